"""The sizes a training claim was decided at, read from the grids it declares: what the tables print beside each
training verdict (width, d_k, depth, steps, precision, seeds, learning rates or logit multipliers).
"""

from __future__ import annotations

from typing import Any, Iterable

from scaling.studies.grid.run import GridSpec


def _values(values: Iterable[Any]) -> str:
  """Distinct values in order of first appearance, joined ("2 and 6", "64, 128 and 256")."""
  out = [str(v) for v in dict.fromkeys(values)]
  return out[0] if len(out) == 1 else f"{', '.join(out[:-1])} and {out[-1]}"


def grid_sizes(specs: Iterable[GridSpec]) -> dict[str, Any]:
  """The sizes of the grids a claim trains, each as the distinct values over its grids.

  Args:
    specs: the claim's grids (``Claim.grids(ctx).values()``), at least one.

  Returns:
    {"width", "head_dim", "depth", "steps", "dtype", "seeds", "swept"}: the first five as lists of distinct values;
    "seeds" the largest number of seeds of a grid; "swept" what the grids sweep, each distinct count once ("5
    learning rates", "5 logit multipliers at one learning rate").

  Raises:
    ValueError: no grids, or something that is not a ``GridSpec``.
  """
  specs = tuple(specs)
  if not specs:
    raise ValueError("specs: a training claim declares at least one grid")
  bad = [type(s).__name__ for s in specs if not isinstance(s, GridSpec)]
  if bad:
    raise ValueError(f"specs must be GridSpecs, got {', '.join(bad)}")
  distinct = lambda f: list(dict.fromkeys(f(s) for s in specs))
  return {"width": distinct(lambda s: s.model_config.width), "head_dim": distinct(lambda s: s.model_config.head_dim),
          "depth": distinct(lambda s: s.model_config.depth), "steps": distinct(lambda s: s.opt_config.steps),
          "dtype": distinct(lambda s: s.model_config.dtype), "seeds": max(len(s.seeds) for s in specs),
          "swept": distinct(_swept)}


def _swept(spec: GridSpec) -> str:
  """What one grid sweeps, in words."""
  if spec.attn_mults is not None:
    return f"{spec.num_values} logit multipliers at one learning rate"
  return f"{spec.num_values} learning rate{'s' if spec.num_values != 1 else ''}"


def sizes_text(sizes: dict[str, Any]) -> str:
  """``grid_sizes`` in words: "width 64, d_k 32, depth 2 and 6, 300 steps, float32, 3 seeds, 5 learning rates
  (declared; ...)"."""
  return (f"width {_values(sizes['width'])}, d_k {_values(sizes['head_dim'])}, depth {_values(sizes['depth'])}, "
          f"{_values(sizes['steps'])} steps, {_values(sizes['dtype'])}, {sizes['seeds']} seed"
          f"{'s' if sizes['seeds'] != 1 else ''}, {_values(sizes['swept'])} (declared; a grid whose optimum sits at its "
          f"edge is widened)")
