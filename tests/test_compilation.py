"""scaling.base.compilation.jit: jax.jit at XLA's backend optimization level chosen for a CPU (the environment's
XLA_FLAGS first), usable inside other traces; the same values as jax.jit and a numpy reference."""

import os
from unittest import mock

import chex
import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest

from scaling.base import compilation

# The test process sets the level in XLA_FLAGS (conftest); these are the environments without it and with level 2.
WITHOUT_LEVEL = {"XLA_FLAGS": " ".join(f for f in os.environ.get("XLA_FLAGS", "").split()
                                       if compilation.LEVEL_FLAG not in f)}
WITH_LEVEL = {"XLA_FLAGS": f"{WITHOUT_LEVEL['XLA_FLAGS']} --{compilation.LEVEL_FLAG}=2".strip()}


def scaled_softmax(x, scale):
  return jax.nn.softmax(scale * x, axis=-1)


def numpy_softmax(x, scale):
  z = scale * np.asarray(x, np.float64)
  e = np.exp(z - z.max(axis=-1, keepdims=True))
  return e / e.sum(axis=-1, keepdims=True)


X = np.random.default_rng(0).standard_normal((4, 8, 33), dtype=np.float32)


class CompilerOptionsTest(absltest.TestCase):

  def test_cpu_level_unless_the_environment_sets_one(self):
    self.assertEqual(jax.default_backend(), "cpu")
    with mock.patch.dict(os.environ, WITHOUT_LEVEL):
      self.assertEqual(compilation.compiler_options(),
                       {"xla_backend_optimization_level": compilation.CPU_BACKEND_OPTIMIZATION_LEVEL})
    with mock.patch.dict(os.environ, WITH_LEVEL):
      self.assertEqual(compilation.compiler_options(), {"xla_backend_optimization_level": 2})

  def test_other_backends_get_jax_jit(self):
    with mock.patch.object(jax, "default_backend", lambda: "gpu"):
      self.assertIsNone(compilation.compiler_options())
      self.assertNotIsInstance(compilation.jit(scaled_softmax), compilation.Jitted)

  def test_the_options_reach_jax_jit_at_the_top_level_only(self):
    with mock.patch.dict(os.environ, WITHOUT_LEVEL), mock.patch.object(jax, "jit", wraps=jax.jit) as jit:
      compilation.jit(scaled_softmax, static_argnums=1)
    self.assertCountEqual([c.kwargs for c in jit.call_args_list],
                          [{"compiler_options": {"xla_backend_optimization_level": 1}, "static_argnums": 1},
                           {"static_argnums": 1}])

  def test_compiler_options_are_refused(self):
    with self.assertRaisesRegex(TypeError, "compiler_options"):
      compilation.jit(scaled_softmax, compiler_options={})


class ValuesTest(chex.TestCase):

  def test_top_level_call_and_lower(self):
    for env in (WITHOUT_LEVEL, WITH_LEVEL):
      with mock.patch.dict(os.environ, env):
        ours = compilation.jit(scaled_softmax, static_argnums=1)
        got = ours(X, 3.0)
        compiled = ours.lower(X, 3.0).compile()  # ahead of time, as jax.jit's
      chex.assert_trees_all_close(got, numpy_softmax(X, 3.0), rtol=1e-5, atol=1e-7)
      chex.assert_trees_all_close(got, jax.jit(scaled_softmax, static_argnums=1)(X, 3.0), rtol=1e-6)
      chex.assert_trees_all_equal(compiled(X), got)

  def test_one_program_per_shape(self):
    with mock.patch.dict(os.environ, WITHOUT_LEVEL):
      ours = compilation.jit(scaled_softmax, static_argnums=1)
    ours(X, 1.0)
    ours(X + 1.0, 1.0)
    self.assertEqual(ours._cache_size(), 1)  # pylint: disable=protected-access
    ours(X[:2], 1.0)
    self.assertEqual(ours._cache_size(), 2)  # pylint: disable=protected-access
    ours.clear_cache()
    self.assertEqual(ours._cache_size(), 0)  # pylint: disable=protected-access

  def test_inside_other_traces(self):
    # XLA refuses compiler options on a jit staged into another program: inside jit, eval_shape, vmap and scan the
    # function runs as a plain jit, part of the outer program.
    with mock.patch.dict(os.environ, WITHOUT_LEVEL):
      ours = compilation.jit(scaled_softmax, static_argnums=1)
    expected = numpy_softmax(X, 2.0)
    chex.assert_trees_all_close(jax.jit(lambda x: ours(x, 2.0) + 0.0)(X), expected, rtol=1e-5, atol=1e-7)
    chex.assert_trees_all_close(jax.vmap(lambda x: ours(x, 2.0))(X), expected, rtol=1e-5, atol=1e-7)
    _, scanned = jax.lax.scan(lambda c, x: (c, ours(x, 2.0)), 0.0, X)
    chex.assert_trees_all_close(scanned, expected, rtol=1e-5, atol=1e-7)
    shape = jax.eval_shape(lambda x: ours(x, 2.0), jax.ShapeDtypeStruct(X.shape, X.dtype))
    self.assertEqual((shape.shape, shape.dtype), (X.shape, X.dtype))
    grads = jax.grad(lambda x: ours(x, 2.0)[..., 0].sum())(X)
    chex.assert_tree_all_finite(grads)


if __name__ == "__main__":
  absltest.main()
