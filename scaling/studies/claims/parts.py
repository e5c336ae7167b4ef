"""Claims that say several things: one criterion per part, and the claim's statistic counts the parts that hold.

``Part`` is one part with the criterion that decides it alone; ``score_parts`` scores the measured parts (1 for a part
that holds, ½ for one that holds partly, 0 otherwise) and ``parts_criterion`` is the claim's criterion on that score.
"""

from __future__ import annotations

import dataclasses
import math

from scaling.studies.claims.verdicts import Criterion
from scaling.studies.claims.verdicts import FAILS
from scaling.studies.claims.verdicts import HOLDS
from scaling.studies.claims.verdicts import PARTLY


@dataclasses.dataclass(frozen=True)
class Part:
  """One part of a claim that says several things, with the criterion that decides that part alone."""

  name: str
  criterion: Criterion


PART_SCORES = {HOLDS: 1.0, PARTLY: 0.5, FAILS: 0.0}


def score_parts(parts: tuple[Part, ...], values: dict[str, float | None]) -> tuple[float, dict[str, str]]:
  """The number of ``parts`` that hold (a part holding partly counts ½), and each part's verdict.

  Args:
    parts: the claim's parts.
    values: each part's measured statistic, by the part's name.

  Returns:
    (score, {part name: verdict}); the score is NaN (the claim is then not measured) when a part is not measured.
  """
  missing = [p.name for p in parts if p.name not in values]
  if missing:
    raise KeyError(f"no measured value for the part(s) {', '.join(missing)}")
  verdicts = {p.name: p.criterion.verdict(values[p.name]) for p in parts}
  return float(sum(PART_SCORES.get(v, math.nan) for v in verdicts.values())), verdicts


def parts_criterion(statistic: str, what: str, parts: tuple[Part, ...], reason: str) -> Criterion:
  """The criterion of a claim of ``parts`` (``score_parts``): holds when every part holds (the score is then the number
  of parts, above n − ½), does not hold when none holds even partly (below ½), partly otherwise."""
  each = "; ".join(f"{p.name}: {p.criterion.text}" for p in parts)
  return Criterion(statistic, f"{what}, each counting 1 if it holds, ½ if partly, 0 if not ({each})",
                   holds=(">", len(parts) - 0.5), fails=("<", 0.5), reason=reason, discrete=True)


def parts_text(verdicts: dict[str, str]) -> str:
  """Each part's verdict, in words.

  Args:
    verdicts: {part name: verdict}, as ``score_parts`` returns them.

  Returns:
    "name: verdict; ...".
  """
  return "; ".join(f"{name}: {verdict}" for name, verdict in verdicts.items())
