"""Training from the pool: SFT, GRPO and PPO with Accelerate (needs the `train` extra)."""
