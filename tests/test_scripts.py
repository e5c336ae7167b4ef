"""scripts/: each one is Python, or a shell script that runs Python as ${PYTHON:-python3} (never whichever python
is first on PATH), so a virtual environment's interpreter given by path runs everything the script starts."""

import pathlib
import re
import subprocess
import sys

from absl.testing import absltest

ROOT = pathlib.Path(__file__).resolve().parents[1]
INTERPRETER = re.compile(r"^python=\$\{PYTHON:-python3\}(\s|$)", re.M)
BARE = re.compile(r"(^|[\s;&|(`])(python3?|python3\.\d+)(?=\s|$)")


def bare_python_lines(text: str) -> list[str]:
  """The lines of a shell script, comments left out, that run an interpreter by name instead of "$python"."""
  return [line for line in text.splitlines()
          if not line.lstrip().startswith("#") and not INTERPRETER.match(line) and BARE.search(line.split(" #")[0])]


class ScriptsTest(absltest.TestCase):

  def test_nothing_reads_data_from_outside_the_clone(self):
    # A clone has no folder beside it: every command and script names the shipped corpus (--text_file=shakespeare).
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=False)
    if tracked.returncode != 0:
      self.skipTest("not a git checkout")
    outside = re.compile(r"\.\./shared/|\.\.[/\\]data/")
    for name in tracked.stdout.splitlines():
      path = ROOT / name
      if path.suffix in (".py", ".md", ".sh", ".cfg", ".toml", ".ini", ".txt") and path.stat().st_size < 1_000_000:
        self.assertIsNone(outside.search(path.read_text(encoding="utf-8", errors="replace")), name)

  def test_every_script_is_python_or_runs_python_through_PYTHON(self):
    scripts = sorted(p for p in (ROOT / "scripts").iterdir() if p.is_file())
    self.assertNotEmpty(scripts)
    for path in scripts:
      self.assertIn(path.suffix, (".py", ".sh"), path.name)
      if path.suffix == ".sh":
        text = path.read_text()
        self.assertEqual(bare_python_lines(text), [], path.name)
        if '"$python"' in text:
          self.assertRegex(text, INTERPRETER, path.name)

  def test_bare_python_is_found(self):
    script = "#!/usr/bin/env bash\n# python in a comment\npython=${PYTHON:-python3}\n"
    self.assertEqual(bare_python_lines(script), [])
    for line in ("python -m experiments.sweep", "  python3 scripts/x.py", "if python -c 'import torch'; then",
                 "x=$(python -c 1)", "a && python3.11 -m y"):
      self.assertEqual(bare_python_lines(script + line + "\n"), [line])
    self.assertEqual(bare_python_lines(script + '"$python" -m experiments.sweep  # python here\n'), [])

  def test_the_variable_picks_the_interpreter(self):
    # The line a script defines its interpreter with, run by bash with and without PYTHON set.
    (line,) = [line for line in (ROOT / "scripts" / "device_claims.sh").read_text().splitlines()
               if INTERPRETER.match(line)]
    for env, want in (({}, "python3"), ({"PYTHON": "/some/venv/bin/python"}, "/some/venv/bin/python")):
      done = subprocess.run(["bash", "-c", f'{line}\necho "$python"'], env={"PATH": "/usr/bin:/bin", **env},
                            capture_output=True, text=True, check=True)
      self.assertEqual(done.stdout.strip(), want)
  def test_install_check_help_prints_and_checks_nothing(self):
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "check_install.py"), "--help"], capture_output=True,
                          text=True, timeout=60, check=False)
    self.assertEqual(done.returncode, 0, done.stderr)
    self.assertTrue(done.stdout.startswith("The package as installed"), done.stdout[:200])
    self.assertNotIn("install check: import scaling", done.stdout)

  def test_install_check_builds_every_installed_package(self):
    text = (ROOT / "setup.py").read_text()
    packages = set(re.findall(r'"(\w+)"', text[text.index("find_packages"):].split(")")[0]))
    check = (ROOT / "scripts" / "check_install.py").read_text()
    files = set(re.findall(r'"([\w.]+)"', check[check.index("PACKAGE_FILES ="):].split(")")[0]))
    self.assertContainsSubset(packages, files)


if __name__ == "__main__":
  absltest.main()
