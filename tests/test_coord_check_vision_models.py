"""μP's coordinate check on vision models written elsewhere (MLP-Mixer with a Conv stem and fixed token-mixing
MLPs; ViT with a Conv patch embedding, a class token and learned positions): flat under μP, growing under SP."""

from absl.testing import absltest
from absl.testing import parameterized

import coord_check_models as ccm


class VisionModelsTest(parameterized.TestCase):

  @parameterized.parameters("mixer", "vit")
  def test_mup_flat_sp_grows(self, name):
    ccm.assert_mup_flat_and_sp_grows(self, name)


if __name__ == "__main__":
  absltest.main()
