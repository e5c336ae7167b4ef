"""Claims as data: each claim declares its criterion, and one function turns measured numbers into its verdict.

A ``Claim`` pairs the text of a claim from the notes with a ``measure`` function
and a ``Criterion``. ``measure`` returns only numbers (and a sentence formatted
from them); it never returns a verdict. ``Criterion.verdict`` is the one place
where a verdict is decided: it reads the claim's decisive statistic from the
numbers and compares it with the criterion's thresholds::

    Criterion("max_rel_dev", "max over d_k of |Var(q·k)/d_k − 1|", holds=("<", 0.05), fails=(">", 0.2))

holds when the statistic is below 0.05, does not hold above 0.2, and holds
partly in between. Every criterion must be able to reach both ``holds`` and
``does not hold`` (the tests check it), so no verdict is constant.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from typing import Any, Callable

from scaling.validation import ConfigError

HOLDS, PARTLY, FAILS = "holds", "partly", "does not hold"
VERDICTS = (HOLDS, PARTLY, FAILS)
NOT_MEASURED = "not measured"

_OPS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}


@dataclasses.dataclass(frozen=True)
class Criterion:
  """How a claim's verdict follows from one measured statistic.

  Attributes:
    statistic: the key of the decisive number in the claim's measured numbers.
    description: what the statistic is, in words (with its units and conditions).
    holds: (comparison, threshold): the claim holds when ``statistic <op> threshold``.
    fails: (comparison, threshold): the claim does not hold when ``statistic <op> threshold``
      (checked after ``holds``); otherwise it holds partly.
  """

  statistic: str
  description: str
  holds: tuple[str, float]
  fails: tuple[str, float]

  def __post_init__(self):
    for name, (op, threshold) in (("holds", self.holds), ("fails", self.fails)):
      if op not in _OPS:
        raise ConfigError(f"{name}: unknown comparison {op!r}; use one of {', '.join(_OPS)}")
      if not math.isfinite(threshold):
        raise ConfigError(f"{name}: threshold must be finite, got {threshold!r}")

  def verdict(self, value: float | None) -> str:
    """The verdict for a measured value of the statistic (``NOT_MEASURED`` when it is missing or NaN)."""
    if value is None or not math.isfinite(float(value)):
      return NOT_MEASURED
    if _OPS[self.holds[0]](value, self.holds[1]):
      return HOLDS
    if _OPS[self.fails[0]](value, self.fails[1]):
      return FAILS
    return PARTLY

  @property
  def text(self) -> str:
    """The criterion in words."""
    return (f"{self.description}: holds if {self.holds[0]} {self.holds[1]:g}, does not hold if "
            f"{self.fails[0]} {self.fails[1]:g}, partly otherwise")

  def probes(self) -> tuple[float, ...]:
    """Values around both thresholds (the tests check that they reach ``holds`` and ``does not hold``)."""
    out = []
    for _, threshold in (self.holds, self.fails):
      step = max(abs(threshold), 1.0) * 1e-3
      out += [threshold - step, threshold, threshold + step]
    lo, hi = min(out), max(out)
    span = max(hi - lo, 1.0)
    return tuple(sorted(set(out + [lo - 10 * span, hi + 10 * span])))


@dataclasses.dataclass(frozen=True)
class Measurement:
  """What a measurement found: the numbers (the criterion's statistic among them) and a sentence built from them."""

  numbers: dict[str, Any]
  finding: str


@dataclasses.dataclass(frozen=True)
class Claim:
  """A claim from the notes, how to measure it and the criterion that decides it."""

  id: str
  source: str
  text: str
  criterion: Criterion
  measure: Callable[[Any], Measurement]
  training: bool = False

  def evaluate(self, ctx: Any) -> dict[str, Any]:
    """Measures the claim and decides its verdict; returns the JSON-ready row."""
    m = self.measure(ctx)
    if self.criterion.statistic not in m.numbers:
      raise KeyError(f"claim {self.id}: the measurement lacks its statistic {self.criterion.statistic!r}")
    value = m.numbers[self.criterion.statistic]
    return {"id": self.id, "source": self.source, "claim": self.text, "criterion": self.criterion.text,
            "statistic": self.criterion.statistic, "value": value, "verdict": self.criterion.verdict(value),
            "finding": m.finding, "numbers": m.numbers}
