"""Where the time of a compiled function goes: XLA op time from a ``jax.profiler`` trace, grouped by kind.

``profile_ops(compiled, args, calls, trace_dir)`` calls ``compiled(*args)`` ``calls`` times under
``jax.profiler.trace`` (with its Perfetto trace), keeps the trace events named after an instruction of the compiled
HLO (the ops XLA's runtime executed; Python and runtime events are left out) and sums their durations per call:

* per category (``category``): ``matmul`` (dot fusions, including the XNNPACK/YNNPACK and oneDNN library fusions,
  and plain dots), ``layout`` (fusions whose root is a copy or transpose: data moved into another layout), and
  ``other`` (elementwise fusions, reductions, concatenations, ...);
* per source op and category (the ``op_name`` metadata XLA keeps from the JAX program, with block indices folded
  together), the largest ones.

Op times are summed, so ops that ran concurrently on different threads count each; the shares are of that sum.
An op's event spans what its own thread did: XLA's CPU runtime runs a plain ``dot`` (Eigen's) asynchronously, so
its event spans the launch and the product then runs on the intra-op threads beside the ops that follow, whose
events it lengthens. The categories' totals keep that time (the ops beside it are mostly matmuls too), but not
where it belongs: the weight gradients' dots look almost free and the input gradients' products beside them slow.
The wall time of the traced calls (``wall_ms_per_call``) is given beside the op time to compare with.
Control-flow instructions (``while``, ``conditional``, ``call``) are left out: their events span the ops of their
bodies, which are counted themselves (a loop's time would otherwise count twice).
"""

from __future__ import annotations

import collections
import glob
import gzip
import json
import pathlib
import re
import time
from typing import Any, Sequence

import jax

CATEGORIES = ("matmul", "layout", "other")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%([\w.\-]+) = .*?$", re.M)
_OP_NAME = re.compile(r'op_name="([^"]*)"')
_CONTAINER = re.compile(r"[\])}] (?:while|conditional|call)\(")  # the opcode after the result type


def category(name: str) -> str:
  """The category of an HLO instruction from its name (XLA names a fusion after its root op or library)."""
  if any(lib in name for lib in ("ynn_fusion", "xnn_fusion", "onednn")) or name.startswith(("dot", "convolution")):
    return "matmul"
  if name.startswith(("copy", "transpose")):
    return "layout"
  return "other"


def _source_op(line: str) -> str:
  """The JAX source op of one HLO line (``op_name`` without the jit prefix, block indices folded), or ''."""
  match = _OP_NAME.search(line)
  if not match:
    return ""
  name = re.sub(r"^jit\([^)]*\)/", "", match.group(1))
  return re.sub(r"block_\d+", "block_*", name)


def profile_ops(compiled: Any, args: Sequence[Any], calls: int, trace_dir: str | pathlib.Path,
                top: int = 6) -> dict[str, Any]:
  """Op time per call of ``compiled(*args)`` by category and by source op, from a profiler trace.

  Args:
    compiled: a compiled JAX function (``jax.jit(f).lower(*args).compile()``), warmed up.
    args: its arguments (reused every call: do not pass donated buffers).
    calls: calls traced.
    trace_dir: where ``jax.profiler`` writes the trace.
    top: how many of the largest source ops to return.

  Returns:
    {"calls", "op_ms_per_call" (all ops), "wall_ms_per_call" (of the traced calls, tracing included),
    "categories": {category: {"ms_per_call", "share"}},
    "top_ops": [{"op", "category", "ms_per_call", "share"}] largest first}.
  """
  hlo = compiled.as_text()
  source = {m.group(1): _source_op(m.group(0)) for m in _INSTRUCTION.finditer(hlo)
            if not _CONTAINER.search(m.group(0))}
  with jax.profiler.trace(str(trace_dir), create_perfetto_trace=True):
    start = time.perf_counter()
    for _ in range(calls):
      out = compiled(*args)
    jax.block_until_ready(out)
    wall_s = time.perf_counter() - start
  path = sorted(glob.glob(str(pathlib.Path(trace_dir) / "**" / "*perfetto_trace.json.gz"), recursive=True))[-1]
  with gzip.open(path) as f:
    trace = json.load(f)
  events = trace["traceEvents"] if isinstance(trace, dict) else trace
  by_category: collections.Counter = collections.Counter()
  by_op: collections.Counter = collections.Counter()
  for event in events:
    name = event.get("name")
    if event.get("ph") != "X" or name not in source or "dur" not in event:
      continue
    us = float(event["dur"])
    by_category[category(name)] += us
    by_op[(source[name] or name, category(name))] += us
  total = sum(by_category.values())
  per_call = lambda us: us / calls / 1e3
  share = lambda us: us / total if total else 0.0
  return {"calls": calls, "op_ms_per_call": per_call(total), "wall_ms_per_call": wall_s / calls * 1e3,
          "categories": {c: {"ms_per_call": per_call(by_category[c]), "share": share(by_category[c])}
                         for c in CATEGORIES},
          "top_ops": [{"op": op, "category": cat, "ms_per_call": per_call(us), "share": share(us)}
                      for (op, cat), us in by_op.most_common(top)]}
