"""Options declared once: a dataclass field carries its default, bounds, choices and help.

Every configurable value of the library is a field of a frozen ``Options``
dataclass declared with ``option(default, help, ...)``. The declaration is the
only place where the name, default, bounds and help of an option exist:
``Options.__post_init__`` checks every field against it (one ValueError naming
the option), and the command-line front end (``experiments/cli.py``) derives
its flags from the same fields. Groups of options that several studies share
(``scaling.training.data.config.DataConfig``, ``scaling.training.model.family.ModelFamily``,
``scaling.training.optimizer.OptimizerConfig``) are fields of the studies' configs; a study
changes a group's defaults by giving the field another default instance.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from typing import Any, Callable, ClassVar, Collection, Iterator, Mapping, Sequence

from scaling.base import validation
from scaling.base.validation import ConfigError
from scaling.base.validation import ConfigTypeError

Choices = Sequence[str] | Callable[[], Sequence[str]]


def option(default: Any, help: str, *, choices: Choices | None = None, lower: float | None = None,
           upper: float | None = None, upper_exclusive: bool = False, positive: bool = False) -> Any:
  """A dataclass field with the metadata of one option.

  Args:
    default: the default value (None = unset; the config derives it).
    help: one sentence for ``--help``.
    choices: allowed names (a sequence, or a function for registries that grow).
    lower: smallest allowed value (each item of a list).
    upper: largest allowed value.
    upper_exclusive: ``upper`` itself is not allowed.
    positive: the value must be > 0.

  Returns:
    A ``dataclasses.field`` with the metadata.
  """
  meta = {"help": help, "choices": choices, "lower": lower, "upper": upper, "upper_exclusive": upper_exclusive,
          "positive": positive}
  if isinstance(default, (list, dict, set)):
    raise TypeError("option defaults must be immutable (use a tuple)")
  if dataclasses.is_dataclass(default):
    return dataclasses.field(default_factory=lambda: default, metadata=meta)
  return dataclasses.field(default=default, metadata=meta)


@dataclasses.dataclass(frozen=True)
class OptionSpec:
  """What ``option`` declared about one field, with its resolved type."""

  name: str
  default: Any
  help: str
  base_type: type  # int, float, bool, str, or an Options subclass
  is_list: bool
  optional: bool
  choices: Choices | None
  lower: float | None
  upper: float | None
  upper_exclusive: bool
  positive: bool

  def allowed(self) -> tuple[str, ...] | None:
    """The choices as a tuple (evaluated now, for registries)."""
    if self.choices is None:
      return None
    return tuple(self.choices() if callable(self.choices) else self.choices)

  def check_item(self, value: Any) -> str | None:
    """Why one (list item) value is invalid, or None."""
    t = self.base_type
    if t is bool:
      return None if isinstance(value, bool) else f"must be true or false, got {value!r}"
    if t is int and (isinstance(value, bool) or not isinstance(value, int)):
      return f"must be an integer, got {value!r}"
    if t is float:
      if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"must be a number, got {value!r}"
      if not math.isfinite(value):
        return f"must be finite, got {value!r}"
    if t is str and not isinstance(value, str) and self.choices is None:
      return f"must be a string, got {value!r}"
    allowed = self.allowed()
    if allowed is not None and value not in allowed:
      return validation.must_be_one_of(value, allowed)
    if self.positive and not value > 0:
      return f"must be positive, got {value!r}"
    if self.lower is not None and value < self.lower:
      return f"must be at least {self.lower:g}, got {value!r}"
    if self.upper is not None and (value >= self.upper if self.upper_exclusive else value > self.upper):
      return f"must be {'below' if self.upper_exclusive else 'at most'} {self.upper:g}, got {value!r}"
    return None

  def check(self, value: Any) -> None:
    """Raises ValueError naming the option unless ``value`` fits the declaration."""
    if value is None:
      if self.optional:
        return
      raise ConfigError(f"{self.name} must be given")
    if self.is_list:
      if not isinstance(value, tuple):
        raise ConfigError(f"{self.name} must be a tuple, got {type(value).__name__}")
      if not value:
        raise ConfigError(f"{self.name} must not be empty")
      items = value
    else:
      items = (value,)
    for item in items:
      problem = self.check_item(item)
      if problem:
        raise ConfigError(f"{self.name} {problem}")


def _unwrap(hint: Any) -> tuple[type, bool, bool]:
  """(base type, is_list, optional) of a type hint such as ``tuple[int, ...] | None``."""
  optional = False
  origin = typing.get_origin(hint)
  if origin in (typing.Union, types.UnionType):
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    optional = len(args) < len(typing.get_args(hint))
    if len(args) != 1:
      raise TypeError(f"unsupported option type {hint!r}")
    hint = args[0]
    origin = typing.get_origin(hint)
  if origin is tuple:
    args = typing.get_args(hint)
    if len(args) != 2 or args[1] is not Ellipsis:
      raise TypeError(f"list options must be tuple[T, ...], got {hint!r}")
    return args[0], True, optional
  return hint, False, optional


@functools.lru_cache(maxsize=None)
def option_specs(cls: type) -> tuple[OptionSpec, ...]:
  """The declared options of an ``Options`` class, in field order (nested groups included as one spec)."""
  hints = typing.get_type_hints(cls)
  specs = []
  for f in dataclasses.fields(cls):
    if not f.init or "help" not in f.metadata:
      continue
    base, is_list, optional = _unwrap(hints[f.name])
    default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
    m = f.metadata
    specs.append(OptionSpec(f.name, default, m["help"], base, is_list, optional, m["choices"], m["lower"], m["upper"],
                            m["upper_exclusive"], m["positive"]))
  return tuple(specs)


def _as_float(value: Any) -> Any:
  """An int as a float; anything else unchanged (the check then rejects what is not a number)."""
  return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


def is_group(spec: OptionSpec) -> bool:
  """Whether the option is a nested group of options."""
  return isinstance(spec.base_type, type) and issubclass(spec.base_type, Options)


@dataclasses.dataclass(frozen=True)
class Options:
  """Base of every config: checks each field against its ``option`` declaration, then ``validate``.

  ``HIDDEN`` names options of nested groups that a config does not expose (they
  keep their defaults); ``experiments/cli.py`` defines no flag for them.
  """

  HIDDEN: ClassVar[tuple[str, ...]] = ()

  def __post_init__(self):
    for spec in option_specs(type(self)):
      value = getattr(self, spec.name)
      if isinstance(value, list):
        value = tuple(value)
        object.__setattr__(self, spec.name, value)
      if is_group(spec):
        if not isinstance(value, spec.base_type):
          raise ConfigError(f"{spec.name} must be a {spec.base_type.__name__}, got {type(value).__name__}")
        continue
      if spec.base_type is float and value is not None:  # ints are accepted where floats are declared
        value = tuple(map(_as_float, value)) if spec.is_list else _as_float(value)
        object.__setattr__(self, spec.name, value)
      spec.check(value)
    self.validate()

  def validate(self) -> None:
    """Checks that involve several options (ValueError naming them); override in subclasses."""

  def check_given(self, given: Collection[str]) -> None:
    """Options typed but unused by this configuration raise ValueError (naming one); override in subclasses.

    Args:
      given: the names of the options typed on the command line (even where typed at their defaults).
    """


def flat_options(cls: type, hidden: Sequence[str] = ()) -> list[tuple[tuple[str, ...], OptionSpec]]:
  """Every leaf option of ``cls`` with its path of group names, nested groups expanded, ``hidden`` left out.

  The ``HIDDEN`` of ``cls`` applies to its nested groups only: an option of ``cls`` itself whose name a
  group hides (a study's own ``z_loss`` beside its optimizer group's) keeps its flag.
  """
  nested_hidden = tuple(set(hidden) | set(getattr(cls, "HIDDEN", ())))
  out = []
  for spec in option_specs(cls):
    if is_group(spec):
      for path, leaf in flat_options(spec.base_type, nested_hidden):
        default = spec.default
        for name in path:
          default = getattr(default, name)
        out.append(((spec.name, *path), dataclasses.replace(leaf, default=getattr(default, leaf.name))))
    elif spec.name not in hidden:
      out.append(((), spec))
  return out


def build(cls: type, values: dict[str, Any], default: Any = None) -> Any:
  """``cls`` from {leaf option name: value}; options not given keep the defaults of ``cls`` (and of its groups).

  ``default`` is the instance whose values stand for options not given (a group's default instance).
  """
  kwargs = {}
  for spec in option_specs(cls):
    current = spec.default if default is None else getattr(default, spec.name)
    if is_group(spec):
      kwargs[spec.name] = build(spec.base_type, values, current)
    elif spec.name in values:
      kwargs[spec.name] = values[spec.name]
    elif default is not None:
      kwargs[spec.name] = current
  return cls(**kwargs)


def to_dict(config: Any) -> dict[str, Any]:
  """A JSON-ready dict of a config (nested groups as dicts)."""
  return dataclasses.asdict(config)


def from_dict(cls: type, data: Mapping[str, Any]) -> Any:
  """The config of class ``cls`` from what ``to_dict`` wrote (read back from JSON or not): ``to_dict``'s inverse.

  Nested groups are built from their dicts and lists become tuples; options missing from ``data`` keep their
  defaults. The config checks itself as any config does when built.

  Args:
    cls: an ``Options`` class.
    data: {field name: value}, a nested group's value a dict of its own.

  Returns:
    The config.
  """
  if not (isinstance(cls, type) and issubclass(cls, Options)):
    raise ConfigTypeError(f"cls must be an Options class, got {cls!r}")
  if not isinstance(data, Mapping):
    raise ConfigTypeError(f"data must be a mapping, got {type(data).__name__}")
  groups = {spec.name: spec.base_type for spec in option_specs(cls) if is_group(spec)}
  names = [f.name for f in dataclasses.fields(cls) if f.init]
  unknown = [name for name in data if name not in names]
  if unknown:
    raise ConfigError(f"{cls.__name__} has no option {unknown[0]!r}{validation.suggestion(unknown[0], names)}")
  kwargs = {}
  for name, value in data.items():
    if name in groups and isinstance(value, Mapping):
      value = from_dict(groups[name], value)
    elif isinstance(value, list):
      value = tuple(value)
    kwargs[name] = value
  return cls(**kwargs)


def _leaves(config: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], OptionSpec, Any]]:
  """(group path, spec, value) of every leaf option of ``config``, nested groups expanded, hidden ones included."""
  for spec in option_specs(type(config)):
    value = getattr(config, spec.name)
    if is_group(spec):
      yield from _leaves(value, (*path, spec.name))
    else:
      yield path, spec, value


def _flag_value(value: Any) -> str:
  """An option's value as a flag writes it (lists comma-separated)."""
  return ",".join(map(str, value)) if isinstance(value, tuple) else str(value)


def command_line(config: Any) -> tuple[str, ...]:
  """The flags that give ``config`` on its command line (``experiments/cli.py``): those of the options it changes.

  One flag per leaf option whose value differs from that of ``type(config)()``, in declaration order:
  ``--name=value`` (lists comma-separated), ``--name`` or ``--noname`` for a boolean.

  Args:
    config: an ``Options`` config whose class builds with its defaults.

  Returns:
    The flags (none for a config at its defaults).

  Raises:
    ConfigError: a changed option that no flag can give (one a group hides, or None where the default is not).
  """
  if not isinstance(config, Options):
    raise ConfigTypeError(f"config must be an Options config, got {type(config).__name__}")
  exposed = {(path, spec.name) for path, spec in flat_options(type(config))}
  defaults = {(path, spec.name): value for path, spec, value in _leaves(type(config)())}
  out = []
  for path, spec, value in _leaves(config):
    if value == defaults[(path, spec.name)]:
      continue
    where = ".".join((*path, spec.name))
    if (path, spec.name) not in exposed:
      raise ConfigError(f"{where} is changed, but it has no flag (its group hides it)")
    if value is None:
      raise ConfigError(f"{where} is None, which no flag gives (its default is {defaults[(path, spec.name)]!r})")
    if spec.base_type is bool and not spec.is_list:
      out.append(f"--{'' if value else 'no'}{spec.name}")
    else:
      out.append(f"--{spec.name}={_flag_value(value)}")
  return tuple(out)


@dataclasses.dataclass(frozen=True)
class Seeds(Options):
  """The seeds of a study: ``seed`` .. ``seed + num_seeds - 1`` (mean and spread are over them)."""

  seed: int = option(0, "First seed (a study of several seeds uses seed, seed + 1, ...).", lower=0)
  num_seeds: int = option(2, "Independent seeds.", lower=1)

  def validate(self):
    if self.seed + self.num_seeds > 2**31 - 1:
      raise ConfigError(f"seed + num_seeds must stay below 2**31, got {self.seed} + {self.num_seeds}")

  @property
  def seeds(self) -> tuple[int, ...]:
    """The seeds, in order."""
    return tuple(range(self.seed, self.seed + self.num_seeds))
