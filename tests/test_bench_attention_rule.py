"""The attention_rule benchmark suite: its plan, a quick run's measurements and the Markdown built from them."""

import contextlib
import dataclasses
import io as std_io
import json
import pathlib

from absl.testing import absltest

from scaling.attention import dispatch as attention_lib
from scaling.attention import logits as logits_lib
from scaling.attention import autotune
from benchmarks import attention_rule
from scaling.base.validation import ConfigError

Row, Table = attention_rule.Row, attention_rule.Table


def _rule_name(row: Row, mode: str) -> str:
  """The path the dispatcher runs for the row in the pass, from ``select_implementation`` itself."""
  opts = logits_lib.resolve_logit_options(row.head_dim, scale=None, rule=None, logit_soft_cap=None,
                                          logit_clamp=None, float32_softmax=True, subtract_max=True)
  choice = attention_lib.select_implementation((row.batch, row.q_len, row.num_heads, row.head_dim),
                                               (row.batch, row.kv_len, row.num_kv_heads, row.head_dim), opts,
                                               is_causal=row.causal)
  path = choice.forward if mode == "fwd" and choice.forward is not None else choice
  return autotune.choice_name(dataclasses.replace(path, forward=None))


class PlanTest(absltest.TestCase):

  def test_columns_resolve_to_tiles_within_the_row(self):
    self.assertEqual(attention_rule.resolve("T x S", 200, 2048), "blockwise 200x2048")
    self.assertEqual(attention_rule.resolve("T x T", 200, 2048), "blockwise 200x200")
    self.assertEqual(attention_rule.resolve("T x 512", 1, 4096), "blockwise 1x512")
    self.assertEqual(attention_rule.resolve("128x256", 100, 200), "blockwise 100x200")  # capped at T and S
    self.assertEqual(attention_rule.resolve("dense", 8, 8), "dense")
    self.assertEqual(attention_rule.resolve("jax.nn", 8, 8), "jax.nn")

  def test_a_row_of_two_tables_is_measured_once_with_both_tables_paths_and_the_rule_path(self):
    row = Row(1, 256, 2, 1, 256, True, modes=("fwd+bwd",))
    tables = (Table("a", "A", ("64x128",), (row,)), Table("b", "B", ("128x128", "dense"), (row,), baseline="jax.nn"),
              Table("c", "C", ("32x32",), (Row(1, 64, 2, 2, 64, False, modes=("fwd",)),)))
    plan = attention_rule.plan(attention_rule.AttentionRuleConfig(tables=tables, rule_tables=("a", "b")))
    (entry,) = plan.values()  # table c not selected
    rule = _rule_name(row, "fwd+bwd")
    self.assertEqual(entry["rule"], rule)
    self.assertEqual(entry["paths"], list(dict.fromkeys(
        ["blockwise 64x128", rule, "blockwise 128x128", "dense", "jax.nn"])))

  def test_every_default_table_has_rows_and_a_known_baseline(self):
    self.assertLen(set(attention_rule.TABLE_NAMES), len(attention_rule.TABLES))
    for table in attention_rule.TABLES:
      self.assertNotEmpty(table.rows, table.name)
      self.assertIn(table.baseline, (attention_rule.FASTEST, attention_rule.JAX_NN))
      for row in table.rows:
        self.assertEqual(row.num_heads % row.num_kv_heads, 0, (table.name, row))
        self.assertTrue(set(row.paths or table.columns) <= set(table.columns), (table.name, row))

  def test_unknown_table_is_refused(self):
    with self.assertRaisesRegex(ConfigError, "rule_tables must name tables of"):
      attention_rule.AttentionRuleConfig(rule_tables=("nope",))


class QuickRunTest(absltest.TestCase):

  def test_quick_run_writes_every_measurement_and_its_table(self):
    out = pathlib.Path(self.create_tempdir().full_path)
    with contextlib.redirect_stdout(std_io.StringIO()):
      result = attention_rule.run(attention_rule.QUICK, out)
    data = json.loads((out / "attention_rule.json").read_text())
    self.assertEqual(set(result), set(data))
    (table,) = attention_rule.QUICK.tables
    self.assertLen(data["measurements"], sum(len(row.modes) for row in table.rows))
    text = (out / "attention_rule.md").read_text()
    self.assertEqual(attention_rule.markdown_from_results(data, attention_rule.QUICK.tables), text)
    for row in table.rows:
      for mode in row.modes:
        (m,) = [m for m in data["measurements"] if m["key"] == list(attention_rule._key(row, mode))]
        self.assertEqual(m["status"], "ok")
        self.assertEqual(m["rule"], _rule_name(row, mode))
        self.assertEqual(set(m["ms"]), set(m["paths"]))
        self.assertIn(m["rule"], m["ms"])
        self.assertTrue(all(ms == min(m["times_s"][p]) * 1e3 > 0 for p, ms in m["ms"].items()))  # the fastest call
        # The row's line: each column's ms and its time over jax.nn's (the quick table's baseline), * on the rule's.
        base = m["ms"]["jax.nn"]
        cells = []
        for column in table.columns:
          path = attention_rule.resolve(column, row.q_len, row.kv_len)
          if column not in (row.paths or table.columns):
            cells.append("")
            continue
          ms = m["ms"][path]
          cells.append(f"{ms:.3g} ({ms / base:.2f})" + ("*" if path == m["rule"] else ""))
        rule = m["rule"].replace("blockwise ", "")
        line = " | ".join(map(str, [row.batch, row.q_len, row.num_heads, row.num_kv_heads, row.kv_len, row.head_dim,
                                    "causal" if row.causal else "none", mode, *cells, f"{base:.3g}",
                                    f"{rule} ({m['ms'][m['rule']] / base:.2f})"]))
        self.assertIn(f"| {line} |", text)
    self.assertTrue(text.rstrip().endswith(f"- the suite took {data['wall_s'] / 60:.0f} min"))

  def test_rows_over_the_limit_are_listed_as_skipped(self):
    out = pathlib.Path(self.create_tempdir().full_path)
    config = attention_rule.AttentionRuleConfig(tables=attention_rule.QUICK.tables, rule_tables=("quick",),
                                                rule_max_gflop=1e-9)
    with contextlib.redirect_stdout(std_io.StringIO()):
      data = attention_rule.run(config, out)
    self.assertTrue(all(m["status"] == "skipped" and "GFLOP" in m["reason"] for m in data["measurements"]))
    text = (out / "attention_rule.md").read_text()
    self.assertIn(f"The {len(data['measurements'])} of {len(data['measurements'])} rows over 1e-09 GFLOP were not "
                  "timed", text)
    self.assertIn("| skipped |", text)


if __name__ == "__main__":
  absltest.main()
