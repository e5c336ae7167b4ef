"""Claims about attention logit scaling, each with the criterion that decides it and the measurement that tests it.

The claims come from two interview-preparation notes on why attention divides
its logits by √d_k (``shared/seeds/000_ae59428f9015f76d.txt``, "note 1", and
``shared/seeds/004_383f650843b84e3b.txt``, "note 2"). Each claim is a
``scaling.studies.verdicts.Claim``: it quotes or paraphrases its source and
declares, next to its text, the ``Criterion`` (one statistic and two
thresholds) that turns the measured numbers into ``holds``, ``partly`` or
``does not hold``; its ``measure`` function returns only numbers and a sentence
formatted from them.

The parts: the measurement context and the wording of measured values
(``scaling.studies.claims_context``: ``Context``, and ``MODES``, the sizes of
``--mode=quick`` and ``--mode=full``), the claims settled by random q, k, v
(``scaling.studies.random_input_claims``), those settled by training small
models (``scaling.studies.training_claims``), and the claim table of all of
them with its Markdown (``scaling.studies.claim_table``). This module runs
them: ``run_claims`` measures the selected claims, ``run`` is the study behind
``experiments.claims``; the public names of the parts stay importable from here.
"""

from __future__ import annotations

import dataclasses
import pathlib
import textwrap
import time
from typing import Any, Callable

from scaling import data as data_lib
from scaling import distributed
from scaling import report
from scaling import resources
from scaling import results
from scaling.config import option
from scaling.config import Options
from scaling.studies import training_claims
# The public names of the claims' parts, importable from here.
from scaling.studies.claim_table import all_claims
from scaling.studies.claim_table import markdown_table
from scaling.studies.claim_table import readme_markdown
from scaling.studies.claims_context import BATCH
from scaling.studies.claims_context import Context
from scaling.studies.claims_context import HEADS
from scaling.studies.claims_context import MODES
from scaling.studies.claims_context import SWEEP_RULES
from scaling.studies.random_input_claims import RANDOM_INPUT_CLAIMS  # pylint: disable=unused-import
from scaling.studies.verdicts import FAILS
from scaling.studies.verdicts import HOLDS
from scaling.studies.verdicts import NOT_MEASURED
from scaling.studies.verdicts import PARTLY
from scaling.validation import ConfigError


def command(ctx: Context, claim_id: str) -> str:
  """The command line that measures ``claim_id`` alone on this context."""
  return " ".join(["python -m experiments.claims", f"--mode={ctx.mode}", f"--ids={claim_id}", *ctx.overrides()])


def run_claims(ctx: Context | None = None, ids: tuple[str, ...] | None = None,
               on_result: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
  """Measures the claims of ``all_claims()`` (all, or those in ``ids``); returns one JSON-ready row per claim.

  Each row is ``Claim.evaluate``'s (id, source, claim, criterion, statistic, value, verdict, finding, numbers)
  with ``command``, the command line that reproduces it alone.
  """
  ctx = ctx or Context()
  claims = all_claims()
  unknown = sorted(set(ids or ()) - {c.id for c in claims})
  if unknown:
    raise ConfigError(f"unknown claim id(s) {', '.join(unknown)}; known: {', '.join(c.id for c in claims)}")
  rows = []
  for claim in claims:
    if ids and claim.id not in ids:
      continue
    row = {**claim.evaluate(ctx), "command": command(ctx, claim.id)}
    rows.append(row)
    if on_result:
      on_result(row)
  return rows


@dataclasses.dataclass(frozen=True)
class ClaimsConfig(Options):
  """Which claims to measure and on what (the options of ``experiments.claims``)."""

  mode: str = option("quick", "Sizes: quick (random inputs at d_k 16, 64, 128, 1024 with 2 seeds; small training "
                     "runs) or full (d_k 16..1024 with 4 seeds; the training runs of docs/claims.md).", choices=tuple(MODES))
  ids: tuple[str, ...] | None = option(None, "Claims to measure (default: all).",
                                       choices=lambda: [c.id for c in all_claims()])
  d_k: tuple[int, ...] | None = option(None, "Head dimensions of the random-input claims (must include 64 and "
                                       "128); default: the mode's.", lower=1)
  num_seeds: int | None = option(None, "Seeds (mean and std are over them); default: the mode's.", lower=1)
  seq_len: int | None = option(None, "Sequence length of the random-input claims; default: the mode's.", lower=2)
  text_file: str | None = option(None, "UTF-8 text for the training claims; default: the built-in synthetic task.")
  seed: int = option(0, "Base random seed.", lower=0, upper=2**31 - 1)
  output: results.OutputConfig = option(results.OutputConfig("runs/claims"), "Output.")
  cluster: distributed.DistributedConfig = option(distributed.DistributedConfig(), "Several processes.")

  def __post_init__(self):
    if self.d_k is not None:
      object.__setattr__(self, "d_k", tuple(sorted(set(self.d_k))))
    if self.ids is not None:
      object.__setattr__(self, "ids", tuple(dict.fromkeys(self.ids)))
    super().__post_init__()

  def validate(self):
    if self.d_k is not None and not {64, 128} <= set(self.d_k):
      raise ConfigError("--d_k must include 64 and 128 (sqrt_flatter_at_128 compares them)")

  def context(self) -> Context:
    """The measurement context of these options."""
    return Context(mode=self.mode, d_k=self.d_k, seq_len=self.seq_len, num_seeds=self.num_seeds, seed=self.seed,
                   text_file=self.text_file)


def memory_estimate(ctx: Context, ids: tuple[str, ...] | None = None) -> resources.Estimate:
  """The largest program of the selected claims: the random-input sweep at the largest d_k, the training grids.

  Building the training claims' estimate reads and checks their data (a text file too short fails here).
  """
  selected = [c for c in all_claims() if ids is None or c.id in ids]
  estimates = []
  if any(not c.training for c in selected):
    d_k = max(ctx.d_k)
    e = resources.sweep_program(batch=BATCH, heads=HEADS, seq_len=ctx.seq_len, d_k=d_k, num_seeds=ctx.num_seeds,
                                num_rules=len(SWEEP_RULES))
    hint = "use a smaller --seq_len or --d_k, or fewer --num_seeds"
    parts = tuple(dataclasses.replace(p, flags=("seq_len", "num_seeds", "d_k"), hint=hint) for p in e.parts)
    estimates.append(resources.Estimate(parts, f"for the random-input claims at d_k {d_k}"))
  if any(c.training for c in selected):
    estimates.append(training_claims.memory_estimate(ctx))
  return resources.largest(estimates)


OUTPUTS = ("claims.jsonl", "claims.md", "claims_readme.md", "config.json", "timings.jsonl")
"""The files ``run`` writes into the output folder (besides run.json)."""


def run(config: ClaimsConfig, out_dir: pathlib.Path) -> list[dict[str, Any]]:
  """The study as ``experiments.claims`` runs it: measures, streams rows, writes the tables, prints verdicts.

  Each claim's row is appended to claims.partial.jsonl when it is measured; rerun
  with the same options into the same folder, a killed run measures only the
  claims it has not finished. The tables are written from the complete rows at
  the end; wall times go to timings.jsonl.
  """
  if config.text_file is not None:
    data_lib.load_text(config.text_file)  # a bad file fails here, before the output folder exists
  ctx = config.context()
  resources.check(memory_estimate(ctx, config.ids),
                  {"seq_len": ctx.seq_len, "num_seeds": ctx.num_seeds, "d_k": ctx.d_k, "mode": ctx.mode})
  start = time.perf_counter()
  results.open_run(out_dir, config, overwrite=config.output.overwrite, outputs=OUTPUTS)
  results.write_json(out_dir / "config.json", {"config": dataclasses.asdict(config), "sizes": ctx.sizes()})
  ids = [c.id for c in all_claims() if not config.ids or c.id in config.ids]
  stream = results.GroupedRows(out_dir / "claims.jsonl", [(i, 1) for i in ids], lambda row: row["id"])
  missing = stream.missing()
  if len(missing) < len(ids):
    print(f"resuming: {len(ids) - len(missing)} of {len(ids)} claims already in {out_dir}", flush=True)
  with report.Progress(len(missing), "claims") as progress:
    began = [time.perf_counter()]

    def on_result(row):
      stream.add(row["id"], [row])
      results.append_timing(out_dir, {"id": row["id"], "seconds": time.perf_counter() - began[0]})
      began[0] = time.perf_counter()
      progress.update(f"{row['id']}: {row['verdict']}")

    if missing:
      run_claims(ctx, tuple(missing), on_result=on_result)
  rows = stream.finish()
  results.write_text(out_dir / "claims.md", markdown_table(rows))
  results.write_text(out_dir / "claims_readme.md", readme_markdown(rows, ctx))
  indent = " " * 16
  for r in rows:
    print(f"[{r['verdict']:>13}] {r['claim']}  ({r['source']})")
    print(textwrap.fill(f"criterion: {r['criterion']}", 116, initial_indent=indent, subsequent_indent=indent))
    print(textwrap.fill(f"measured: {r['finding']}", 116, initial_indent=indent, subsequent_indent=indent))
    print(f"{indent}reproduce: {r['command']}")
  counts = {v: sum(r["verdict"] == v for r in rows) for v in (HOLDS, PARTLY, FAILS, NOT_MEASURED)}
  print(f"\n{len(rows)} claims ({ctx.mode} mode, {time.perf_counter() - start:.0f}s): "
        + ", ".join(f"{n} {v}" for v, n in counts.items() if n or v != NOT_MEASURED)
        + f"; wrote claims.jsonl, claims.md, claims_readme.md and config.json to {out_dir}")
  return rows
