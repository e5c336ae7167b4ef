"""`--help` of each experiment: its own description and flags, and no option of another experiment."""

import contextlib
import importlib
import io
import re

from absl.testing import absltest
from absl.testing import parameterized

EXPERIMENTS = ("train", "sweep", "claims", "coord_check", "transfer", "stability", "benchmark", "attention_memory")
NOT_OPTIONS = {"d_k": "the head dimension's symbol", "qk_norm": "a rule's name"}
"""Snake-case words that name an option somewhere but mean something else in prose."""


def _help(name):
  module = importlib.import_module(f"experiments.{name}")
  out = io.StringIO()
  with contextlib.redirect_stdout(out):
    code = module.main([name, "--help"])
  assert code == 0, name
  return module, out.getvalue()


def _flags(text):
  """The flags a help text lists (``--name:`` and ``--[no]name:`` lines)."""
  return set(re.findall(r"^\s+--(?:\[no\])?(\w+):", text, re.M))


class HelpTest(parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.helps = {name: _help(name) for name in EXPERIMENTS}

  @parameterized.parameters(*EXPERIMENTS)
  def test_mentions_only_its_own_options(self, name):
    module, text = self.helps[name]
    self.assertTrue(text.startswith(module.__doc__.strip().splitlines()[0]), text[:200])
    own = _flags(text)
    every = set().union(*(_flags(t) for _, t in self.helps.values()))
    words = set(re.findall(r"(?<![\w.])(\w+_\w+)", text)) | set(re.findall(r"--(\w+)", text))
    stray = (words & every) - own - set(NOT_OPTIONS)
    self.assertEmpty(stray, f"experiments.{name} --help mentions options it does not have")

  @parameterized.parameters(*EXPERIMENTS)
  def test_example_commands_keep_their_line_breaks(self, name):
    _, text = self.helps[name]
    for line in text.splitlines():
      if line.lstrip().startswith("python -m "):  # one command a line, or continued by a backslash at its end
        self.assertEqual(line.count("python -m "), 1, line)
        self.assertNotRegex(line, r"\S {3,}--", "a continuation line joined to its command (a lost backslash)")

  @parameterized.parameters(("sweep", "--rules:", "post_softmax"), ("sweep", "--dtype:", "bfloat16"))
  def test_list_options_name_their_choices(self, name, flag, choice):
    _, text = self.helps[name]
    entry = text[text.index(flag):].split("(a comma-separated list)")[0]
    self.assertIn(choice, entry)

  def test_train_has_no_seed_count(self):
    _, text = self.helps["train"]
    self.assertIn("--seed:", text)
    self.assertNotIn("num_seeds", text)


if __name__ == "__main__":
  absltest.main()
