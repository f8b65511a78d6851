"""A benchmark package that exists only for tests: it declares one kind of LLM-judged check (claims about the
conversation) with no edit of the engine, as any package would (``docs/benchmarks.md``)."""
