"""Time on an accelerator, from its datasheet, for runs planned for an accelerator this host does not have.

``training_flops`` counts the floating-point operations of a training program, ``ACCELERATOR_PEAKS`` holds the
datasheet peaks of a few GPUs and ``accelerator_seconds`` turns the floating-point operations of a run's programs
into expected seconds on one of them (``TimeModel``: a fraction of the peak, plus compilation and per-step
overhead). The training grids' plan (``scaling.studies.grid.run.GridPlan``) and the claims' device budget
(``scaling.studies.claims.study``) use them.
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import Any, Sequence

from scaling.training import resources


def training_flops(model_config: Any, *, steps: int, members: int, batch_size: int, seq_len: int) -> float:
  """Floating-point operations of training ``members`` vmapped models for ``steps`` steps: per sequence,
  6 · parameters · tokens for the weights plus 12 · depth · T² · width for the attention (forward and backward).

  Args:
    model_config: a ``scaling.training.model.config.ModelConfig``.
    steps: training steps.
    members: vmapped models (seeds × learning rates).
    batch_size, seq_len: B and T of a training batch.

  Returns:
    FLOPs.
  """
  for name, value in (("steps", steps), ("members", members), ("batch_size", batch_size), ("seq_len", seq_len)):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
      raise ValueError(f"{name} must be a positive int, got {value!r}")
  params = resources.param_count(model_config)
  per_sequence = 6.0 * params * seq_len + 12.0 * model_config.depth * seq_len**2 * model_config.width
  return per_sequence * batch_size * steps * members


ACCELERATOR_PEAKS: dict[str, dict[str, float]] = {
    "H200": {"float32": 67e12, "tf32": 494.5e12, "bfloat16": 989.5e12, "float16": 989.5e12},
    "H100": {"float32": 67e12, "tf32": 494.5e12, "bfloat16": 989.5e12, "float16": 989.5e12},
    "A100": {"float32": 19.5e12, "tf32": 156e12, "bfloat16": 312e12, "float16": 312e12},
}
"""Dense peak FLOP/s per matmul precision of the SXM parts, keyed by a word of JAX's ``device_kind`` (e.g. "NVIDIA
H200"). "float32" is the CUDA cores' rate, "tf32" float32 matmuls on the tensor cores (what XLA uses for float32 on
these GPUs at JAX's default matmul precision), "bfloat16" and "float16" the tensor cores' rate. Sources: the NVIDIA
H200 Tensor Core GPU datasheet (H200 SXM: FP32 67 TFLOPS, TF32 989 and BF16/FP16 1,979 TFLOPS with sparsity), the
NVIDIA H100 Tensor Core GPU datasheet (H100 SXM: the same figures) and the NVIDIA A100 Tensor Core GPU datasheet
(FP32 19.5, TF32 156, BF16/FP16 312 TFLOPS dense); the datasheets' "with sparsity" figures (2:4 structured sparsity)
are halved here."""


@dataclasses.dataclass(frozen=True)
class TimeModel:
  """How a run's floating-point operations become seconds on an accelerator (assumptions, not measurements).

  Attributes:
    efficiency: the fraction of the datasheet peak the programs reach (small models reach a fraction of it).
    compile_seconds: compilation per program.
    step_seconds: host overhead per training step (dispatch, the per-step divergence check's copy to the host).
    fixed_seconds: what the run spends outside the planned programs (e.g. the random-input claims).
  """

  efficiency: float = 0.3
  compile_seconds: float = 20.0
  step_seconds: float = 0.005
  fixed_seconds: float = 60.0


def accelerator_peak(device_kind: str, dtype: str, tf32: bool = True) -> float:
  """The dense datasheet peak FLOP/s of ``device_kind`` for matmuls in ``dtype`` (``ACCELERATOR_PEAKS``).

  Args:
    device_kind: JAX's ``device_kind``, or any name holding a key of ``ACCELERATOR_PEAKS`` (e.g. "NVIDIA H200").
    dtype: "float32" or "bfloat16".
    tf32: float32 matmuls run as TF32 on the tensor cores (JAX's default precision on these GPUs).

  Returns:
    FLOP/s.
  """
  name = _accelerator_name(device_kind)
  if name is None:
    raise ValueError(f"device_kind: no datasheet peaks for {device_kind!r}; known: {', '.join(ACCELERATOR_PEAKS)}")
  peaks = ACCELERATOR_PEAKS[name]
  key = "tf32" if dtype == "float32" and tf32 else dtype
  if key not in peaks:
    raise ValueError(f"dtype: no {dtype!r} peak for {device_kind!r}; known: {', '.join(peaks)}")
  return peaks[key]


def _accelerator_name(device_kind: str) -> str | None:
  """The key of ``ACCELERATOR_PEAKS`` that ``device_kind`` names (e.g. "H200" in "NVIDIA H200"), or None."""
  return next((name for name in ACCELERATOR_PEAKS if name.lower() in device_kind.lower()), None)


def accelerator_seconds(programs: Sequence[tuple[float, str, int]], device_kind: str,
                        model: TimeModel = TimeModel(), compiled: int | None = None) -> dict[str, float]:
  """The expected seconds of running ``programs`` one after another on one ``device_kind``.

  Args:
    programs: one (floating-point operations, dtype, steps) per run program.
    device_kind: the accelerator (``accelerator_peak``'s).
    model: the fraction of the peak and the overheads.
    compiled: how many of them are compiled (programs that are the same computation are compiled once);
      None: every one.

  Returns:
    {"compute", "compile", "steps", "fixed", "total"}: seconds; and "compute_at_peak", the compute at the full
    datasheet peak (the least any program or overhead could leave; not part of the total).
  """
  at_peak = sum(flops / accelerator_peak(device_kind, dtype) for flops, dtype, _ in programs)
  out = {"compute": at_peak / model.efficiency,
         "compile": model.compile_seconds * (len(programs) if compiled is None else compiled),
         "steps": model.step_seconds * sum(steps for _, _, steps in programs), "fixed": model.fixed_seconds}
  out["total"] = sum(out.values())
  out["compute_at_peak"] = at_peak
  return out


def measured_efficiency(train_results: dict[str, Any], device_kind: str, dtype: str = "float32",
                        variant: str = "every_metric") -> float:
  """The fraction of ``device_kind``'s datasheet peak a training step reached, from a run of the benchmark's train
  suite (``python -m experiments.benchmark --suite=train``, its train.json) on that accelerator.

  It is the step's model FLOP/s (``benchmarks.train.throughput``: compilation excluded) over
  ``accelerator_peak(device_kind, dtype)``, so that a plan's compute is the planned FLOPs at the FLOP/s a training
  step was measured to reach, not at an assumed fraction.

  Args:
    train_results: train.json's contents.
    device_kind: the accelerator the plan is for; train.json's ``device_kind`` must name the same one.
    dtype: the matmul dtype of the planned programs.
    variant: the timed step (``benchmarks.train.STEP_VARIANTS``): "every_metric", what the training grids run.

  Returns:
    The fraction, in (0, 1].

  Raises:
    ValueError: results that are not a train suite's, measured on another device, or a fraction outside (0, 1].
  """
  try:
    measured_on = str(train_results["device_kind"])
    flops_per_s = float(train_results["throughput"]["variants"][variant]["flops_per_s"])
  except (KeyError, TypeError, ValueError) as e:
    raise ValueError(f"train_results: not a train suite's train.json with device_kind and the {variant!r} step's "
                     f"flops_per_s ({type(e).__name__}: {e})") from e
  peak = accelerator_peak(device_kind, dtype)
  if _accelerator_name(measured_on) != _accelerator_name(device_kind):
    raise ValueError(f"train_results: measured on {measured_on!r}, not on {device_kind!r}")
  fraction = flops_per_s / peak
  if not 0.0 < fraction <= 1.0:
    raise ValueError(f"train_results: {flops_per_s:.3g} FLOP/s is {fraction:.3g} of {device_kind}'s datasheet peak; "
                     "a measured fraction must lie in (0, 1]")
  return fraction
