"""Test configuration: CPU only, headless plotting, bounded hypothesis runs, and what keeps the two test workers fast
(XLA's compile flags, programs dropped between files, fewer full garbage collections)."""

import atexit
import gc
import os
import shutil
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("MPLBACKEND", "Agg")
# The tests compile hundreds of small programs (every eager op is one), and on CPU compilation dominates their
# time. XLA's backend optimization level 0 halves it, and the older CPU emitters (no fusion emitters) compile each
# small program in about two thirds of the time (test_model.py with test_unit_scaling.py: 205 -> 145 s). Every
# numerical check compares against an independent reference with a tolerance (or two runs of the same program),
# so the generated code's speed does not matter here. Each of the two test workers has one core: one LLVM module per
# program (no parallel code generation) and Eigen on the calling thread save a further tenth of the CPU
# (test_unit_scaling.py with test_attention.py: 85 -> 74 s of user time). A caller's own XLA_FLAGS keep precedence
# (subprocesses inherit these).
for _flag, _value in (("xla_backend_optimization_level", "0"), ("xla_cpu_use_fusion_emitters", "false"),
                      ("xla_cpu_parallel_codegen_split_count", "1"), ("xla_cpu_multi_thread_eigen", "false")):
  if _flag not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --{_flag}={_value}".strip()
# Entry points keep JAX's persistent compilation cache under $XDG_CACHE_HOME: a fresh folder per test process,
# removed at exit, so tests neither read nor fill the user's cache (subprocesses inherit it).
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="scaling-test-cache-")
atexit.register(shutil.rmtree, os.environ["XDG_CACHE_HOME"], ignore_errors=True)

# Python's full garbage collections (by default every tenth collection of the middle generation) scan every object a
# test worker holds (JAX, Flax, the tests' models and traced functions). In the default group they took 13-16 s per
# worker (53-62 of them, with the programs dropped between files as below); every hundredth instead, 10-13 of them
# took 3 s, and the whole run 280 s against 291 s. The young generations keep Python's defaults.
_young, _middle, _ = gc.get_threshold()
gc.set_threshold(_young, _middle, 100)

from hypothesis import settings  # noqa: E402

settings.register_profile("ci", max_examples=20, deadline=None, derandomize=True)
settings.load_profile("ci")

from absl import flags  # noqa: E402

# absltest's create_tempdir reads absl's own flags; under pytest nobody parses argv.
if not flags.FLAGS.is_parsed():
  flags.FLAGS.mark_as_parsed()


def pytest_runtest_teardown(item, nextitem):
  """JAX's compiled programs are dropped when a worker moves on to the next file.

  A file's tests share their programs (module-scope fixtures, one tiny model per file); programs compiled for an
  earlier file are seldom those of the next, yet each one kept alive holds its executable and traced functions.
  Keeping them all, the default group took 316-320 s of wall time and 54-59 s of system time on two cores; dropping
  them at each file's end, 291 s and 30 s on the same machine.
  """
  if nextitem is None or nextitem.path != item.path:
    import jax  # pylint: disable=import-outside-toplevel  # after the XLA_FLAGS above
    jax.clear_caches()
