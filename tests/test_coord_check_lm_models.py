"""μP's coordinate check on language models written elsewhere (GPT-2 tied and untied, an nnx model with a tied
table): flat under μP, growing under SP, and the tied model's verdicts those of its untied twin."""

from absl.testing import absltest
from absl.testing import parameterized

import coord_check_models as ccm
from scaling.studies.coord_check.verdicts import BREAKS


class LanguageModelsTest(parameterized.TestCase):

  @parameterized.parameters("gpt2_tied", "gpt2_untied", "nnx_tied")
  def test_mup_flat_sp_grows(self, name):
    ccm.assert_mup_flat_and_sp_grows(self, name)

  def test_tied_and_untied_twins_agree(self):
    tied, untied = ccm.check("gpt2_tied"), ccm.check("gpt2_untied")
    for scheme in ("sp", "mup"):
      a, b = ccm.verdicts(tied, scheme), ccm.verdicts(untied, scheme)
      # No module of the blocks breaks μP in one twin and is within the tolerance in the other (the readout's own
      # modules differ: wte, lm_head); "inconclusive" (within two standard errors of the tolerance) is neither.
      common = [m for m in a if m in b and m.startswith("h_")]
      self.assertLen(common, 7)  # the block and its six modules (ln_1, c_attn, c_proj, ln_2, c_fc, mlp_c_proj)
      clash = {m: (a[m], b[m]) for m in common if {a[m], b[m]} == {"ok", BREAKS}}
      self.assertEmpty(clash, scheme)


if __name__ == "__main__":
  absltest.main()
