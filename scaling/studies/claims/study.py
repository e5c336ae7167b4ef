"""Claims about attention logit scaling, each with the criterion that decides it and the measurement that tests it.

The claims come from two interview-preparation notes on why attention divides
its logits by √d_k (``shared/seeds/000_ae59428f9015f76d.txt``, "note 1", and
``shared/seeds/004_383f650843b84e3b.txt``, "note 2"). Each claim is a
``scaling.studies.claims.verdicts.Claim``: it quotes or paraphrases its source and
declares, next to its text, the ``Criterion`` (one statistic and two
thresholds) that turns the measured numbers into ``holds``, ``partly`` or
``does not hold``; its ``measure`` function returns only numbers and a sentence
formatted from them.

The parts: the measurement context and the wording of measured values
(``scaling.studies.claims.context``: ``Context``, and ``MODES``, the sizes of
``--mode=quick``, ``--mode=cpu_hour`` and ``--mode=paper``), the claims settled by
random q, k, v (drawn by ``scaling.studies.claims.random_input.inputs``; one module per
family, gathered in ``scaling.studies.claims.table.RANDOM_INPUT_CLAIMS``), those settled by
training small models (``scaling.studies.claims.training.families``), the citations
checked against their sources (``scaling.studies.claims.citations``), and the
claim table of all of them with its Markdown (``scaling.studies.claims.table``). This module runs
them: ``run_claims`` measures the selected claims, ``run`` is the study behind
``experiments.claims``; the public names of the parts stay importable from here.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import textwrap
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp

from scaling.training.data import text_corpus
from scaling.runs import run_lock
from scaling.runs import distributed
from scaling.runs import report
from scaling.training import resources
from scaling.studies import sweep_memory
from scaling.studies import device_time
from scaling.runs import results
from scaling.base.config import option
from scaling.base.config import Options
from scaling.studies.grid import run as grid_run
from scaling.studies.claims.history import criteria_history
from scaling.studies.claims.history import page_versions
from scaling.studies.claims.training.grid_sizes import grid_sizes
from scaling.studies.claims.training.sizes import follows_num_seeds
# The public names of the claims' parts, importable from here.
from scaling.studies.claims.table import all_claims
from scaling.studies.claims.table import markdown_table
from scaling.studies.claims.table import readme_markdown
from scaling.studies.claims.context import BATCH
from scaling.studies.claims.context import COMPUTE_DTYPES
from scaling.studies.claims.context import Context
from scaling.studies.claims.context import HEADS
from scaling.studies.claims.context import hardware
from scaling.studies.claims.context import MODES
from scaling.studies.claims.context import SWEEP_RULES
from scaling.studies.claims.table import RANDOM_INPUT_CLAIMS  # pylint: disable=unused-import
from scaling.studies.claims.verdicts import CITATION
from scaling.studies.claims.verdicts import CITATION_VERDICTS
from scaling.studies.claims.verdicts import FAILS
from scaling.studies.claims.verdicts import HOLDS
from scaling.studies.claims.verdicts import NOT_MEASURABLE
from scaling.studies.claims.verdicts import NOT_MEASURED
from scaling.studies.claims.verdicts import PARTLY
from scaling.studies.claims.verdicts import SOURCE_AGREES
from scaling.studies.claims.verdicts import SOURCE_CONTRADICTS
from scaling.studies.claims.verdicts import VERDICTS
from scaling.base.validation import ConfigError


def command(ctx: Context, claim_id: str) -> str:
  """The command line that measures ``claim_id`` alone on this context."""
  return " ".join(["python -m experiments.claims", f"--mode={ctx.mode}", f"--ids={claim_id}", *ctx.overrides()])


def run_claims(ctx: Context | None = None, ids: tuple[str, ...] | None = None,
               on_result: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
  """Measures the claims of ``all_claims()`` (all, or those in ``ids``); returns one JSON-ready row per claim.

  Each row is ``Claim.evaluate``'s (id, source, claim, criterion, statistic, value, verdict, finding, numbers)
  with ``command``, the command line that reproduces it alone, and for a training claim ``sizes``, those of the
  grids it was decided at (``grid_sizes``). Timed claims (``Claim.timed``) are measured last,
  once compiling ahead has stopped (nothing is left to train then), so that no compilation runs beside their clocks;
  the rows come back in table order.
  """
  ctx = ctx or Context()
  claims = all_claims()
  unknown = sorted(set(ids or ()) - {c.id for c in claims})
  if unknown:
    raise ConfigError(f"unknown claim id(s) {', '.join(unknown)}; known: {', '.join(c.id for c in claims)}")
  selected = [c for c in claims if not ids or c.id in ids]
  rows = {}
  for claim in sorted(selected, key=lambda c: c.timed):
    if claim.timed:
      ctx.planner.close()
    rows[claim.id] = {**claim.evaluate(ctx), "command": command(ctx, claim.id)}
    if claim.training:
      rows[claim.id]["sizes"] = grid_sizes(claim.grids(ctx).values())
    if on_result:
      on_result(rows[claim.id])
  return [rows[c.id] for c in selected]


@dataclasses.dataclass(frozen=True)
class ClaimsConfig(Options):
  """Which claims to measure and on what (the options of ``experiments.claims``)."""

  mode: str = option("quick", "Sizes: quick (minutes on 2 CPU cores: random inputs at d_k 16, 64, 128, 1024 with 2 "
                     "seeds; width-32 training runs), cpu_hour (d_k 16..1024 with 4 seeds; width-64 training runs, "
                     "planned for about an hour on 2 CPU cores), paper (the notes' setting: d_k 64, width 512, 8 "
                     "heads, sequences of 256, depths 2/6/12, ~2000 steps, 3 seeds; for an accelerator) or paper_8min "
                     "(the notes' model with 3 learning rates, 300-600 steps and float32: scripts/device_claims.sh, "
                     "under 8 minutes on one H200).",
                     choices=tuple(MODES))
  ids: tuple[str, ...] | None = option(None, "Claims to measure (default: all).",
                                       choices=lambda: [c.id for c in all_claims()])
  d_k: tuple[int, ...] | None = option(None, "Head dimensions of the random-input claims (must include 64 and "
                                       "128); default: the mode's.", lower=1)
  num_seeds: int | None = option(None, "Seeds (mean and std are over them); default: the mode's.", lower=1)
  seq_len: int | None = option(None, "Sequence length of the random-input claims; default: the mode's.", lower=2)
  text_file: str | None = option(None, "UTF-8 text for the training claims ('shakespeare': tiny Shakespeare, "
                                 "shipped with the package); default: the built-in synthetic task.")
  seed: int = option(0, "Base random seed.", lower=0, upper=2**31 - 1)
  compute_dtype: str = option("float32", "Compute precision of the training claims' models (projections, MLP and "
                              "residual stream; parameters, attention logits and softmax stay float32), except the "
                              "grids that name their own precisions: those of the NaN, gradient-norm, hard-selection "
                              "and stable-gradient claims (the mode's dtypes).",
                              choices=COMPUTE_DTYPES)
  dry_run: bool = option(False, "Print the planned training and its expected time on this device, then stop "
                         "(nothing is measured or written).")
  device_efficiency_from: str | None = option(
      None, "A train.json that the benchmark's train suite (experiments.benchmark) wrote on the accelerator the plan "
      "is for (an NVIDIA H200): the plan's compute on it at the training step's measured FLOP/s; default: at an "
      "assumed fraction of its datasheet peak.")
  compile_ahead: bool = option(True, "Compile the training grids' programs in a thread while the claims before "
                               "them are measured, and on a CPU then train the grids there too, from the last one "
                               "back, beside the run's own training (one device; the time split counts that "
                               "thread apart).")
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
      raise ConfigError("d_k must include 64 and 128 (sqrt_flatter_at_128 compares them)")

  def context(self) -> Context:
    """The measurement context of these options."""
    return Context(mode=self.mode, d_k=self.d_k, seq_len=self.seq_len, num_seeds=self.num_seeds, seed=self.seed,
                   text_file=self.text_file, compute_dtype=self.compute_dtype)


def planned_grids(ctx: Context, ids: tuple[str, ...] | None = None) -> grid_run.GridPlan:
  """The grids the selected training claims (all, or those in ``ids``) declare (``Claim.grids``), each once, in
  order: read from the declarations, nothing is trained or measured.

  Declaring them reads and checks the training data (a text file too short fails here).
  """
  selected = [c for c in all_claims() if c.training and (ids is None or c.id in ids)]
  return ctx.planner.plan(spec for claim in selected for spec in claim.grids(ctx).values())


def memory_estimate(ctx: Context, ids: tuple[str, ...] | None = None) -> resources.Estimate:
  """The largest program of the selected claims: the random-input sweep at the largest d_k, the largest planned
  training grid (``planned_grids``)."""
  selected = [c for c in all_claims() if ids is None or c.id in ids]
  estimates = []
  if any(not c.training for c in selected):
    d_k = max(ctx.d_k)
    e = sweep_memory.sweep_program(batch=BATCH, heads=HEADS, seq_len=ctx.seq_len, d_k=d_k, num_seeds=ctx.num_seeds,
                                num_rules=len(SWEEP_RULES))
    hint = "use a smaller seq_len or d_k, or fewer num_seeds"
    parts = tuple(dataclasses.replace(p, flags=("seq_len", "num_seeds", "d_k"), hint=hint) for p in e.parts)
    estimates.append(resources.Estimate(parts, f"for the random-input claims at d_k={d_k}"))
  if any(c.training for c in selected):
    if follows_num_seeds(ctx):
      flags, hint = ("mode", "num_seeds"), "use mode='quick' or fewer num_seeds, or leave the training claims out of ids"
    else:  # the mode fixes the grids' seeds: num_seeds changes only the random-input claims
      flags, hint = ("mode",), "use mode='quick', or leave the training claims out of ids"
    estimates.append(planned_grids(ctx, ids).estimate(flags, hint))
  return resources.largest(estimates)


MATMUL_SIZES = {"cpu": 1024}  # the square float32 matmul whose rate sets the time estimate, per backend
MATMUL_SIZE = 8192  # on accelerators
COMPILE_SECONDS = 20.0  # about one training grid's compilation on a 2-core CPU (measured at quick sizes)


def matmul_size() -> int:
  """The side of the timed matmul on the default backend."""
  return MATMUL_SIZES.get(jax.default_backend(), MATMUL_SIZE)


def device_flops() -> float:
  """Floating-point operations per second of a jitted square float32 matmul (``matmul_size``) on the default device
  (best of 5)."""
  n = matmul_size()
  a = jnp.ones((n, n), jnp.float32)
  f = jax.jit(lambda x: x @ x)
  f(a).block_until_ready()
  best = float("inf")
  for _ in range(5):
    start = time.perf_counter()
    f(a).block_until_ready()
    best = min(best, time.perf_counter() - start)
  return 2.0 * n**3 / best


DEVICE_KIND = "NVIDIA H200"  # the accelerator scripts/device_claims.sh is planned for
DEVICE_BUDGET_SECONDS = 8 * 60.0  # ... and the time it must fit in
DEVICE_TIME_MODEL = device_time.TimeModel(efficiency=0.3, compile_seconds=20.0, step_seconds=0.005, fixed_seconds=60.0)
"""The assumptions behind the accelerator plan: 30% of the datasheet peak (small models: the low end of what such
programs reach), 20 s of compilation per grid (a depth-12 paper-size grid compiles in about 14 s on a 2-core CPU),
5 ms of host work per step (the step's dispatch and its per-step divergence check), 60 s for the random-input claims."""


def accelerator_plan(ctx: Context, ids: tuple[str, ...] | None = None, device_kind: str = DEVICE_KIND,
                     model: device_time.TimeModel = DEVICE_TIME_MODEL) -> dict[str, float]:
  """Expected seconds of the selected claims on one ``device_kind`` (``device_time.accelerator_seconds`` of the
  planned training grids; nothing is trained and no accelerator is needed)."""
  plan = planned_grids(ctx, ids)
  fixed = model.fixed_seconds if any(not c.training for c in all_claims() if ids is None or c.id in ids) else 0.0
  return device_time.accelerator_seconds(plan.programs(), device_kind, dataclasses.replace(model, fixed_seconds=fixed),
                                       compiled=plan.compiled())


def describe_accelerator_plan(plan: dict[str, float], device_kind: str = DEVICE_KIND,
                              budget: float = DEVICE_BUDGET_SECONDS, model: device_time.TimeModel = DEVICE_TIME_MODEL,
                              measured_by: str | None = None) -> str:
  """``accelerator_plan``'s seconds in words, with whether they fit ``budget``; ``measured_by`` names the train.json
  that measured ``model.efficiency`` (``device_time.measured_efficiency``), None where it is assumed."""
  fits = "fits" if plan["total"] <= budget else "does NOT fit"
  source = (f"the training step's efficiency measured by {measured_by}" if measured_by
            else "an assumed efficiency, not measured; --device_efficiency_from gives a measured one")
  return (f"on one {device_kind} (datasheet peak × {model.efficiency:.3g}, {source}): about {plan['total'] / 60:.1f} min "
          f"({plan['compute'] / 60:.1f} min of compute, {plan['compile'] / 60:.1f} of compilation, "
          f"{plan['steps'] / 60:.1f} of per-step overhead, {plan['fixed'] / 60:.1f} outside training), which {fits} "
          f"{budget / 60:g} min; its compute alone at the full datasheet peak would take "
          f"{plan['compute_at_peak'] / 60:.1f} min")


def device_time_model(efficiency_from: str | None) -> device_time.TimeModel:
  """``DEVICE_TIME_MODEL``, its efficiency measured by the train suite's train.json at ``efficiency_from`` on
  ``DEVICE_KIND`` (``device_time.measured_efficiency``) where one is given.

  Raises:
    ConfigError: a file that is missing, not JSON, not a train suite's, or measured on another device.
  """
  if efficiency_from is None:
    return DEVICE_TIME_MODEL
  path = pathlib.Path(efficiency_from)
  try:
    measured = device_time.measured_efficiency(json.loads(path.read_text()), DEVICE_KIND)
  except (OSError, ValueError) as e:
    raise ConfigError(f"device_efficiency_from: {path}: {e}") from e
  return dataclasses.replace(DEVICE_TIME_MODEL, efficiency=measured)


def time_estimate(ctx: Context, ids: tuple[str, ...] | None = None, efficiency_from: str | None = None) -> str:
  """The planned training of the selected claims and its expected time on the present device, in words, and on
  ``DEVICE_KIND`` from its datasheet.

  The compute is the floating-point operations of ``planned_grids`` at the measured matmul rate (small models run
  below it, so read it as a lower bound), plus COMPILE_SECONDS per distinct program (``GridPlan.compiled``).
  """
  model = device_time_model(efficiency_from)
  plan = planned_grids(ctx, ids)
  if not plan:
    return f"no training claims selected; {hardware()}"
  flops, rate = plan.flops(), device_flops()
  programs = plan.compiled()
  seconds = flops / rate + COMPILE_SECONDS * programs
  return (f"planned training: {len(plan)} grids ({programs} distinct programs), {plan.runs} runs, "
          f"{flops / 1e12:.3g} TFLOP; on {hardware()} at the measured {rate / 1e9:.3g} GFLOP/s of a "
          f"{matmul_size()}² matmul: at least {seconds / 60:.1f} min ({flops / rate / 60:.1f} min of compute, about "
          f"{COMPILE_SECONDS:g} s of compilation per distinct program); "
          + describe_accelerator_plan(accelerator_plan(ctx, ids, model=model), model=model,
                                      measured_by=efficiency_from))


def verdict_counts(rows: list[dict[str, Any]]) -> dict[str, int]:
  """How many rows have each verdict, for every verdict the rows have: measured verdicts (``VERDICTS``, the
  inconclusive ones among them), ``NOT_MEASURED``, the citations' (``CITATION_VERDICTS``), then any other, in order
  of first appearance."""
  order = (*VERDICTS, NOT_MEASURED, *CITATION_VERDICTS)
  found = [str(r["verdict"]) for r in rows]
  names = [v for v in order if v in found] + [v for v in dict.fromkeys(found) if v not in order]
  return {v: found.count(v) for v in names}


OUTPUTS = ("claims.jsonl", "claims.md", "claims_readme.md", "config.json", "timings.jsonl")
"""The files ``run`` writes into the output folder (besides run.json)."""


@run_lock.held_while_running
def run(config: ClaimsConfig, out_dir: pathlib.Path) -> list[dict[str, Any]]:
  """The study as ``experiments.claims`` runs it: measures, streams rows, writes the tables, prints verdicts.

  Each claim's row is appended to claims.partial.jsonl when it is measured; rerun
  with the same options into the same folder, a killed run measures only the
  claims it has not finished. The tables are written from the complete rows at
  the end; wall times go to timings.jsonl.
  """
  if config.text_file is not None:
    text_corpus.load_text(config.text_file)  # a bad file fails here, before the output folder exists
  ctx = config.context()
  memory = memory_estimate(ctx, config.ids)
  values = {"seq_len": ctx.seq_len, "num_seeds": ctx.num_seeds, "d_k": ctx.d_k, "mode": ctx.mode}
  need = f"largest program about {memory.total / 2**30:.3g} GiB {memory.where}"
  if config.dry_run:  # the plan of a run too large for this host is still shown (it may be meant for another)
    try:
      resources.check(memory, values)
    except resources.ResourceError as e:
      need += f" (this host: {e})"
  else:
    resources.check(memory, values)  # before planning, so that a run too large is refused at once
  print(f"mode {ctx.mode}: {time_estimate(ctx, config.ids, config.device_efficiency_from)}; {need}", flush=True)
  if config.dry_run:
    return []
  start = time.perf_counter()
  results.open_run(out_dir, config, overwrite=config.output.overwrite, outputs=OUTPUTS,
                   ignore=("dry_run", "compile_ahead", "device_efficiency_from"))
  version = results.code_version()
  results.write_json(out_dir / "config.json", {"config": dataclasses.asdict(config), "sizes": ctx.sizes(), **version})
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

    if missing:  # the training grids compile in a thread while the claims before them are measured
      if config.compile_ahead:
        ctx.planner.compile_ahead(planned_grids(ctx, tuple(missing)).grids)
      try:
        run_claims(ctx, tuple(missing), on_result=on_result)
      finally:
        ctx.planner.close()
  rows = stream.finish()
  # Each criterion against the published pages (git history of docs/claims.md in this checkout), for the tables.
  past = criteria_history(rows, ctx.mode, page_versions(results.checkout_root()))
  rows = [{**r, "criterion_history": past[r["id"]]} if r["id"] in past else r for r in rows]
  results.write_text(out_dir / "claims.md", markdown_table(rows))
  results.write_text(out_dir / "claims_readme.md", readme_markdown(rows, ctx, version))
  indent = " " * 16
  for r in rows:
    print(f"[{r['verdict']:>13}] {r['claim']}  ({r['source']})")
    print(textwrap.fill(f"criterion: {r['criterion']}", 116, initial_indent=indent, subsequent_indent=indent))
    if r.get("reason"):
      print(textwrap.fill(f"why: {r['reason']}", 116, initial_indent=indent, subsequent_indent=indent))
    label = {CITATION: "source", NOT_MEASURABLE: "why"}.get(r.get("kind"), "measured")
    print(textwrap.fill(f"{label}: {r['finding']}", 116, initial_indent=indent, subsequent_indent=indent))
    print(f"{indent}reproduce: {r['command']}")
  print(f"\n{len(rows)} claims ({ctx.mode} mode, {time.perf_counter() - start:.0f}s): "
        + ", ".join(f"{n} {v}" for v, n in verdict_counts(rows).items())
        + f"; wrote claims.jsonl, claims.md, claims_readme.md and config.json to {out_dir}")
  return rows
