"""Flag types, one-line error handling, output folders and progress shared by the experiments."""

from __future__ import annotations

import math
import os
import pathlib
import sys
import time
from typing import Any, Callable, Sequence

from absl import app
from absl import flags
from absl import logging


def _caller_module() -> str:
  """Name of the module that called the define_* helper (flags belong to it, as with absl's own)."""
  name = sys._getframe(2).f_globals["__name__"]  # pylint: disable=protected-access
  return sys.argv[0] if name == "__main__" else name  # absl keys the main module by its path


class _ListParser(flags.ArgumentParser):
  """Parses a comma-separated list, converting and checking each item."""

  syntactic_help = "a comma-separated list"

  def __init__(self, convert: Callable[[str], Any], check: Callable[[Any], str | None], kind: str):
    self._convert, self._check, self._kind = convert, check, kind

  def flag_type(self) -> str:
    return "comma-separated list"

  def parse(self, argument):
    if isinstance(argument, (list, tuple)):
      items = list(argument)
    else:
      items = str(argument).split(",")
    out = []
    for raw in items:
      item = raw.strip() if isinstance(raw, str) else raw
      if item == "":
        raise ValueError("empty list item")
      try:
        value = self._convert(item)
      except (TypeError, ValueError):
        raise ValueError(f"{item!r} is not {self._kind}") from None
      problem = self._check(value)
      if problem:
        raise ValueError(f"{item!r}: {problem}")
      out.append(value)
    if not out:
      raise ValueError("the list is empty")
    return out


def _int(text) -> int:
  if isinstance(text, bool):
    raise ValueError(text)
  if isinstance(text, int):
    return text
  return int(str(text), 10)


def define_int_list(name: str, default: Sequence[int] | str, help_text: str, *, lower_bound: int = 1):
  """A comma-separated list of integers, each at least ``lower_bound``."""
  check = lambda v: None if v >= lower_bound else f"must be at least {lower_bound}"
  return flags.DEFINE(_ListParser(_int, check, "an integer"), name, default, help_text,
                       serializer=flags.CsvListSerializer(","), module_name=_caller_module())


def define_float_list(name: str, default: Sequence[float] | str, help_text: str, *,
                      lower_bound: float | None = None, positive: bool = False):
  """A comma-separated list of finite floats (optionally positive or bounded below)."""

  def check(v):
    if not math.isfinite(v):
      return "must be finite"
    if positive and v <= 0:
      return "must be positive"
    if lower_bound is not None and v < lower_bound:
      return f"must be at least {lower_bound}"
    return None

  return flags.DEFINE(_ListParser(float, check, "a number"), name, default, help_text,
                      serializer=flags.CsvListSerializer(","), module_name=_caller_module())


def define_enum_list(name: str, default: Sequence[str] | str, choices: Sequence[str] | Callable[[], Sequence[str]],
                     help_text: str):
  """A comma-separated list of names from ``choices`` (a sequence, or a function for registries)."""

  def check(v):
    known = choices() if callable(choices) else choices
    return None if v in known else f"unknown; choose from {', '.join(known)}"

  return flags.DEFINE(_ListParser(str, check, "a name"), name, default, help_text,
                      serializer=flags.CsvListSerializer(","), module_name=_caller_module())


def define_finite_float(name: str, default: float, help_text: str, *, lower_bound: float | None = None,
                        positive: bool = False):
  """A single finite float flag (rejects nan and inf), optionally positive or bounded below."""
  holder = flags.DEFINE(flags.FloatParser(lower_bound=lower_bound), name, default, help_text,
                        module_name=_caller_module())

  def check(v):
    return v is None or (math.isfinite(v) and (not positive or v > 0))

  what = "a finite positive number" if positive else "a finite number"
  flags.register_validator(name, check, message=f"--{name} must be {what}")
  return holder


def flag_values(module_name: str) -> dict[str, Any]:
  """{name: value} of the flags that module ``module_name`` defined (for config.json)."""
  module = sys.modules[module_name]
  return {f.name: f.value for f in flags.FLAGS.get_flags_for_module(module)}


def make_dataset_or_fail(task: str, text_file: str | None, *, seq_len: int, batch_size: int, seed: int,
                         **options: Any):
  """``scaling.data.make_dataset`` for the --task/--text_file flags, or a one-line failure naming the flag."""
  from scaling import data as data_lib  # pylint: disable=g-import-not-at-top

  if task == "text" and not text_file:
    fail("--task=text needs --text_file")
  if task != "text" and text_file:
    fail(f"--text_file is only read with --task=text, not --task={task}")
  try:
    return data_lib.make_dataset(task, seq_len=seq_len, batch_size=batch_size,
                                 text_file=text_file if task == "text" else None, seed=seed, **options)
  except data_lib.DataError as e:
    fail(f"--text_file: {e}")
  except ValueError as e:
    fail(f"--task={task} with --seq_len={seq_len}: {e}")


def check_width_family(family, parametrizations, widths, dataset) -> None:
  """Fails with one line naming the flag unless a WidthFamily gives a valid model at its base and every width."""
  try:
    family.heads(family.base_width)
  except ValueError as e:
    fail(f"--base_width={family.base_width}: {e}")
  for width in widths:
    try:
      family.check(parametrizations, [width], vocab_size=dataset.vocab_size, max_len=dataset.seq_len)
    except ValueError as e:
      message = str(e) if f"width {width}" in str(e) else f"width {width}: {e}"
      fail(f"--widths: {message}")


def fail(message: str, code: int = 2):
  """Prints one error line to stderr and exits non-zero (no traceback)."""
  sys.stderr.write(f"error: {message}\n")
  sys.stderr.flush()
  raise SystemExit(code)


def _parse_flags(argv: list[str]) -> list[str]:
  try:
    return flags.FLAGS(argv)
  except flags.Error as e:
    fail(str(e).splitlines()[0])


def run(main: Callable[[list[str]], Any]) -> None:
  """``absl.app.run`` with flag errors reported as one line and exit status 2, and quiet INFO logs."""

  def quiet_main(argv):
    if not flags.FLAGS["verbosity"].present:
      logging.set_verbosity(logging.WARNING)
    return main(argv)

  app.run(quiet_main, flags_parser=_parse_flags)


def reject_extra_args(argv: Sequence[str]) -> None:
  """Fails on positional arguments, which none of the experiments take."""
  if len(argv) > 1:
    fail(f"unexpected positional arguments: {' '.join(argv[1:])}")


def prepare_out_dir(path: str, flag_name: str = "out_dir") -> pathlib.Path:
  """Creates ``path`` (and parents) or fails with one line naming the flag."""
  if not path:
    fail(f"--{flag_name} must not be empty")
  p = pathlib.Path(path)
  try:
    p.mkdir(parents=True, exist_ok=True)
  except OSError as e:
    fail(f"--{flag_name}={path}: cannot create directory ({e.strerror or e})")
  if not os.access(p, os.W_OK):
    fail(f"--{flag_name}={path}: directory is not writable")
  return p


class Progress:
  """Prints ``[i/n] label (elapsed, eta)`` lines to stderr for long loops."""

  def __init__(self, total: int, name: str = "", stream=None):
    self.total, self.name, self.done = total, name, 0
    self.stream = stream or sys.stderr
    self.start = time.perf_counter()

  def update(self, label: str = "", n: int = 1) -> None:
    self.done += n
    elapsed = time.perf_counter() - self.start
    eta = elapsed / self.done * (self.total - self.done) if self.done else float("nan")
    prefix = f"{self.name} " if self.name else ""
    self.stream.write(f"{prefix}[{self.done}/{self.total}] {label}  {elapsed:.1f}s elapsed, ~{eta:.1f}s left\n")
    self.stream.flush()


def format_table(rows: Sequence[dict[str, Any]], columns: Sequence[str], floatfmt: str = ".4g") -> str:
  """A plain-text table of ``rows`` restricted to ``columns``; nested {'mean': ..} values show their mean."""

  def cell(v):
    if isinstance(v, dict) and "mean" in v:
      v = v["mean"]
    if isinstance(v, float):
      return format(v, floatfmt)
    return str(v)

  body = [[cell(r.get(c, "")) for c in columns] for r in rows]
  widths = [max(len(c), *(len(b[i]) for b in body)) if body else len(c) for i, c in enumerate(columns)]
  line = lambda cells: "  ".join(x.rjust(w) for x, w in zip(cells, widths))
  return "\n".join([line(columns), line(["-" * w for w in widths])] + [line(b) for b in body])
