"""``init_params`` draws the numbers of Flax's own ``Module.init`` in one draw per shape: bit for bit op by op, within
one unit in the last place compiled.

The reference is Flax: ``Transformer(config).init`` (one key and one draw per parameter, the keys Flax derives from
the module paths) and Flax's ``LazyRng`` for the keys themselves, on our model and on a module written as Flax's own
examples write them (``nn.Dense`` inside ``nn.Module``s).
"""

import os
import subprocess
import sys

from absl.testing import absltest
from absl.testing import parameterized
import flax.linen as nn
from flax.core import scope as flax_scope
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from scaling.attention import rules as rules_lib
from scaling.mup import layers
from scaling.mup import schemes as P
from scaling.training.model import param_draws
from scaling.training.model import scanned_blocks
from scaling.training.model import transformer as model_lib
from scaling.training.model.config import ModelConfig


def _flax_init(rng, cfg):
  tokens = jnp.zeros((1, min(cfg.max_len, 8)), jnp.int32)
  return layers.unbox(model_lib.Transformer(cfg).init(rng, tokens)["params"])


def _assert_same_numbers(test, got, want, max_ulp=0):
  """Same tree, shapes and dtypes; values equal, or within ``max_ulp`` units in the last place."""
  test.assertEqual(jax.tree.structure(got), jax.tree.structure(want))
  for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(got), jax.tree.leaves(want)):
    test.assertEqual((a.shape, a.dtype), (b.shape, b.dtype), path)
    if max_ulp:
      np.testing.assert_array_max_ulp(np.asarray(a), np.asarray(b), maxulp=max_ulp)
    else:
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=str(path))


# Under the tests' XLA flags (tests/conftest.py: no optimization, the older CPU emitters) XLA compiles our vmapped
# draws and Flax's one-by-one draws into loops whose float32 rounding differs by a few units in the last place (as
# Flax's compiled init differs from its op-by-op one); op by op the numbers are identical, and compiled with XLA's
# default flags too (CompiledDefaultFlagsTest, in a process of its own).
COMPILED_ULP = 4


CONFIGS = (
    dict(depth=1),
    dict(depth=3, parametrization=P.get_parametrization("mup", base_width=32)),
    dict(depth=4, parametrization=P.get_parametrization("umup")),
    dict(depth=2, use_bias=True, num_kv_heads=2, norm="rms"),
    dict(depth=3, pre_ln=False, positions="learned"),
    dict(depth=2, rule=rules_lib.get_rule("qk_norm")),
    dict(depth=3, parametrization=P.get_parametrization("sp", depth_alpha=1.0), scan_layers=False),
)


class FlaxInitTest(parameterized.TestCase):

  @parameterized.parameters(*CONFIGS)
  def test_same_numbers_as_flax_init(self, **kw):
    # Op by op: identical.
    cfg = ModelConfig(vocab_size=37, width=32, num_heads=4, head_dim=8, max_len=16, **kw)
    rng = jax.random.PRNGKey(11)
    want = _flax_init(rng, cfg)
    _assert_same_numbers(self, model_lib.init_params(rng, cfg), want)
    _assert_same_numbers(self, model_lib.init_params(rng, cfg, stacked=True),
                         scanned_blocks.stack_blocks(want, cfg.depth))

  @parameterized.parameters(*CONFIGS[1:3])
  def test_compiled(self, **kw):
    cfg = ModelConfig(vocab_size=37, width=32, num_heads=4, head_dim=8, max_len=16, **kw)
    rng = jax.random.PRNGKey(11)
    want = jax.jit(lambda r: _flax_init(r, cfg))(rng)
    for stacked in (False, True):
      got = jax.jit(lambda r, stacked=stacked: model_lib.init_params(r, cfg, stacked=stacked))(rng)
      _assert_same_numbers(self, got, scanned_blocks.stack_blocks(want, cfg.depth) if stacked else want,
                           COMPILED_ULP)

  def test_under_vmap_over_seeds(self):
    # A grid draws its members' parameters vmapped over their seeds' keys.
    cfg = ModelConfig(vocab_size=37, width=32, depth=2, num_heads=4, head_dim=8, max_len=16)
    rngs = jax.vmap(jax.random.PRNGKey)(jnp.arange(3))
    got = jax.jit(jax.vmap(lambda r: model_lib.init_params(r, cfg, stacked=True)))(rngs)
    flax_init = jax.jit(lambda r: _flax_init(r, cfg))
    for i in range(3):
      _assert_same_numbers(self, jax.tree.map(lambda a, i=i: a[i], got),
                           scanned_blocks.stack_blocks(flax_init(rngs[i]), cfg.depth), COMPILED_ULP)

  def test_typed_keys(self):
    cfg = ModelConfig(vocab_size=37, width=32, depth=2, num_heads=4, head_dim=8, max_len=16)
    rng = jax.random.key(4)
    _assert_same_numbers(self, model_lib.init_params(rng, cfg), _flax_init(rng, cfg))

  def test_program_does_not_grow_with_depth(self):
    # One fold_in and one draw per shape: the stacked init of depth 12 has as many random ops as that of depth 2
    # (Flax's init has two per parameter).
    def draws(depth, fn):
      cfg = ModelConfig(vocab_size=37, width=32, depth=depth, num_heads=4, head_dim=8, max_len=16)
      jaxpr = str(jax.make_jaxpr(lambda r: fn(r, cfg))(jax.random.PRNGKey(0)))
      return jaxpr.count("random_bits") + jaxpr.count("random_fold_in")
    ours = lambda r, cfg: model_lib.init_params(r, cfg, stacked=True)
    self.assertEqual(draws(12, ours), draws(2, ours))
    self.assertGreater(draws(12, _flax_init), 5 * draws(2, ours))


class KeyHashTest(parameterized.TestCase):

  @parameterized.parameters(((), 1), (("block_0", "attn", "query"), 1), (("embed",), 2), (("a" * 300,), 70000))
  def test_fold_in_of_the_hash_is_flax_lazy_rng(self, scope, count):
    rng = jax.random.PRNGKey(3)
    want = flax_scope.LazyRng.create(rng, *scope, count).as_jax_rng()
    got = jax.random.fold_in(rng, jnp.uint32(param_draws.flax_key_hash(scope, count)))
    np.testing.assert_array_equal(got, want)

  def test_keys_flax_gives_a_module_written_with_nn_dense(self):
    # Each parameter's value is its own key, so the test reads the keys Flax handed out.
    key_init = lambda key, shape, dtype=jnp.float32: jnp.broadcast_to(
        jax.random.key_data(key).astype(jnp.float32)[:1], shape)

    class Inner(nn.Module):
      @nn.compact
      def __call__(self, x):
        return nn.Dense(3, kernel_init=key_init, bias_init=key_init, name="proj")(x)

    class Outer(nn.Module):
      @nn.compact
      def __call__(self, x):
        return Inner(name="inner")(nn.Dense(4, kernel_init=key_init, name="first")(x))

    rng = jax.random.PRNGKey(9)
    params = Outer().init(rng, jnp.zeros((1, 2)))["params"]
    for path, count in ((("first",), 1), (("inner", "proj"), 1), (("inner", "proj"), 2)):
      leaf = params
      for name in path:
        leaf = leaf[name]
      leaf = leaf["kernel" if count == 1 else "bias"]
      key = jax.random.fold_in(rng, jnp.uint32(param_draws.flax_key_hash(path, count)))
      self.assertEqual(float(leaf.reshape(-1)[0]), float(jax.random.key_data(key).astype(jnp.float32)[0]))


_DEFAULT_FLAGS_SCRIPT = """
import jax, numpy as np
from scaling.mup import schemes as P
from scaling.training.model import transformer as T
from scaling.training.model.config import ModelConfig
from scaling.mup import layers
import jax.numpy as jnp
for kw in (dict(depth=3), dict(depth=2, use_bias=True, parametrization=P.get_parametrization("umup"))):
  cfg = ModelConfig(vocab_size=37, width=32, num_heads=4, head_dim=8, max_len=16, **kw)
  flax_init = jax.jit(lambda r: layers.unbox(T.Transformer(cfg).init(r, jnp.zeros((1, 8), jnp.int32))["params"]))
  ours = jax.jit(lambda r: T.init_params(r, cfg))
  for a, b in zip(jax.tree.leaves(flax_init(jax.random.PRNGKey(11))), jax.tree.leaves(ours(jax.random.PRNGKey(11)))):
    np.testing.assert_array_equal(a, b)
print("identical")
"""


@pytest.mark.slow  # a process of its own, with XLA's default flags
class CompiledDefaultFlagsTest(absltest.TestCase):

  def test_compiled_numbers_are_identical_with_default_flags(self):
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    done = subprocess.run([sys.executable, "-c", _DEFAULT_FLAGS_SCRIPT], capture_output=True, text=True, env=env)
    self.assertEqual(done.returncode, 0, done.stderr[-3000:])
    self.assertIn("identical", done.stdout)


if __name__ == "__main__":
  absltest.main()
