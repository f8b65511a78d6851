"""A sum of floats kept exactly, so that a value can be taken out again and the total never depends on the order.

A finite double is an integer multiple of 2**-1074 (the smallest step between doubles), so a sum of doubles is
kept as one integer count of that step. Reading it divides once, which Python rounds correctly: the result is
exactly what :func:`math.fsum` gives for the same values, in any order, and removing a value leaves the sum as if
it had never been added. Summaries kept as running aggregates use it to give the same floats as a sum over the
whole list of records.
"""

from __future__ import annotations

import math

_SCALE_BITS = 1074
_SCALE = 1 << _SCALE_BITS


class ExactSum:
    """The exact sum of the floats added (less those removed); :attr:`value` is ``math.fsum`` of them."""

    __slots__ = ("_specials", "_units")

    def __init__(self) -> None:
        self._units = 0
        self._specials = [0, 0, 0]
        """How many +inf, -inf and NaN it holds, which have no exact count: ``math.fsum`` decides what they make."""

    def add(self, value: float, times: int = 1) -> None:
        """Add ``value`` ``times`` times (a negative ``times`` takes it out)."""
        if not math.isfinite(value):
            self._specials[2 if math.isnan(value) else 0 if value > 0 else 1] += times
            return
        numerator, denominator = float(value).as_integer_ratio()
        self._units += times * numerator * (_SCALE // denominator)

    def remove(self, value: float) -> None:
        self.add(value, -1)

    def merge(self, other: ExactSum) -> None:
        """Add everything ``other`` holds."""
        self._units += other._units
        self._specials = [mine + theirs for mine, theirs in zip(self._specials, other._specials, strict=True)]

    @property
    def value(self) -> float:
        positive, negative, nan = self._specials
        if positive or negative or nan:
            return math.fsum([math.inf] * min(positive, 1) + [-math.inf] * min(negative, 1) + [math.nan] * min(nan, 1))
        return self._units / _SCALE
