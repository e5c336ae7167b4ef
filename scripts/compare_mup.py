"""This project's μP beside microsoft/mup's on the same small models, run here: a tied GPT-2's coordinate check and
an MLP's learning-rate transfer. Writes Markdown tables for docs/your_model.md.

  pip install torch mup        # not dependencies of the package: this comparison only
  python scripts/compare_mup.py --out_dir runs/compare_mup
  python scripts/update_readme.py your_model_mup_tied runs/compare_mup/tied.md
  python scripts/update_readme.py your_model_mup_mlp runs/compare_mup/mlp_transfer.md

Tied readout (``--part=tied``): GPT-2 as Hugging Face's Flax code writes it (tests/external_models.py: Conv1D
kernels stored (out, in), a fused q/k/v kernel, GPT-2's 0.02 init, the token table also the readout) and its
PyTorch twin (the same layers, ``mup.MuSharedReadout(wte.weight)``, ``mup.set_base_shapes(model, base,
delta=delta)``, ``mup.MuAdam``), both coordinate-checked with one criterion (``scaling.studies.coord_check.verdicts``):
the slope of log2 RMS against log2 width of every module's output at initialization and of its change since
initialization after 1..k Adam steps on one fixed batch; a module breaks μP when a slope exceeds 0.1. mup three
ways: GPT-2's init as written; every Linear weight redrawn by ``mup.init.normal_(std=0.02)`` after
``set_base_shapes`` (mup's tool for width-correct init); and every weight so (the tables too). Beside them our
untied twin, and our model made μP the way the docs said before (the paper's init, the tie named, the loss
multiplying the logits, the check judging the unscaled product).

MLP transfer (``--part=mlp``): examples/linen_mlp.py's MLP (3 hidden ReLU layers, a readout) on its teacher task, and
the same MLP in PyTorch with ``mup.MuReadout``, ``set_base_shapes`` and ``MuAdam`` (PyTorch's default init); every
(width, learning rate, seed) trains 200 Adam steps on the same batches; the final loss is the mean training loss of
the last 20 steps and the optimum per width is found by ``scaling.studies.grid.optimum`` for both. Beside them, each
with the other's initializers (ours with PyTorch's uniform kernels and biases, mup's with Flax's normal kernels and
zero biases), which separates what the init does from what the parametrization does.
"""

from __future__ import annotations

import argparse
import math
import pathlib
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import flax.linen as nn  # pylint: disable=g-import-not-at-top,wrong-import-position
import jax  # pylint: disable=g-import-not-at-top,wrong-import-position
import jax.numpy as jnp  # pylint: disable=g-import-not-at-top,wrong-import-position

import scaling  # pylint: disable=g-import-not-at-top,wrong-import-position
from scaling.runs import results  # pylint: disable=g-import-not-at-top,wrong-import-position
from scaling.runs import report  # pylint: disable=g-import-not-at-top,wrong-import-position
from scaling.studies.grid import optimum as optimum_lib  # pylint: disable=g-import-not-at-top,wrong-import-position
from scaling.studies.coord_check import verdicts as coord_check_lib  # pylint: disable=g-import-not-at-top,wrong-import-position
from examples import linen_mlp  # pylint: disable=g-import-not-at-top,wrong-import-position
import external_models as em  # pylint: disable=g-import-not-at-top,wrong-import-position

TOLERANCE = coord_check_lib.TOLERANCE
MLP_RUNS = ("ours (Flax's init)", "ours (PyTorch's init)", "mup (PyTorch's init)", "mup (Flax's init)")
"""The MLP transfer's columns: each parametrization with its own init and with the other's."""


# ----------------------------------------------------------------------------------------------- tied readout


def _torch_gpt2(width: int, depth: int = 2):
  """tests/external_models.Gpt2 in PyTorch, tied through ``mup.MuSharedReadout``."""
  import torch  # pylint: disable=g-import-not-at-top
  from torch import nn as tnn  # pylint: disable=g-import-not-at-top
  import mup  # pylint: disable=g-import-not-at-top

  def linear(fan_in, fan_out):
    layer = tnn.Linear(fan_in, fan_out)  # weight [out, in], as the Flax twin's Conv1D
    tnn.init.normal_(layer.weight, std=0.02)
    tnn.init.zeros_(layer.bias)
    return layer

  class Block(tnn.Module):

    def __init__(self):
      super().__init__()
      self.ln_1, self.ln_2 = tnn.LayerNorm(width, eps=1e-5), tnn.LayerNorm(width, eps=1e-5)
      self.c_attn, self.c_proj = linear(width, 3 * width), linear(width, width)
      self.c_fc, self.mlp_c_proj = linear(width, 4 * width), linear(4 * width, width)

    def forward(self, x):
      b, t, d = x.shape
      n = d // em.HEAD_DIM
      q, k, v = (y.reshape(b, t, n, em.HEAD_DIM) for y in self.c_attn(self.ln_1(x)).split(d, dim=-1))
      logits = torch.einsum("bqnh,bknh->bnqk", q, k) / math.sqrt(em.HEAD_DIM)
      mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
      weights = torch.softmax(logits.masked_fill(~mask, -1e9), dim=-1)
      x = x + self.c_proj(torch.einsum("bnqk,bknh->bqnh", weights, v).reshape(b, t, d))
      return x + self.mlp_c_proj(tnn.functional.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

  class Gpt2(tnn.Module):

    def __init__(self):
      super().__init__()
      self.wte, self.wpe = tnn.Embedding(em.VOCAB, width), tnn.Embedding(em.SEQ, width)
      tnn.init.normal_(self.wte.weight, std=0.02)
      tnn.init.normal_(self.wpe.weight, std=0.02)
      for i in range(depth):
        self.add_module(f"h_{i}", Block())
      self.ln_f = tnn.LayerNorm(width, eps=1e-5)
      self.lm_head = mup.MuSharedReadout(self.wte.weight, bias=False)

    def forward(self, tokens):
      x = self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1]))
      for i in range(depth):
        x = getattr(self, f"h_{i}")(x)
      return self.lm_head(self.ln_f(x))

  return Gpt2()


def _torch_coord_rows(widths, batch, *, steps, lr, seeds, reinit, base_width):
  """mup's coordinate check of the PyTorch twin, as our rows (RMS of every module output and of its change).

  ``reinit``: "none" (GPT-2's 0.02 as written), "linear" (after ``set_base_shapes``, every Linear weight redrawn by
  ``mup.init.normal_(std=0.02)``: 0.02 at the base width, ∝ 1/√fan_in beyond) or "all" (the tables too).
  """
  import torch  # pylint: disable=g-import-not-at-top
  import mup  # pylint: disable=g-import-not-at-top
  inputs = torch.as_tensor(np.asarray(batch["inputs"]), dtype=torch.long)
  targets = torch.as_tensor(np.asarray(batch["targets"]), dtype=torch.long)
  rows = []
  for width in widths:
    per_seed = {}
    for seed in seeds:
      def build():
        torch.manual_seed(seed)
        model = _torch_gpt2(width)
        mup.set_base_shapes(model, _torch_gpt2(base_width), delta=_torch_gpt2(2 * base_width))
        for name, param in model.named_parameters():
          if (reinit == "all" and name.endswith("weight") and "ln" not in name) or (
              reinit == "linear" and name.endswith("weight") and param.ndim == 2 and not name.startswith("w")):
            mup.init.normal_(param, std=0.02)
        return model
      model, initial = build(), build()  # the same draw twice: one trained, one kept at initialization
      opt = mup.MuAdam(model.parameters(), lr=lr)
      for step in range(steps + 1):
        outs, outs0 = _hooked(model, inputs), _hooked(initial, inputs)
        for name, out in outs.items():
          rms = float(out.pow(2).mean().sqrt())
          delta = float((out - outs0[name]).pow(2).mean().sqrt())
          per_seed.setdefault((step, name), []).append((rms, delta))
        loss = torch.nn.functional.cross_entropy(model(inputs).reshape(-1, em.VOCAB), targets.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    for (step, name), values in per_seed.items():
      rms = [v[0] for v in values]
      rows.append({"parametrization": "mup", "width": width, "step": step, "layer": name, "rms": float(np.mean(rms)),
                   "rms_std": float(np.std(rms)), "rms_seeds": rms,
                   "delta_rms": float(np.mean([v[1] for v in values])), "delta_rms_seeds": [v[1] for v in values],
                   "loss": None})
  return rows


def _hooked(model, inputs):
  """{module name ("h_0/c_attn", "model"): output} of one forward pass, without gradients."""
  import torch  # pylint: disable=g-import-not-at-top
  outs, handles = {}, []
  for name, module in model.named_modules():
    key = name.replace(".", "/") or "model"
    handles.append(module.register_forward_hook(
        lambda mod, args, out, key=key: outs.__setitem__(key, out.detach().clone())))
  with torch.no_grad():
    model(inputs)
  for h in handles:
    h.remove()
  return outs


class _OldWay(em.Gpt2):
  """The tied GPT-2 made μP as the docs said before: the loss multiplies the logits by ``multiplier``."""

  multiplier: float = 1.0


def _old_way_loss(model, batch):
  import optax  # pylint: disable=g-import-not-at-top
  logits = model.multiplier * model(batch["inputs"])
  return optax.softmax_cross_entropy_with_integer_labels(logits, batch["targets"]).mean()


def _old_way(widths, batch, *, steps, lr, seeds, base_width):
  """The tie named, the paper's init, the loss multiplying the unscaled product that the check records."""
  wp = scaling.WidthParametrization(lambda w: em.Gpt2(w), em.lm_loss, batch, "mup", base_width=base_width,
                                    init="paper", read_computation=False, tied_embedding="wte/embedding")
  factory = lambda w: _OldWay(w, multiplier=wp.at(w).tied_readout_multiplier)
  return scaling.coord_check(factory, _old_way_loss, batch, optimizer=wp.optimizer, init=wp.init, widths=widths,
                             steps=steps, learning_rate=lr, seeds=seeds, roles=wp.roles(max(widths)),
                             name="mup", progress=False)


def tied(out: pathlib.Path, widths=(64, 128, 256, 512), steps=3, lr=1e-2, seeds=tuple(range(8))) -> str:
  """The tied GPT-2's coordinate check: mup's and ours side by side (Markdown)."""
  batch = em.lm_batch(jax.random.key(0), 16)
  common = dict(widths=widths, steps=steps, learning_rate=lr, seeds=seeds, progress=False)
  columns = {}
  start = time.perf_counter()
  for reinit, name in (("none", "mup, GPT-2's init"), ("linear", "mup, mup.init on the Linear weights"),
                       ("all", "mup, mup.init on every weight")):
    rows = _torch_coord_rows(widths, batch, steps=steps, lr=lr, seeds=seeds, reinit=reinit, base_width=widths[0])
    columns[name] = coord_check_lib.from_rows(rows, steps)
  columns["ours (this engine)"] = scaling.coord_check(lambda w: em.Gpt2(w), em.lm_loss, batch, schemes=("mup",),
                                                     **common)
  columns["ours, untied twin"] = scaling.coord_check(lambda w: em.Gpt2(w, tied=False), em.lm_loss, batch,
                                                    schemes=("mup",), **common)
  columns["ours, the old way"] = _old_way(widths, batch, steps=steps, lr=lr, seeds=seeds, base_width=widths[0])
  for i, result in enumerate(columns.values()):
    results.write_jsonl(out / f"tied_rows_{i}.jsonl", result.rows)
  text = _tied_markdown(columns, widths, steps, lr, len(seeds), time.perf_counter() - start)
  (out / "tied.md").write_text(text)
  return text


def _fmt(v):
  return "–" if v is None else f"{v:+.2f}"


def _tied_markdown(columns, widths, steps, lr, num_seeds, seconds) -> str:
  by_column = {name: {v["layer"]: v for v in result.verdicts} for name, result in columns.items()}
  modules = list(dict.fromkeys(m for verdicts in by_column.values() for m in verdicts))
  cells = []
  for module in modules:
    row = [module]
    for verdicts in by_column.values():
      v = verdicts.get(module)
      row.append("" if v is None else f"{_fmt(v['slope_init'])} / {_fmt(v['slope_update'])}"
                 + {"ok": "", coord_check_lib.BREAKS: " **✗**"}.get(v["verdict"], " (?)"))
    cells.append(row)
  lines = [f"Coordinate check of the GPT-2-style model (2 blocks, head dim {em.HEAD_DIM}, widths "
           f"{', '.join(map(str, widths))}; {steps} Adam steps at lr {lr:g} on one fixed batch of 16 × {em.SEQ} "
           f"random tokens, {num_seeds} seeds). Each cell: slope of log2 RMS against log2 width at initialization / "
           f"largest slope of the change since initialization; **✗** = breaks μP (a slope above {TOLERANCE:g} by more than two "
           f"standard errors over the seeds), (?) = above it by less (inconclusive).",
           "", report.markdown_table(["module", *columns], cells).rstrip(), ""]
  for name, result in columns.items():
    broken = [v["layer"] for v in result.broken]
    noisy = [v["layer"] for v in result.inconclusive]
    lines.append(f"- {name}: " + (f"{len(broken)} module(s) break μP ({', '.join(broken)})." if broken
                                  else "no module breaks μP.") +
                 (f" {len(noisy)} inconclusive within the seeds' noise ({', '.join(noisy)})." if noisy else ""))
  lines.append(f"- Measured by `scripts/compare_mup.py --part=tied` in {seconds:.0f} s (PyTorch {_torch_version()}, "
               f"mup {_mup_version()}).")
  return "\n".join(lines) + "\n"


def _torch_version():
  import torch  # pylint: disable=g-import-not-at-top
  return torch.__version__


def _mup_version():
  from importlib import metadata  # pylint: disable=g-import-not-at-top
  return metadata.version("mup")


# --------------------------------------------------------------------------------------------- MLP transfer


def _torch_uniform(key, shape, dtype=jnp.float32, fan_in=None):
  """PyTorch's default for nn.Linear (kaiming_uniform with a = √5, and its bias): U(−1/√fan_in, 1/√fan_in)."""
  bound = 1.0 / math.sqrt(shape[0] if fan_in is None else fan_in)
  return jax.random.uniform(key, shape, dtype, -bound, bound)


class _TorchInitMLP(nn.Module):
  """examples/linen_mlp.MLP with PyTorch's default initializers (kernels and biases U(±1/√fan_in))."""

  width: int
  depth: int = 3

  @nn.compact
  def __call__(self, x):
    for i in range(self.depth):
      fan_in = x.shape[-1]
      x = nn.relu(nn.Dense(self.width, kernel_init=_torch_uniform, name=f"dense_{i}",
                           bias_init=lambda k, s, d=jnp.float32, f=fan_in: _torch_uniform(k, s, d, f))(x))
    fan_in = x.shape[-1]
    return nn.Dense(linen_mlp.D_OUT, kernel_init=_torch_uniform, name="readout",
                    bias_init=lambda k, s, d=jnp.float32, f=fan_in: _torch_uniform(k, s, d, f))(x)


def _torch_mlp(width: int, flax_init: bool):
  import torch  # pylint: disable=g-import-not-at-top
  from torch import nn as tnn  # pylint: disable=g-import-not-at-top
  import mup  # pylint: disable=g-import-not-at-top
  layers, fan_in = [], linen_mlp.D_IN
  for _ in range(3):
    layers += [tnn.Linear(fan_in, width), tnn.ReLU()]
    fan_in = width
  model = tnn.Sequential(*layers, mup.MuReadout(width, linen_mlp.D_OUT))
  if flax_init:  # Flax's Dense: lecun normal (truncated normal, variance 1/fan_in), zero biases
    for module in model.modules():
      if isinstance(module, tnn.Linear):
        std = 1.0 / math.sqrt(module.in_features) / 0.87962566103423978
        tnn.init.trunc_normal_(module.weight, std=std, a=-2 * std, b=2 * std)
        tnn.init.zeros_(module.bias)
  del torch
  return model


def _torch_transfer(widths, log2_lrs, seeds, steps, batches, flax_init):
  """mup's MLP grid: final losses [steps, L·S] per width (member i = lr i // S, seed i % S)."""
  import torch  # pylint: disable=g-import-not-at-top
  import mup  # pylint: disable=g-import-not-at-top
  data = [{k: torch.as_tensor(np.asarray(v)) for k, v in batches(t).items()} for t in range(steps)]
  out = {}
  for width in widths:
    curves = []
    for log2_lr in log2_lrs:
      for seed in seeds:
        torch.manual_seed(seed)
        model = _torch_mlp(width, flax_init)
        base, delta = _torch_mlp(widths[0], flax_init), _torch_mlp(2 * widths[0], flax_init)
        mup.set_base_shapes(model, base, delta=delta)
        opt = mup.MuAdam(model.parameters(), lr=2.0**log2_lr)
        losses = []
        for batch in data:
          loss = torch.mean((model(batch["x"]) - batch["y"]) ** 2)
          opt.zero_grad()
          loss.backward()
          opt.step()
          losses.append(float(loss))
        curves.append(losses)
    out[width] = np.asarray(curves, np.float64).T
  return out


def mlp(out: pathlib.Path, widths=(64, 128, 256, 512), log2_lrs=tuple(float(x) for x in range(-12, -3)),
        seeds=(0, 1), steps=200, batch_size=32) -> str:
  """The MLP's optimal learning rate per width: mup's and ours, each also with the other's init (Markdown)."""
  batches = linen_mlp.make_batches(batch_size)
  last = steps // 10
  start = time.perf_counter()
  rows = []
  for name, model in ((MLP_RUNS[0], linen_mlp.MLP), (MLP_RUNS[1], _TorchInitMLP)):
    result = scaling.transfer(model, linen_mlp.loss_fn, batches, schemes=("mup",), widths=widths, log2_lrs=log2_lrs,
                              steps=steps, seeds=seeds, progress=False)
    rows += [{**r, "parametrization": name} for r in result.rows]
  for name, flax_init in ((MLP_RUNS[2], False), (MLP_RUNS[3], True)):
    for width, losses in _torch_transfer(widths, log2_lrs, seeds, steps, batches, flax_init).items():
      rows += [{"parametrization": name, "width": width, **r, "steps": steps, "average_last": last}
               for r in optimum_lib.summarize_grid(losses, log2_lrs, len(seeds), last)]
  keys = ("parametrization", "width")
  optimum = optimum_lib.find_optimum(rows, keys=keys)
  text = _mlp_markdown(optimum, widths, log2_lrs, seeds, steps, batch_size, last, time.perf_counter() - start)
  (out / "mlp_transfer.md").write_text(text)
  return text


def _mlp_markdown(optimum, widths, log2_lrs, seeds, steps, batch_size, last, seconds) -> str:
  names = list(dict.fromkeys(o["parametrization"] for o in optimum))
  best = {(o["parametrization"], o["width"]): optimum_lib.optimum_log2_lr(o) for o in optimum}
  loss = {(o["parametrization"], o["width"]): o["final_loss"] for o in optimum}
  cells = [[str(w)] + [("–" if best[(n, w)] is None else f"{best[(n, w)]:.2f}") + f" ({loss[(n, w)]:.4f})"
                       for n in names] for w in widths]
  moved = {n: optimum_lib.spread([best[(n, w)] for w in widths]) for n in names}
  cells.append(["moves (octaves)"] + [("–" if moved[n] is None else f"{moved[n]:.2f}") for n in names])
  base = widths[0]

  def offset(a, b):  # how far b's base-width optimum sits from a's (octaves)
    return "–" if best[(a, base)] is None or best[(b, base)] is None else f"{best[(b, base)] - best[(a, base)]:+.2f}"

  ours, ours_torch, mup_own, mup_flax = MLP_RUNS
  lines = [f"Optimal log2 learning rate of the MLP per width under μP (parabola vertex around the grid's best, its "
           f"final loss in brackets): teacher task of examples/linen_mlp.py, batch {batch_size}, {steps} Adam steps, "
           f"{len(log2_lrs)} learning rates 2^{log2_lrs[0]:g} .. 2^{log2_lrs[-1]:g}, {len(seeds)} seeds, final loss = "
           f"mean training loss of the last {last} steps; the same batches for every run.", "",
           report.markdown_table(["width", *names], cells).rstrip(), "",
           f"- Base-width optimum of mup against ours, each with its own init: {offset(ours, mup_own)} octaves; with "
           f"the same init: {offset(ours_torch, mup_own)} (both PyTorch's), {offset(ours, mup_flax)} (both Flax's). "
           f"Ours with PyTorch's init against ours with Flax's: {offset(ours, ours_torch)}.",
           f"- How far the optimum moves: ours {moved[ours]:.2f} and mup {moved[mup_own]:.2f} octaves with their own "
           f"inits; with PyTorch's init ours {moved[ours_torch]:.2f} and mup {moved[mup_own]:.2f}, with Flax's ours "
           f"{moved[ours]:.2f} and mup {moved[mup_flax]:.2f}.",
           f"- Measured by `scripts/compare_mup.py --part=mlp` in {seconds:.0f} s (PyTorch {_torch_version()}, "
           f"mup {_mup_version()})."]
  return "\n".join(lines) + "\n"


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out_dir", default="runs/compare_mup")
  parser.add_argument("--part", default="all", choices=("all", "tied", "mlp"))
  args = parser.parse_args(argv)
  out = pathlib.Path(args.out_dir)
  out.mkdir(parents=True, exist_ok=True)
  if args.part in ("all", "tied"):
    print(tied(out))
  if args.part in ("all", "mlp"):
    print(mlp(out))


if __name__ == "__main__":
  main(sys.argv[1:])
