"""Runs an experiment's main on a command line built from keyword flags, capturing its exit code and output."""

import contextlib
import importlib.util
import io
import json
import os
import pathlib
import re
import shutil
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]


def load_script(name: str):
  """scripts/<name>.py as a module (registered in sys.modules under ``name``), e.g. to call its main in-process."""
  spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
  module = sys.modules[name] = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def argv(module, **flag_values) -> list[str]:
  """The command line: ``--name=value`` per flag (lists comma-joined, booleans as --name / --noname)."""
  args = [module.__name__]
  for name, value in flag_values.items():
    if isinstance(value, bool):
      args.append(f"--{name}" if value else f"--no{name}")
    elif isinstance(value, (list, tuple)):
      args.append(f"--{name}={','.join(str(v) for v in value)}")
    else:
      args.append(f"--{name}={value}")
  return args


def run_main(module, **flag_values):
  """Runs ``module.main`` on ``argv(module, **flag_values)``; returns (exit code, stdout, stderr)."""
  out, err = io.StringIO(), io.StringIO()
  with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    code = module.main(argv(module, **flag_values))
  return code, out.getvalue(), err.getvalue()


def assert_one_line_error(test, code, stdout, stderr, needle, out_dir=None):
  """Bad input: exit status 2, nothing on stdout, one ``error: ...`` line naming ``needle``, no output folder."""
  test.assertEqual(code, 2, stderr)
  test.assertNotIn("Traceback", stderr)
  lines = stderr.strip().splitlines()
  test.assertLen(lines, 1, stderr)
  test.assertTrue(lines[0].startswith("error: "), lines[0])
  test.assertIn(needle, lines[0])
  test.assertEqual(stdout, "")
  if out_dir is not None:
    test.assertFalse(os.path.exists(out_dir), out_dir)


def run_with(module, base_flags, out_dir, **flag_values):
  """``run_main`` with ``base_flags`` updated by ``flag_values`` (a None value drops the flag)."""
  flags = {k: v for k, v in {**base_flags, **flag_values}.items() if v is not None}
  return run_main(module, out_dir=str(out_dir), **flags)


def assert_runs_on_text_file_alone(test, module, base_flags, text, tmp_dir, **flag_values):
  """Runs ``module`` with only ``--text_file`` naming the data; checks it trained on that text; returns stdout."""
  path = os.path.join(tmp_dir, "data.txt")
  with open(path, "w") as f:
    f.write(text)
  out = os.path.join(tmp_dir, "out")
  code, stdout, stderr = run_with(module, base_flags, out, text_file=path, **flag_values)
  test.assertEqual(code, 0, stderr)
  with open(os.path.join(out, "config.json")) as f:
    config = json.load(f)
  test.assertEqual(config["dataset"]["name"], "text")
  test.assertEqual(config["dataset"]["vocab_size"], len(set(text)))
  test.assertEqual(config["config"]["data"]["text_file"], path)
  return stdout, out


def run_study(test, module, base_flags, **flag_values):
  """``run_with`` into a new folder (removed when ``test`` ends) that must succeed; returns (the output folder,
  stdout, the rows of its results.jsonl)."""
  parent = tempfile.mkdtemp()
  test.addCleanup(shutil.rmtree, parent, ignore_errors=True)
  out = pathlib.Path(parent) / "out"
  code, stdout, stderr = run_with(module, base_flags, out, **flag_values)
  test.assertEqual(code, 0, stderr)
  assert_time_split(test, stderr, out)
  with open(out / "results.jsonl") as f:
    return out, stdout, [json.loads(line) for line in f if line.strip()]


def assert_time_split(test, stderr, out_dir=None):
  """The run printed (on stderr) its wall time split into compilation, compute and the rest, the parts adding up;
  with ``out_dir``, the same split is in its time_split.json."""
  found = re.search(r"time split: wall ([\d.]+)s = compilation ([\d.]+)s \(.*?(\d+) programs, (\d+) from the "
                    r"cache\) \+ compute ([\d.]+)s .*\+ rest (-?[\d.]+)s", stderr)
  test.assertIsNotNone(found, stderr[-2000:])
  wall, compile_s, programs, hits, compute, rest = (float(found.group(i)) for i in range(1, 7))
  test.assertAlmostEqual(wall, compile_s + compute + rest, delta=0.16)  # each printed to 0.1 s
  test.assertLessEqual(hits, programs)
  if out_dir is not None:
    with open(os.path.join(out_dir, "time_split.json")) as f:
      written = json.load(f)
    test.assertAlmostEqual(written["wall_s"], wall, delta=0.051)
    test.assertEqual((written["compiles"], written["cache_hits"]), (programs, hits))
