"""scripts/flax_attention_suite.py on small fake flax source distributions, offline."""

import io
import os
import pathlib
import subprocess
import sys
import tarfile
import tempfile
import textwrap

from absl.testing import absltest
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "flax_attention_suite.py"

# One call of the attention_fn at init and one at apply (linen, each traced once), one call (nnx): 3 calls when it is
# the default.
LINEN_TEST = textwrap.dedent("""\
    import flax.linen as nn
    import jax
    import jax.numpy as jnp


    def test_linen_module():
      layer = nn.MultiHeadDotProductAttention(num_heads=2, qkv_features=8)
      x = jnp.ones((1, 3, 8))
      y = jax.jit(layer.apply)(jax.jit(layer.init)(jax.random.key(0), x), x)  # one program each, not op by op
      assert y.shape == x.shape
    """)
NNX_TEST = textwrap.dedent("""\
    from flax import nnx
    import jax.numpy as jnp


    def test_nnx_module():
      layer = nnx.MultiHeadAttention(num_heads=2, in_features=8, decode=False, rngs=nnx.Rngs(0))
      assert layer(jnp.ones((1, 3, 8))).shape == (1, 3, 8)
    """)
FAILING_TEST = "\n\ndef test_fails():\n  assert 1 == 2\n"
NO_ATTENTION_TEST = "def test_nothing():\n  assert True\n"


def _sdist(folder, files):
  """A flax-0.0.0.tar.gz with ``files`` (path under the top folder: text) and a file the script must leave."""
  path = pathlib.Path(folder) / "flax-0.0.0.tar.gz"
  with tarfile.open(path, "w:gz") as tar:
    for name, text in {**files, "flax/__init__.py": "raise ImportError('not to be imported')\n"}.items():
      data = text.encode()
      info = tarfile.TarInfo(f"flax-0.0.0/{name}")
      info.size = len(data)
      tar.addfile(info, io.BytesIO(data))
  return path


def _run(sdist, *args):
  # The script's pytest run loads only the plugins it names (its own): the installed third-party plugins, which the
  # small tests here do not use, would cost each run more to import than the tests themselves take.
  env = dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
  return subprocess.run([sys.executable, str(SCRIPT), "--sdist", str(sdist), *args], capture_output=True, text=True,
                        timeout=600, check=False, env=env)


@pytest.mark.slow  # the script runs pytest in processes of its own
class SuiteScriptTest(absltest.TestCase):

  def test_extracts_patches_runs_and_reports(self):
    with tempfile.TemporaryDirectory() as tmp:
      files = {"tests/linen/linen_attention_test.py": LINEN_TEST, "tests/nnx/nn/attention_test.py": NNX_TEST}
      work = pathlib.Path(tmp) / "work"
      done = _run(_sdist(tmp, files), "--work_dir", str(work))
      self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
      for name, text in files.items():
        self.assertEqual((work / name).read_text(), text)
      self.assertFalse((work / "flax").exists())
    self.assertIn("2 passed, 0 failed, 0 errors, 0 skipped; the adapter was called 3 times", done.stdout)
    self.assertIn("flax.linen.attention.MultiHeadDotProductAttention", done.stdout)
    self.assertIn("flax.nnx.nn.attention.MultiHeadAttention", done.stdout)

  def test_a_failing_test_exits_1_with_its_count(self):
    with tempfile.TemporaryDirectory() as tmp:
      done = _run(_sdist(tmp, {"tests/linen/linen_attention_test.py": LINEN_TEST + FAILING_TEST,
                               "tests/nnx/nn/attention_test.py": NNX_TEST}))
    self.assertEqual(done.returncode, 1, done.stdout + done.stderr)
    self.assertIn("2 passed, 1 failed, 0 errors, 0 skipped; the adapter was called 3 times", done.stdout)

  def test_no_call_of_the_adapter_exits_1(self):
    with tempfile.TemporaryDirectory() as tmp:
      done = _run(_sdist(tmp, {"tests/linen/linen_attention_test.py": NO_ATTENTION_TEST,
                               "tests/nnx/nn/attention_test.py": NO_ATTENTION_TEST}))
    self.assertEqual(done.returncode, 1, done.stdout + done.stderr)
    self.assertIn("2 passed, 0 failed", done.stdout)
    self.assertIn("the adapter was never called", done.stderr)

  def test_missing_test_file_exits_2(self):
    with tempfile.TemporaryDirectory() as tmp:
      done = _run(_sdist(tmp, {"tests/linen/linen_attention_test.py": LINEN_TEST}))
      self.assertEqual(done.returncode, 2, done.stdout + done.stderr)
      self.assertIn("flax-0.0.0.tar.gz has no tests/nnx/nn/attention_test.py", done.stderr)
      done = _run(pathlib.Path(tmp) / "absent.tar.gz")
    self.assertEqual(done.returncode, 2, done.stdout + done.stderr)
    self.assertIn("cannot read", done.stderr)


if __name__ == "__main__":
  absltest.main()
