"""coalign: train teams of LLM agents to work together (MOAT, later PilotRL)."""

__version__ = "0.1.0"
