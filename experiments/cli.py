"""Command lines derived from the library's config declarations: one flag per ``scaling.base.config.option``.

``main(ConfigClass, run, argv, doc)`` defines one absl flag for every leaf
option of the config (nested option groups flattened; their ``HIDDEN`` options
left out) in a flag namespace of its own, parses ``argv`` (``--flagfile``
included), builds the config, so that every check the declaration and the
config's ``validate`` make runs before any work, and calls
``run(config, out_dir)``; a study checks what needs its data (dataset, model
shapes) before it creates ``out_dir`` (``scaling.runs.results.make_dir``), so bad
input leaves nothing behind. Bad input (a flag, or a ``scaling.ConfigError`` raised
by the library or a study, whose message names options by their fields: ``flag_text``
writes them as the flags the user typed) ends with one line ``error: ...`` on stderr and exit
status 2, while any other exception, a bug, keeps its traceback; so does a configuration that ``scaling.training.resources`` estimates
to need more memory than is available (checked by each study before it writes).
An allocation that fails anyway (XLA's RESOURCE_EXHAUSTED, or MemoryError)
ends with one line ``error: out of memory ...`` and exit status 1, after the
files and folders this run created under ``--out_dir`` are removed (files that
were there before are left alone). ``--help`` prints the options.

Without ``--out_dir`` each configuration gets a directory of its own under the
study's default folder (``runs/<experiment>/<changed options>-<hash>``, see
``run_directory``): the same options resume and reuse what was finished, changed
options start a new run, and ``runs/<experiment>/latest`` links the one used last.
An ``--out_dir`` given keeps one folder per run: other options are refused there
unless ``--overwrite``.

Every entry point also has the options of the process (``scaling.studies.process.ProcessOptions``),
applied around the run by ``scaling.studies.process.run`` (the path a benchmark's fresh
process takes too): ``--compilation_cache_dir`` is JAX's persistent compilation
cache (on by default, under the user's cache folder), so a rerun reads the
programs an earlier run compiled instead of compiling them; the run's time split
is printed and written to its ``time_split.json``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import math
import os
import pathlib
import re
import shlex
import shutil
import sys
from typing import Any, Callable, Sequence

from absl import flags
import jax

from scaling.base import config as config_lib
from scaling.training.data import text_corpus
from scaling.studies import process as process_lib
from scaling.runs import interrupt
from scaling.runs import results
from scaling.base import validation
from scaling.studies.process import ProcessOptions


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
      allowed = self.spec.allowed()
      if allowed is not None and value not in allowed:  # the item named once
        raise ValueError(f"{item!r}: {validation.must_be_one_of(value, allowed, show_value=False)}")
      problem = self.spec.check_item(value)
      if problem:
        raise ValueError(f"{item!r}: {problem}")
      if value in out:
        raise ValueError(f"{item!r} is given twice")
      out.append(value)
    if not out:
      raise ValueError("the list is empty")
    return out


class ChoiceParser(flags.EnumParser):
  """absl's enum parser whose error names the value once and suggests the closest choice."""

  def parse(self, argument: str) -> str:
    if argument not in self.enum_values:
      raise ValueError(f"{argument!r}: {validation.must_be_one_of(argument, self.enum_values, show_value=False)}")
    return argument


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
  """A fresh flag namespace with one flag per exposed leaf option of ``cls`` and of ``ProcessOptions``.

  Returns:
    (the flags, the option specs of ``cls``).
  """
  fv = flags.FlagValues()
  leaves = config_lib.flat_options(cls)
  process = [(("process",), spec) for _, spec in config_lib.flat_options(ProcessOptions)]
  for path, spec in leaves + process:
    name, help_text, default = spec.name, spec.help, spec.default
    common = dict(flag_values=fv, module_name=" / ".join(path) or cls.__name__)  # --help groups flags by this
    if spec.is_list:
      if spec.allowed() is not None:  # absl's help shows an enum's choices but not a list's
        help_text = f"{help_text} Any of: {', '.join(map(str, spec.allowed()))}."
      flags.DEFINE(ListParser(spec), name, None if default is None else list(default), help_text,
                   serializer=flags.CsvListSerializer(","), **common)
    elif spec.base_type is bool:
      flags.DEFINE_boolean(name, default, help_text, **common)
    elif spec.allowed() is not None:
      flag = flags.EnumFlag(name, default, help_text, list(spec.allowed()))
      flag.parser = ChoiceParser(flag.parser.enum_values)
      flags.DEFINE_flag(flag, **common)
    elif spec.base_type is int:
      flags.DEFINE_integer(name, default, help_text, lower_bound=spec.lower, **common)
    elif spec.base_type is float:
      flags.DEFINE_float(name, default, help_text, lower_bound=spec.lower, **common)
    else:
      flags.DEFINE_string(name, default, help_text, **common)
  return fv, [spec for _, spec in leaves]


def parse(cls: type, argv: Sequence[str]) -> Any:
  """The config of ``cls`` from command-line arguments (``argv[0]`` is the program); raises ``UsageError``."""
  return parse_with_process(cls, argv)[0]


def parse_with_process(cls: type, argv: Sequence[str]) -> tuple[Any, ProcessOptions]:
  """(the config of ``cls``, the ``ProcessOptions``) from command-line arguments; raises ``UsageError``."""
  return _parse(cls, argv)[:2]


def _parse(cls: type, argv: Sequence[str]) -> tuple[Any, ProcessOptions, set[str]]:
  """(the config, the ``ProcessOptions``, the names of the flags given) from command-line arguments."""
  fv, specs = define_flags(cls)
  try:
    rest = fv(list(argv))
  except flags.UnrecognizedFlagError as e:
    raise UsageError(f"unknown flag --{e.flagname}{_did_you_mean(e.flagname, list(fv))}") from None
  except flags.Error as e:  # the first line, and the wrapped list of choices indented below it
    lines = str(e).splitlines()
    raise UsageError("\n".join(lines[:1] + [line for line in lines[1:] if line.startswith("  ")])) from None
  if len(rest) > 1:
    raise UsageError(f"unexpected positional arguments: {' '.join(rest[1:])}")
  built = []
  for kind, kind_specs in ((cls, specs), (ProcessOptions, config_lib.option_specs(ProcessOptions))):
    values = {}
    for spec in kind_specs:
      value = fv[spec.name].value
      values[spec.name] = tuple(value) if isinstance(value, list) else value
    try:
      built.append(config_lib.build(kind, values))
    except ValueError as e:
      raise UsageError(flag_text(e, cls)) from None
  try:  # options typed but unused, even at their defaults
    built[0].check_given({spec.name for spec in specs if fv[spec.name].present})
  except ValueError as e:
    raise UsageError(flag_text(e, cls)) from None
  return built[0], built[1], {spec.name for spec in specs if fv[spec.name].present}


def _did_you_mean(name: str, known: Sequence[str]) -> str:
  """``"; did you mean --x?"`` for the flags closest to ``name``: spelled alike, or abbreviated by their words'
  initials (``lr`` for ``learning_rate``); empty when none is close."""
  bare = name[2:] if name.startswith("no") and name[2:] in known else name
  initials = [k for k in known if "_" in k and "".join(word[0] for word in k.split("_")) == bare]
  close = initials + [k for k in difflib.get_close_matches(bare, known, n=3, cutoff=0.75) if k not in initials]
  if not close:
    return ""
  return f"; did you mean {' or '.join(f'--{k}' for k in close[:3])}?"


class UsageError(Exception):
  """Bad command-line input, reported as one line."""


_FIELD_VALUE = re.compile(r"(?<![\w.-])([a-z_][a-z0-9_]*)=('[^']*'|\"[^\"]*\"|\([^()]*\)|[^\s,;:()]+)")
_LEADING_NAME = re.compile(r"([a-z_][a-z0-9_]*)(?=[ :])")


def flag_text(error: BaseException, cls: type) -> str:
  """The message of a library error with the options of ``cls`` (and ``ProcessOptions``) it names written as flags.

  The library names an option by its field: ``tau``, or with its value ``rule='temperature'``. The command line's
  user typed flags, so the options with a flag are rewritten: every ``name=value`` (a quoted string unquoted, a
  tuple as a comma-separated list, a boolean's ``name=True`` and ``name=False`` as ``--name`` and ``--noname``),
  the name the message starts with, and each bare name the error lists in its ``fields``
  (``scaling.base.validation.ConfigError``). Other words, and names that are not flags, are left as they are.

  Args:
    error: the exception (a ``ConfigError``, or any ValueError a config raised).
    cls: the config class of the command line.

  Returns:
    The message, with flags.
  """
  leaves = [spec for _, spec in config_lib.flat_options(cls) + config_lib.flat_options(ProcessOptions)]
  names = {spec.name for spec in leaves}
  booleans = {spec.name for spec in leaves if spec.base_type is bool and not spec.is_list}

  def with_value(match: re.Match) -> str:
    name, value = match.groups()
    if name not in names:
      return match.group(0)
    if name in booleans and value in ("True", "False"):
      return f"--{'' if value == 'True' else 'no'}{name}"
    if value[0] in "'\"":
      value = value[1:-1]
    elif value[0] == "(":
      value = ",".join(item.strip().strip("'\"") for item in value[1:-1].split(",") if item.strip())
    return f"--{name}={value}"

  text = _FIELD_VALUE.sub(with_value, str(error))
  bare = sorted({f for f in getattr(error, "fields", ()) if f in names}, key=len, reverse=True)
  if bare:
    text = re.sub(rf"(?<![\w.='\"-])({'|'.join(map(re.escape, bare))})(?![\w='\"-])", r"--\1", text)
  leading = _LEADING_NAME.match(text)
  if leading and leading.group(1) in names:
    text = f"--{text}"
  return text


def fail(message: str, code: int = 2) -> int:
  """Prints one error line to stderr and returns the exit status."""
  sys.stderr.write(f"error: {message}\n")
  sys.stderr.flush()
  return code


OUT_OF_MEMORY = 1
"""Exit status of a run whose allocation failed (bad input, and estimates over the memory available, exit 2)."""


def out_of_memory(error: BaseException) -> bool:
  """Whether ``error`` is a failed allocation: MemoryError, or a JAX runtime error with RESOURCE_EXHAUSTED."""
  if isinstance(error, MemoryError):
    return True
  runtime_error = getattr(jax.errors, "JaxRuntimeError", None) or getattr(jax.errors, "XlaRuntimeError", None)
  return runtime_error is not None and isinstance(error, runtime_error) and "RESOURCE_EXHAUSTED" in str(error)


def snapshot(out_dir: pathlib.Path | None) -> set[str] | None:
  """The paths under ``out_dir`` now (None when it does not exist), to tell later which ones a run created."""
  if out_dir is None or not out_dir.is_dir():
    return None
  return {os.path.join(root, name) for root, dirs, files in os.walk(out_dir) for name in dirs + files}


def remove_created(out_dir: pathlib.Path | None, before: set[str] | None) -> None:
  """Removes what a run created under ``out_dir``: all of it if it did not exist before, else the new paths."""
  if out_dir is None or not out_dir.exists():
    return
  if before is None:
    shutil.rmtree(out_dir, ignore_errors=True)
    return
  for root, dirs, files in os.walk(out_dir, topdown=True):
    for name in list(dirs):
      path = os.path.join(root, name)
      if path not in before:
        shutil.rmtree(path, ignore_errors=True)
        dirs.remove(name)
    for name in files:
      path = os.path.join(root, name)
      if path not in before:
        try:
          os.remove(path)
        except OSError:
          pass


def _first_line(error: BaseException) -> str:
  """The first non-empty line of an error's message."""
  for line in str(error).splitlines():
    if line.strip():
      return line.strip().rstrip(".")
  return type(error).__name__


def main(cls: type, run: Callable[[Any, pathlib.Path | None], Any], argv: Sequence[str] | None = None,
         doc: str | None = None, *, needs_out_dir: bool = True) -> int:
  """Parses ``argv`` into a ``cls`` config and calls ``run(config, out_dir)`` (``scaling.studies.process.run``); returns the
  exit status.

  With ``needs_out_dir=False`` the config has no output group and ``run`` gets None.
  """
  argv = list(sys.argv if argv is None else argv)
  if any(a in ("-h", "--help", "--helpfull", "-help") for a in argv[1:]):
    fv, _ = define_flags(cls)
    print((doc or "").strip() + "\n\nflags:\n" + fv.get_help())
    return 0
  out_dir = before = None
  own_dir = False
  try:
    config, process, given = _parse(cls, argv)
    if needs_out_dir:
      config, own_dir = run_directory(config, "out_dir" in given)
      out_dir = pathlib.Path(config.output.out_dir)
    before = snapshot(out_dir)
    announce = contextlib.nullcontext()
    if own_dir and (out_dir / results.MANIFEST).exists():
      print(f"run directory: {out_dir} (resuming or reusing its results)", flush=True)
    elif own_dir:  # named when the study makes it: a run refused before it writes names no folder
      announce = results.announce_when_made(out_dir, f"run directory: {out_dir} (new)")
    with announce, interrupt.stop_at_safe_points():
      process_lib.run(run, config, out_dir, process)
    if own_dir:
      results.link_latest(out_dir)
  except UsageError as e:
    return fail(str(e))
  except text_corpus.DataError as e:
    return fail(f"--text_file: {e}")
  except validation.ConfigError as e:  # bad input; any other exception is a bug and keeps its traceback
    return fail(flag_text(e, cls))
  except KeyboardInterrupt as e:
    if own_dir and out_dir.exists():
      results.link_latest(out_dir)
    status = e.exit_status if isinstance(e, interrupt.Interrupted) else 130
    name = e.signal_name if isinstance(e, interrupt.Interrupted) else "SIGINT"
    kept = f"what finished is in {out_dir}; " if out_dir is not None and out_dir.exists() else ""
    print(f"interrupted ({name}): {kept}to resume, run the same command again: {resume_command(argv)}",
          file=sys.stderr, flush=True)
    return status
  except Exception as e:  # pylint: disable=broad-except  (only allocation failures are handled here)
    if not out_of_memory(e):
      raise
    remove_created(out_dir, before)
    where = f"; removed what this run wrote to {out_dir}" if out_dir is not None else ""
    return fail(f"out of memory: {_first_line(e)}{where}; use smaller sizes", OUT_OF_MEMORY)
  return 0


def resume_command(argv: Sequence[str]) -> str:
  """The command line that reruns ``argv``: ``python -m experiments.<name> ...`` for an entry point's script."""
  script = pathlib.Path(argv[0]) if argv else pathlib.Path("?")
  if script.suffix == ".py" and script.parent.name == "experiments":
    head = ["python", "-m", f"experiments.{script.stem}"]
  else:
    head = [str(argv[0]) if argv else "?"]
  return " ".join(shlex.quote(a) for a in [*head, *argv[1:]])


def run_directory(config: Any, given: bool) -> tuple[Any, bool]:
  """(``config`` with the run's output directory, whether it is the configuration's own one).

  An ``--out_dir`` given is used as it is. Without one, the study's default folder
  (``runs/<experiment>``) holds one directory per configuration, named by
  ``scaling.runs.results.run_name``: the same options find their earlier run (resumed, its
  finished results reused) and changed ones start a new directory.
  """
  if given:
    return config, False
  folder = results.run_dir(config.output.out_dir, config)
  return dataclasses.replace(config, output=dataclasses.replace(config.output, out_dir=str(folder))), True
