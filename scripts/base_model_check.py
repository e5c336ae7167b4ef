"""The base model is the user's model: μP at the base width against the model as written, and the init modes
measured against each other. Writes Markdown tables for docs/your_model.md.

  python scripts/base_model_check.py --out_dir runs/base_model_check
  python scripts/update_readme.py your_model_base_equality runs/base_model_check/base_equality.md
  python scripts/update_readme.py your_model_init_modes runs/base_model_check/init_modes.md

Base equality: for every model of tests/external_models.py (GPT-2 tied and untied, MLP-Mixer, ViT, an nnx model
with a tied table), ``scaling.WidthParametrization(model, loss, batch, "mup", base_width=64)`` at the base width
against the model's own initialization from the same key: the largest difference of any parameter and of the loss
on one batch, under the default ``init="base"`` and under ``init="paper"`` (the paper's constants redrawn).

Init modes: the coordinate check of the tied and untied GPT-2 (widths 64 to 512; 3 Adam steps at lr 0.01 on one
fixed batch, 8 seeds) under each init mode, and each mode's initial loss at the base width; the criterion of a
module breaking μP is ``scaling.studies.coord_check.verdicts``'s (a slope above 0.1).
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import jax  # pylint: disable=g-import-not-at-top,wrong-import-position

import scaling  # pylint: disable=g-import-not-at-top,wrong-import-position
from scaling.runs import report  # pylint: disable=g-import-not-at-top,wrong-import-position
import external_models as em  # pylint: disable=g-import-not-at-top,wrong-import-position

BASE = 64


def _max_abs(a, b) -> float:
  return max(float(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64))))
             for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def base_equality(out: pathlib.Path) -> str:
  """μP at the base width against the model as written (Markdown)."""
  start = time.perf_counter()
  cells = []
  for name, (factory, loss, batch_of, _, _) in em.MODELS.items():
    batch = batch_of(jax.random.key(1))
    own = scaling.WidthParametrization(factory, loss, batch, "mup", base_width=BASE).widths.functional(BASE)
    key = jax.random.key(3)
    own_params, state = own.init(jax.random.split(key)[0])  # the key the parametrized init hands the model
    own_loss = float(own.loss(own_params, state, batch))
    row = [name, f"{own_loss:.6f}"]
    for init in ("base", "paper"):
      fm = scaling.WidthParametrization(factory, loss, batch, "mup", base_width=BASE, init=init).model_at(BASE)
      params, _ = fm.init(key)
      row += [f"{_max_abs(params, own_params):.3g}", f"{float(fm.loss(params, state, batch)):.6f}"]
    cells.append(row)
  lines = [f"μP at the base width ({BASE}) against the model as written, from the same key: the largest difference of "
           "any parameter and the loss on one batch (tests/external_models.py).", "",
           report.markdown_table(["model", "loss as written", "init=base: largest parameter difference",
                                  "init=base: loss", "init=paper: largest parameter difference",
                                  "init=paper: loss"], cells).rstrip(), "",
           f"- Criterion: the base model is the model as written when every parameter difference is 0 and the loss "
           f"is the same. Measured by `scripts/base_model_check.py` in {time.perf_counter() - start:.0f} s."]
  text = "\n".join(lines) + "\n"
  (out / "base_equality.md").write_text(text)
  return text


def init_modes(out: pathlib.Path, widths=(64, 128, 256, 512), seeds=tuple(range(8))) -> str:
  """The tied and untied GPT-2's coordinate check under each init mode (Markdown)."""
  start = time.perf_counter()
  batch = em.lm_batch(jax.random.key(0), 16)
  cells = []
  for name in ("gpt2_tied", "gpt2_untied"):
    factory = em.MODELS[name][0]
    for init in scaling.mup.width_family.INIT_MODES:
      result = scaling.coord_check(factory, em.lm_loss, batch, schemes=("mup",), widths=widths, steps=3,
                                   learning_rate=1e-2, seeds=seeds, init=init, progress=False)
      wp = scaling.WidthParametrization(factory, em.lm_loss, batch, "mup", base_width=widths[0], init=init)
      fm = wp.model_at(widths[0])
      params, state = fm.init(jax.random.key(0))
      broken = [v["layer"] for v in result.broken]
      noisy = [v["layer"] for v in result.inconclusive]
      cells.append([name, init, f"{float(fm.loss(params, state, batch)):.3f}",
                    f"{len(broken)}" + (f" ({', '.join(broken)})" if broken else ""),
                    f"{len(noisy)}" + (f" ({', '.join(noisy)})" if noisy else "")])
  lines = [f"μP's init modes on GPT-2 (widths {', '.join(map(str, widths))}; coordinate check of 3 Adam steps at lr "
           f"0.01 on one fixed batch of 16 × {em.SEQ} random tokens, {len(seeds)} seeds): the loss of the base model "
           "at initialization and the modules breaking μP (a slope of log2 RMS against log2 width above 0.1 at "
           "initialization, or of the change since initialization after the updates, by more than two standard "
           "errors over the seeds).", "",
           report.markdown_table(["model", "init", "initial loss at the base width", "modules breaking μP",
                                  "inconclusive (within two standard errors)"], cells).rstrip(), "",
           f"- Measured by `scripts/base_model_check.py` in {time.perf_counter() - start:.0f} s."]
  text = "\n".join(lines) + "\n"
  (out / "init_modes.md").write_text(text)
  return text


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out_dir", default="runs/base_model_check")
  parser.add_argument("--part", default="all", choices=("all", "equality", "init_modes"))
  args = parser.parse_args(argv)
  out = pathlib.Path(args.out_dir)
  out.mkdir(parents=True, exist_ok=True)
  if args.part in ("all", "equality"):
    print(base_equality(out))
  if args.part in ("all", "init_modes"):
    print(init_modes(out))


if __name__ == "__main__":
  main(sys.argv[1:])
