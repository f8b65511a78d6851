"""The two kinds of failure a command reports without a traceback (see ``harness/cli_errors.py``).

:class:`BadInput`: what was asked cannot be done as asked (exit status 2); its message is one line per problem,
each naming what would work. :class:`Unavailable`: something the work needs does not answer, such as a model
endpoint (exit status 1). Both are ordinary outcomes of using the tool, not bugs.
"""

from __future__ import annotations


class BadInput(ValueError):
    """Bad input: one line per problem, each naming what would work."""

    def __init__(self, *problems: str) -> None:
        super().__init__("\n".join(problems))
        self.problems = [line for problem in problems for line in problem.splitlines()] or [""]


class Unavailable(RuntimeError):
    """A service the work needs (a model endpoint, the Hub) does not answer."""
