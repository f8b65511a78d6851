"""Waiting for a benchmark's child processes without hanging when one dies."""

from __future__ import annotations

import queue
from multiprocessing.process import BaseProcess
from typing import Any


def receive(answers: Any, process: BaseProcess, what: str) -> Any:
    """The next answer ``process`` puts on ``answers``; stops the bench with one line if the process ends
    without one (an import error in a spawned child would otherwise leave the bench waiting forever)."""
    while True:
        try:
            return answers.get(timeout=1.0)
        except queue.Empty:
            if not process.is_alive():
                raise SystemExit(f"{what} ended (exit code {process.exitcode}) without an answer") from None
