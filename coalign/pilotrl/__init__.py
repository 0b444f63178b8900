"""PilotRL: one AdaPlan model plans, acts and rewrites its plan (`runtime`); SFT on expert episodes, then the
progressive GRPO stages (`curriculum`, `rewards`, `rollout`); its bench and report."""
