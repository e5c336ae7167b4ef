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

A criterion with ``noise`` takes the statistic's standard error over seeds (the measurement reports it as
``<statistic>_se``): when a threshold lies within two standard errors of the value, the seeds cannot tell the sides
apart and the verdict is ``INCONCLUSIVE``, never holds or does not hold. A criterion with ``edge`` reads a boolean
the measurement reports (the optimum the statistic is made of stays at the edge of the grid searched, so it is not
located): the verdict is then ``INCONCLUSIVE_EDGE``. A claim may carry other readings of its words beside the one
its verdict answers (``Claim.beside``): each is decided by its own criterion from the same numbers.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from typing import Any, Callable, Sequence, TYPE_CHECKING

from scaling.base.validation import ConfigError

if TYPE_CHECKING:  # the context imports the studies the claims run; a verdict only reads it
  from scaling.studies.claims.context import Context

HOLDS, PARTLY, FAILS = "holds", "partly", "does not hold"
# A measured statistic whose thresholds lie within NOISE_SES standard errors (over seeds), or whose optimum stays at
# the edge of the grid searched, decides nothing either way.
INCONCLUSIVE = "inconclusive (within 2 standard errors)"
INCONCLUSIVE_EDGE = "inconclusive (grid edge)"
INCONCLUSIVE_VERDICTS = (INCONCLUSIVE, INCONCLUSIVE_EDGE)
NOISE_SES = 2.0
VERDICTS = (HOLDS, PARTLY, FAILS, *INCONCLUSIVE_VERDICTS)
NOT_MEASURED = "not measured"
# The verdicts of citation claims. SOURCE_CONTRADICTS: the source says otherwise. NOT_STATED: the whole source was read
# and it never says it (silence, not disagreement). NOT_IN_PASSAGE: only part of the source was read, and that part
# neither says what the note attributes to it nor contradicts it (absent from an abstract is neither).
SOURCE_AGREES, SOURCE_CONTRADICTS = "source agrees", "source contradicts"
NOT_STATED = "not stated in the source"
NOT_IN_PASSAGE = "not found in the passage checked"
CITATION_VERDICTS = (SOURCE_AGREES, SOURCE_CONTRADICTS, NOT_STATED, NOT_IN_PASSAGE)
MEASURED, CITATION = "measured", "checked against the source"  # the kinds of claims
SUPPORTING = "supporting measurement"  # the kind of a measured row that no claim of the notes makes (Claim.supports)
NOT_MEASURABLE = "not measurable here"  # the kind, and the verdict, of a claim no measurement here can settle
KNIFE_EDGE = 0.1  # a statistic within 10% (relative) of a threshold: the finding shows the margin

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
    reason: one line on why the thresholds follow from the claim's words (written before the measurement).
    noise: the verdict takes the statistic's standard error over seeds (the numbers' ``<statistic>_se``; None
      there: fewer than two seeds, nothing to take): ``INCONCLUSIVE`` when a threshold lies within ``NOISE_SES``
      standard errors of the value.
    repeats: what that standard error is over, in words ("seeds"; a timing's "timing rounds").
    discrete: the statistic takes a few values only (a count of parts that hold, in halves): a value on a threshold
      is no knife-edge, and the finding says nothing of its margin.
    edge: the key of a boolean in the numbers, true when the optimum the statistic is made of stays at the edge of
      the grid searched (after any widening): the verdict is then ``INCONCLUSIVE_EDGE``.
  """

  statistic: str
  description: str
  holds: tuple[str, float]
  fails: tuple[str, float]
  reason: str = ""
  noise: bool = False
  edge: str | None = None
  repeats: str = "seeds"
  discrete: bool = False

  def __post_init__(self):
    for name, (op, threshold) in (("holds", self.holds), ("fails", self.fails)):
      if op not in _OPS:
        raise ConfigError(f"{name}: unknown comparison {op!r}; use one of {', '.join(_OPS)}")
      if not math.isfinite(threshold):
        raise ConfigError(f"{name}: threshold must be finite, got {threshold!r}")

  def verdict(self, value: float | None, standard_error: float | None = None, at_edge: bool = False) -> str:
    """The verdict for a measured value of the statistic.

    Args:
      value: the statistic (None or NaN: ``NOT_MEASURED``).
      standard_error: its standard error over seeds, or None (unknown: the thresholds alone decide). When a
        threshold lies within ``NOISE_SES`` standard errors of ``value`` (the values ``NOISE_SES`` standard errors
        either side get different verdicts), the verdict is ``INCONCLUSIVE``.
      at_edge: the optimum the statistic is made of stays at the edge of its grid: ``INCONCLUSIVE_EDGE``.

    Returns:
      ``HOLDS``, ``PARTLY``, ``FAILS``, one of ``INCONCLUSIVE_VERDICTS`` or ``NOT_MEASURED``.
    """
    if value is None or not math.isfinite(float(value)):
      return NOT_MEASURED
    if at_edge:
      return INCONCLUSIVE_EDGE
    decided = self._decide(float(value))
    if standard_error is not None and math.isfinite(float(standard_error)):
      if standard_error < 0:
        raise ConfigError(f"standard_error must be >= 0, got {standard_error!r}")
      spread = NOISE_SES * float(standard_error)
      if {self._decide(float(value) - spread), self._decide(float(value) + spread)} != {decided}:
        return INCONCLUSIVE
    return decided

  def _decide(self, value: float) -> str:
    """The verdict of the thresholds alone."""
    if _OPS[self.holds[0]](value, self.holds[1]):
      return HOLDS
    if _OPS[self.fails[0]](value, self.fails[1]):
      return FAILS
    return PARTLY

  @property
  def text(self) -> str:
    """The criterion in words."""
    out = (f"{self.description}: holds if {self.holds[0]} {self.holds[1]:g}, does not hold if "
           f"{self.fails[0]} {self.fails[1]:g}, partly otherwise")
    if self.noise:
      out += (f"; inconclusive if a threshold lies within {NOISE_SES:g} standard errors (over {self.repeats}) of the "
              "value")
    if self.edge:
      out += "; inconclusive if the optimum stays at the edge of the grid searched (widened up to its bound)"
    return out

  def margin(self, value: float | None) -> dict[str, float] | None:
    """The nearest threshold, the value's distance to it, and that distance relative to the larger of |threshold|
    and the gap between the two thresholds (None if not measured)."""
    if value is None or not math.isfinite(float(value)):
      return None
    threshold = min((self.holds[1], self.fails[1]), key=lambda t: abs(float(value) - t))
    scale = max(abs(threshold), abs(self.holds[1] - self.fails[1]), 1e-12)
    return {"threshold": threshold, "distance": float(value) - threshold,
            "relative": abs(float(value) - threshold) / scale}

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
class Reading:
  """Another reading of a claim's words, beside the one its verdict answers, decided by its own criterion.

  Attributes:
    label: the reading in words (what it takes the claim to say).
    criterion: its criterion, read from the same measured numbers as the claim's.
  """

  label: str
  criterion: Criterion


def decide(criterion: Criterion, numbers: dict[str, Any], where: str = "the measurement") -> dict[str, Any]:
  """A criterion's verdict from measured numbers: its statistic, the statistic's standard error (``noise``) and
  whether its optimum stays at the grid's edge (``edge``) read from ``numbers``.

  Args:
    criterion: the criterion.
    numbers: the measured numbers.
    where: what measured them, for the error message.

  Returns:
    {"statistic", "value", "standard_error", "repeats", "at_edge", "verdict", "margin"}.

  Raises:
    KeyError: the numbers lack the statistic, its standard error (``noise``) or the edge flag (``edge``).
  """
  needed = [criterion.statistic]
  if criterion.noise:
    needed.append(f"{criterion.statistic}_se")
  if criterion.edge:
    needed.append(criterion.edge)
  missing = [k for k in needed if k not in numbers]
  if missing:
    raise KeyError(f"{where} lacks {', '.join(map(repr, missing))} (its criterion's statistic, the statistic's "
                   f"standard error over {criterion.repeats}, or its grid-edge flag)")
  value = numbers[criterion.statistic]
  se = numbers[f"{criterion.statistic}_se"] if criterion.noise else None
  at_edge = bool(numbers[criterion.edge]) if criterion.edge else False
  return {"statistic": criterion.statistic, "value": value, "standard_error": se, "repeats": criterion.repeats,
          "at_edge": at_edge, "verdict": criterion.verdict(value, se, at_edge), "margin": criterion.margin(value)}


def _decision_words(decision: dict[str, Any]) -> str:
  """The statistic with its standard error, and why an inconclusive verdict is one, in a sentence (empty if there
  is nothing to add)."""
  value, se, stat = decision["value"], decision["standard_error"], decision["statistic"]
  if value is None or not math.isfinite(float(value)):
    return ""
  words = []
  if se is not None:
    words.append(f"{stat} = {float(value):.4g} ± {float(se):.2g} (standard error over {decision['repeats']}).")
  if decision["verdict"] == INCONCLUSIVE:
    words.append(f"Inconclusive: the threshold {decision['margin']['threshold']:g} lies within {NOISE_SES:g} "
                 "standard errors of the value.")
  elif decision["verdict"] == INCONCLUSIVE_EDGE:
    words.append("Inconclusive: the optimum stays at the edge of the grid searched, so it is not located.")
  return " ".join(words)


@dataclasses.dataclass(frozen=True)
class Claim:
  """A claim from the notes, how to measure it and the criterion that decides it.

  A training claim (``training``) declares the grids it trains in ``grids``: ``grids(ctx)`` maps names to
  ``scaling.studies.grid.run.GridSpec`` s, read without training anything to plan a run. A row with ``supports`` is
  a supporting measurement, not a claim of the notes: its statement is ours, its criterion decides it as any other,
  and it names the ids of the claims it informs; the tables show it apart and the verdict counts leave it out. ``beside`` holds other
  readings of the claim's words, each decided by its own criterion from the same numbers and reported in the row
  beside the verdict, which answers ``criterion``. A ``timed`` claim's statistic is a wall-clock time: it is measured
  after every other claim, with nothing compiling beside it (``scaling.studies.claims.study.run_claims``).
  """

  id: str
  source: str
  text: str
  criterion: Criterion
  measure: Callable[[Any], Measurement]
  training: bool = False
  grids: Callable[[Any], dict[Any, Any]] | None = None
  beside: tuple[Reading, ...] = ()
  timed: bool = False
  supports: tuple[str, ...] = ()

  def __post_init__(self):
    if self.training and self.grids is None:
      raise ConfigError(f"claim {self.id}: a training claim declares the grids it trains (grids)")
    if isinstance(self.supports, str):
      raise ConfigError(f"claim {self.id}: supports must be a tuple of claim ids, got the string {self.supports!r}")

  @property
  def kind(self) -> str:
    """``SUPPORTING`` for a measurement that no claim of the notes makes (``supports`` names the rows it informs),
    ``MEASURED`` otherwise."""
    return SUPPORTING if self.supports else MEASURED

  def evaluate(self, ctx: Context) -> dict[str, Any]:
    """Measures the claim and decides its verdict; returns the JSON-ready row.

    A verdict within ``KNIFE_EDGE`` (relative) of a threshold says so in its finding, with the margin; the
    finding gives the statistic's standard error (``Criterion.noise``), why an inconclusive verdict is one, and
    each reading of ``beside`` with its verdict.
    """
    m = self.measure(ctx)
    if self.criterion.statistic not in m.numbers:
      raise KeyError(f"claim {self.id}: the measurement lacks its statistic {self.criterion.statistic!r}")
    main = decide(self.criterion, m.numbers, f"claim {self.id}: the measurement")
    value, margin = main["value"], main["margin"]
    finding = " ".join(s for s in (m.finding, _decision_words(main)) if s)
    if (not self.criterion.discrete and main["verdict"] not in INCONCLUSIVE_VERDICTS and margin is not None
        and margin["relative"] < KNIFE_EDGE
        and (margin["distance"] or margin["threshold"])):
      finding += (f" Knife-edge: {self.criterion.statistic} = {float(value):.4g} is {margin['distance']:+.3g} from "
                  f"the threshold {margin['threshold']:g}.")
    beside = []
    for reading in self.beside:
      d = decide(reading.criterion, m.numbers, f"claim {self.id}: the measurement (reading {reading.label!r})")
      beside.append({"label": reading.label, "criterion": reading.criterion.text, "reason": reading.criterion.reason,
                     **{k: d[k] for k in ("statistic", "value", "standard_error", "at_edge", "verdict")}})
      shown = "n/a" if d["value"] is None else f"{float(d['value']):.4g}"
      se = "" if d["standard_error"] is None else f" ± {float(d['standard_error']):.2g}"
      finding += f" Beside, {reading.label}: **{d['verdict']}** ({d['statistic']} = {shown}{se})."
    row = {"id": self.id, "kind": self.kind, "source": self.source, "claim": self.text,
           "criterion": self.criterion.text, "reason": self.criterion.reason, "statistic": self.criterion.statistic,
           "value": value, "standard_error": main["standard_error"], "verdict": main["verdict"], "margin": margin,
           "finding": finding, "numbers": m.numbers}
    if beside:
      row["beside"] = beside
    if self.supports:
      row["supports"] = list(self.supports)
    return row


def citation_verdict(part_verdicts: Sequence[str]) -> str:
  """The verdict of a citation claim made of parts, from its parts' verdicts.

  A claim is as good as its weakest part: the source contradicts the claim if it contradicts any part (one wrong
  half makes the citation wrong); it agrees only if it agrees with every part; otherwise, nothing read contradicts the
  claim and some part is not stated in the source (read in full) or, failing that, not found in the passage checked.

  Args:
    part_verdicts: one verdict of ``CITATION_VERDICTS`` per part (at least one).

  Returns:
    ``SOURCE_CONTRADICTS``, ``SOURCE_AGREES``, ``NOT_STATED`` or ``NOT_IN_PASSAGE``.
  """
  if isinstance(part_verdicts, str) or not part_verdicts:
    raise ConfigError("part_verdicts must be a non-empty sequence of citation verdicts")
  unknown = [v for v in part_verdicts if v not in CITATION_VERDICTS]
  if unknown:
    raise ConfigError(f"part_verdicts: unknown verdict(s) {unknown!r}; use {', '.join(map(repr, CITATION_VERDICTS))}")
  if SOURCE_CONTRADICTS in part_verdicts:
    return SOURCE_CONTRADICTS
  if all(v == SOURCE_AGREES for v in part_verdicts):
    return SOURCE_AGREES
  return NOT_STATED if NOT_STATED in part_verdicts else NOT_IN_PASSAGE


@dataclasses.dataclass(frozen=True)
class CitationPart:
  """One part of a citation claim that asserts several things (an attribution and a content, or two halves).

  Attributes:
    text: the part of the claim, in the note's words.
    verdict: one of ``CITATION_VERDICTS``.
    evidence: what the source says on this part, with where it says it.
  """

  text: str
  verdict: str
  evidence: str

  def __post_init__(self):
    if self.verdict not in CITATION_VERDICTS:
      raise ConfigError(f"verdict: unknown {self.verdict!r}; use {', '.join(map(repr, CITATION_VERDICTS))}")


@dataclasses.dataclass(frozen=True)
class CitationClaim:
  """A factual citation of the notes, checked against the cited source by reading it: never a measured verdict.

  Attributes:
    id, source, text: as ``Claim``'s.
    reference: the work (and section) the claim is checked against.
    passage: the passage of that source, quoted.
    verdict: one of ``CITATION_VERDICTS``: whether the source says what the note says it says. ``SOURCE_CONTRADICTS``
      where the source says otherwise; ``NOT_STATED`` only where the whole source was read (``full_text``) and it
      is silent on the claim; ``NOT_IN_PASSAGE`` only where part of it was read (``full_text`` False).
    check: how the passage bears on the claim.
    compared_with: what was read (the whole text or which sections, in which copy: the paper's HTML or PDF text, a
      transcription, a repository file at a commit) and compared word for word with the quoted passage; empty when
      nothing was, and the row then says it is not verified verbatim.
    full_text: whether every section and appendix of the source was read.
    parts: for a claim that asserts several things, each part with its own verdict; ``verdict`` must then be
      ``citation_verdict`` of theirs (any part contradicted makes the claim contradicted).
  """

  id: str
  source: str
  text: str
  reference: str
  passage: str
  verdict: str
  check: str
  compared_with: str = ""
  full_text: bool = False
  parts: tuple[CitationPart, ...] = ()
  training = False
  kind = CITATION
  timed = False  # nothing is timed

  def __post_init__(self):
    if self.verdict not in CITATION_VERDICTS:
      raise ConfigError(f"citation {self.id}: verdict {self.verdict!r} is not one of "
                        f"{', '.join(map(repr, CITATION_VERDICTS))}")
    if self.verdict == NOT_IN_PASSAGE and self.full_text:
      raise ConfigError(f"citation {self.id}: {NOT_IN_PASSAGE!r} needs a partial reading; the full text was read, "
                        f"so the source agrees, contradicts it or does not state it")
    if self.verdict == NOT_STATED and not self.full_text:
      raise ConfigError(f"citation {self.id}: {NOT_STATED!r} needs the full text read; with part of it read, the "
                        f"claim is {NOT_IN_PASSAGE!r}")
    if self.parts and self.verdict != citation_verdict([p.verdict for p in self.parts]):
      raise ConfigError(f"citation {self.id}: verdict {self.verdict!r} does not follow from its parts' verdicts "
                        f"{[p.verdict for p in self.parts]!r} (expected "
                        f"{citation_verdict([p.verdict for p in self.parts])!r})")

  def evaluate(self, ctx: Context) -> dict[str, Any]:  # pylint: disable=unused-argument
    """The JSON-ready row: its verdict (one of ``CITATION_VERDICTS``) and the quoted passage as its finding."""
    return {"id": self.id, "kind": self.kind, "source": self.source, "claim": self.text,
            "criterion": f"checked against the source (not measured): {self.reference}", "reason": "",
            "statistic": None, "value": None, "verdict": self.verdict, "margin": None,
            "finding": " ".join(s for s in (f"“{self.passage}” ({self.reference}).", self.check, self.by_part(),
                                            self.verbatim()) if s),
            "numbers": {"reference": self.reference, "passage": self.passage, "compared_with": self.compared_with,
                        "full_text": self.full_text,
                        "parts": [dataclasses.asdict(p) for p in self.parts]}}

  def by_part(self) -> str:
    """Each part's verdict and evidence, then the rule that gives the claim's verdict (empty without parts)."""
    if not self.parts:
      return ""
    each = " ".join(f"Part “{p.text}”: {p.verdict}. {p.evidence}" for p in self.parts)
    return (f"{each} Verdict of the claim: {self.verdict} (a claim with parts agrees only if every part does, is "
            f"contradicted if any part is, and is otherwise not stated, or not found in the passage checked, as its "
            f"parts are).")

  def verbatim(self) -> str:
    """What was read, and whether the passage is verbatim, in one sentence."""
    if not self.compared_with:
      return f"Quoted from {self.reference}, not verified verbatim."
    read = "Read in full" if self.full_text else "Read in part"
    return f"{read}; quoted verbatim (compared with {self.compared_with})."


@dataclasses.dataclass(frozen=True)
class UnmeasurableClaim:
  """A claim of the notes that no measurement here can settle: its verdict is ``NOT_MEASURABLE``, with the reason.

  Attributes:
    id, source, text: as ``Claim``'s.
    would_need: what a measurement that settles it would need (the criterion that cannot be declared here).
    why: one line on why neither random inputs, a closed form nor the training runs here can provide it.
    related: ids of the measured rows that settle parts of it or its premises.
  """

  id: str
  source: str
  text: str
  would_need: str
  why: str
  related: tuple[str, ...] = ()
  training = False
  kind = NOT_MEASURABLE
  timed = False  # nothing is timed

  def evaluate(self, ctx: Context) -> dict[str, Any]:  # pylint: disable=unused-argument
    """The JSON-ready row: verdict ``NOT_MEASURABLE``, no statistic, the reason as its finding."""
    related = f" Measured rows on its parts: {', '.join(self.related)}." if self.related else ""
    return {"id": self.id, "kind": self.kind, "source": self.source, "claim": self.text,
            "criterion": f"none declared (not measurable here): settling it would need {self.would_need}",
            "reason": "", "statistic": None, "value": None, "verdict": NOT_MEASURABLE, "margin": None,
            "finding": f"Not measured: {self.why}{related}",
            "numbers": {"would_need": self.would_need, "why": self.why, "related": list(self.related)}}
