"""Every ``python -m experiments.*`` command on the README and the docs pages parses as written, from a clone.

Each command (continuation lines joined, its trailing comment dropped) goes through its entry point's ``main`` with
the study's run replaced by a recorder: every flag must exist, every value must pass the config's checks, and every
``--text_file`` must name a file the clone has (the shipped corpus, ``--text_file=shakespeare``). Nothing is trained.
"""

import contextlib
import dataclasses
import importlib
import io
import os
import pathlib
import re
import shlex
from unittest import mock

from absl.testing import absltest

from experiments import cli
from scaling.training.data import text_corpus

ROOT = pathlib.Path(__file__).resolve().parents[1]
COMMAND = re.compile(r"^\s*(?:\$ )?(python3? -m experiments\.\w+.*)$")
INLINE = re.compile(r"`(python3? -m experiments\.\w+[^`$]*)`")
"""A command in running text or a table cell (one inline code span, which may wrap over lines)."""
PLACEHOLDER = re.compile(r"\[--|=[A-Z]+\b")
"""A usage pattern rather than a command: optional flags in brackets, or a value to fill in (``--steps=N``)."""


def doc_commands() -> list[tuple[str, str]]:
  """(file, command) for every ``python -m experiments.*`` line of README.md and docs/*.md, continuations joined."""
  found = []
  for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
      match = COMMAND.match(lines[i]) if "`" not in lines[i] else None
      if match:
        command = match.group(1)
        while command.rstrip().endswith("\\") and i + 1 < len(lines):
          i += 1
          command = command.rstrip()[:-1] + " " + lines[i].strip()
        command = re.split(r"\s(?:&&|&|;|\|)(?:\s|$)", command.split(" #")[0].strip() + " ")[0].strip()
        if "$" not in command:  # a line of a shell loop ($i, $g) is checked by the script that runs it
          found.append((path.name, command))
      i += 1
    for span in INLINE.findall(re.sub(r"\s*\n\s*", " ", path.read_text(encoding="utf-8"))):
      if not PLACEHOLDER.search(span):
        found.append((path.name, span.strip()))
  return list(dict.fromkeys(found))


def _text_files(config) -> list[str]:
  """Every ``text_file`` value in a (nested) config."""
  out = []
  for field in dataclasses.fields(config):
    value = getattr(config, field.name)
    if field.name == "text_file" and value is not None:
      out.append(value)
    elif dataclasses.is_dataclass(value):
      out.extend(_text_files(value))
  return out


class DocCommandsTest(absltest.TestCase):

  def test_the_pages_have_commands(self):
    files = {name for name, _ in doc_commands()}
    self.assertGreaterEqual(len(doc_commands()), 15)
    self.assertContainsSubset({"README.md", "coord_check.md", "transfer.md", "training.md", "claims.md"}, files)

  def test_every_command_parses_and_names_files_the_clone_has(self):
    cwd = os.getcwd()
    os.chdir(self.create_tempdir().full_path)  # a run folder a command would name is made here, if at all
    self.addCleanup(os.chdir, cwd)
    for name, command in doc_commands():
      with self.subTest(page=name, command=command):
        argv = shlex.split(command)[2:]  # experiments.<name> and its flags
        module = importlib.import_module(argv[0])
        got = []
        err = io.StringIO()
        with mock.patch.object(cli.process_lib, "run", lambda run, config, *_: got.append(config)), \
            contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
          code = module.main(argv)
        self.assertEqual(code, 0, err.getvalue())
        self.assertLen(got, 1)
        for text_file in _text_files(got[0]):
          self.assertTrue(text_corpus.corpus_path(text_file).is_file(), f"--text_file={text_file}")

  def test_a_wrong_command_is_caught(self):
    argv = ["experiments.coord_check", "--text_file=no/such/corpus.txt"]
    module = importlib.import_module(argv[0])
    got = []
    with mock.patch.object(cli.process_lib, "run", lambda run, config, *_: got.append(config)), \
        contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
      self.assertEqual(module.main(argv), 0)
    self.assertFalse(text_corpus.corpus_path(_text_files(got[0])[0]).is_file())
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
      self.assertEqual(module.main(["experiments.coord_check", "--widths=16,x"]), 2)


if __name__ == "__main__":
  absltest.main()
