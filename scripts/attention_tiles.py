"""Times dense attention and blockwise at each tile side by side: the measurements behind the default's tile rule.

  python scripts/attention_tiles.py --out=OUT.md
  python scripts/attention_tiles.py --out=OUT.md --cases=2x256x8x8x256,1x2048x8x8x2048 --masks=causal

For every case B x T x N x K x S (batch, query length, query heads, key/value heads, key length; head dim
--head_dim, float32) and masking it compiles dense attention (up to 2**26 logits, as ``autotune.candidates_for``
does) and blockwise attention at each tile of --tiles (capped at T and S, so the largest ones become one T x S
tile), the forward pass alone and forward+backward (value and gradients w.r.t. q, k, v of the output's sum), and
times them side by side: --repeats rounds, each timed call right after an untimed call of the same path
(``scaling.attention.autotune.interleaved_times``), the fastest call counting.
The table gives, per case and pass, each path's time over the fastest path's (1.00 marks the fastest), and what
``scaling.attention.dispatch.select_implementation`` runs there (under differentiation, and alone) with its own ratio.
The measurements go to OUT.json.
"""

import dataclasses
import json
import pathlib
import sys

import jax
import jax.numpy as jnp

from experiments import cli
from scaling.attention import dispatch as attention
from scaling.attention import logits as logits_lib
from scaling.attention import autotune
from scaling.base import config as config_lib
from scaling.runs import report
from scaling.base.config import option
from scaling.base.validation import ConfigError

CASES = ("2x256x8x8x256", "2x256x8x2x256", "2x256x8x1x256", "1x512x4x4x512", "1x512x4x1x512", "1x1024x1x1x1024",
         "1x1024x2x2x1024", "1x1x8x8x4096", "2x1024x8x8x1024", "1x1024x4x4x1024", "4x512x8x8x512",
         "1x2048x8x8x2048")
TILES = ((64, 128), (128, 128), (128, 256), (256, 256), (256, 512), (512, 512), (1024, 1024), (4096, 4096))
MODES = ("fwd+bwd", "fwd")


@dataclasses.dataclass(frozen=True)
class Options(config_lib.Options):
  """The options of the tile measurement."""

  out: str = option("attention_tiles.md", "Markdown table to write; the measurements go to the same path with .json.")
  cases: tuple[str, ...] = option(CASES, "Cases BxTxNxKxS (N a multiple of K).")
  masks: tuple[str, ...] = option(("causal", "none"), "Maskings: causal, none.", choices=("causal", "none"))
  head_dim: int = option(64, "Head dimension H.", lower=1)
  tiles: tuple[str, ...] = option(tuple(f"{q}x{k}" for q, k in TILES), "Blockwise tiles BQxBK (capped at T and S).")
  repeats: int = option(5, "Timed calls per path (the fastest counts).", lower=1)
  seed: int = option(0, "Seed of the random inputs.")

  def validate(self):
    for case in self.cases:
      parts = case.split("x")
      if len(parts) != 5 or not all(p.isdigit() and int(p) > 0 for p in parts) or int(parts[2]) % int(parts[3]):
        raise ConfigError(f"cases must be BxTxNxKxS with positive integers and K dividing N, got {case!r}")
    for tile in self.tiles:
      parts = tile.split("x")
      if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise ConfigError(f"tiles must be BQxBK with positive integers, got {tile!r}")


def measure_case(case: str, causal: bool, options: Options) -> list[dict]:
  """One row per pass: the fastest ms of every path and the default's choice in that pass."""
  b, t, n, k, s = map(int, case.split("x"))
  query_shape, key_shape = (b, t, n, options.head_dim), (b, s, k, options.head_dim)
  opts = logits_lib.resolve_logit_options(options.head_dim, scale=None, rule=None, logit_soft_cap=None,
                                          logit_clamp=None, float32_softmax=True, subtract_max=True)
  keys = jax.random.split(jax.random.PRNGKey(options.seed), 3)
  args = tuple(jax.random.normal(key, shape) for key, shape in zip(keys, (query_shape, key_shape, key_shape)))
  choice = attention.select_implementation(query_shape, key_shape, opts, is_causal=causal)
  capped = [(min(int(q), t), min(int(k), s)) for q, k in (tile.split("x") for tile in options.tiles)]
  rows = []
  for mode in MODES:
    fns = {}
    for path in autotune.candidates_for(query_shape, key_shape, capped, attention.fixed_tiles(choice)):
      fn = autotune.attention_function(path, opts, is_causal=causal)
      step = fn if mode == "fwd" else jax.value_and_grad(lambda q, k, v, fn=fn: jnp.sum(fn(q, k, v)),
                                                         argnums=(0, 1, 2))
      fns[autotune.choice_name(path)] = jax.jit(step).lower(*args).compile()
    for fn in fns.values():
      jax.block_until_ready(fn(*args))
    times = autotune.interleaved_times(fns, args, options.repeats)
    default = choice.forward if mode == "fwd" and choice.forward is not None else choice
    rows.append({"case": case, "causal": causal, "mode": mode, "head_dim": options.head_dim,
                 "ms": {name: min(v) * 1e3 for name, v in times.items()},
                 "default": autotune.choice_name(dataclasses.replace(default, forward=None))})
  return rows


def markdown(rows: list[dict], options: Options) -> str:
  """The table: per case and pass, each path's time over the fastest's, and the default's path and ratio."""
  names = list(dict.fromkeys(name for row in rows for name in row["ms"]))
  def short(name):
    return name.replace("blockwise ", "")
  cells = []
  for row in rows:
    fastest = min(row["ms"].values())
    default = row["ms"].get(row["default"])
    cells.append([row["case"], "causal" if row["causal"] else "none", row["mode"],
                  *(f"{row['ms'][name] / fastest:.2f}" if name in row["ms"] else "" for name in names),
                  f"{short(row['default'])} ({default / fastest:.2f})" if default is not None else
                  f"{short(row['default'])} (not timed)"])
  heading = (f"Time over the fastest path of each row (1.00 = fastest; fastest of {options.repeats} interleaved "
             f"calls; float32, H = {options.head_dim}; {jax.devices()[0].device_kind}, "
             f"{jax.device_count()} device(s)); tiles BQxBK capped at T and S, so a tile column can be one T x S "
             f"tile; default = what `select_implementation` runs in that pass:")
  table = report.markdown_table(["B x T x N x K x S", "mask", "pass", *(short(n) for n in names), "default"], cells)
  ratios = [row["ms"][row["default"]] / min(row["ms"].values()) for row in rows if row["default"] in row["ms"]]
  within = sum(r <= 1.1 for r in ratios)
  summary = (f"- the default within 1.1x of the fastest path: {within} of {len(ratios)} rows where it was timed"
             + (f"; slowest relative to it: {max(ratios):.2f}" if ratios else "") + ".")
  return f"{heading}\n\n{table}\n\n{summary}\n"


def run(options: Options, out_dir: pathlib.Path | None = None) -> None:
  del out_dir
  out = pathlib.Path(options.out)
  out.parent.mkdir(parents=True, exist_ok=True)  # before the measurements, not after
  rows = []
  with report.Progress(len(options.cases) * len(options.masks), "cases") as progress:
    for case in options.cases:
      for mask in options.masks:
        rows.extend(measure_case(case, mask == "causal", options))
        progress.update(f"{case} {mask}")
  out.with_suffix(".json").write_text(json.dumps({"options": dataclasses.asdict(options), "rows": rows}, indent=1))
  out.write_text(markdown(rows, options))
  print(out.read_text())


def main(argv: list[str] | None = None) -> int:
  return cli.main(Options, run, argv, __doc__, needs_out_dir=False)


if __name__ == "__main__":
  sys.exit(main())
