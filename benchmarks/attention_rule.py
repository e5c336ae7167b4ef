"""Benchmark suite `attention_rule`: the side-by-side timings behind the dispatch rule of ``scaling.attention.dispatch``.

  python -m experiments.benchmark --suite=attention_rule
  python -m experiments.benchmark --suite=attention_rule --rule_tables=one_tile,small --rule_max_gflop=20

``select_implementation`` (what ``dot_product_attention(implementation=None)``
runs) picks dense or blockwise attention and the blockwise tile from the
shapes and masking; each table of ``TABLES`` holds the cases that decided one
part of that rule: the path past which one T x S tile stops paying, the tile
sizes at long S, the GQA group's tile cap, the step cap of causal attention
without GQA, and so on. For each row (B, T, N, K, S, H, masking, pass) the
suite times its paths side by side: dense (``scaling.attention.dense``),
jax.nn's XLA implementation, and ``scaling.attention.blockwise`` at each tile of the
table (capped at T and S; "T x S" is one tile covering all of T x S), plus the
path the rule runs in that pass (under differentiation, or alone:
``Choice.forward``) where it is none of those. A tile is (block_q, block_k).

Timing: float32 inputs, the forward pass alone or forward+backward (value and
gradients w.r.t. q, k and v of ⟨out, ct⟩), every path compiled ahead of time,
then ``repeats`` rounds in which every path of the row is called in turn, each
timed call right after an untimed call of the same path
(``scaling.attention.autotune.interleaved_times``); the fastest call counts. A row is
measured once however many tables show it, with the union of their paths.

A row whose FLOPs (4·B·N·T·S·H, halved when causal, ×3.5 forward+backward)
exceed ``max_gflop`` is skipped (its cells say so), to keep a run within one
sitting on a small machine. Writes ``attention_rule.json`` (every measurement)
and ``attention_rule.md`` (one table per part of the rule, for the generated
section ``bench_attention_rule`` of docs/benchmarks.md:
``python scripts/update_readme.py bench_attention_rule <out_dir>/attention_rule.md``).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import pathlib
import time
from typing import Any

import jax
import jax.numpy as jnp

from scaling.attention import dispatch as attention_lib
from scaling.attention import logits as logits_lib
from scaling.attention import autotune
from scaling.base import config as config_lib
from scaling.runs import report
from scaling.runs import results as results_lib
from scaling.base.config import option
from scaling.base.config import Options
from benchmarks import timing
from benchmarks.implementations import FWD_BWD_FLOP_FACTOR
from benchmarks.implementations import MODES
from scaling.base.validation import ConfigError
from scaling.base.validation import ConfigTypeError

DENSE = "dense"
JAX_NN = "jax.nn"
FASTEST = "fastest"
"""A table's baseline: each time over the fastest path of its row (or over jax.nn's, ``JAX_NN``)."""


@dataclasses.dataclass(frozen=True)
class Row:
  """One measured case: shapes, masking, passes and the paths a table shows for it (None: the table's columns)."""

  batch: int
  q_len: int
  num_heads: int
  num_kv_heads: int
  kv_len: int
  causal: bool
  modes: tuple[str, ...] = MODES
  paths: tuple[str, ...] | None = None
  head_dim: int = 64


@dataclasses.dataclass(frozen=True)
class Table:
  """A part of the rule: the question its rows answer, its columns (paths), rows and baseline."""

  name: str
  title: str
  columns: tuple[str, ...]
  rows: tuple[Row, ...]
  baseline: str = FASTEST


def _rows(shapes, causal=(True,), modes=MODES, paths=None, head_dim=64) -> tuple[Row, ...]:
  """Rows of (B, T, N, K, S) shapes (or (B, T, N, K) with S = T), each masking, with the same passes and paths."""
  out = []
  for shape in shapes:
    b, t, n, k, s = shape if len(shape) == 5 else (*shape, shape[1])
    out.extend(Row(b, t, n, k, s, c, tuple(modes), None if paths is None else tuple(paths), head_dim)
               for c in causal)
  return tuple(out)


FB, FWD = ("fwd+bwd",), ("fwd",)
LONG_TILES = ("128x128", "256x256", "256x512", "512x256", "512x512", "1024x256")
STEP_TILES = ("64x128", "128x128", "128x256", "256x256", "256x512")
STEP_TILES_FEW = ("64x128", "128x128", "256x512")
GQA_TILES = ("64x128", "64x256", "128x128", "128x256", "256x256", "128x512", "256x512")
SMALL = ((1, 16, 2, 2), (4, 32, 4, 4), (1, 128, 4, 4), (1, 1, 8, 8, 128), (4, 100, 4, 4), (16, 64, 4, 4),
         (2, 128, 8, 1), (4, 128, 8, 8), (16, 128, 4, 4), (32, 64, 8, 8), (8, 128, 8, 2), (64, 128, 8, 8))
STEP_CAP_FIT = ((8, 256, 8, 8), (4, 512, 8, 8), (2, 512, 8, 8), (4, 1024, 8, 8), (2, 1024, 8, 8), (2, 1024, 4, 4),
                (1, 1024, 8, 8), (1, 1024, 4, 4), (1, 1024, 2, 2), (4, 2048, 8, 8), (2, 2048, 8, 8), (1, 2048, 8, 8),
                (2, 2048, 4, 4), (1, 2048, 4, 4), (16, 512, 8, 8), (3, 1024, 8, 8), (8, 1024, 8, 8), (1, 1536, 8, 8),
                (2, 2048, 16, 16), (8, 2048, 8, 8))
STEP_CAP_FORWARD = ((16, 512, 8, 8), (4, 512, 8, 8), (2, 512, 8, 8), (8, 1024, 8, 8), (4, 1024, 8, 8), (2, 1024, 8, 8),
                    (1, 1024, 8, 8), (1, 1024, 4, 4), (8, 2048, 8, 8), (4, 2048, 8, 8), (2, 2048, 8, 8),
                    (1, 2048, 8, 8))
STEP_CAP_CHECK = ((16, 2048, 8, 8), (3, 2048, 8, 8), (1, 4096, 8, 8), (6, 1024, 8, 8), (2, 1536, 8, 8),
                  (4, 1536, 8, 8))

TABLES = (
    Table("jax_nn", "Dense and blockwise against jax.nn (B = 1, N = 4 unless given)",
          (DENSE, "64x64", "128x128", "256x256", "512x256"),
          _rows([(1, 128, 4, 4), (1, 256, 4, 4)], (True,), FB, (DENSE, "64x64", "128x128", "256x256"))
          + _rows([(1, 256, 4, 4)], (False,), FB, (DENSE, "64x64", "128x128", "256x256"))
          + _rows([(4, 512, 8, 8), (1, 2048, 8, 8)], (True,), FB, (DENSE, "512x256"))
          + _rows([(1, 2048, 8, 8)], (False,), FB, (DENSE, "512x256"))
          + _rows([(1, 512, 4, 4)], (False,), FWD, (DENSE, "128x128"))
          + _rows([(1, 512, 4, 4)], (False,), MODES, (DENSE, "128x128"), head_dim=128)
          + _rows([(4, 512, 8, 8)], (False,), FB, (DENSE, "128x128"))
          + _rows([(1, 512, 4, 4)], (True,), FB, (DENSE, "128x128"), head_dim=128),
          baseline=JAX_NN),
    Table("long_tiles", "Tile sizes at B = 1, N = 4, forward+backward", LONG_TILES,
          _rows([(1, 2048, 4, 4)], (True,), FB) + _rows([(1, 2048, 4, 4)], (True,), FB, head_dim=128)
          + _rows([(1, 2048, 4, 4)], (False,), FB, ("128x128", "256x256", "256x512", "512x256", "512x512"))
          + _rows([(1, 8192, 4, 4)], (True,), FB, ("128x128", "256x256", "256x512", "512x256", "512x512"))
          + _rows([(1, 512, 4, 4)], (True,), FB, ("128x128", "256x256", "256x512", "512x512"))
          + _rows([(1, 1024, 4, 4), (1, 4096, 4, 4)], (True,), FB, ("128x128", "256x512"))
          + _rows([(1, 1024, 4, 4)], (True,), FB, ("128x128", "256x512"), head_dim=128)
          + _rows([(1, 1024, 4, 4)], (False,), FB, ("128x128", "256x512"))
          + _rows([(1, 4096, 4, 4)], (False,), FB, ("128x128", "256x512"), head_dim=128)),
    Table("gqa", "Tiles under GQA (N query heads over K key/value heads), causal, forward+backward", GQA_TILES,
          _rows([(1, 2048, 8, 2)], (True,), FB, GQA_TILES[1:])
          + _rows([(1, 2048, 8, 1)], (True,), FB, ("64x256", "128x128", "128x256", "256x256", "256x512"))
          + _rows([(1, 2048, 8, 8)], (True,), FB, ("128x128", "128x256", "256x256", "128x512", "256x512"))
          + _rows([(2, 2048, 4, 4)], (True,), FB, ("128x128", "128x256", "256x256", "256x512"))
          + _rows([(1, 2048, 4, 4)], (True,), FB, ("128x256", "256x256", "128x512", "256x512"))
          + _rows([(2, 4096, 8, 2)], (True,), FB, ("64x128", "64x256", "128x128", "128x256", "256x256", "256x512"))
          + _rows([(4, 512, 8, 2)], (True,), FB, ("64x128", "64x256", "128x128", "128x256", "256x256"))
          + _rows([(4, 512, 8, 8)], (True,), FB, ("64x128", "128x128", "128x256"))),
    Table("one_tile", "One T x S tile while the B·N·T·S logits are few", ("T x S", "128x128", "128x256", DENSE),
          _rows([(2, 256, 8, 8), (2, 256, 8, 2), (2, 256, 8, 1), (1, 512, 4, 4), (4, 256, 4, 4)], (True,), FB,
                ("T x S", "128x128", "128x256", DENSE))
          + _rows([(2, 256, 8, 8), (2, 256, 8, 2), (2, 256, 8, 1), (1, 512, 4, 4), (4, 256, 4, 4)], (True,), FWD,
                  ("T x S", "128x128", DENSE))
          + _rows([(1, 512, 4, 4)], (True,), MODES, ("T x S", "128x128", DENSE), head_dim=128)
          + _rows([(2, 256, 8, 8), (1, 512, 4, 4), (1, 1024, 1, 1), (1, 1024, 2, 2), (1, 1, 8, 8, 4096)], (False,),
                  MODES, ("T x S", "128x128", DENSE))
          + _rows([(1, 512, 4, 1), (1, 1024, 1, 1), (1, 1024, 2, 2)], (True,), MODES, ("T x S", "128x128", DENSE))),
    Table("small", "S below BLOCKWISE_MIN_KV_LEN: one T x S tile or dense", ("T x S", DENSE, "64x64", "128x128"),
          _rows(SMALL, (True, False))),
    Table("short_queries", "Causal with T < S: only the first T keys are seen",
          ("T x T", "64x128", "128x128", "T x 512", "T x S", DENSE),
          _rows([(1, 1, 8, 8, 4096), (2, 64, 8, 8, 4096), (1, 200, 4, 4, 2048)])),
    Table("step_cap", "Causal without GQA: the step B·N·bq·bk over batch and heads", STEP_TILES,
          _rows(STEP_CAP_FIT, (True,), FB) + _rows(STEP_CAP_FORWARD, (True,), FWD, STEP_TILES_FEW)
          + _rows(STEP_CAP_CHECK, (True,), MODES, STEP_TILES_FEW)),
    Table("gqa_step", "Causal with GQA: the group's tile cap alone, forward+backward",
          ("64x128", "128x128", "128x256", "256x256"),
          _rows([(4, 256, 8, 1), (2, 512, 8, 1), (4, 512, 8, 2), (2, 1024, 8, 2), (2, 512, 8, 2), (2, 768, 8, 2),
                 (2, 512, 4, 2), (4, 512, 4, 2)], (True,), FB)),
    Table("unmasked", "Without a causal mask: the largest tiles", STEP_TILES,
          _rows([(4, 512, 8, 8), (2, 1024, 8, 8), (1, 2048, 8, 8)], (False,)) + _rows([(2, 4096, 8, 8)], (False,), FB)),
)
"""The parts of the rule and the cases each was measured on."""
TABLE_NAMES = tuple(t.name for t in TABLES)


@dataclasses.dataclass(frozen=True)
class AttentionRuleConfig(Options):
  """Which tables to measure, how often, and the largest row timed."""

  rule_tables: tuple[str, ...] = option(TABLE_NAMES, "Attention rule suite: tables to measure (of "
                                        f"{', '.join(TABLE_NAMES)}).")
  rule_repeats: int = option(3, "Attention rule suite: timed calls per path (the fastest counts).", lower=1)
  rule_max_gflop: float | None = option(None, "Attention rule suite: skip rows of more GFLOP (forward+backward "
                                        "counted 3.5x the forward); None: time every row.", positive=True)
  seed: int = option(0, "Seed of the random inputs.", lower=0)
  tables: tuple[Table, ...] = TABLES
  """The tables ``rule_tables`` selects from (tests pass tiny ones)."""

  def validate(self):
    names = [t.name for t in self.tables]
    for name in self.rule_tables:
      if name not in names:
        raise ConfigError(f"rule_tables must name tables of {', '.join(names)}, got {name!r}")


QUICK = AttentionRuleConfig(rule_repeats=1, tables=(
    Table("quick", "Smoke run", ("T x S", "64x128", DENSE), _rows([(1, 256, 2, 1)], (True,)) + _rows(
        [(1, 32, 2, 2)], (False,), FB, ("T x S", DENSE), head_dim=16), baseline=JAX_NN),), rule_tables=("quick",))
"""Two tiny rows for a smoke run (jax.nn as the baseline), not a measurement."""


def resolve(path: str, q_len: int, kv_len: int) -> str:
  """The concrete path of a column: "dense", "jax.nn" or "blockwise BQxBK" (tile capped at T and S).

  Args:
    path: "dense", "jax.nn", or a tile "BQxBK" whose sides are numbers, "T", "S" (one T x S tile) or such.
    q_len: T.
    kv_len: S.

  Returns:
    The path's name as ``scaling.attention.autotune.choice_name`` writes it.
  """
  if path in (DENSE, JAX_NN):
    return path
  sides = [side.strip() for side in path.split("x")]
  size = {"T": q_len, "S": kv_len}
  bq, bk = (size[side] if side in size else int(side) for side in sides)
  return f"blockwise {min(bq, q_len)}x{min(bk, kv_len)}"


def rule_path(row: Row, mode: str) -> str:
  """The path ``select_implementation`` runs for the row in the pass ``mode`` (its forward's, undifferentiated)."""
  opts = logits_lib.resolve_logit_options(row.head_dim, scale=None, rule=None, logit_soft_cap=None,
                                          logit_clamp=None, float32_softmax=True, subtract_max=True)
  choice = attention_lib.select_implementation(_query_shape(row), _key_shape(row), opts, is_causal=row.causal)
  if mode == "fwd" and choice.forward is not None:
    choice = choice.forward
  return autotune.choice_name(dataclasses.replace(choice, forward=None))


def _query_shape(row: Row) -> tuple[int, ...]:
  return row.batch, row.q_len, row.num_heads, row.head_dim


def _key_shape(row: Row) -> tuple[int, ...]:
  return row.batch, row.kv_len, row.num_kv_heads, row.head_dim


def row_flops(row: Row, mode: str) -> float:
  """4·B·N·T·S·H, halved when causal, ×3.5 forward+backward (the attention suite's convention)."""
  flops = 4.0 * row.batch * row.num_heads * row.q_len * row.kv_len * row.head_dim * (0.5 if row.causal else 1.0)
  return flops * (FWD_BWD_FLOP_FACTOR if mode == "fwd+bwd" else 1.0)


def _key(row: Row, mode: str) -> tuple:
  """What identifies a measurement: the row's case and masking, and the pass."""
  return (row.batch, row.q_len, row.num_heads, row.num_kv_heads, row.kv_len, row.head_dim, row.causal, mode)


def _function(path: str, causal: bool):
  """(q, k, v) -> output of a concrete path (the default scale 1/√H)."""
  if path == JAX_NN:
    return lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=causal)
  if path == DENSE:
    return autotune.path_function(autotune.Choice("dense"), is_causal=causal)
  bq, bk = map(int, path.split(" ")[1].split("x"))
  return autotune.path_function(autotune.Choice("blockwise", bq, bk), is_causal=causal)


def _step(path: str, causal: bool, mode: str):
  """The timed function of (q, k, v, ct): the output, or ⟨out, ct⟩ and its gradients w.r.t. q, k and v."""
  fn = _function(path, causal)
  if mode == "fwd":
    return lambda q, k, v, ct: fn(q, k, v)
  return jax.value_and_grad(lambda q, k, v, ct: jnp.vdot(fn(q, k, v), ct), argnums=(0, 1, 2))


def _inputs(row: Row, seed: int) -> tuple[jax.Array, ...]:
  """Random float32 q, k, v and the output's cotangent."""
  keys = jax.random.split(jax.random.PRNGKey(seed), 4)
  shapes = (_query_shape(row), _key_shape(row), _key_shape(row), _query_shape(row))
  return tuple(jax.random.normal(key, shape, jnp.float32) for key, shape in zip(keys, shapes))


def measure(row: Row, mode: str, paths: list[str], repeats: int, seed: int) -> dict[str, Any]:
  """The fastest of ``repeats`` interleaved calls of each path (ms), with their compile time."""
  args = _inputs(row, seed)
  start = time.perf_counter()
  lowered = [jax.jit(_step(path, row.causal, mode)).lower(*args) for path in paths]
  with concurrent.futures.ThreadPoolExecutor(autotune.COMPILE_THREADS) as pool:  # XLA compiles without the GIL
    fns = dict(zip(paths, pool.map(lambda low: low.compile(), lowered)))
  compile_s = time.perf_counter() - start
  times = autotune.interleaved_times(fns, args, repeats)
  return {"ms": {path: min(t) * 1e3 for path, t in times.items()}, "times_s": times, "compile_s": compile_s}


def plan(config: AttentionRuleConfig) -> dict[tuple, dict[str, Any]]:
  """Every measurement the selected tables need, once each: {key: {"row", "mode", "paths", "rule"}}."""
  out: dict[tuple, dict[str, Any]] = {}
  for table in config.tables:
    if table.name not in config.rule_tables:
      continue
    for row in table.rows:
      for mode in row.modes:
        entry = out.setdefault(_key(row, mode), {"row": row, "mode": mode, "paths": [],
                                                  "rule": rule_path(row, mode)})
        wanted = [*(row.paths or table.columns), *((JAX_NN,) if table.baseline == JAX_NN else ())]
        for path in [resolve(p, row.q_len, row.kv_len) for p in wanted] + [entry["rule"]]:
          if path not in entry["paths"]:
            entry["paths"].append(path)
  return out


def run(config: AttentionRuleConfig, out_dir: pathlib.Path) -> dict[str, Any]:
  """Measures the selected tables; writes attention_rule.json and attention_rule.md into ``out_dir``.

  Args:
    config: the tables and limits (``QUICK`` for a smoke run).
    out_dir: output directory (created if needed).

  Returns:
    Everything written to attention_rule.json.
  """
  if not isinstance(config, AttentionRuleConfig):
    raise ConfigTypeError(f"config must be an AttentionRuleConfig, got {type(config).__name__}")
  wall_start = time.perf_counter()
  load_start = os.getloadavg()[0]
  out_dir = pathlib.Path(out_dir)
  out_dir.mkdir(parents=True, exist_ok=True)
  todo = plan(config)
  measurements = []
  with report.Progress(len(todo), "attention rule") as progress:
    for entry in sorted(todo.values(), key=lambda e: row_flops(e["row"], e["mode"])):
      row, mode = entry["row"], entry["mode"]
      record = {"case": dataclasses.asdict(row) | {"modes": None, "paths": None}, "key": list(_key(row, mode)),
                "mode": mode, "rule": entry["rule"], "paths": entry["paths"], "gflop": row_flops(row, mode) / 1e9}
      if config.rule_max_gflop is not None and record["gflop"] > config.rule_max_gflop:
        record.update(status="skipped", reason=f"{record['gflop']:.0f} GFLOP > {config.rule_max_gflop:g}")
      else:
        record.update(status="ok", **measure(row, mode, entry["paths"], config.rule_repeats, config.seed))
        fastest = min(record["ms"], key=record["ms"].get)
        print(f"{_case_name(row)} {mode}: fastest {fastest} {record['ms'][fastest]:.4g} ms; rule "
              f"{record['rule']} {record['ms'][record['rule']] / record['ms'][fastest]:.2f}x", flush=True)
      measurements.append(record)
      progress.update(f"{_case_name(row)} {mode}")
  results = {"config": config_lib.to_dict(config), "machine": {"platform": jax.devices()[0].platform,
                                                               "cpu_count": os.cpu_count(), "jax": jax.__version__},
             "measurements": measurements, "wall_s": time.perf_counter() - wall_start,
             "load_average": [load_start, os.getloadavg()[0]]}
  results_lib.write_json(out_dir / "attention_rule.json", results)
  (out_dir / "attention_rule.md").write_text(markdown_from_results(results, config.tables))
  print(f"attention rule suite: {results['wall_s']:.0f} s; wrote attention_rule.json and attention_rule.md to "
        f"{out_dir}")
  return results


def _case_name(row: Row) -> str:
  """B, T, N, K, S and H of a row, and its masking, briefly."""
  return (f"B{row.batch} T{row.q_len} N{row.num_heads} K{row.num_kv_heads} S{row.kv_len} H{row.head_dim} "
          f"{'causal' if row.causal else 'none'}")


def _ms(ms: float) -> str:
  return f"{ms:.3g}" if ms < 1000 else f"{ms:.0f}"


def _table_rows(table: Table, by_key: dict[tuple, dict]) -> list[list]:
  """The Markdown rows of one table: per measured row and pass, its cells "ms (ratio)", * on the rule's path."""
  body, seen = [], set()
  for row in table.rows:
    for mode in row.modes:
      key = _key(row, mode)
      record = by_key.get(key)
      if record is None or key in seen:
        continue
      seen.add(key)
      ok = record["status"] == "ok"
      ms = record.get("ms", {})
      base = (ms[JAX_NN] if table.baseline == JAX_NN else min(ms.values())) if ok else None

      def cell(path: str) -> str:
        if not ok:
          return "skipped"
        return f"{_ms(ms[path])} ({ms[path] / base:.2f})" + ("*" if path == record["rule"] else "")

      shown = row.paths or table.columns
      cells = [cell(resolve(p, row.q_len, row.kv_len)) if p in shown else "" for p in table.columns]
      if table.baseline == JAX_NN:
        cells.append(_ms(ms[JAX_NN]) if ok else "skipped")
      rule = record["rule"].replace("blockwise ", "")
      cells.append(f"{rule} ({ms[record['rule']] / base:.2f})" if ok else rule)
      body.append([row.batch, row.q_len, row.num_heads, row.num_kv_heads, row.kv_len, row.head_dim,
                   "causal" if row.causal else "none", mode, *cells])
  return body


def markdown_from_results(results: dict[str, Any], tables: tuple[Table, ...] = TABLES) -> str:
  """attention_rule.md from a run's results (as ``run`` returns them or attention_rule.json holds them).

  Args:
    results: the run's results.
    tables: the tables its config chose from (``TABLES`` unless a test passes its own).

  Returns:
    One paragraph and table per measured table, then the suite's wall time.
  """
  by_key = {tuple(m["key"]): m for m in results["measurements"]}
  limit = results["config"]["rule_max_gflop"]
  skipped = sum(m["status"] != "ok" for m in results["measurements"])
  lines = [f"**attention rule**: each row's paths timed side by side (float32; the fastest of "
           f"{results['config']['rule_repeats']} interleaved calls of each, in ms; in parentheses its time over the "
           f"row's fastest path, or over jax.nn's where the table says so; * = the path `select_implementation` runs "
           f"in that pass, also given in the last column; a tile BQxBK is capped at T and S, and T x S is one tile)"
           f"{timing.load_note(results)}."
           + (f" The {skipped} of {len(by_key)} rows over {limit:g} GFLOP were not timed (\"skipped\"), to fit the "
              f"run into one sitting." if skipped else ""), ""]
  for table in tables:
    if table.name not in results["config"]["rule_tables"]:
      continue
    body = _table_rows(table, by_key)
    if not body:
      continue
    baseline = "jax.nn's time" if table.baseline == JAX_NN else "the row's fastest path"
    header = ["B", "T", "N", "K", "S", "H", "mask", "pass", *table.columns,
              *(["jax.nn ms"] if table.baseline == JAX_NN else []), "rule runs"]
    lines += [f"*{table.title}* (`{table.name}`; ratio over {baseline}):", "",
              report.markdown_table(header, body).rstrip("\n"), ""]
  lines.append(f"- the suite took {results['wall_s'] / 60:.0f} min")
  return "\n".join(lines) + "\n"
