"""The sizes of the training claims in each mode, their seeds and their data.

``SIZES`` holds the sizes of each mode (quick, cpu_hour, paper, paper_8min, and test for the unit tests): the model,
the depths and their steps, the learning rates, the seeds, and what each claim sweeps beyond them; ``sizes`` reads
those of a context's mode and ``describe_sizes`` puts them in words for the tables' headings. Every training claim
trains on ``ctx.text_file`` (character level, e.g. tiny Shakespeare) or, when it is None, on the built-in synthetic
recall task (``data_config``, ``dataset_of``); ``data_name`` says which.
"""

from __future__ import annotations

import math
import os
from typing import Any

from scaling.training.data.config import DataConfig
from scaling.training.data.dataset import Dataset
from scaling.training.data import text_corpus
from scaling.studies.claims.context import Context


QK_RULES = ("none", "sqrt", "linear", "qk_norm")
_OCTAVES_FROM_1E4 = tuple(math.log2(1e-4) + k for k in range(7))  # 1e-4 .. 6.4e-3
_COMMON = dict(nan_window=100, stall_fraction=0.9, warmup_fraction=0.1, clip=1.0, tiny_octaves_below=(2.0, 4.0),
               qk_rules=QK_RULES, qk_lr=1e-3, coord_lr=1e-2, edge_octaves=2.0,
               transfer_depth=2, transfer_parametrizations=("sp", "mup"), attn_log2_mults=(-2.0, -1.0, 0.0, 1.0, 2.0),
               dtypes=("float32",), refine_best_lr=False, nan_low_dtypes=("bfloat16", "float16"))


SIZES: dict[str, dict[str, Any]] = {
    "paper": dict(_COMMON, width=512, num_heads=8, head_dim=64, seq_len=256, batch_size=8, num_seeds=3,
                  depth_small=2, depth_converge=6, depth_diverge=12, steps={2: 2000, 6: 2000, 12: 2000},
                  log2_lrs=_OCTAVES_FROM_1E4[:6], fixed_step=500, qk_widths=(256, 512), transfer_widths=(128, 256, 512),
                  transfer_log2_lrs=tuple(float(x) for x in range(-14, -5)), transfer_steps=2000,
                  dtypes=("float32", "bfloat16")),
    "paper_8min": dict(_COMMON, width=512, num_heads=8, head_dim=64, seq_len=256, batch_size=8, num_seeds=3,
                       depth_small=2, depth_converge=6, depth_diverge=12, steps={2: 300, 6: 600, 12: 300},
                       log2_lrs=_OCTAVES_FROM_1E4[2:5], fixed_step=250, qk_widths=(512,), qk_rules=("sqrt",),
                       transfer_widths=(128, 512), transfer_log2_lrs=(-13.0, -12.0, -11.0, -10.0, -9.0),
                       transfer_steps=300, transfer_parametrizations=("mup",),
                       depth12_setups=((True, False), (False, False), (False, True)), nan_low_dtypes=()),
    "cpu_hour": dict(_COMMON, width=64, num_heads=2, head_dim=32, seq_len=32, batch_size=8, num_seeds=3,
                     depth_small=2, depth_converge=6, depth_diverge=12, steps={2: 300, 6: 300, 12: 200},
                     log2_lrs=_OCTAVES_FROM_1E4[::2] + (math.log2(1e-2),), fixed_step=100, qk_widths=(64, 128),
                     transfer_widths=(32, 64, 128),
                     transfer_log2_lrs=tuple(float(x) for x in range(-13, -3)), transfer_steps=300,
                     refine_best_lr=True),
    "quick": dict(_COMMON, width=32, num_heads=2, head_dim=16, seq_len=32, batch_size=8, num_seeds=None,
                  depth_small=2, depth_converge=6, depth_diverge=12, steps={2: 100, 6: 100, 12: 100},
                  log2_lrs=(math.log2(1e-4), math.log2(1e-3), math.log2(1e-2)), fixed_step=30, qk_widths=(32, 64),
                  transfer_widths=(32, 128),
                  transfer_log2_lrs=(-12.0, -10.0, -8.0, -6.0, -4.0), transfer_steps=100),
    "test": dict(_COMMON, width=16, num_heads=2, head_dim=8, seq_len=8, batch_size=2, num_seeds=2,
                 depth_small=1, depth_converge=1, depth_diverge=1, steps={1: 4},
                 log2_lrs=(-10.0, -2.0), fixed_step=2,
                 qk_widths=(16,), qk_rules=("sqrt",), transfer_widths=(16,), transfer_log2_lrs=(-10.0, -6.0, -2.0),
                 transfer_steps=4, transfer_parametrizations=("mup",), attn_log2_mults=(-1.0, 0.0, 1.0),
                 refine_best_lr=True),
}
"""The training sizes of each mode. "paper" is the notes' setting (d_k 64, width 512 = 8 heads, sequences of 256,
depths 2, 6 and 12, about 2,000 steps, learning rates in octaves, 3 seeds, float32 and bfloat16); "paper_8min" keeps
its model (d_k 64, width 512 = 8 heads, sequences of 256, depths 2, 6 and 12, pre- and post-LN, 3 seeds) and cuts what
the claims' words do not need, to fit 8 minutes on one H200 (``scaling.studies.claims.study.accelerator_plan``): 3
learning rates, the octaves around 1e-3 (8e-4 and its neighbours), instead of 6; 300 steps where the claim is about
early training (NaN within 100 steps; depth 12 "cannot converge" at the start of training; depth 2), 600 at depth 6
whose claims are about the whole curve (slow, oscillating, worse); depth 12 pre-LN without warmup and post-LN with and
without it (warmup is what post-LN needs, Xiong et al. 2020; pre-LN with warmup is left out); float32 only (no
training claim's words are about precision; the low-precision claims are random-input ones); q-k alignment at width
512 with 1/√d_k only, and μP transfer at widths 128 and 512 without SP beside it; "cpu_hour" the largest setting
planned for about an hour on two CPU cores; "quick" keeps every claim at minutes (100 steps at every
depth: "within 100 steps" is run as written); "test" is tiny, for the unit tests only.

In every mode: ``coord_lr``, the learning rate of the coordinate check read from the transfer grids (the rate of
``experiments.coord_check``); ``edge_octaves``, how far a grid is widened past the edge its optimum sits at;
``refine_best_lr``, whether the comparisons that ask for it train a finer grid around each grid's best rate (the log2
midpoints between it and its neighbours; cpu_hour and test: picking the best of rates two octaves apart is itself
noisy, ``scaling.studies.claims.training.best_learning_rate``); ``nan_low_dtypes``, the compute precisions the
"NaN within 100 steps" claim also trains in, at the converging depth for its first ``nan_window`` steps (none in
paper_8min, which keeps float32 only)."""


NORM_SETUPS = ((True, False), (True, True), (False, False), (False, True))
"""The depth-12 setups (pre_ln, warmup) of a mode that names none (``depth12_setups``)."""


def setup_name(pre_ln: bool, warmup: bool) -> str:
  """A depth-12 setup in words: "pre-LN, no warmup", "post-LN, with warmup", ..."""
  return f"{'pre' if pre_ln else 'post'}-LN, {'with' if warmup else 'no'} warmup"


# ----------------------------------------------------------------------------
# A context's sizes, seeds and data.


def sizes(ctx: Context) -> dict[str, Any]:
  """The sizes of ``ctx.mode`` (KeyError naming the modes when it has none)."""
  try:
    return SIZES[ctx.mode]
  except KeyError:
    raise KeyError(f"no training sizes for mode {ctx.mode!r}; known: {', '.join(SIZES)}") from None


def follows_num_seeds(ctx: Context) -> bool:
  """Whether the grids train ``ctx.num_seeds`` seeds (the mode sets none of its own)."""
  return sizes(ctx)["num_seeds"] is None


def seeds_of(ctx: Context) -> range:
  """The seeds of the grids: ctx.seed .. (the mode's num_seeds, else ctx.num_seeds, at least 1); a range, so that
  planning grids of too many seeds (refused for their memory) holds no list of them."""
  n = (getattr(ctx, "num_seeds", 2) if follows_num_seeds(ctx) else sizes(ctx)["num_seeds"]) or 1
  return range(int(ctx.seed), int(ctx.seed) + max(1, int(n)))


def depths_of(ctx: Context) -> tuple[int, ...]:
  """The depths of ``ctx.mode`` (small, converging, diverging), each once."""
  s = sizes(ctx)
  return tuple(dict.fromkeys((s["depth_small"], s["depth_converge"], s["depth_diverge"])))


def data_name(ctx: Context) -> str:
  """What the claims train on, for the numbers: the text file's name or the synthetic task."""
  text = getattr(ctx, "text_file", None)
  if text in text_corpus.CORPORA:
    return f"text file {text_corpus.CORPORA[text]} (characters)"
  return f"text file {os.path.basename(text)} (characters)" if text else "synthetic recall task"


def describe_sizes(ctx: Context) -> str:
  """The training sizes of ``ctx.mode`` in words, for the tables' headings (read from ``SIZES``)."""
  s = sizes(ctx)
  depths = depths_of(ctx)
  lrs = [2.0 ** x for x in s["log2_lrs"]]
  t_lrs = s["transfer_log2_lrs"]
  return (f"width {s['width']}, {s['num_heads']} heads of d_k {s['head_dim']}, sequences of {s['seq_len']}, batch "
          f"{s['batch_size']}; depths {', '.join(map(str, depths))} for "
          f"{', '.join(str(s['steps'][d]) for d in depths)} steps of constant-rate Adam at {len(lrs)} learning rates "
          f"{lrs[0]:.3g} .. {lrs[-1]:.3g}"
          f"{' (and the midpoints around each best rate)' if s['refine_best_lr'] else ''}; {len(seeds_of(ctx))} "
          f"seeds; {' and '.join(s['dtypes'])}"
          + (f" ({' and '.join(s['nan_low_dtypes'])} compute for the first {s['nan_window']} steps at depth "
             f"{s['depth_converge']}, for the NaN claim)" if s['nan_low_dtypes'] else "")
          + f"; depth "
          f"{s['depth_diverge']} {'; '.join(setup_name(*x) for x in s.get('depth12_setups', NORM_SETUPS))} (warmup: "
          f"{s['warmup_fraction']:.0%} of the steps); tiny learning "
          f"rates {' and '.join(f'{o:g}' for o in s['tiny_octaves_below'])} octaves below 1/√d_k's best at depth "
          f"{s['depth_converge']}, with clipping at {s['clip']:g}; q-k at widths "
          f"{', '.join(map(str, s['qk_widths']))} (learning rate {s['qk_lr']:g}); transfer at widths "
          f"{', '.join(map(str, s['transfer_widths']))}, learning rates 2^{t_lrs[0]:g} .. 2^{t_lrs[-1]:g} "
          f"({len(t_lrs)}), {s['transfer_steps']} cosine-scheduled steps")


def data_config(ctx: Context) -> DataConfig:
  """The training data of ``ctx``: its text file (None: the synthetic task) at the mode's sequence and batch."""
  s = sizes(ctx)
  return DataConfig(text_file=getattr(ctx, "text_file", None), seq_len=s["seq_len"], batch_size=s["batch_size"])


def dataset_of(ctx: Context) -> Dataset:
  """The training data of ``ctx`` (made once, by its ``GridPlanner``)."""
  return ctx.planner.dataset(data_config(ctx), int(ctx.seed))
