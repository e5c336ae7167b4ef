"""Memory checked before work: what an experiment's configuration needs, against what is available.

Each estimate is a sum of named parts (``Part``), each sized by a few options:
attention logits (a T × S float32 matrix per head and sequence; dense
attention materializes it, blockwise attention only one block of key columns
per query row, so T × block), parameters, optimizer state, gradients,
activations and readout logits, times the members a program vmaps (seeds,
rules, learning rates). Parts of one compiled program are live together;
programs run one after another (head dims of a sweep, widths of a width study)
take the largest. The constants (``DENSE_TRAIN_COPIES`` and the like) count
the T × S (or B × T × D) float32 arrays a program keeps live at once, from
what the program computes (logits, weights, their gradients, the metrics'
intermediates); ``tests/test_resources.py`` checks the sizes against the real
arrays and the totals against XLA's own buffer plan.

``check`` compares an estimate with the memory available (the accelerator's
``bytes_limit`` less what is in use when JAX runs on one, else the host's
MemAvailable) and raises ``ResourceError``, one line naming the options that
size the largest part, the estimate and what is available, and what to change.

The sweep's programs are estimated beside the sweep (``scaling.studies.sweep_memory``) from the sizes here; the time
of a run on an accelerator is ``scaling.studies.device_time``'s.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from typing import Any, Iterable, Mapping, Sequence

from scaling.base.validation import ConfigError

F32 = 4  # bytes of a float32 (parameters, optimizer state and attention logits are float32)

BLOCKWISE_COPIES = 5
"""T × block float32 arrays live per head and sequence in blockwise attention (a tile, its weights, their
gradients, and the per-block residuals of the scan)."""
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
  """Parameters of ``scaling.training.model.transformer.Transformer(model_config)`` in closed form (no initialization).

  Args:
    model_config: a ``scaling.training.model.config.ModelConfig``.

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


def training_program(model_config: Any, *, optimizer: str, momentum: float = 0.0, batch_size: int, seq_len: int,
                     members: int = 1, state_copies: int = 2, member_flags: Sequence[str] = ()) -> Estimate:
  """One compiled training step of ``members`` vmapped models (and the state kept between steps).

  Args:
    model_config: a ``scaling.training.model.config.ModelConfig``.
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
