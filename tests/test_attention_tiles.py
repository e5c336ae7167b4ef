"""scripts/attention_tiles.py on a tiny case: its table agrees with the measurements it saved."""

import json
import pathlib

from absl.testing import absltest

import experiment_main
from scaling.attention import dispatch as attention
from scaling.attention import logits as logits_lib
from scaling.attention import autotune


def _script():
  return experiment_main.load_script("attention_tiles")


class AttentionTilesTest(absltest.TestCase):

  def test_tiny_case_table_matches_its_measurements(self):
    script = _script()
    out = pathlib.Path(self.create_tempdir().full_path) / "runs" / "tiles.md"  # runs/ made by the script
    status = script.main(["attention_tiles", f"--out={out}", "--cases=1x256x2x1x256", "--masks=causal",
                          "--head_dim=8", "--tiles=64x128", "--repeats=1"])
    self.assertEqual(status, 0)
    rows = json.loads(out.with_suffix(".json").read_text())["rows"]
    self.assertEqual([r["mode"] for r in rows], ["fwd+bwd", "fwd"])
    opts = logits_lib.resolve_logit_options(8, scale=None, rule=None, logit_soft_cap=None, logit_clamp=None,
                                            float32_softmax=True, subtract_max=True)
    choice = attention.select_implementation((1, 256, 2, 8), (1, 256, 1, 8), opts, is_causal=True)
    # what the default runs in each pass, timed though not among --tiles
    default = {"fwd+bwd": autotune.choice_name(choice), "fwd": autotune.choice_name(choice.forward or choice)}
    names = list(dict.fromkeys(["dense", "blockwise 64x128", *(f"blockwise {q}x{k}"
                                                               for q, k in attention.fixed_tiles(choice))]))
    for row in rows:
      self.assertEqual(set(row["ms"]), set(names))
      self.assertEqual(row["default"], default[row["mode"]])
      self.assertTrue(all(ms > 0 for ms in row["ms"].values()))
    text = out.read_text()
    for row in rows:
      fastest = min(row["ms"], key=row["ms"].get)
      ratios = {name: ms / row["ms"][fastest] for name, ms in row["ms"].items()}
      cells = [f"{ratios[n]:.2f}" for n in names]
      self.assertIn(f"| 1x256x2x1x256 | causal | {row['mode']} | {' | '.join(cells)} | "
                    f"{row['default'].replace('blockwise ', '')} ({ratios[row['default']]:.2f}) |", text)
    within = sum(r["ms"][r["default"]] / min(r["ms"].values()) <= 1.1 for r in rows)
    self.assertIn(f"the default within 1.1x of the fastest path: {within} of 2 rows", text)

  def test_bad_case_is_refused_in_one_line(self):
    script = _script()
    out = pathlib.Path(self.create_tempdir().full_path) / "tiles.md"
    self.assertEqual(script.main(["attention_tiles", f"--out={out}", "--cases=1x256x3x2x256"]), 2)
    self.assertFalse(out.exists())


if __name__ == "__main__":
  absltest.main()
