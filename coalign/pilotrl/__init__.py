"""PilotRL: one AdaPlan model plans, acts and rewrites its plan (`runtime`); SFT on expert episodes, then the
progressive GRPO stages (`stages`, `rewards`, `rollout`); its bench and report."""
