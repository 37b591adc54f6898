"""Policy training with TRL + peft: tool-use SFT and GRPO with a PTE cost penalty."""
