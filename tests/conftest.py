"""Test configuration: CPU only, headless plotting, bounded hypothesis runs."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("MPLBACKEND", "Agg")

from hypothesis import settings  # noqa: E402

settings.register_profile("ci", max_examples=20, deadline=None, derandomize=True)
settings.load_profile("ci")

from absl import flags  # noqa: E402

# absltest's create_tempdir reads absl's own flags; under pytest nobody parses argv.
if not flags.FLAGS.is_parsed():
  flags.FLAGS.mark_as_parsed()
