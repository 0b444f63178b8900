"""Pure text <-> objects: the Agent Lumos prompts and parsers (onetime and iterative), AdaPlan's turns,
answer matching, model text read as an environment action."""
