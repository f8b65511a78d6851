"""One episode: the loop, its configuration, the components its rules choose (turn policy, result formatting, ending,
reward), what the agent sees of a tool call, the turns of a script, tool sessions, limits, dual control, blame and
the verdict."""
