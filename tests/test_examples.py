"""The examples of docs/your_model.md, each run at a tiny size: roles inferred, parametrized, coordinate-checked
and transferred, with their figures and tables written."""

import contextlib
import io
import pathlib

from absl.testing import absltest
import pytest
from absl.testing import parameterized

from examples import linen_mlp
from examples import linen_transformer
from examples import nnx_mlp
from examples import nnx_transformer

ROOT = pathlib.Path(__file__).resolve().parents[1]
TEXT = "".join(f"line {i}: to be, or not to be, that is the question.\n" for i in range(40))
# One parametrization each (SP and μP are compared in tests/test_user_coord_check.py), two widths, few steps; the
# transfer of the linen MLP only (the grid itself is tested there too).
TINY = ["--widths=16,32", "--transfer_widths=16,32", "--base_width=16", "--seeds=1", "--coord_seeds=1", "--coord_steps=1", "--batch_size=2"]
TINY_LM = ["--seq_len=8", "--depth=1", "--num_heads=2"]
# name -> (module, extra options, modules of the model that the coordinate check records)
EXAMPLES = {
    "linen_mlp": (linen_mlp, ["--parametrizations=mup", "--transfer_steps=2", "--log2_lrs=-8,-6"],
                  {"dense_0", "dense_1", "dense_2", "readout", "model"}),
    "nnx_mlp": (nnx_mlp, ["--parametrizations=sp", "--transfer_steps=0"],
                {"layers/0", "layers/1", "layers/2", "readout", "model"}),
    "linen_transformer": (linen_transformer, ["--parametrizations=mup", "--transfer_steps=0",
                                              *TINY_LM],
                          {"embed", "pos", "block_0/attn/query", "block_0/attn/out", "block_0/mlp_out", "readout"}),
    "nnx_transformer": (nnx_transformer, ["--parametrizations=sp", "--transfer_steps=0", *TINY_LM],
                        {"embed", "pos", "blocks/0/attn/query", "blocks/0/attn/out", "blocks/0/mlp_out",
                         "readout"}),
}


@pytest.mark.slow  # each example, a whole study, as a user runs it
class ExamplesTest(parameterized.TestCase):

  @parameterized.parameters(*EXAMPLES)
  def test_example_runs(self, name):
    module, extra, modules = EXAMPLES[name]
    out = pathlib.Path(self.create_tempdir().full_path)
    argv = [f"--out_dir={out}", *TINY, *extra]
    if "transformer" in name:
      text = out / "text.txt"
      text.write_text(TEXT)
      argv.append(f"--text_file={text}")
    result = module.main(argv)
    check = result["coord_check"]
    scheme = next(a.split("=")[1] for a in argv if a.startswith("--parametrizations"))
    self.assertEqual({v["parametrization"] for v in check.verdicts}, {scheme})
    self.assertContainsSubset(modules, {v["layer"] for v in check.verdicts})
    written = {p.name for p in out.iterdir()}
    self.assertContainsSubset({"coord_check.png", "coord_check_delta.png", "coord_check.md"}, written)
    self.assertIn("| module | role |", (out / "coord_check.md").read_text())
    if "--transfer_steps=0" in extra:
      self.assertIsNone(result["transfer"])
    else:
      widths = {o["width"] for o in result["transfer"].optimum}
      self.assertEqual(widths, {16, 32})
      self.assertIn("within 1 octave", (out / "transfer.md").read_text())



class BadInputTest(absltest.TestCase):

  def test_a_library_config_error_is_one_line_and_exit_2(self):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
      with self.assertRaises(SystemExit) as ctx:
        linen_mlp.main(["--widths=0", "--out_dir", self.create_tempdir().full_path])
    self.assertEqual(ctx.exception.code, 2)
    self.assertEqual(err.getvalue().splitlines(), ["error: widths must be positive ints, got (0,)"])

if __name__ == "__main__":
  absltest.main()
