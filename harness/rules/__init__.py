"""Episode rules and the contract with the policies they drive: the named profiles, the policy protocols, and the
project's own system prompts."""
