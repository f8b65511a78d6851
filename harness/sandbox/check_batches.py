"""Check batches: the episodes of one scenario scored together in one check process.

Score requests for one scenario (the same checks) that arrive while that scenario's check process is being forked
or is running its batch wait, and the next check process scores all of them, up to ``MAX_BATCH_EPISODES``; a check
process never serves two scenarios and exits after its one batch. The first request of a quiet scenario is scored at
once, unless other episodes of the scenario announced that they will ask (``CheckBatcher.expecting``: a run's
trials of one task run together): its process then waits for them, up to ``gather_seconds``
(``SandboxLimits.check_gather_s``), while its batch has room. More processes start for one scenario only when more
episodes wait than its running processes will take next.

A batch whose process dies (a crash, a kill, a run past its budget, a reply refused) fails only its own episodes,
and each of them is scored again alone, one after the other, in a fresh process: the batch's failure never reaches
another episode's verdict.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Hashable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import orjson

from harness.sandbox.check_inputs import EpisodeInputs
from harness.sandbox.children import Child, ChildLost
from harness.schema import Check
from harness.states.encodings import READ_ONLY_STATES

logger = logging.getLogger(__name__)

MAX_BATCH_EPISODES = 8
"""Episodes one check process scores at most: a batch's inputs are all in the process at once, under its memory
cap, and a batch that fails is scored again one episode at a time."""


def inputs_size(inputs: EpisodeInputs) -> int:
    return sum(len(part) for part in inputs)


Answers = list[dict[str, Any]]
"""One episode's answers, one per check, as the check process sent them."""


def encode_inputs(initial: Any, final: Any, transcript: list[dict[str, Any]]) -> EpisodeInputs:
    """One episode's inputs: the bytes of the initial state's, the final state's and the transcript's JSON
    (``check_inputs.EpisodeInputs``), encoded once, when the episode asks to be scored (their size decides which
    batch it fits). The check process decodes each part afresh for every check that reads it
    (each gets copies of its own), never once on arrival, which for a large state would be most of its work."""
    initial_bytes = READ_ONLY_STATES.plain(initial)
    final_bytes = initial_bytes if final is initial else READ_ONLY_STATES.plain(final)
    return initial_bytes, final_bytes, orjson.dumps(transcript)


SCENARIO_OF_CHECKS: ContextVar[Hashable | None] = ContextVar("scenario_of_checks", default=None)
"""The scenario whose checks the current task runs (see ``checks_of_scenario``); None: a process of their own."""


@contextlib.contextmanager
def checks_of_scenario(scenario: Hashable) -> Iterator[None]:
    """Within this block, ``SandboxPool.run_checks`` may score the checks together with other waiting episodes of
    ``scenario`` (a key that names one scenario; the pool adds the checks themselves to it). The run path's call
    to ``run_checks`` stays as it is."""
    token = SCENARIO_OF_CHECKS.set(scenario)
    try:
        yield
    finally:
        SCENARIO_OF_CHECKS.reset(token)


@dataclass
class ScoreExpected:
    """An episode of ``scenario`` that will ask to be scored, from its start until it asks (its *arrival*) or
    ends without asking."""

    scenario: Hashable
    on_arrival: Callable[[], None] | None = None
    """Called once, when the episode asks to be scored or ends (a run frees the episode's slot then)."""
    arrived: bool = False


_EXPECTED_SCORE: ContextVar[ScoreExpected | None] = ContextVar("expected_score", default=None)
"""The current task's announced episode (see ``CheckBatcher.expecting``)."""


@dataclass
class _Waiting:
    inputs: EpisodeInputs
    answers: asyncio.Future[Answers]


@dataclass
class _ScenarioQueue:
    scenario: Hashable
    checks: list[Check]
    waiting: list[_Waiting] = field(default_factory=list)
    runners: int = 0


class CheckBatcher:
    """Scores episodes in batches per scenario with the pool's functions: ``spawn`` forks a check process,
    ``request`` runs a batch in it (``ChildLost`` when the process fails it), ``alone`` scores one episode in
    processes of its own, never raising ``ChildLost`` (first all its checks in one process when asked, then, or
    at once, each check in a process of its own)."""

    def __init__(
        self,
        spawn: Callable[[], Awaitable[Child]],
        request: Callable[[Child, list[Check], list[EpisodeInputs]], Awaitable[list[Answers]]],
        alone: Callable[[list[Check], EpisodeInputs, bool], Awaitable[Answers]],
        *,
        max_episodes: int = MAX_BATCH_EPISODES,
        max_bytes: int,
        closed: Callable[[], Exception],
        gather_seconds: float = 0.0,
    ):
        self.spawn = spawn
        self.request = request
        self.alone = alone
        self.max_episodes = max_episodes
        self.max_bytes = max_bytes
        """The inputs a batch holds at most (an episode larger than that is a batch of its own)."""
        self.closed = closed
        """The error of the episodes still waiting when the pool closes."""
        self.gather_seconds = gather_seconds
        """How long, at most, a scenario's first waiting episode holds its check process back for announced ones."""
        self._queues: dict[Hashable, _ScenarioQueue] = {}
        self._runners: set[asyncio.Task[None]] = set()
        self._expected: dict[Hashable, int] = {}
        """Per scenario, the announced episodes that have not arrived yet."""
        self._arrivals: dict[Hashable, asyncio.Event] = {}

    @contextlib.contextmanager
    def expecting(self, scenario: Hashable, on_arrival: Callable[[], None] | None = None) -> Iterator[ScoreExpected]:
        """Within this block the current task runs an episode of ``scenario`` (the key ``checks_of_scenario``
        names it by) that will ask to be scored. A check process about to start for the scenario's first waiting
        episode waits for such episodes (up to ``gather_seconds``, and while its batch has room), so that the
        episodes of a scenario that run together, the trials of a task, are scored by one process."""
        expected = ScoreExpected(scenario, on_arrival)
        self._expected[scenario] = self._expected.get(scenario, 0) + 1
        token = _EXPECTED_SCORE.set(expected)
        try:
            yield expected
        finally:
            _EXPECTED_SCORE.reset(token)
            self._arrive(expected)

    def _arrive(self, expected: ScoreExpected) -> None:
        if expected.arrived:
            return
        expected.arrived = True
        left = self._expected.get(expected.scenario, 1) - 1
        if left > 0:
            self._expected[expected.scenario] = left
        else:
            self._expected.pop(expected.scenario, None)
        arrival = self._arrivals.pop(expected.scenario, None)
        if arrival is not None:
            arrival.set()
        if expected.on_arrival is not None:
            expected.on_arrival()

    async def _gather(self, queue: _ScenarioQueue) -> None:
        """Wait while announced episodes of the queue's scenario are still running, the batch has room and
        ``gather_seconds`` have not passed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.gather_seconds
        while self._expected.get(queue.scenario, 0) > 0 and len(queue.waiting) < self.max_episodes:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            arrival = self._arrivals.setdefault(queue.scenario, asyncio.Event())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(arrival.wait(), remaining)

    async def score(self, key: Hashable, checks: list[Check], inputs: EpisodeInputs, scenario: Hashable) -> Answers:
        """The answers of ``checks`` on one episode's inputs; ``key`` names the scenario and its checks,
        ``scenario`` the scenario alone (as ``expecting`` does)."""
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = _ScenarioQueue(scenario, checks)
        waiting = _Waiting(inputs, asyncio.get_running_loop().create_future())
        queue.waiting.append(waiting)
        expected = _EXPECTED_SCORE.get()
        if expected is not None and expected.scenario == scenario:
            self._arrive(expected)
        if queue.runners == 0 or len(queue.waiting) > self.max_episodes * queue.runners:
            queue.runners += 1
            runner = asyncio.get_running_loop().create_task(self._run(key, queue))
            self._runners.add(runner)
            runner.add_done_callback(self._runners.discard)
        return await waiting.answers

    async def _run(self, key: Hashable, queue: _ScenarioQueue) -> None:
        """Score the scenario's waiting episodes, a batch per check process, until none waits."""
        batch: list[_Waiting] = []
        try:
            if queue.runners == 1:
                await self._gather(queue)
            while queue.waiting:
                child: Child | None = None
                failure: BaseException | None = None
                try:
                    child = await self.spawn()  # episodes that finish meanwhile join this batch
                except Exception as exc:
                    failure = exc
                batch = self._take(queue)
                if child is not None and not batch:
                    child.close()
                if not batch:
                    continue
                try:
                    if failure is not None or child is None:
                        raise failure or RuntimeError("no check process")
                    answers = await self._score_batch(child, queue.checks, batch)
                except Exception as exc:  # the sandbox failed (no zygote could fork): this batch's episodes say so
                    for waiting in batch:
                        _fail(waiting, exc)
                else:
                    for waiting, episode_answers in zip(batch, answers, strict=True):
                        if not waiting.answers.done():
                            waiting.answers.set_result(episode_answers)
                batch = []
        except BaseException:
            # The pool is closing: no episode is left waiting for an answer.
            for waiting in [*batch, *queue.waiting]:
                _fail(waiting, self.closed())
            queue.waiting.clear()
            raise
        finally:
            queue.runners -= 1
            if queue.runners == 0 and not queue.waiting and self._queues.get(key) is queue:
                del self._queues[key]

    def _take(self, queue: _ScenarioQueue) -> list[_Waiting]:
        """The next batch: the first waiting episodes, within both bounds (at least one)."""
        live = [waiting for waiting in queue.waiting if not waiting.answers.done()]
        size = 0
        count = 0
        for waiting in live[: self.max_episodes]:
            size += inputs_size(waiting.inputs)
            if count and size > self.max_bytes:
                break
            count += 1
        batch, queue.waiting = live[:count], live[count:]
        return batch

    async def _score_batch(self, child: Child, checks: list[Check], batch: list[_Waiting]) -> list[Answers]:
        try:
            return await self.request(child, checks, [waiting.inputs for waiting in batch])
        except ChildLost as lost:
            if len(batch) > 1:
                logger.warning(
                    "a check process scoring %d episodes of one scenario failed (%s); each is scored again alone",
                    len(batch),
                    lost.reason,
                )
        answers = []
        for waiting in batch:  # one at a time, each in a fresh process
            answers.append(await self.alone(checks, waiting.inputs, len(batch) > 1))
        return answers

    async def close(self) -> None:
        runners = list(self._runners)
        for runner in runners:
            runner.cancel()
        await asyncio.gather(*runners, return_exceptions=True)
        self._queues.clear()


def _fail(waiting: _Waiting, exc: BaseException) -> None:
    if not waiting.answers.done():
        waiting.answers.set_exception(exc)


__all__ = [
    "MAX_BATCH_EPISODES",
    "SCENARIO_OF_CHECKS",
    "Answers",
    "CheckBatcher",
    "ScoreExpected",
    "checks_of_scenario",
    "encode_inputs",
    "inputs_size",
]
