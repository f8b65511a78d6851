"""τ-bench (sierra-research/tau-bench, MIT): import from a checkout, rules, scoring and export."""
