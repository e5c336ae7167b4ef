"""Memory checked before work: what an experiment's configuration needs, against what is available.

Each estimate is a sum of named parts (``Part``), each sized by a few options:
attention logits (a T × S float32 matrix per head and sequence; dense
attention materializes it, blockwise attention only one block of key columns
per query row, so T × block), parameters, optimizer state, gradients,
activations and readout logits, times the members a program vmaps (seeds,
rules, learning rates). Parts of one compiled program are live together;
programs run one after another (head dims of a sweep, widths of a width study)
take the largest. The constants (``DENSE_SWEEP_COPIES`` and the like) count
the T × S (or B × T × D) float32 arrays a program keeps live at once, from
what the program computes (logits, weights, their gradients, the metrics'
intermediates); ``tests/test_resources.py`` checks the sizes against the real
arrays and the totals against XLA's own buffer plan.

``check`` compares an estimate with the memory available (the accelerator's
``bytes_limit`` less what is in use when JAX runs on one, else the host's
MemAvailable) and raises ``ResourceError``, one line naming the options that
size the largest part, the estimate and what is available, and what to change.

Time, for runs planned for an accelerator this host does not have: ``training_flops`` counts the floating-point
operations of a training program, ``ACCELERATOR_PEAKS`` holds the datasheet peaks of a few GPUs and
``accelerator_seconds`` turns the floating-point operations of a run's programs into expected seconds on one of them
(``TimeModel``: a fraction of the peak, plus compilation and per-step overhead).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
import re
from typing import Any, Iterable, Mapping, Sequence

from scaling.base.validation import ConfigError

F32 = 4  # bytes of a float32 (parameters, optimizer state and attention logits are float32)

DENSE_SWEEP_COPIES = 6
"""T × S float32 arrays live per (seed, rule) in the dense sweep program: logits, weights, the mask, the
gradient with respect to logits and weights, and the softmax-Jacobian and entropy intermediates."""
BLOCKWISE_COPIES = 5
"""T × block float32 arrays live per head and sequence in blockwise attention (a tile, its weights, their
gradients, and the per-block residuals of the scan)."""
SWEEP_QKV_COPIES = 4
"""B × T × N × d_k arrays per seed independent of the rules (q, k, v and the upstream gradient) ..."""
SWEEP_QKV_COPIES_PER_RULE = 4
"""... and per rule (the output and the gradients with respect to q, k and v)."""
DENSE_TRAIN_COPIES = 5
"""T × T float32 arrays per head, sequence and block kept for the backward pass of dense attention in
training (logits, weights, the mask, the attention metrics' intermediates)."""
WIDTH_COPIES = 8
"""B × T × D float32 arrays per block kept for the backward pass (block input, norms, q, k, v, attention
output, residuals); the MLP adds ``HIDDEN_COPIES`` of B × T × F."""
HIDDEN_COPIES = 2
READOUT_COPIES = 3
"""B × T × V float32 arrays of the readout (logits, softmax, their gradient)."""


class ResourceError(ConfigError):
  """A configuration that needs more memory than is available (one line naming the options)."""


@dataclasses.dataclass(frozen=True)
class Part:
  """One named part of an estimate.

  Attributes:
    what: what it holds, e.g. "dense attention logits".
    bytes: its size.
    flags: the options that size it (named without dashes), most important first.
    hint: what to change to shrink it (options named by their fields: ``seq_len``, ``attention='blockwise'``).
  """

  what: str
  bytes: int
  flags: tuple[str, ...] = ()
  hint: str = ""


@dataclasses.dataclass(frozen=True)
class Estimate:
  """The parts of one program live together; ``where`` says which program of a run it is (e.g. "at d_k=1024")."""

  parts: tuple[Part, ...]
  where: str = ""

  @property
  def total(self) -> int:
    """The bytes of all parts."""
    return sum(p.bytes for p in self.parts)

  @property
  def largest(self) -> Part:
    """The largest part."""
    return max(self.parts, key=lambda p: p.bytes)

  def bytes_of(self, what: str) -> int:
    """The bytes of the parts named ``what`` (0 if none)."""
    return sum(p.bytes for p in self.parts if p.what == what)


def largest(estimates: Iterable[Estimate]) -> Estimate:
  """The estimate with the most bytes (programs that run one after another)."""
  return max(estimates, key=lambda e: e.total)


# ----------------------------------------------------------------------------
# Available memory.


def host_available_bytes() -> int | None:
  """Host memory available to a new allocation: /proc/meminfo's MemAvailable, else free pages; None if unknown."""
  try:
    with open("/proc/meminfo") as f:
      for line in f:
        if line.startswith("MemAvailable:"):
          return int(line.split()[1]) * 1024
  except (OSError, ValueError, IndexError):
    pass
  try:
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
  except (ValueError, OSError, AttributeError):
    return None


def device_available_bytes(device: Any = None) -> int | None:
  """An accelerator's ``bytes_limit`` less ``bytes_in_use`` from ``memory_stats()``; None where it has none (CPU)."""
  import jax  # pylint: disable=import-outside-toplevel
  device = device or jax.devices()[0]
  try:
    stats = device.memory_stats()
  except Exception:  # pylint: disable=broad-except  (backends without memory statistics)
    return None
  if not stats or "bytes_limit" not in stats:
    return None
  return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))


def available_bytes() -> tuple[int | None, str]:
  """(bytes, where): the default device's free memory on an accelerator, else the host's."""
  import jax  # pylint: disable=import-outside-toplevel
  if jax.default_backend() != "cpu":
    device = device_available_bytes()
    if device is not None:
      return device, f"on {jax.devices()[0].device_kind}"
  return host_available_bytes(), "on the host"


def gib(num_bytes: float) -> str:
  """Bytes as a short size: GiB, or TiB, PiB, EiB when larger."""
  value, unit = num_bytes / 2**30, "GiB"
  for bigger in ("TiB", "PiB", "EiB"):
    if value < 1024:
      break
    value, unit = value / 1024, bigger
  return f"{value:.3g} {unit}"


def _field(name: str, value: Any) -> str:
  """``name=value`` as the option's field reads (a list as a tuple)."""
  return f"{name}={tuple(value) if isinstance(value, list) else value!r}"


def message(estimate: Estimate, values: Mapping[str, Any], available: int, where_available: str = "") -> str:
  """The one-line refusal: the options sizing the largest part, the estimate, what is available, what to do."""
  part = estimate.largest
  named = " ".join(_field(n, values[n]) for n in part.flags if n in values and values[n] is not None)
  where = f" {estimate.where}" if estimate.where else ""
  text = (f"{named} need{'s' if len(part.flags) == 1 else ''} ~{gib(estimate.total)}{where}, "
          f"~{gib(part.bytes)} of it for {part.what}; {gib(available)} available{' ' if where_available else ''}"
          f"{where_available}")
  return f"{text}; {part.hint}" if part.hint else text


def hint_fields(estimate: Estimate, values: Mapping[str, Any]) -> tuple[str, ...]:
  """The options (names in ``values``) that the largest part's hint names bare, e.g. "a smaller seq_len"."""
  words = re.findall(r"(?<![\w.='\"-])[a-z_][a-z0-9_]*(?![\w='\"-])", estimate.largest.hint)
  return tuple(dict.fromkeys(w for w in words if w in values))


def check(estimate: Estimate, values: Mapping[str, Any], available: int | None = None) -> None:
  """Raises ``ResourceError`` when ``estimate`` exceeds the available memory (``available_bytes`` by default).

  Args:
    estimate: what the run needs.
    values: option name -> value, to name the options in the message.
    available: bytes available (default: measured now); unknown memory is not checked.
  """
  where = ""
  if available is None:
    available, where = available_bytes()
  if available is not None and estimate.total > available:
    raise ResourceError(message(estimate, values, available, where), fields=hint_fields(estimate, values))


def option_values(config: Any) -> dict[str, Any]:
  """Every leaf option of a (nested) config dataclass by name."""
  out = {}
  for field in dataclasses.fields(config):
    value = getattr(config, field.name)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
      out.update(option_values(value))
    else:
      out[field.name] = value
  return out


# ----------------------------------------------------------------------------
# Sizes of arrays.


def logits_bytes(batch: int, heads: int, q_len: int, kv_len: int) -> int:
  """Bytes of one float32 attention-logit matrix [B, N, T, S]."""
  return batch * heads * q_len * kv_len * F32


def attention_bytes(batch: int, heads: int, q_len: int, kv_len: int, implementation: str, block: int) -> int:
  """Bytes of the logits attention forms at once: all of [B, N, T, S] dense, [B, N, T, min(block, S)] blockwise."""
  if implementation == "blockwise":
    return logits_bytes(batch, heads, q_len, min(block, kv_len))
  return logits_bytes(batch, heads, q_len, kv_len)


def param_count(model_config: Any) -> int:
  """Parameters of ``scaling.training.model.Transformer(model_config)`` in closed form (no initialization).

  Args:
    model_config: a ``scaling.training.model.ModelConfig``.

  Returns:
    The number of parameters: embeddings, per block the norms, q/k/v/out and
    MLP kernels (biases with ``use_bias``), QK-norm gains, the final norm and
    the readout.
  """
  from scaling.attention import rules as rules_lib  # pylint: disable=import-outside-toplevel
  c = model_config
  d, v, n, k, h, f = c.width, c.vocab_size, c.num_heads, c.kv_heads, c.head_dim, c.mlp_hidden
  bias = 1 if c.use_bias else 0
  norm = d * (1 + bias)
  dense = lambda fan_in, fan_out: fan_in * fan_out + bias * fan_out
  block = (2 * norm + dense(d, n * h) + 2 * dense(d, k * h) + dense(n * h, d) + dense(d, f) + dense(f, d)
           + (2 * h if isinstance(c.attention_rule, rules_lib.QKNorm) and c.qk_norm_gains else 0))
  positions = c.max_len * d if c.positions == "learned" else 0
  return v * d + positions + c.depth * block + (norm if c.pre_ln else 0) + d * v


def optimizer_state_count(num_params: int, optimizer: str, momentum: float = 0.0) -> int:
  """Float32 numbers of optimizer state: Adam(W) and Adam-atan2 two moments, SGD with momentum one, plain SGD none."""
  if optimizer in ("adam", "adamw", "adam_atan2"):
    return 2 * num_params
  return num_params if momentum else 0


# ----------------------------------------------------------------------------
# Estimates.


def sweep_program(*, batch: int, heads: int, seq_len: int, d_k: int, num_seeds: int, num_rules: int,
                  attention: str = "dense", block: int = 128, width: int | None = None) -> Estimate:
  """The d_k sweep's program at one head dim: every seed vmapped, every rule evaluated in it.

  Args:
    batch, heads, seq_len, d_k: the shape of q, k, v [B, T, N, d_k] per seed.
    num_seeds: seeds vmapped.
    num_rules: rules (dense: all live together; blockwise: one after another).
    attention: "dense" or "blockwise".
    block: the blockwise tile.
    width: width mode: inputs [B, T, width] and W_q, W_k, W_v [width, N·d_k] per seed.

  Returns:
    An Estimate with parts for the attention logits, q/k/v and their gradients, and the projections.
  """
  live_rules = num_rules if attention == "dense" else 1
  copies = DENSE_SWEEP_COPIES if attention == "dense" else BLOCKWISE_COPIES
  logits = copies * attention_bytes(batch, heads, seq_len, seq_len, attention, block) * num_seeds * live_rules
  qkv = (SWEEP_QKV_COPIES + SWEEP_QKV_COPIES_PER_RULE * live_rules) * batch * seq_len * heads * d_k * F32 * num_seeds
  hint = ("use attention='blockwise', a smaller seq_len or batch, or fewer num_seeds or rules"
          if attention == "dense" else "use a smaller block_size, seq_len or batch, or fewer num_seeds")
  parts = [Part(f"{attention} attention logits", logits,
                ("seq_len", "batch", "num_heads", "num_seeds", "rules") + (("block_size",) if attention != "dense"
                                                                          else ()), hint),
           Part("q, k, v and their gradients", qkv, ("d_k", "seq_len", "batch", "num_heads", "num_seeds"),
                "use a smaller d_k, seq_len or batch, or fewer num_seeds")]
  if width is not None:
    proj = 2 * (batch * seq_len * width + 3 * width * heads * d_k) * F32 * num_seeds
    parts.append(Part("width-mode inputs and projections", proj, ("width", "d_k", "seq_len", "num_seeds"),
                      "use a smaller width, d_k or seq_len"))
  return Estimate(tuple(parts))


def sweep_estimate(config: Any) -> Estimate:
  """The largest program of a ``scaling.studies.sweep.SweepConfig`` (over its program shapes and head dims).

  One program per (width-mode point, sequence length, dtype, d_k); its rules and, with iid inputs, its qk_std values
  are vmapped together (counted as rules); every dtype is counted at 4 bytes, an upper bound.
  """
  programs = []
  for mode in config.modes():
    width = mode.width[0] if mode.parametrization else None
    stds = 1 if mode.parametrization else len(mode.qk_std)
    for d_k in mode.d_k:
      e = sweep_program(batch=mode.batch, heads=mode.num_heads, seq_len=mode.seq_len[0], d_k=d_k,
                        num_seeds=mode.num_seeds, num_rules=len(mode.rules) * stds, attention=mode.attention,
                        block=mode.block_size, width=width)
      where = f"at d_k={d_k}" + (f" and width={width}" if width is not None else "")
      if len(config.seq_len) > 1:
        where += f" and seq_len={mode.seq_len[0]}"
      programs.append(dataclasses.replace(e, where=where))
  return largest(programs)


def training_program(model_config: Any, *, optimizer: str, momentum: float = 0.0, batch_size: int, seq_len: int,
                     members: int = 1, state_copies: int = 2, member_flags: Sequence[str] = ()) -> Estimate:
  """One compiled training step of ``members`` vmapped models (and the state kept between steps).

  Args:
    model_config: a ``scaling.training.model.ModelConfig``.
    optimizer, momentum: the optimizer (its state size).
    batch_size, seq_len: B and T of a training batch.
    members: vmapped models (seeds × learning rates).
    state_copies: copies of (parameters, optimizer state) live at a step: the input and the updated state (2),
      one more when the last finite state is kept.
    member_flags: the options that set ``members`` (named in messages).

  Returns:
    An Estimate with parts for parameters, optimizer state, gradients, activations, attention logits and the
    readout logits.
  """
  c = model_config
  members_flags = tuple(member_flags)
  p = param_count(c)
  o = optimizer_state_count(p, optimizer, momentum)
  b, t = batch_size, seq_len
  width_flags = ("width", "widths", "depth", "depths", "mlp_ratio")
  attn = attention_bytes(b, c.num_heads, t, t, c.attention, c.block_q)
  attn_copies = DENSE_TRAIN_COPIES if c.attention == "dense" else BLOCKWISE_COPIES
  hint_attn = ("use attention='blockwise', a smaller seq_len or batch_size" if c.attention == "dense"
               else "use a smaller block_size, seq_len or batch_size")
  few = f", or fewer {' or '.join(members_flags)}" if members_flags else ""
  return Estimate((
      Part("parameters", state_copies * p * F32 * members, width_flags + ("vocab_size",) + members_flags,
           f"use a smaller width or depth{few}"),
      Part("optimizer state", state_copies * o * F32 * members, width_flags + ("optimizer",) + members_flags,
           f"use a smaller width or depth{few}"),
      Part("gradients", p * F32 * members, width_flags + members_flags, f"use a smaller width or depth{few}"),
      Part("activations", c.depth * b * t * (WIDTH_COPIES * c.width + HIDDEN_COPIES * c.mlp_hidden) * F32 * members,
           ("batch_size", "seq_len") + width_flags + members_flags,
           f"use a smaller batch_size, seq_len, width or depth{few}"),
      Part(f"{c.attention} attention logits", attn_copies * c.depth * attn * members,
           ("seq_len", "batch_size", "depth") + (("block_size",) if c.attention != "dense" else ()) + members_flags,
           hint_attn + few),
      Part("readout logits", READOUT_COPIES * b * t * c.vocab_size * F32 * members,
           ("vocab_size", "batch_size", "seq_len") + members_flags,
           f"use a smaller vocab_size, batch_size or seq_len{few}"),
  ))


def training_estimate(model_configs: Sequence[tuple[str, Any]], *, optimizer: str, momentum: float = 0.0,
                      batch_size: int, seq_len: int, members: int = 1, state_copies: int = 2,
                      member_flags: Sequence[str] = (), data_bytes: int = 0) -> Estimate:
  """The largest of several training programs run one after another.

  Args:
    model_configs: (label, ``ModelConfig``) pairs, e.g. ("at width 1024", config).
    data_bytes: device bytes of the data held throughout (text tokens), added to every program.
    (the rest as ``training_program``).

  Returns:
    The largest program's Estimate, with ``where`` its label.
  """
  programs = []
  for label, model_config in model_configs:
    e = training_program(model_config, optimizer=optimizer, momentum=momentum, batch_size=batch_size,
                         seq_len=seq_len, members=members, state_copies=state_copies, member_flags=member_flags)
    if data_bytes:
      e = dataclasses.replace(e, parts=e.parts + (Part("training text", data_bytes, ("text_file",),
                                                       "use a smaller text_file"),))
    programs.append(dataclasses.replace(e, where=label))
  return largest(programs)


def dataset_bytes(dataset: Any) -> int:
  """Device bytes a dataset holds throughout (the tokens of a text file; synthetic tasks hold none)."""
  tokens = getattr(dataset, "tokens", None)
  return 0 if tokens is None else int(math.prod(tokens.shape)) * tokens.dtype.itemsize


# ----------------------------------------------------------------------------
# Time on an accelerator, from its datasheet.


def training_flops(model_config: Any, *, steps: int, members: int, batch_size: int, seq_len: int) -> float:
  """Floating-point operations of training ``members`` vmapped models for ``steps`` steps: per sequence,
  6 · parameters · tokens for the weights plus 12 · depth · T² · width for the attention (forward and backward).

  Args:
    model_config: a ``scaling.training.model.ModelConfig``.
    steps: training steps.
    members: vmapped models (seeds × learning rates).
    batch_size, seq_len: B and T of a training batch.

  Returns:
    FLOPs.
  """
  for name, value in (("steps", steps), ("members", members), ("batch_size", batch_size), ("seq_len", seq_len)):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
      raise ValueError(f"{name} must be a positive int, got {value!r}")
  params = param_count(model_config)
  per_sequence = 6.0 * params * seq_len + 12.0 * model_config.depth * seq_len**2 * model_config.width
  return per_sequence * batch_size * steps * members


ACCELERATOR_PEAKS: dict[str, dict[str, float]] = {
    "H200": {"float32": 67e12, "tf32": 494.5e12, "bfloat16": 989.5e12, "float16": 989.5e12},
    "H100": {"float32": 67e12, "tf32": 494.5e12, "bfloat16": 989.5e12, "float16": 989.5e12},
    "A100": {"float32": 19.5e12, "tf32": 156e12, "bfloat16": 312e12, "float16": 312e12},
}
"""Dense peak FLOP/s per matmul precision of the SXM parts, keyed by a word of JAX's ``device_kind`` (e.g. "NVIDIA
H200"). "float32" is the CUDA cores' rate, "tf32" float32 matmuls on the tensor cores (what XLA uses for float32 on
these GPUs at JAX's default matmul precision), "bfloat16" and "float16" the tensor cores' rate. Sources: the NVIDIA H200 Tensor
Core GPU datasheet (H200 SXM: FP32 67 TFLOPS, TF32 989 and BF16/FP16 1,979 TFLOPS with sparsity), the NVIDIA H100
Tensor Core GPU datasheet (H100 SXM: the same figures) and the NVIDIA A100 Tensor Core GPU datasheet (FP32 19.5,
TF32 156, BF16/FP16 312 TFLOPS dense); the datasheets' "with sparsity" figures (2:4 structured sparsity) are halved
here."""


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
  for name, peaks in ACCELERATOR_PEAKS.items():
    if name.lower() in device_kind.lower():
      key = "tf32" if dtype == "float32" and tf32 else dtype
      if key not in peaks:
        raise ValueError(f"dtype: no {dtype!r} peak for {device_kind!r}; known: {', '.join(peaks)}")
      return peaks[key]
  raise ValueError(f"device_kind: no datasheet peaks for {device_kind!r}; known: {', '.join(ACCELERATOR_PEAKS)}")


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
