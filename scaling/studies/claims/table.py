"""The claim table: every claim (the random-input claims, the training claims, the claims not measurable here, then
the citations) with its id, and the Markdown tables of their rows (``claims.md``, and ``claims_readme.md`` for
docs/claims.md).
"""

from __future__ import annotations

from typing import Any

from scaling.base.validation import ConfigError
from scaling.runs import report
from scaling.studies.claims import citations as citation_claims
from scaling.studies.claims.random_input import exp_overflow as exp_overflow_claims
from scaling.studies.claims.random_input import feature_scaling as feature_scaling_claims
from scaling.studies.claims.random_input import head_dim_and_retrieval as head_dim_and_retrieval_claims
from scaling.studies.claims.random_input import logit_variance as logit_variance_claims
from scaling.studies.claims.training import norms as norm_claims
from scaling.studies.claims.random_input import norms_and_temperature as norms_and_temperature_claims
from scaling.studies.claims.random_input import outlier_overflow as outlier_overflow_claims
from scaling.studies.claims.random_input import projection_init as projection_init_claims
from scaling.studies.claims.random_input import rope as rope_claims
from scaling.studies.claims.random_input import scale_order as scale_order_claims
from scaling.studies.claims.random_input import softmax_saturation as softmax_saturation_claims
from scaling.studies.claims.training import families as training_claims
from scaling.studies.claims.history import history_text
from scaling.studies.claims.training.grid_sizes import sizes_text
from scaling.studies.claims.training.sizes import describe_sizes
from scaling.studies.claims import unmeasurable as unmeasurable_claims
from scaling.studies.claims.context import BATCH
from scaling.studies.claims.context import Context
from scaling.studies.claims.context import hardware
from scaling.studies.claims.context import HEADS
from scaling.studies.claims.context import n_seeds_text
from scaling.studies.claims.verdicts import CITATION
from scaling.studies.claims.verdicts import CITATION_VERDICTS
from scaling.studies.claims.verdicts import CitationClaim
from scaling.studies.claims.verdicts import Claim
from scaling.studies.claims.verdicts import INCONCLUSIVE
from scaling.studies.claims.verdicts import INCONCLUSIVE_EDGE
from scaling.studies.claims.verdicts import INCONCLUSIVE_VERDICTS
from scaling.studies.claims.verdicts import NOISE_SES
from scaling.studies.claims.verdicts import NOT_MEASURABLE
from scaling.studies.claims.verdicts import UnmeasurableClaim
from scaling.studies.claims.verdicts import NOT_IN_PASSAGE
from scaling.studies.claims.verdicts import NOT_STATED
from scaling.studies.claims.verdicts import SOURCE_AGREES
from scaling.studies.claims.verdicts import SOURCE_CONTRADICTS
from scaling.studies.claims.verdicts import SUPPORTING


def insert_after(claims: tuple[Any, ...], after: str, new: tuple[Any, ...]) -> tuple[Any, ...]:
  """``claims`` with ``new`` inserted right after the claim whose id is ``after``.

  Args:
    claims: claims (anything with an ``id``), in table order.
    after: the id of the claim the new ones follow.
    new: the claims to insert, in their order.

  Returns:
    The claims with ``new`` in place.

  Raises:
    ConfigError: no claim of ``claims`` has the id ``after``.
  """
  ids = [c.id for c in claims]
  if after not in ids:
    raise ConfigError(f"no claim {after!r} to place the claims {[c.id for c in new]!r} after; ids: {ids!r}")
  i = ids.index(after) + 1
  return tuple(claims[:i]) + tuple(new) + tuple(claims[i:])


RANDOM_INPUT_CLAIMS: tuple[Claim, ...] = (
    insert_after(logit_variance_claims.LOGIT_VARIANCE_CLAIMS, "sqrt_adjusted_factor",
                 projection_init_claims.PROJECTION_INIT_CLAIMS)
    + softmax_saturation_claims.SOFTMAX_SATURATION_CLAIMS + exp_overflow_claims.EXP_OVERFLOW_CLAIMS
    + insert_after(outlier_overflow_claims.OUTLIER_OVERFLOW_CLAIMS, "nan_gradient_explosion",
                   scale_order_claims.SCALE_ORDER_CLAIMS)
    + rope_claims.ROPE_CLAIMS + norms_and_temperature_claims.NORMS_AND_TEMPERATURE_CLAIMS
    + head_dim_and_retrieval_claims.HEAD_DIM_AND_RETRIEVAL_CLAIMS + feature_scaling_claims.FEATURE_SCALING_CLAIMS)
"""The claims random inputs, closed forms and small synthetic problems can settle, family by family, each new row
beside the rows it belongs with, in the order of the tables."""

CITATION_LEGEND = (
    f"Citation verdicts: **{SOURCE_AGREES}** (the source says it), **{SOURCE_CONTRADICTS}** (the source says "
    f"otherwise), **{NOT_STATED}** (the whole source was read and it never says it: silence, not disagreement), "
    f"**{NOT_IN_PASSAGE}** (only part of the source was read, and that part neither says nor contradicts it). A claim "
    f"with parts contradicts if any part does, and agrees only if every part does; each row says what was read.")
"""The line above the citation table that defines its verdicts."""

INCONCLUSIVE_LEGEND = (
    f"**{INCONCLUSIVE}**: a threshold lies within {NOISE_SES:g} standard errors (over seeds) of the measured value, so "
    f"the seeds cannot tell which side it is on; **{INCONCLUSIVE_EDGE}**: the optimum the statistic is made of stays "
    f"at the edge of the grid searched (widened up to its bound), so it is not located. Neither is a verdict either "
    f"way.")
"""The line above a measured table with an inconclusive row, defining those verdicts."""


def all_claims() -> tuple[Claim | UnmeasurableClaim | CitationClaim, ...]:
  """RANDOM_INPUT_CLAIMS, ``scaling.studies.claims.training.families.TRAINING_CLAIMS``,
  ``scaling.studies.claims.training.norms.NORM_CLAIMS``, ``scaling.studies.claims.unmeasurable.UNMEASURABLE_CLAIMS``, then
  ``scaling.studies.claims.citations.CITATION_CLAIMS`` (ValueError if an id repeats)."""
  claims = (RANDOM_INPUT_CLAIMS + training_claims.TRAINING_CLAIMS + norm_claims.NORM_CLAIMS
            + unmeasurable_claims.UNMEASURABLE_CLAIMS + citation_claims.CITATION_CLAIMS)
  ids = [c.id for c in claims]
  duplicated = sorted({i for i in ids if ids.count(i) > 1})
  if duplicated:
    raise ValueError(f"claim id(s) defined twice: {', '.join(duplicated)}")
  return claims


SUPPORTING_LEGEND = (
    "Supporting measurements: no claim of the notes makes them; each is decided by its criterion like a claim, is not "
    "counted among the claims' verdicts, and informs the rows it names.")
"""The line above the table of supporting measurements."""


def _criterion_cell(row: dict[str, Any]) -> str:
  """The criterion with the reason its thresholds follow from the claim's words, then each other reading's
  (``Claim.beside``), then its history against the published pages (``history.history_text``) when the row has one."""
  cell = f"{row['criterion']}. Why: {row['reason']}" if row.get("reason") else row["criterion"]
  for other in row.get("beside") or ():
    cell += f". Beside, {other['label']}: {other['criterion']}"
    cell += f". Why: {other['reason']}" if other.get("reason") else ""
  past = history_text(row.get("criterion_history"))
  return f"{cell}. {past}" if past else cell


def _verdict_cell(row: dict[str, Any]) -> str:
  """The verdict in bold, and for a training row the sizes it was decided at (``Claim.grids``' ``grid_sizes``)."""
  cell = f"**{row['verdict']}**"
  return f"{cell} at {sizes_text(row['sizes'])}" if row.get("sizes") else cell


def markdown_table(rows: list[dict[str, Any]]) -> str:
  """Measured claims as a Markdown table (claim, source, criterion with its reason and any other reading's, verdict,
  what we measured, reproduce; after ``INCONCLUSIVE_LEGEND`` when a verdict is inconclusive; a training row's
  verdict with the sizes it was decided at), the supporting measurements in their own (after ``SUPPORTING_LEGEND``,
  with the rows each informs), the claims not measurable here in their own (claim, source, what settling it would need, why not here, verdict), then citation
  claims in theirs (claim, source, checked against, verdict, the source's passage), after ``CITATION_LEGEND``
  (ValueError if a citation row's verdict is not one of ``CITATION_VERDICTS``)."""
  measured = [r for r in rows if r.get("kind") not in (CITATION, NOT_MEASURABLE, SUPPORTING)]
  supporting = [r for r in rows if r.get("kind") == SUPPORTING]
  unmeasurable = [r for r in rows if r.get("kind") == NOT_MEASURABLE]
  cited = [r for r in rows if r.get("kind") == CITATION]
  parts = []
  if measured:
    if any(r["verdict"] in INCONCLUSIVE_VERDICTS for r in measured):
      parts.append(INCONCLUSIVE_LEGEND)
    parts.append(report.markdown_table(
        ("claim", "source", "criterion", "verdict", "what we measured", "reproduce"),
        [(r["claim"], r["source"], _criterion_cell(r), _verdict_cell(r), r["finding"], f"`{r['command']}`")
         for r in measured]))
  if supporting:
    parts.append(SUPPORTING_LEGEND + "\n\n" + report.markdown_table(
        ("measurement", "why it is here", "criterion", "result", "informs", "what we measured", "reproduce"),
        [(r["claim"], r["source"], _criterion_cell(r), _verdict_cell(r), ", ".join(r.get("supports") or ()),
          r["finding"], f"`{r['command']}`") for r in supporting]))
  if unmeasurable:
    parts.append(report.markdown_table(
        ("claim", "source", "settling it would need", "why not here", "verdict"),
        [(r["claim"], r["source"], r["numbers"]["would_need"], r["finding"], f"**{r['verdict']}**")
         for r in unmeasurable]))
  if cited:
    unknown = sorted({str(r["verdict"]) for r in cited} - set(CITATION_VERDICTS))
    if unknown:
      raise ValueError(f"rows: citation verdict(s) {', '.join(map(repr, unknown))} not among "
                       f"{', '.join(map(repr, CITATION_VERDICTS))}")
    parts.append(CITATION_LEGEND + "\n\n" + report.markdown_table(
        ("claim", "source", "checked against (not measured)", "verdict", "the source says"),
        [(r["claim"], r["source"], r["numbers"]["reference"], f"**{r['verdict']}**", r["finding"]) for r in cited]))
  return "\n\n".join(parts)


def readme_markdown(rows: list[dict[str, Any]], ctx: Context, version: dict[str, str] | None = None) -> str:
  """The tables for docs/claims.md: the random-input claims, the training claims (``Claim.training``), the supporting
  measurements, the claims not measurable here, then the citation claims; each heading states the mode, the sizes, the hardware and the code and
  day of the run (``version``: ``results.code_version()`` at its start)."""
  training = {c.id for c in all_claims() if c.training}
  parts = []
  where = f"hardware {hardware()}" + (f"; run on {version['code']}, {version['date']}" if version else "")
  sizes = (f"mode {ctx.mode}: d_k {', '.join(map(str, ctx.d_k))}; {ctx.seq_len} tokens; batch {BATCH} × {HEADS} "
           f"heads; {n_seeds_text(ctx)} from {ctx.seed}; {where}")
  data = ctx.text_file or "the built-in synthetic task"
  measured = [r for r in rows if r.get("kind") not in (CITATION, NOT_MEASURABLE, SUPPORTING)]
  for title, selected in ((f"Random-input claims ({sizes}):", [r for r in measured if r["id"] not in training]),
                          (f"Training claims (data: {data}; mode {ctx.mode}: {describe_sizes(ctx)}; "
                           f"{where}):", [r for r in measured if r["id"] in training]),
                          (f"Supporting measurements (mode {ctx.mode}; {where}):",
                           [r for r in rows if r.get("kind") == SUPPORTING]),
                          ("Claims not measurable here (no criterion can be declared; the rows that measure their "
                           "parts are named):", [r for r in rows if r.get("kind") == NOT_MEASURABLE]),
                          ("Citation claims (checked against the source by reading it; not measured"
                           + (f"; {version['code']}" if version else "") + "):",
                           [r for r in rows if r.get("kind") == CITATION])):
    if selected:
      parts.append(f"{title}\n\n{markdown_table(selected)}")
  return "\n".join(parts)
