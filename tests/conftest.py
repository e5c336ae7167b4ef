"""Test configuration: CPU only, headless plotting, bounded hypothesis runs, one flag namespace per experiment."""

import importlib
import os
import types

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("MPLBACKEND", "Agg")

from absl import flags  # noqa: E402
from hypothesis import settings  # noqa: E402
import pytest  # noqa: E402

settings.register_profile("ci", max_examples=20, deadline=None, derandomize=True)
settings.load_profile("ci")

FLAGS = flags.FLAGS

# absltest helpers (create_tempdir) and experiment mains read flags; under pytest nobody parses argv.
if not FLAGS.is_parsed():
  FLAGS.mark_as_parsed()

# Each experiment is its own program with its own flags (several define --out_dir, --seed, ...), so in one
# test process their flags would collide. Import every experiment once here, keep its Flag objects aside,
# and install only the flags of the experiment a test module imports while its tests run.
EXPERIMENTS = ("experiments.sweep", "experiments.train", "experiments.coord_check", "experiments.transfer",
               "experiments.claims", "experiments.benchmark", "experiments.attention_memory")
_EXPERIMENT_FLAGS: dict[str, list] = {}


def _uninstall(name: str) -> None:
  for flag in _EXPERIMENT_FLAGS[name]:
    if flag.name in FLAGS and FLAGS[flag.name] is flag:
      delattr(FLAGS, flag.name)


def _install(name: str) -> None:
  for flag in _EXPERIMENT_FLAGS[name]:
    FLAGS[flag.name] = flag
    FLAGS.register_flag_by_module(name, flag)


for _name in EXPERIMENTS:
  importlib.import_module(_name)
  _EXPERIMENT_FLAGS[_name] = list(FLAGS.get_flags_for_module(_name))
  _uninstall(_name)


@pytest.fixture(autouse=True)
def _experiment_flags(request):
  """Installs the flags of the experiment module that the running test's module imported."""
  used = {v.__name__ for v in vars(request.module).values()
          if isinstance(v, types.ModuleType) and v.__name__ in _EXPERIMENT_FLAGS}
  if len(used) > 1:
    raise RuntimeError(f"{request.module.__name__} imports several experiments ({sorted(used)}); "
                       "test one experiment per file")
  for name in used:
    _install(name)
  yield
  for name in used:
    _uninstall(name)
