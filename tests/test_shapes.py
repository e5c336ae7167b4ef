"""Tests for scaling.mup.shapes: the names along a parameter's path and the fans of a parameter by its kind."""

from absl.testing import absltest
from absl.testing import parameterized
import jax

from scaling.mup import shapes as shapes_lib


class PathNamesTest(absltest.TestCase):

  def test_jax_key_paths(self):
    tree = {"block_0": {"attn": {"query": {"kernel": 1}, "key_gain": 2}}, "ln_final": {"scale": 3}, "list": [4, 5]}
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    self.assertEqual([shapes_lib.path_names(path) for path, _ in leaves], [
        ("block_0", "attn", "key_gain"),
        ("block_0", "attn", "query", "kernel"),
        ("list", "0"),
        ("list", "1"),
        ("ln_final", "scale"),
    ])

  def test_strings_and_attribute_keys(self):
    self.assertEqual(shapes_lib.path_names(["params", "readout", "kernel"]), ("params", "readout", "kernel"))
    self.assertEqual(shapes_lib.path_names([jax.tree_util.GetAttrKey("mu"), jax.tree_util.SequenceKey(2)]), ("mu", "2"))


class FansTest(parameterized.TestCase):

  @parameterized.parameters(
      ("embedding", (100, 32), (100, 32)),
      ("hidden", (32, 128), (32, 128)),
      ("hidden", (128, 32), (128, 32)),
      ("attn_q", (32, 64), (32, 64)),
      ("attn_k", (32, 4, 8), (32, 32)),
      ("attn_v", (32, 16), (32, 16)),
      ("attn_o", (64, 32), (64, 32)),
      ("attn_o", (4, 16, 32), (64, 32)),
      ("readout", (32, 100), (32, 100)),
      ("bias", (128,), (1, 128)),
      ("bias", (4, 16), (1, 64)),
      ("norm", (32,), (1, 32)),
      ("norm", (), (1, 1)),
      ("fixed", (10,), (1, 10)),
      ("fixed", (7, 3), (7, 3)),
      ("input", (5, 64), (5, 64)),
  )
  def test_fans(self, kind, shape, want):
    self.assertEqual(shapes_lib.fans(kind, shape), want)

  @parameterized.parameters(
      ("hidden", (3, 3, 16, 32), 3, (144, 32)),  # Conv [kh, kw, in, out]
      ("attn_q", (32, 4, 8), 1, (32, 32)),  # DenseGeneral [D, N, H]
      ("hidden", (4, 8, 32), 2, (32, 32)),  # DenseGeneral [N, H, D]
      ("readout", (8, 2, 5), 2, (16, 5)),
  )
  def test_fans_with_in_axes(self, kind, shape, in_axes, want):
    self.assertEqual(shapes_lib.fans(kind, shape, in_axes), want)

  @parameterized.parameters((0, r"an integer in \[1, 2\]"), (3, r"an integer in \[1, 2\]"),
                            (True, "an int or a sequence"), (1.5, "an int or a sequence"), ((), "name between 1 and 2"),
                            ((0, 1, 2), "name between 1 and 2"), ((3,), "name between 1 and 2"))
  def test_bad_in_axes(self, in_axes, message):
    with self.assertRaisesRegex(ValueError, "in_axes must (be )?" + message):
      shapes_lib.fans("hidden", (4, 8, 32), in_axes)

  def test_input_axes_anywhere(self):
    # A kernel stored [out, in] (Conv1D-style) has its input on axis 1; a DenseGeneral [N, H, D] on (0, 1).
    self.assertEqual(shapes_lib.fans("hidden", (48, 16), (1,)), (16, 48))
    self.assertEqual(shapes_lib.fans("attn_o", (4, 8, 32), (0, 1)), (32, 32))
    self.assertEqual(shapes_lib.fans("input", (3, 3, 5, 32), (0, 1, 2)), (45, 32))

  @parameterized.parameters(
      ("embedding", (100,), "embedding parameter must be"),
      ("embedding", (2, 3, 4), "embedding parameter must be"),
      ("hidden", (32,), "at least 2 axes"),
      ("readout", (0, 10), "empty or negative axis"),
      ("bias", (0,), "empty or negative axis"),
      ("conv", (3, 3), "unknown layer kind"),
      ("hidden", (2.5, 3), "sequence of integers"),
  )
  def test_bad(self, kind, shape, message):
    with self.assertRaisesRegex(ValueError, message):
      shapes_lib.fans(kind, shape)


if __name__ == "__main__":
  absltest.main()
