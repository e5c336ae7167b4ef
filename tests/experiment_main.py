"""Runs an experiment's main under overridden flags, capturing its exit code and output."""

import contextlib
import io as std_io

from absl.testing import flagsaver


def run_main(module, **flag_values):
  """Runs ``module.main``; returns (exit code or None, stdout, stderr)."""
  out, err = std_io.StringIO(), std_io.StringIO()
  code = None
  with flagsaver.flagsaver(**flag_values), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    try:
      module.main([module.__name__.rsplit(".", 1)[-1]])
    except SystemExit as e:
      code = e.code
  return code, out.getvalue(), err.getvalue()
