"""The TRL wrappers both recipes train with: SFT, DPO and GRPO (rewards and rollouts passed in), the settings
and run folder every training stage records."""
