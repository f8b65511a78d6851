"""Deterministic stand-ins for ``time``, ``datetime``, ``uuid`` and ``random`` inside the sandbox worker.

Model-written code imports these instead of the real modules. Each reads the clock and the random generator
of the session whose call is running (``CONTEXT.current``), so the same calls on the same initial state always
give the same state. Standard library only.
"""

from __future__ import annotations

import datetime as _datetime
import random as _random
import time as _time
import types
import uuid as _uuid
from typing import Any

DEFAULT_EPOCH = 1_736_942_400.0  # 2025-01-15T12:00:00Z


class Clock:
    """A session's deterministic clock and random generator. The clock advances one second per tool call."""

    def __init__(self, seed: int, epoch: float = DEFAULT_EPOCH):
        self.epoch = epoch
        self.ticks = 0
        self.rng = _random.Random(seed)

    def now(self) -> float:
        return self.epoch + self.ticks

    def advance(self) -> None:
        self.ticks += 1


class _Context:
    def __init__(self) -> None:
        self.current = Clock(0)


CONTEXT = _Context()


def _now() -> float:
    return CONTEXT.current.now()


def _rng() -> _random.Random:
    return CONTEXT.current.rng


# ------------------------------------------------------------------------------------------------- time


def _make_time() -> types.ModuleType:
    module = types.ModuleType("time")
    for name in ("struct_time", "strptime", "timezone", "altzone", "daylight", "tzname"):
        if hasattr(_time, name):
            setattr(module, name, getattr(_time, name))

    def time() -> float:
        return _now()

    def time_ns() -> int:
        return int(_now() * 1_000_000_000)

    def sleep(_seconds: float) -> None:
        return None

    def gmtime(seconds: float | None = None) -> _time.struct_time:
        return _time.gmtime(_now() if seconds is None else seconds)

    def strftime(fmt: str, t: Any = None) -> str:
        return _time.strftime(fmt, gmtime() if t is None else t)

    def asctime(t: Any = None) -> str:
        return _time.asctime(gmtime() if t is None else t)

    def ctime(seconds: float | None = None) -> str:
        return _time.asctime(gmtime(seconds))

    def mktime(t: Any) -> float:
        import calendar

        return float(calendar.timegm(t))

    vars(module).update(
        time=time,
        time_ns=time_ns,
        monotonic=time,
        perf_counter=time,
        process_time=time,
        monotonic_ns=time_ns,
        perf_counter_ns=time_ns,
        sleep=sleep,
        gmtime=gmtime,
        localtime=gmtime,
        strftime=strftime,
        asctime=asctime,
        ctime=ctime,
        mktime=mktime,
    )
    return module


# --------------------------------------------------------------------------------------------- datetime


class FrozenDateTime(_datetime.datetime):
    """``datetime`` whose ``now``/``utcnow``/``today`` read the session clock (naive values are UTC)."""

    @classmethod
    def now(cls, tz: _datetime.tzinfo | None = None) -> FrozenDateTime:
        if tz is None:
            return cls.fromtimestamp(_now(), _datetime.UTC).replace(tzinfo=None)
        return cls.fromtimestamp(_now(), tz)

    @classmethod
    def utcnow(cls) -> FrozenDateTime:
        return cls.now()

    @classmethod
    def today(cls) -> FrozenDateTime:
        return cls.now()

    @classmethod
    def __get_pydantic_core_schema__(cls, _source: Any, _handler: Any) -> Any:
        return _pydantic_schema("datetime_schema")


class FrozenDate(_datetime.date):
    @classmethod
    def today(cls) -> FrozenDate:
        moment = _datetime.datetime.fromtimestamp(_now(), _datetime.UTC)
        return cls(moment.year, moment.month, moment.day)

    @classmethod
    def __get_pydantic_core_schema__(cls, _source: Any, _handler: Any) -> Any:
        return _pydantic_schema("date_schema")


def _pydantic_schema(kind: str) -> Any:
    """A pydantic model annotated with the sandbox's ``datetime.date``/``datetime.datetime`` (these classes)
    validates and dumps as with the real ones (an imported benchmark's models may be annotated with
    ``datetime.date``). Only
    pydantic calls this, so pydantic_core is loaded already."""
    import pydantic_core.core_schema

    return getattr(pydantic_core.core_schema, kind)()


def _make_datetime() -> types.ModuleType:
    module = types.ModuleType("datetime")
    for name in ("timedelta", "time", "timezone", "tzinfo", "MINYEAR", "MAXYEAR", "UTC"):
        if hasattr(_datetime, name):
            setattr(module, name, getattr(_datetime, name))
    vars(module).update(
        datetime=FrozenDateTime,
        date=FrozenDate,
    )
    return module


# ------------------------------------------------------------------------------------------------- uuid


def _make_uuid() -> types.ModuleType:
    module = types.ModuleType("uuid")
    for name in ("UUID", "uuid3", "uuid5", "NAMESPACE_DNS", "NAMESPACE_URL", "NAMESPACE_OID", "NAMESPACE_X500"):
        setattr(module, name, getattr(_uuid, name))

    def uuid4() -> _uuid.UUID:
        return _uuid.UUID(int=_rng().getrandbits(128), version=4)

    def uuid1(node: int | None = None, clock_seq: int | None = None) -> _uuid.UUID:
        return _uuid.UUID(int=_rng().getrandbits(128), version=1)

    vars(module).update(
        uuid4=uuid4,
        uuid1=uuid1,
    )
    return module


# ----------------------------------------------------------------------------------------------- random


class SeededRandom(_random.Random):
    """``random.Random()`` without a seed takes its seed from the session instead of the OS."""

    def __init__(self, x: Any = None) -> None:
        super().__init__(_rng().getrandbits(64) if x is None else x)

    def seed(self, a: Any = None, version: int = 2) -> None:
        super().seed(_rng().getrandbits(64) if a is None else a, version)


_RANDOM_FUNCTIONS = (
    "random",
    "uniform",
    "triangular",
    "randint",
    "randrange",
    "choice",
    "choices",
    "shuffle",
    "sample",
    "getrandbits",
    "gauss",
    "normalvariate",
    "lognormvariate",
    "expovariate",
    "vonmisesvariate",
    "gammavariate",
    "betavariate",
    "paretovariate",
    "weibullvariate",
    "randbytes",
)


def _make_random() -> types.ModuleType:
    module = types.ModuleType("random")

    def delegate(name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            return getattr(_rng(), name)(*args, **kwargs)

        call.__name__ = name
        return call

    for name in _RANDOM_FUNCTIONS:
        setattr(module, name, delegate(name))

    def seed(a: Any = None, version: int = 2) -> None:
        if a is not None:
            _rng().seed(a, version)

    vars(module).update(
        seed=seed,
        Random=SeededRandom,
        SystemRandom=SeededRandom,
    )
    return module


SHIM_MODULES: dict[str, types.ModuleType] = {
    "time": _make_time(),
    "datetime": _make_datetime(),
    "uuid": _make_uuid(),
    "random": _make_random(),
}
