"""Public benchmarks and other projects' release formats, one package each, each registered through the
``harness.benchmarks`` entry points (``docs/benchmarks.md``). ``arithmetic`` is the jail's source of what upstream
``calculate`` tools compute, shared by the packages that import such tools."""
