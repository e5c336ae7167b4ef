"""The claim table: every claim (the random-input claims, then the training claims) with its id, and the
Markdown tables of their measured rows (``claims.md``, and ``claims_readme.md`` for docs/claims.md).
"""

from __future__ import annotations

from typing import Any

from scaling import report
from scaling.studies import training_claims
from scaling.studies.claims_context import BATCH
from scaling.studies.claims_context import Context
from scaling.studies.claims_context import HEADS
from scaling.studies.claims_context import n_seeds_text
from scaling.studies.random_input_claims import RANDOM_INPUT_CLAIMS
from scaling.studies.verdicts import Claim


def all_claims() -> tuple[Claim, ...]:
  """RANDOM_INPUT_CLAIMS, then ``scaling.studies.training_claims.TRAINING_CLAIMS`` (ValueError if an id repeats)."""
  claims = RANDOM_INPUT_CLAIMS + training_claims.TRAINING_CLAIMS
  ids = [c.id for c in claims]
  duplicated = sorted({i for i in ids if ids.count(i) > 1})
  if duplicated:
    raise ValueError(f"claim id(s) defined twice: {', '.join(duplicated)}")
  return claims


def markdown_table(rows: list[dict[str, Any]]) -> str:
  """The claims as a Markdown table: claim, source, criterion, verdict, what we measured, reproduce."""
  return report.markdown_table(
      ("claim", "source", "criterion", "verdict", "what we measured", "reproduce"),
      [(r["claim"], r["source"], r["criterion"], f"**{r['verdict']}**", r["finding"], f"`{r['command']}`")
       for r in rows])


def readme_markdown(rows: list[dict[str, Any]], ctx: Context) -> str:
  """The tables for docs/claims.md: the random-input claims, then the training claims (``Claim.training``)."""
  training = {c.id for c in all_claims() if c.training}
  parts = []
  sizes = (f"mode {ctx.mode}: d_k {', '.join(map(str, ctx.d_k))}; {ctx.seq_len} tokens; batch {BATCH} × {HEADS} "
           f"heads; {n_seeds_text(ctx)} from {ctx.seed}")
  data = ctx.text_file or "the built-in synthetic task"
  for title, selected in ((f"Random-input claims ({sizes}):", [r for r in rows if r["id"] not in training]),
                          (f"Training claims (data: {data}; mode {ctx.mode}: {training_claims.describe_sizes(ctx)}):",
                           [r for r in rows if r["id"] in training])):
    if selected:
      parts.append(f"{title}\n\n{markdown_table(selected)}")
  return "\n".join(parts)
