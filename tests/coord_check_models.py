"""The coordinate-check tests shared by the language and vision models of tests/external_models.py."""

import jax

import scaling
import external_models as em

WIDTHS = (32, 64, 128)
RESULTS = {}


def check(name):
  """SP and μP coordinate checks of one model (3 Adam steps at lr 0.01, 2 seeds; computed once per process)."""
  if name not in RESULTS:
    factory, loss, batch_of, _, _ = em.MODELS[name]
    RESULTS[name] = scaling.coord_check(factory, loss, batch_of(jax.random.key(0), 8), schemes=("sp", "mup"),
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
