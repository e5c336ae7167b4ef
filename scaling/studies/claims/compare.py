"""Two claims runs side by side: each claim's statistic and verdict in both, and the time each run spent on it.

What ``scripts/compare_claims.py`` prints, e.g. the training claims in bfloat16 compute against float32
(``experiments.claims --compute_dtype``): how far each statistic moved, whether the verdict changed, and the time
ratio. Only what the two runs measured is compared; nothing is judged here beyond the verdicts each run decided.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from scaling.base.validation import ConfigError
from scaling.runs import report


def _number(value: Any) -> float:
  """A statistic as a float (NaN when it is missing or not a number)."""
  try:
    return float(value)
  except (TypeError, ValueError):
    return math.nan


def compare_rows(rows_a: Sequence[Mapping[str, Any]], rows_b: Sequence[Mapping[str, Any]],
                 seconds_a: Mapping[str, float] | None = None,
                 seconds_b: Mapping[str, float] | None = None) -> list[dict[str, Any]]:
  """One entry per claim measured in both runs (in run A's order), with its statistic in each.

  Args:
    rows_a, rows_b: the rows of two runs' claims.jsonl.
    seconds_a, seconds_b: each claim's seconds (the runs' timings.jsonl), or None.

  Returns:
    [{"id", "statistic", "a", "b", "difference" (b − a), "relative" (|b − a| / |a|, NaN where a is 0 or not
    finite), "verdict_a", "verdict_b", "same_verdict", "seconds_a", "seconds_b"}], for the claims with a statistic
    in both runs.

  Raises:
    ConfigError: the runs share no measured claim.
  """
  by_id = {r["id"]: r for r in rows_b}
  out = []
  for a in rows_a:
    b = by_id.get(a["id"])
    if b is None or a.get("statistic") is None or a.get("statistic") != b.get("statistic"):
      continue
    va, vb = _number(a.get("value")), _number(b.get("value"))
    diff = vb - va
    relative = abs(diff) / abs(va) if math.isfinite(va) and va != 0 else math.nan
    out.append({"id": a["id"], "statistic": a["statistic"], "a": va, "b": vb, "difference": diff,
                "relative": relative, "verdict_a": a["verdict"], "verdict_b": b["verdict"],
                "same_verdict": a["verdict"] == b["verdict"],
                "seconds_a": (seconds_a or {}).get(a["id"], math.nan),
                "seconds_b": (seconds_b or {}).get(a["id"], math.nan)})
  if not out:
    raise ConfigError("the two runs share no claim measured with the same statistic")
  return out


def seconds_by_claim(timings: Sequence[Mapping[str, Any]]) -> dict[str, float]:
  """{claim id: seconds} from a claims run's timings.jsonl rows ({"id", "seconds"}; a resumed claim's last)."""
  return {str(t["id"]): float(t["seconds"]) for t in timings if "id" in t and "seconds" in t}


def _g(x: float, spec: str = ".4g") -> str:
  return "n/a" if not math.isfinite(x) else format(x, spec)


def comparison_markdown(entries: Sequence[Mapping[str, Any]], label_a: str, label_b: str) -> str:
  """``compare_rows``' entries as a Markdown table, then a line with the count of changed verdicts and the runs'
  total seconds over the compared claims.

  Args:
    entries: ``compare_rows``' result.
    label_a, label_b: what each run is (e.g. "float32", "bfloat16").

  Returns:
    Markdown.
  """
  if not entries:
    raise ConfigError("entries must hold at least one compared claim")
  table = report.markdown_table(
      ("claim", "statistic", label_a, label_b, f"{label_b} − {label_a}", "relative", f"verdict {label_a}",
       f"verdict {label_b}", f"seconds {label_a}", f"seconds {label_b}"),
      [(f"`{e['id']}`", f"`{e['statistic']}`", _g(e["a"]), _g(e["b"]), _g(e["difference"], "+.3g"),
        _g(e["relative"], ".2g"), e["verdict_a"], e["verdict_b"] if e["same_verdict"] else f"**{e['verdict_b']}**",
        _g(e["seconds_a"], ".1f"), _g(e["seconds_b"], ".1f")) for e in entries])
  changed = [e["id"] for e in entries if not e["same_verdict"]]
  total_a = sum(e["seconds_a"] for e in entries if math.isfinite(e["seconds_a"]))
  total_b = sum(e["seconds_b"] for e in entries if math.isfinite(e["seconds_b"]))
  ratio = f" ({total_b / total_a:.2f}×)" if total_a > 0 else ""
  relative = [e["relative"] for e in entries if math.isfinite(e["relative"])]
  median = sorted(relative)[len(relative) // 2] if relative else math.nan
  return (f"{table}\n\n{len(entries)} claims compared: {len(changed)} verdicts differ"
          + (f" ({', '.join(changed)})" if changed else "")
          + f"; median relative change of the statistic {_g(median, '.2g')}; seconds over these claims "
          f"{total_a:.0f} ({label_a}) and {total_b:.0f} ({label_b}){ratio}.\n")
