"""``python -m experiments.claims`` with one more mode, "test": the tiny training sizes the unit tests use.

  python tests/claims_job.py --mode=test --ids=... --out_dir=...

The random-input sizes of "test" are small too; the training claims read theirs from
``scaling.studies.claims.training.sizes.SIZES["test"]``. Used by test_claims_kill.py in subprocesses.
"""

import sys

from scaling.studies.claims import context as claims_context

claims_context.MODES["test"] = {"d_k": (64, 128), "seq_len": 8, "num_seeds": 2, "widths": (16,)}

from experiments import claims  # noqa: E402  pylint: disable=g-import-not-at-top  (after the mode is added)

if __name__ == "__main__":
  sys.exit(claims.main(["claims", *sys.argv[1:]]))
