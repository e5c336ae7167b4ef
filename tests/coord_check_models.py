"""The coordinate-check tests shared by the language and vision models of tests/external_models.py."""

import jax

import scaling
import external_models as em

# The slopes are least-squares fits of log2 RMS against log2 width; over 32, 64, 128 (equally spaced in log2) the
# middle width has zero weight (the slope is half the difference of the ends), so 32 and 128 give the same slopes,
# standard errors and verdicts with a third fewer programs to compile.
WIDTHS = (32, 128)
# One block of each model: every kind of layer (its attention or token mixing, its MLP, its norms) is in it, and a
# second block only adds to what is compiled. At depth 1 every μP verdict is still "ok" and under SP six to
# thirteen modules per model still grow, like width^0.5 to width^1.7.
FACTORIES = {
    "gpt2_tied": lambda w: em.Gpt2(w, depth=1),
    "gpt2_untied": lambda w: em.Gpt2(w, depth=1, tied=False),
    "mixer": lambda w: em.Mixer(w, depth=1),
    "vit": lambda w: em.ViT(w, depth=1),
    "nnx_tied": lambda w, rngs: em.NnxLM(w, rngs, depth=1),
}
RESULTS = {}


def check(name):
  """SP and μP coordinate checks of one model (3 Adam steps at lr 0.01, 2 seeds; computed once per process)."""
  if name not in RESULTS:
    _, loss, batch_of, _, _ = em.MODELS[name]
    RESULTS[name] = scaling.coord_check(FACTORIES[name], loss, batch_of(jax.random.key(0), 8), schemes=("sp", "mup"),
                                        widths=WIDTHS, steps=3, learning_rate=1e-2, seeds=(0, 1), progress=False)
  return RESULTS[name]


def verdicts(result, scheme):
  """{module: verdict} of one scheme."""
  return {v["layer"]: v["verdict"] for v in result.verdicts if v["parametrization"] == scheme}


def assert_mup_flat_and_sp_grows(test, name):
  result = check(name)
  mup = [v for v in result.verdicts if v["parametrization"] == "mup"]
  test.assertNotEmpty(mup)
  for v in mup:  # |slope| < 0.1 for growth: no slope above the tolerance at init or after the updates
    test.assertEqual(v["verdict"], "ok", f"{name} mup {v['layer']}: {v}")
  grown = [v["layer"] for v in result.verdicts if v["parametrization"] == "sp" and v["verdict"] != "ok"]
  test.assertGreaterEqual(len(grown), 3, f"{name} sp: only {grown} grow")
  test.assertLessEqual(result.tolerance, 0.1)
