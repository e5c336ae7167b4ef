"""What every example shares: the command line, and the coordinate check and learning-rate transfer of a model
given as a factory of the width under each parametrization (``scaling.WidthParametrization``), written to
--out_dir.

Each example defines its model (a factory of the width per parametrization), its loss and its data, and calls
``main``; ``python -m examples.linen_mlp --help`` lists the options.
"""

from __future__ import annotations

import argparse
import sys
import pathlib
import time
from typing import Any, Callable

import jax

import scaling
from scaling.runs import results
from scaling.studies.coord_check import verdicts as coord_verdicts
from scaling.studies.transfer import any_model as transfer_lib


def parser(description: str, *, widths: str = "64,128,256,512", transfer_steps: int = 200,
           batch_size: int = 32, log2_lrs: str = "-12,-11,-10,-9,-8,-7,-6,-5,-4") -> argparse.ArgumentParser:
  """The options every example takes (an example adds its own)."""
  p = argparse.ArgumentParser(description=description)
  ints = lambda s: tuple(int(x) for x in s.split(","))
  floats = lambda s: tuple(float(x) for x in s.split(","))
  p.add_argument("--out_dir", default=None, help="Output folder (default runs/examples/<example>).")
  p.add_argument("--parametrizations", default="sp,mup", type=lambda s: tuple(s.split(",")),
                 help="Parametrizations compared (scaling.parametrize schemes).")
  p.add_argument("--widths", default=widths, type=ints, help="Widths of the coordinate check (and of the transfer).")
  p.add_argument("--transfer_widths", default=None, type=ints, help="Widths of the transfer (default --widths).")
  p.add_argument("--base_width", default=64, type=int, help="Base width (μP equals SP there); delta = 2x base.")
  p.add_argument("--init", default="base", choices=scaling.mup.width_family.INIT_MODES,
                 help="Init: base (the model's own initializers, scaled by the scheme's law from the base width), "
                      "paper (the paper's constants) or rescale (the model's distributions at the paper's stds).")
  p.add_argument("--batch_size", default=batch_size, type=int, help="Batch size.")
  p.add_argument("--coord_steps", default=3, type=int, help="Coordinate check: RMS at steps 0..k.")
  p.add_argument("--coord_lr", default=1e-2, type=float, help="Coordinate check: the Adam learning rate.")
  p.add_argument("--coord_seeds", default=4, type=int, help="Coordinate check: seeds (vmapped); the RMS is their mean.")
  p.add_argument("--seeds", default=2, type=int, help="Transfer: seeds per learning rate (vmapped).")
  p.add_argument("--transfer_steps", default=transfer_steps, type=int, help="Transfer: training steps per run "
                 "(0: no transfer).")
  p.add_argument("--log2_lrs", default=log2_lrs, type=floats, help="Transfer: base-2 logs of the learning rates.")
  return p


def main(name: str, args: argparse.Namespace, *rest: Any, **kwargs: Any) -> dict[str, Any]:
  """``run`` for a command line: bad input (the library's ConfigError) ends with one ``error:`` line, exit status 2."""
  try:
    return run(name, args, *rest, **kwargs)
  except scaling.ConfigError as e:
    print(f"error: {e}", file=sys.stderr)
    raise SystemExit(2) from None


def run(name: str, args: argparse.Namespace, model_for: Callable[[str], Callable[..., Any]],
         loss_fn: Callable[[Any, Any], Any], batches: Callable[[int], Any], *, data: str,
         overrides: dict[str, Any] | None = None) -> dict[str, Any]:
  """Infer roles, parametrize, coordinate-check and transfer the model under every parametrization of --parametrizations.

  Args:
    name: the example's name (output folder).
    args: the parsed options of ``parser``.
    model_for: scheme -> the model factory of the width under it (e.g. the attention rule differs).
    loss_fn: ``loss_fn(module, batch) -> scalar``.
    batches: ``batches(step) -> batch`` (the coordinate check trains on batch 0 at every step, as mup's fix_data).
    data: what the data is, for the headings.
    overrides: ``scaling.infer_kinds`` overrides (e.g. ``scaling.FLAX_ATTENTION``).

  Returns:
    {"coord_check": CoordCheckResult, "transfer": TransferResult or None} of every parametrization together;
    the folder holds coord_check.png, coord_check_delta.png, coord_check.md, coord_check.jsonl (the rows) and
    (with --transfer_steps) transfer.png, transfer.md and transfer.jsonl.
  """
  scaling.mup.user_model.check_widths(args.widths)
  out = pathlib.Path(args.out_dir or f"runs/examples/{name}")
  out.mkdir(parents=True, exist_ok=True)
  start = time.perf_counter()
  example = batches(0)
  checks, transfers = [], []
  for scheme in args.parametrizations:
    model = model_for(scheme)
    param = scaling.WidthParametrization(model, loss_fn, example, scheme, base_width=args.base_width,
                                         overrides=overrides, init=args.init)
    roles = param.roles(max(args.widths))
    print(f"{name} {scheme}: roles " + ", ".join(f"{p}={r.kind}{' (tied)' if r.tied else ''}"
                                                 for p, r in roles.items()), flush=True)
    checks.append(scaling.coord_check(model, loss_fn, example, schemes=(param,), widths=args.widths,
                                      steps=args.coord_steps, learning_rate=args.coord_lr,
                                      seeds=range(args.coord_seeds)))
    if args.transfer_steps:
      transfers.append(scaling.transfer(model, loss_fn, batches, schemes=(param,),
                                        widths=args.transfer_widths or args.widths, log2_lrs=args.log2_lrs,
                                        steps=args.transfer_steps, seeds=range(args.seeds)))
  check = coord_verdicts.combine(*checks)
  check.write_figure(out / "coord_check.png")
  check.write_figure(out / "coord_check_delta.png", delta=True)
  widths = ", ".join(map(str, args.widths))
  heading = (f"Coordinate check of `{name}` (widths {widths}; {args.coord_steps} Adam steps at lr "
             f"{args.coord_lr:g} on one fixed batch of {data}, {args.coord_seeds} seeds):")
  results.write_jsonl(out / "coord_check.jsonl", check.rows)
  results.write_text(out / "coord_check.md", check.verdict_markdown(heading))
  print(check.verdict_markdown(heading))
  transfer = None
  if transfers:
    transfer = transfer_lib.combine(*transfers)
    results.write_jsonl(out / "transfer.jsonl", transfer.rows)
    transfer.write_figure(out / "transfer.png")
    text = transfer.optimum_markdown(transfer_lib.heading(transfer, data, "Adam"))
    results.write_text(out / "transfer.md", text)
    print(transfer.loss_table())
    print(text)
  print(f"{name}: {time.perf_counter() - start:.0f}s; wrote {', '.join(sorted(p.name for p in out.iterdir()))} to "
        f"{out}")
  return {"coord_check": check, "transfer": transfer}

