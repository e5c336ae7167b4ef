"""Measures the claims of the notes this project started from and prints a verdict for each.

  python -m experiments.claims                      # every claim, ~1 minute on 2 CPU cores
  python -m experiments.claims --ids=gradients_vanish,rope_changes_norms

Writes claims.jsonl (one object per claim: id, source, claim, verdict, finding,
numbers), claims.md (a Markdown table) and config.json into --out_dir.
"""

from __future__ import annotations

import dataclasses
import textwrap

from absl import flags

from experiments import common
from scaling import claims as claims_lib
from scaling import io

_IDS = common.define_enum_list("ids", None, [c.id for c in claims_lib.CLAIMS], "Claims to measure (default: all).")
_D_K = common.define_int_list("d_k", "16,32,64,128,256,512,1024", "Head dimensions of the random-input sweeps "
                              "(must include 64 and 128).")
_NUM_SEEDS = flags.DEFINE_integer("num_seeds", 4, "Seeds per sweep configuration.", lower_bound=1)
_SEQ_LEN = flags.DEFINE_integer("seq_len", 128, "Sequence length of the random-input sweeps.", lower_bound=2)
_SEED = flags.DEFINE_integer("seed", 0, "Base random seed.", lower_bound=0)
_OUT_DIR = flags.DEFINE_string("out_dir", "runs/claims", "Output directory.")


@dataclasses.dataclass(frozen=True)
class ClaimsConfig:
  ids: tuple[str, ...] | None
  d_k: tuple[int, ...]
  num_seeds: int
  seq_len: int
  seed: int


def markdown_table(rows) -> str:
  """The claims as a Markdown table: claim, source, verdict, finding."""
  cell = lambda text: str(text).replace("|", "\\|")
  lines = ["| claim | source | verdict | what we measured |", "|---|---|---|---|"]
  for r in rows:
    lines.append(f"| {cell(r['claim'])} | {cell(r['source'])} | **{r['verdict']}** | {cell(r['finding'])} |")
  return "\n".join(lines) + "\n"


def main(argv):
  common.reject_extra_args(argv)
  config = ClaimsConfig(tuple(_IDS.value) if _IDS.value else None, tuple(sorted(set(_D_K.value))), _NUM_SEEDS.value,
                        _SEQ_LEN.value, _SEED.value)
  if not {64, 128} <= set(config.d_k):
    common.fail("--d_k must include 64 and 128 (two claims are about those head dims)")
  out_dir = common.prepare_out_dir(_OUT_DIR.value)
  io.write_json(out_dir / "config.json", dataclasses.asdict(config))
  partial = out_dir / "claims.partial.jsonl"
  partial.unlink(missing_ok=True)
  total = len(config.ids) if config.ids else len(claims_lib.CLAIMS)
  progress = common.Progress(total, "claims")
  ctx = claims_lib.Context(d_k=config.d_k, seq_len=config.seq_len, num_seeds=config.num_seeds, seed=config.seed)

  def on_result(row):
    io.append_jsonl(partial, row)
    progress.update(f"{row['id']}: {row['verdict']}")

  rows = claims_lib.run_claims(ctx, config.ids, on_result=on_result)
  io.write_jsonl(out_dir / "claims.jsonl", rows)
  (out_dir / "claims.md").write_text(markdown_table(rows))
  partial.unlink(missing_ok=True)
  for r in rows:
    print(f"[{r['verdict']:>13}] {r['claim']}  ({r['source']})")
    print(textwrap.indent(textwrap.fill(r["finding"], 100), " " * 16))
  counts = {v: sum(r["verdict"] == v for r in rows) for v in (claims_lib.HOLDS, claims_lib.PARTLY, claims_lib.FAILS)}
  print(f"\n{len(rows)} claims: " + ", ".join(f"{n} {v}" for v, n in counts.items()) + f"; wrote claims.jsonl and "
        f"claims.md to {out_dir}")


if __name__ == "__main__":
  common.run(main)
