"""Scoring a final state: checks run in the sandbox, rewards, and the helpers checks use on what the agent said."""
