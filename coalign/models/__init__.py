"""Models at the edge: loading (by folder, shipped base or hub id), the two agents' generation, its backends
(hf, vllm, an OpenAI-compatible server), the HTTP client of endpoints and token-level turn encoding."""
