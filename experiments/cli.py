"""Command lines derived from the library's config declarations: one flag per ``scaling.config.option``.

``main(ConfigClass, run, argv, doc)`` defines one absl flag for every leaf
option of the config (nested option groups flattened; their ``HIDDEN`` options
left out) in a flag namespace of its own, parses ``argv`` (``--flagfile``
included), builds the config, so that every check the declaration and the
config's ``validate`` make runs before any work, and calls
``run(config, out_dir)``; a study checks what needs its data (dataset, model
shapes) before it creates ``out_dir`` (``scaling.results.make_dir``), so bad
input leaves nothing behind. Bad input ends with one line ``error: ...`` on stderr
and exit status 2; ``--help`` prints the options.
"""

from __future__ import annotations

import math
import pathlib
import sys
from typing import Any, Callable, Sequence

from absl import flags

from scaling import config as config_lib
from scaling import data as data_lib


class ListParser(flags.ArgumentParser):
  """Parses a comma-separated list (or a list), converting and checking each item."""

  syntactic_help = "a comma-separated list"

  def __init__(self, spec: config_lib.OptionSpec):
    self.spec = spec

  def flag_type(self) -> str:
    return "comma-separated list"

  def parse(self, argument: Any) -> list[Any]:
    items = list(argument) if isinstance(argument, (list, tuple)) else str(argument).split(",")
    out = []
    for raw in items:
      item = raw.strip() if isinstance(raw, str) else raw
      if item == "":
        raise ValueError("empty list item")
      try:
        value = _convert(self.spec.base_type, item)
      except (TypeError, ValueError):
        raise ValueError(f"{item!r} is not {_KINDS[self.spec.base_type]}") from None
      problem = self.spec.check_item(value)
      if problem:
        raise ValueError(f"{item!r}: {problem}")
      out.append(value)
    if not out:
      raise ValueError("the list is empty")
    return out


_KINDS = {int: "an integer", float: "a number", str: "a name"}


def _convert(kind: type, item: Any) -> Any:
  if kind is int:
    if isinstance(item, bool):
      raise ValueError(item)
    return item if isinstance(item, int) else int(str(item), 10)
  if kind is float:
    value = float(item)
    if not math.isfinite(value):
      raise ValueError(item)
    return value
  return str(item)


def define_flags(cls: type) -> tuple[flags.FlagValues, list[config_lib.OptionSpec]]:
  """A fresh flag namespace with one flag per exposed leaf option of ``cls``."""
  fv = flags.FlagValues()
  leaves = config_lib.flat_options(cls)
  for path, spec in leaves:
    name, help_text, default = spec.name, spec.help, spec.default
    common = dict(flag_values=fv, module_name=" / ".join(path) or cls.__name__)  # --help groups flags by this
    if spec.is_list:
      flags.DEFINE(ListParser(spec), name, None if default is None else list(default), help_text,
                   serializer=flags.CsvListSerializer(","), **common)
    elif spec.base_type is bool:
      flags.DEFINE_boolean(name, default, help_text, **common)
    elif spec.allowed() is not None:
      flags.DEFINE_enum(name, default, list(spec.allowed()), help_text, **common)
    elif spec.base_type is int:
      flags.DEFINE_integer(name, default, help_text, lower_bound=spec.lower, **common)
    elif spec.base_type is float:
      flags.DEFINE_float(name, default, help_text, lower_bound=spec.lower, **common)
    else:
      flags.DEFINE_string(name, default, help_text, **common)
  return fv, [spec for _, spec in leaves]


def parse(cls: type, argv: Sequence[str]) -> Any:
  """The config of ``cls`` from command-line arguments (``argv[0]`` is the program); raises ``UsageError``."""
  fv, specs = define_flags(cls)
  try:
    rest = fv(list(argv))
  except flags.Error as e:
    raise UsageError(str(e).splitlines()[0]) from None
  if len(rest) > 1:
    raise UsageError(f"unexpected positional arguments: {' '.join(rest[1:])}")
  values = {}
  for spec in specs:
    value = fv[spec.name].value
    values[spec.name] = tuple(value) if isinstance(value, list) else value
  try:
    return config_lib.build(cls, values)
  except ValueError as e:
    raise UsageError(_flag_message(str(e), [s.name for s in specs])) from None


class UsageError(Exception):
  """Bad command-line input, reported as one line."""


def _flag_message(message: str, names: Sequence[str]) -> str:
  """Prefixes ``--`` to a message that starts with an option's name."""
  for name in sorted(names, key=len, reverse=True):
    if message.startswith(f"{name} ") or message.startswith(f"{name}:"):
      return f"--{message}"
  return message


def fail(message: str, code: int = 2) -> int:
  """Prints one error line to stderr and returns the exit status."""
  sys.stderr.write(f"error: {message}\n")
  sys.stderr.flush()
  return code


def main(cls: type, run: Callable[[Any, pathlib.Path | None], Any], argv: Sequence[str] | None = None,
         doc: str | None = None, *, needs_out_dir: bool = True) -> int:
  """Parses ``argv`` into a ``cls`` config and calls ``run(config, out_dir)``; returns the exit status.

  With ``needs_out_dir=False`` the config has no output group and ``run`` gets None.
  """
  argv = list(sys.argv if argv is None else argv)
  if any(a in ("-h", "--help", "--helpfull", "-help") for a in argv[1:]):
    fv, _ = define_flags(cls)
    print((doc or "").strip() + "\n\nflags:\n" + fv.get_help())
    return 0
  try:
    config = parse(cls, argv)
    out_dir = pathlib.Path(config.output.out_dir) if needs_out_dir else None
    run(config, out_dir)
  except UsageError as e:
    return fail(str(e))
  except data_lib.DataError as e:
    return fail(f"--text_file: {e}")
  except ValueError as e:
    return fail(str(e))
  except KeyboardInterrupt:
    return 130
  return 0
