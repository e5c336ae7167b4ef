"""Bad input to every experiment: one line ``error: ...``, a non-zero exit, no traceback, nothing written."""

import os
import pathlib
import subprocess
import sys
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import pytest

import experiment_main
from experiments import attention_memory
from experiments import benchmark
from experiments import claims
from experiments import cli
from experiments import coord_check
from experiments import sweep
from experiments import train
from experiments import transfer
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct as flax_struct
import scaling
from scaling.attention import blockwise as blockwise_lib
from scaling.training.data.config import DataConfig
from scaling.attention import metrics as metrics_lib
from scaling.training.model import transformer as model_lib
from scaling.training.model.family import ModelFamily
from scaling.training.model.config import ModelConfig
from scaling.training.optimizer import OptimizerConfig
from scaling.training import resources
from scaling.training.loop import run as loop_lib
from scaling.training.loop import losses as losses_lib
from scaling.training.loop import transformer_step

ROOT = pathlib.Path(__file__).resolve().parents[1]

# Text files named in the table by placeholder; written once per test class.
FILES = {
    "{empty}": b"",
    "{short}": b"abcdefghij" * 2,  # 20 characters: less than one sequence of any study's default length
    "{binary}": b"\x7fELF\x02\x01\x01\x00" * 40,
    "{latin1}": "caf\u00e9 na\u00efve ".encode("latin-1") * 40,
}
HUGE = 1_000_000_000

CASES = (
    # sweep
    ("sweep_duplicate_d_k", sweep, dict(d_k="16,16"), "--d_k=16,16: '16' is given twice"),
    ("sweep_duplicate_rule", sweep, dict(rules="sqrt,sqrt"), "--rules"),
    ("sweep_empty_list", sweep, dict(d_k=""), "--d_k"),
    ("sweep_zero_seeds", sweep, dict(num_seeds=0), "--num_seeds"),
    ("sweep_huge_seed", sweep, dict(seed=2**31), "--seed"),
    ("sweep_unknown_dtype", sweep, dict(dtype="float64"), "--dtype"),
    ("sweep_nan_std", sweep, dict(qk_std="nan"), "--qk_std"),
    ("sweep_tau_without_rule", sweep, dict(tau=2.0), "--tau"),
    ("sweep_base_head_dim_unused", sweep, dict(base_head_dim=32, rules="sqrt"), "--base_head_dim"),
    ("sweep_dense_logits_too_big", sweep, dict(seq_len=2_000_000, d_k=1024), "--seq_len=2000000"),
    ("sweep_blockwise_too_big", sweep, dict(seq_len=2_000_000_000, d_k=16, attention="blockwise"),
     "blockwise attention logits"),
    ("sweep_huge_width", sweep, dict(parametrization="sp", width=HUGE, d_k=16), f"--width={HUGE}"),
    ("sweep_huge_seeds", sweep, dict(num_seeds=HUGE), f"--num_seeds={HUGE}"),
    ("sweep_rule_typo_named_once", sweep, dict(rules="sqrt,lineer"),
     "--rules=sqrt,lineer: 'lineer': must be one of none, sqrt, linear, quadratic, temperature, qk_norm, "
     "post_softmax, param (did you mean 'linear'?)"),
    # train
    ("train_rule_typo", train, dict(rule="lineer"), "--rule=lineer: 'lineer': must be one of default, none, sqrt,"),
    ("train_optimizer_typo", train, dict(optimizer="adamm"),
     "--optimizer=adamm: 'adamm': must be one of adam, adamw, sgd, adam_atan2 (did you mean 'adam'?)"),
    ("train_huge_width", train, dict(width=HUGE, steps=1), f"--width={HUGE}"),
    ("train_huge_seq_len", train, dict(seq_len=HUGE), "dense attention logits"),
    ("train_huge_vocab", train, dict(vocab_size=100 * HUGE), "readout logits"),
    ("train_huge_depth", train, dict(depth=10 * HUGE), "--depth"),
    ("train_steps_overflow", train, dict(steps=2**31), "--steps"),
    ("train_lr_overflows_float32", train, dict(learning_rate=1e39), "--learning_rate"),
    ("train_divergence_below_1", train, dict(divergence_factor=0.5), "--divergence_factor"),
    ("train_end_factor_above_1", train, dict(end_factor=2.0, schedule="cosine"), "--end_factor"),
    ("train_text_directory", train, dict(text_file="{dir}"), "is a directory"),
    ("train_text_device", train, dict(text_file="/dev/zero"), "not a regular file"),
    ("train_text_missing", train, dict(text_file="{dir}/missing.txt"), "does not exist"),
    ("train_text_empty", train, dict(text_file="{empty}"), "is empty"),
    ("train_text_binary", train, dict(text_file="{binary}"), "binary"),
    ("train_text_not_utf8", train, dict(text_file="{latin1}"), "not valid UTF-8"),
    ("train_text_short", train, dict(text_file="{short}"), "too short for one sequence"),
    ("train_qk_norm_without_rule", train, dict(qk_norm="layer"), "--qk_norm=layer only applies to --rule=qk_norm"),
    ("train_no_qk_gains_without_rule", train, dict(qk_norm_gains=False, rule="sqrt"), "--noqk_norm_gains only"),
    ("train_eps_scaling_with_atan2", train, dict(optimizer="adam_atan2", eps_scaling="mup"), "has no epsilon"),
    ("train_negative_z_loss", train, dict(z_loss=-0.1), "--z_loss"),
    # coord_check
    ("coord_one_width", coord_check, dict(widths="64"), "--widths"),
    ("coord_duplicate_width", coord_check, dict(widths="64,64"), "given twice"),
    ("coord_duplicate_parametrization", coord_check, dict(parametrizations="sp,sp"), "--parametrizations"),
    ("coord_huge_width", coord_check, dict(widths=f"64,{HUGE}"), f"--widths=64,{HUGE}"),
    ("coord_huge_seeds", coord_check, dict(num_seeds=HUGE), f"--num_seeds={HUGE}"),
    ("coord_text_short", coord_check, dict(text_file="{short}"), "too short for one sequence"),
    # transfer
    ("transfer_duplicate_lr", transfer, dict(log2_lrs="-3,-3.0"), "given twice"),
    ("transfer_huge_grid", transfer, dict(num_seeds=HUGE), f"--num_seeds={HUGE}"),
    ("transfer_huge_width", transfer, dict(widths=HUGE), f"--widths={HUGE}"),
    ("transfer_average_last", transfer, dict(average_last=1000, steps=10), "--average_last"),
    ("transfer_text_empty", transfer, dict(text_file="{empty}"), "is empty"),
    # options another axis does not use are refused when typed, even at their default values
    ("transfer_default_widths_on_depth_axis", transfer, dict(axis="depth", widths="32,64,128,256"),
     "--widths only applies to --axis=width"),
    ("transfer_default_depth_on_depth_axis", transfer, dict(axis="depth", depth=2), "--depth only applies"),
    ("transfer_default_rule_with_rules", transfer, dict(rules="sqrt,linear", rule="default"), "--rule does not apply"),
    ("coord_default_widths_on_depth_axis", coord_check, dict(axis="depth", widths="64,128,256,512,1024"),
     "--widths only applies to --axis=width"),
    # claims
    ("claims_duplicate_id", claims, dict(ids="variance_is_dk,variance_is_dk"), "--ids"),
    ("claims_duplicate_d_k", claims, dict(d_k="64,128,128"), "--d_k"),
    ("claims_huge_seq_len", claims, dict(seq_len=10_000_000), "--seq_len=10000000"),
    ("claims_huge_seeds", claims, dict(num_seeds=HUGE), f"--num_seeds={HUGE}"),
    ("claims_text_device", claims, dict(text_file="/dev/zero"), "not a regular file"),
    ("claims_text_short_for_training", claims, dict(text_file="{short}", ids="train_nan_within_100_steps"),
     "too short for one sequence"),
    ("claims_negative_seed", claims, dict(seed=-1), "--seed"),
    # benchmark and the attention-memory probe
    ("benchmark_duplicate_suite", benchmark, dict(suite="sweep,sweep"), "--suite"),
    ("benchmark_unknown_suite", benchmark, dict(suite="foo"), "--suite"),
    ("memory_fraction_above_1", attention_memory, dict(max_memory_fraction=2.0), "--max_memory_fraction"),
    ("memory_unknown_impl", attention_memory, dict(impl="foo"), "--impl"),
)


# Misuse of the library: (name, call, exception type, text the message must hold: the argument's name and more).
# Each check fires before anything is traced, so no case compiles a program.
Q, KV = jnp.ones((2, 8, 4, 16)), jnp.ones((2, 8, 2, 16))  # B = 2, T = S = 8, N = 4, K = 2, H = 16
BNTS = jnp.ones((2, 4, 8, 8))
ATTENTION = (("dot_product_attention", scaling.dot_product_attention),
             ("blockwise_attention", scaling.blockwise_attention),
             ("attention_with_aux", scaling.attention_with_aux))
ATTENTION_CASES = (
    # (name, args after q, k, v, kwargs, exception, needle)
    ("int_inputs", dict(query=jnp.ones((2, 8, 4, 16), jnp.int32)), {}, TypeError, "query must have a floating dtype"),
    ("mixed_dtypes", dict(key=KV.astype(jnp.bfloat16)), {}, TypeError, "one dtype"),
    ("rank_2", dict(query=jnp.ones((8, 16)), key=jnp.ones((8, 16)), value=jnp.ones((8, 16))), {}, ValueError,
     "got shapes (8, 16)"),
    ("gqa_heads", dict(query=jnp.ones((2, 8, 3, 16))), {}, ValueError, "query heads N (3) must be a multiple of key heads K (2)"),
    ("batch", dict(key=jnp.ones((3, 8, 2, 16)), value=jnp.ones((3, 8, 2, 16))), {}, ValueError, "batch B"),
    ("value_shape", dict(value=jnp.ones((2, 9, 2, 16))), {}, ValueError, "key and value must have the same shape"),
    ("empty_length", dict(query=jnp.ones((2, 0, 4, 16))), {}, ValueError, "query must have no empty axis"),
    ("bias_shape", {}, dict(bias=jnp.ones((2, 4, 8, 7))), ValueError, "bias of shape (2, 4, 8, 7) does not broadcast"),
    ("bias_kv_heads", {}, dict(bias=jnp.ones((2, 2, 8, 8))), ValueError, "bias of shape (2, 2, 8, 8)"),
    ("bias_rank_5", {}, dict(bias=jnp.ones((1, 2, 4, 8, 8))), ValueError, "bias must have at most 4 dimensions"),
    ("bias_bool", {}, dict(bias=jnp.ones((8, 8), bool)), TypeError, "bias must have a floating dtype"),
    ("mask_float", {}, dict(mask=jnp.ones((8, 8))), TypeError, "mask must be boolean"),
    ("mask_shape", {}, dict(mask=jnp.ones((8, 7), bool)), ValueError, "mask of shape (8, 7)"),
    ("mask_heads", {}, dict(mask=jnp.ones((2, 3, 8, 8), bool)), ValueError, "mask of shape (2, 3, 8, 8)"),
    ("lengths_size", {}, dict(query_seq_lengths=jnp.array([3, 4, 5])), ValueError, "query_seq_lengths must be [B] = [2]"),
    ("lengths_float", {}, dict(key_value_seq_lengths=jnp.array([3.0, 4.0])), TypeError,
     "key_value_seq_lengths must be integers"),
    ("lengths_negative", {}, dict(key_value_seq_lengths=np.array([3, -1])), ValueError,
     "key_value_seq_lengths must be >= 0"),
    ("window_negative", {}, dict(local_window_size=-1), ValueError, "local_window_size must be an int >= 0"),
    ("window_float", {}, dict(local_window_size=1.5), ValueError, "local_window_size"),
    ("window_triple", {}, dict(local_window_size=(1, 2, 3)), ValueError, "local_window_size"),
    ("window_one_tuple", {}, dict(local_window_size=(1,)), ValueError, "(left, right) pair"),
    ("causal_string", {}, dict(is_causal="yes"), TypeError, "is_causal must be True or False"),
    ("rule_typo", {}, dict(rule="lineer"), ValueError, "unknown logit-scale rule 'lineer' (did you mean 'linear'?)"),
    ("rule_int", {}, dict(rule=3), TypeError, "rule must be a name or a ScaleRule"),
    ("scale_string", {}, dict(scale="a"), TypeError, "scale must be a number"),
    ("scale_nan", {}, dict(scale=float("nan")), ValueError, "scale must be finite"),
    ("scale_negative", {}, dict(scale=-1.0), ValueError, "scale must be >= 0"),
    ("soft_cap_string", {}, dict(logit_soft_cap="x"), TypeError, "logit_soft_cap must be a number"),
)


def _attention_cases():
  for fn_name, fn in ATTENTION:
    for name, arrays, kwargs, kind, needle in ATTENTION_CASES:
      yield (f"{fn_name}_{name}", fn, arrays, kwargs, kind, needle)


def _no_params_parametrized():
  """SP applied to a model without parameters: enough to build its optimizers."""
  return scaling.parametrize(scaling.mup.roles.from_kinds({}, {}, 1.0), "sp")


_CFG = dict(vocab_size=16, width=32, depth=1, num_heads=2, head_dim=16)
@flax_struct.dataclass
class _UserRule(scaling.ScaleRule):
  """A user's rule: its own logit_scale is checked like the built-in rules'."""

  def logit_scale(self, head_dim):
    return head_dim ** -1.5


LIBRARY_CASES = (
    ("dpa_implementation", lambda: scaling.dot_product_attention(Q, KV, KV, implementation="fast"), ValueError,
     "implementation must be None or one of"),
    *((("dpa_cudnn_without_gpu", lambda: scaling.dot_product_attention(Q, KV, KV, implementation="cudnn"),
         ValueError, "implementation='cudnn' needs a GPU"),) if jax.default_backend() != "gpu" else ()),
    ("dpa_return_weights", lambda: scaling.dot_product_attention(Q, KV, KV, return_weights=1), TypeError,
     "return_weights must be True or False"),
    ("blockwise_block_q", lambda: scaling.blockwise_attention(Q, KV, KV, block_q=0), ValueError, "block_q"),
    ("blockwise_block_k_bool", lambda: scaling.blockwise_attention(Q, KV, KV, block_k=True), ValueError, "block_k"),
    ("tile_count_block_q", lambda: blockwise_lib.blockwise_tile_count(Q, KV, KV, block_q=-1), ValueError, "block_q"),
    ("logits_rank", lambda: scaling.attention_logits(jnp.ones((8, 16)), jnp.ones((8, 16))), ValueError, "query"),
    ("weights_gqa", lambda: scaling.attention_weights(jnp.ones((2, 8, 3, 16)), KV), ValueError, "query heads N (3)"),
    ("masked_softmax_mask_float", lambda: scaling.masked_softmax(jnp.ones((4, 8)), jnp.ones((4, 8))), TypeError,
     "mask must be boolean"),
    ("masked_softmax_mask_shape", lambda: scaling.masked_softmax(jnp.ones((4, 8)), jnp.ones((4, 7), bool)),
     ValueError, "mask of shape (4, 7)"),
    ("masked_softmax_int", lambda: scaling.masked_softmax(jnp.ones((4, 8), jnp.int32), None), TypeError,
     "logits must have a floating dtype"),
    ("logit_stats_rank", lambda: scaling.logit_stats_per_head(jnp.ones((4, 8))), ValueError,
     "logits must be [B, N, T, S]"),
    ("logit_stats_mask_float", lambda: scaling.logit_stats_per_head(BNTS, BNTS), TypeError, "mask must be boolean"),
    ("weight_stats_mask_shape", lambda: scaling.weight_stats_per_head(BNTS, jnp.ones((2, 4, 8, 7), bool)),
     ValueError, "mask of shape (2, 4, 8, 7)"),
    ("row_entropy_int", lambda: metrics_lib.row_entropy(jnp.ones((8, 8), jnp.int32)), TypeError,
     "p must have a floating"),
    ("row_entropy_scalar", lambda: metrics_lib.row_entropy(jnp.ones(())), ValueError, "p must be [..., S]"),
    ("jacobian_scalar", lambda: metrics_lib.softmax_jacobian(jnp.ones(())), ValueError, "p must be [..., S]"),
    ("jacobian_norm_int", lambda: metrics_lib.softmax_jacobian_fro_norm(jnp.ones((3,), jnp.int32)), TypeError,
     "p must"),
    ("metrics_cotangent", lambda: scaling.attention_metrics_per_head(Q, KV, KV, jnp.ones((2, 8, 4, 15))), ValueError,
     "cotangent must have the output's shape"),
    ("metrics_unbatched", lambda: scaling.attention_metrics_per_head(Q[0], KV[0], KV[0], Q[0]), ValueError,
     "query must be [B, T, N, H]"),
    ("average_heads_array", lambda: scaling.average_heads(jnp.ones(3)), TypeError, "per_head must be a dict"),
    ("rope_odd", lambda: scaling.apply_rope(jnp.ones((2, 8, 4, 15))), ValueError, "even head_dim"),
    ("rope_rank", lambda: scaling.apply_rope(jnp.ones((8, 16))), ValueError, "x must be [B, T, N, H]"),
    ("rope_int", lambda: scaling.apply_rope(jnp.ones((2, 8, 4, 16), jnp.int32)), TypeError, "x must have a floating"),
    ("rope_positions", lambda: scaling.apply_rope(Q, jnp.arange(7)), ValueError, "positions must be [T] or [B, T]"),
    ("rope_positions_batch", lambda: scaling.apply_rope(Q, jnp.ones((3, 8))), ValueError, "positions of shape"),
    ("rope_base", lambda: scaling.apply_rope(Q, base=0.0), ValueError, "base must be positive"),
    ("get_rule_typo", lambda: scaling.get_rule("quadratik"), ValueError, "did you mean 'quadratic'?"),
    ("get_rule_option", lambda: scaling.get_rule("linear", foo=1), ValueError, "bad options for rule 'linear'"),
    ("get_rule_base_head_dim", lambda: scaling.get_rule("linear", base_head_dim=-3), ValueError,
     "base_head_dim must be positive"),
    ("get_rule_tau_string", lambda: scaling.get_rule("temperature", tau="a"), TypeError, "tau must be a number"),
    ("register_rule_factory", lambda: scaling.register_rule("not_callable", 3), TypeError, "factory must be"),
    ("get_parametrization_typo", lambda: scaling.get_parametrization("mupp"), ValueError,
     "unknown parametrization 'mupp' (did you mean 'mup'?)"),
    ("get_parametrization_option", lambda: scaling.get_parametrization("mup", foo=1), ValueError, "foo"),
    ("parametrize_optimizer_name", lambda: _no_params_parametrized().optimizer("adamm", 1e-3), ValueError,
     "unknown optimizer 'adamm' (did you mean 'adam'?)"),
    ("parametrize_optimizer_nesterov",
     lambda: _no_params_parametrized().optimizer("sgd", 1e-3, momentum=0.9, nesterov="yes"), TypeError, "nesterov"),
    ("parametrize_scheme", lambda: scaling.parametrize(scaling.mup.roles.from_kinds({}, {}, 1.0), 3), TypeError,
     "parametrization must be a name or a Parametrization"),
    ("parametrize_scale_lr_optimizer", lambda: _no_params_parametrized().scale_lr("adamm"), ValueError,
     "unknown optimizer 'adamm'"),
    ("optimizer_config_typo", lambda: OptimizerConfig(optimizer="adamm"), ValueError,
     "optimizer must be one of adam, adamw, sgd, adam_atan2; got 'adamm' (did you mean 'adam'?)"),
    ("optimizer_config_lr", lambda: OptimizerConfig(learning_rate=-1.0), ValueError, "learning_rate"),
    ("optimizer_config_steps", lambda: OptimizerConfig(steps=2.5), ValueError, "steps must be an integer"),
    ("data_config_task", lambda: DataConfig(task="recal"), ValueError, "(did you mean 'recall'?)"),
    ("data_config_seq_len", lambda: DataConfig(seq_len=0), ValueError, "seq_len"),
    ("model_family_rule", lambda: ModelFamily(rule="lineer"), ValueError,
     "got 'lineer' (did you mean 'linear'?)"),
    ("model_config_width", lambda: ModelConfig(**{**_CFG, "width": 0}), ValueError, "width"),
    ("model_config_causal", lambda: ModelConfig(**_CFG, causal="yes"), TypeError, "causal must be True"),
    ("model_config_rule_name", lambda: ModelConfig(**_CFG, rule="sqrt"), ValueError,
     "rule must be a ScaleRule object"),
    ("model_config_gqa", lambda: ModelConfig(**_CFG, num_kv_heads=3), ValueError, "num_kv_heads"),
    ("param_kinds_config", lambda: model_lib.param_kinds(3), TypeError,
     "config must be a scaling.training.model.config.ModelConfig"),
    ("transformer_config", lambda: model_lib.Transformer("gpt2"), TypeError,
     "config must be a scaling.training.model.config.ModelConfig"),
    ("apply_with_aux_model", lambda: model_lib.apply_with_aux(3, {}, jnp.ones((1, 8), jnp.int32)), TypeError,
     "model must be a scaling.training.model.transformer.Transformer"),
    ("model_config_dtype", lambda: ModelConfig(**_CFG, dtype="bfloat61"), ValueError,
     "dtype must be one of float32, bfloat16, float16; got 'bfloat61' (did you mean 'bfloat16'?)"),
    ("data_config_batch_size", lambda: DataConfig(batch_size="2"), ValueError, "batch_size"),
    ("z_loss_weights", lambda: losses_lib.z_loss(jnp.ones((2, 3, 4)), jnp.ones((2, 4)), 0.1), ValueError,
     "weights must be [B, T]"),
    ("z_loss_coefficient", lambda: losses_lib.z_loss(jnp.ones((2, 3, 4)), jnp.ones((2, 3)), -0.1), ValueError,
     "coefficient must be >= 0"),
    ("run_training_model", lambda: loop_lib.run_training("m", OptimizerConfig(), None), TypeError,
     "model must be a scaling.training.model.config.ModelConfig or a training program"),
    ("run_training_dataset",
     lambda: loop_lib.run_training(ModelConfig(**_CFG), OptimizerConfig(), "d"), TypeError,
     "dataset must be"),
    ("train_step_state", lambda: transformer_step.train_step(3, {}, model=None, optimizer=None, opt_config=None),
     TypeError, "state must be a TrainState"),
    ("make_attention_fn_rule", lambda: scaling.make_attention_fn(rule="lineer"), ValueError, "did you mean 'linear'"),
    ("rule_logit_scale_zero", lambda: scaling.get_rule("sqrt").logit_scale(0), ValueError,
     "head_dim must be a positive integer, got 0"),
    ("rule_weight_scale_float", lambda: scaling.get_rule("post_softmax").weight_scale(2.5), ValueError,
     "head_dim must be a positive integer"),
    ("user_rule_logit_scale_negative", lambda: _UserRule().logit_scale(-4), ValueError,
     "head_dim must be a positive integer, got -4"),
)


class LibraryMisuseTest(parameterized.TestCase):
  """Each misuse raises scaling's own ConfigError (a ValueError; ConfigTypeError also a TypeError) naming the argument."""

  def _check(self, call, kind, needle):
    with self.assertRaises(kind) as caught:
      call()
    self.assertIsInstance(caught.exception, scaling.ConfigError)
    if kind is TypeError:
      self.assertIsInstance(caught.exception, scaling.ConfigTypeError)
    self.assertIn(needle, str(caught.exception))

  @parameterized.named_parameters(*_attention_cases())
  def test_attention(self, fn, arrays, kwargs, kind, needle):
    qkv = dict(query=Q, key=KV, value=KV, **{})
    qkv.update(arrays)
    self._check(lambda: fn(qkv["query"], qkv["key"], qkv["value"], **kwargs), kind, needle)

  @parameterized.named_parameters(*LIBRARY_CASES)
  def test_library(self, call, kind, needle):
    self._check(call, kind, needle)

  def test_good_inputs_pass_the_checks(self):
    # The same shapes, well formed, reach the computation (jax.nn as the reference): the checks refuse no good input.
    mask = jnp.tril(jnp.ones((8, 8), bool))
    out = scaling.dot_product_attention(Q, KV, KV, jnp.zeros((4, 8, 8)), mask, local_window_size=(3, np.int64(0)),
                                        key_value_seq_lengths=np.array([8, 5]), implementation="dense")
    expected = jax.nn.dot_product_attention(Q, KV, KV, jnp.zeros((4, 8, 8)), mask, local_window_size=(3, 0),
                                            key_value_seq_lengths=jnp.array([8, 5]))
    np.testing.assert_allclose(out, expected, atol=1e-6)
    # traced arrays pass the checks without being read: lengths, bias and a scale under jit
    traced = jax.jit(lambda lens, bias, s: scaling.dot_product_attention(
        Q, KV, KV, bias, mask, scale=s, key_value_seq_lengths=lens, local_window_size=(3, 0), implementation="dense"))
    np.testing.assert_allclose(traced(jnp.array([8, 5]), jnp.zeros((4, 8, 8)), jnp.float32(0.25)), expected,
                               atol=1e-6)


class BadInputTest(parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.dir = pathlib.Path(absltest.get_default_test_tmpdir()) / "bad_inputs"
    cls.dir.mkdir(parents=True, exist_ok=True)
    cls.paths = {"{dir}": str(cls.dir)}
    for name, raw in FILES.items():
      path = cls.dir / (name.strip("{}") + ".txt")
      path.write_bytes(raw)
      cls.paths[name] = str(path)

  def _flags(self, flags):
    out = {}
    for name, value in flags.items():
      if isinstance(value, str):
        for placeholder, path in self.paths.items():
          value = value.replace(placeholder, path)
      out[name] = value
    return out

  @parameterized.named_parameters(*CASES)
  def test_refused_with_one_line(self, module, flags, needle):
    flags = self._flags(flags)
    out_dir = None
    if module is not attention_memory:
      out_dir = str(self.dir / f"out_{self._testMethodName}")
      flags["out_dir"] = out_dir
    code, stdout, stderr = experiment_main.run_main(module, **flags)
    experiment_main.assert_one_line_error(self, code, stdout, stderr, needle, out_dir)


class AllocationFailureTest(absltest.TestCase):

  def test_out_of_memory_in_xla_is_one_line_and_removes_new_files(self):
    # The estimate is told there is plenty of memory, so the sweep runs and XLA's allocation fails.
    out = pathlib.Path(self.create_tempdir().full_path) / "out"
    out.mkdir()
    (out / "kept.txt").write_text("from an earlier run")
    with mock.patch.object(resources, "available_bytes", lambda: (2**90, "")):
      code, stdout, stderr = experiment_main.run_main(sweep, seq_len=2_000_000, d_k=16, num_seeds=1, rules="sqrt",
                                                      batch=1, num_heads=1, out_dir=str(out))
    self.assertEqual(code, cli.OUT_OF_MEMORY, stderr)
    self.assertNotIn("Traceback", stderr)
    lines = stderr.strip().splitlines()
    self.assertLen(lines, 1, stderr)
    self.assertTrue(lines[0].startswith("error: out of memory: RESOURCE_EXHAUSTED"), lines[0])
    self.assertEqual(stdout, "")
    self.assertEqual(sorted(os.listdir(out)), ["kept.txt"])  # config.json and the partial rows are gone

  def test_memory_error_removes_a_new_out_dir(self):
    out = pathlib.Path(self.create_tempdir().full_path) / "new" / "out"

    def run(config, out_dir):
      out_dir.mkdir(parents=True)
      (out_dir / "rows.jsonl").write_text("{}\n")
      raise MemoryError()

    code, _, stderr = experiment_main.run_main(
        type("module", (), {"__name__": "prog", "main": staticmethod(
            lambda argv: cli.main(benchmark.BenchmarkConfig, run, argv))}), out_dir=str(out))
    self.assertEqual(code, cli.OUT_OF_MEMORY)
    self.assertLen(stderr.strip().splitlines(), 1, stderr)
    self.assertTrue(stderr.startswith("error: out of memory"), stderr)
    self.assertFalse(out.exists())

  def _main_raising(self, error):
    def run(config, out_dir):
      raise error

    return lambda argv: cli.main(benchmark.BenchmarkConfig, run, argv)

  def test_config_error_from_a_study_is_one_line(self):
    out = str(pathlib.Path(self.create_tempdir().full_path) / "out")
    module = type("module", (), {"__name__": "prog", "main": staticmethod(
        self._main_raising(scaling.ConfigError("--width=3 is too small for --num_heads=4")))})
    code, stdout, stderr = experiment_main.run_main(module, out_dir=out)
    experiment_main.assert_one_line_error(self, code, stdout, stderr, "error: --width=3 is too small", out)

  def test_value_error_from_a_bug_keeps_its_traceback(self):
    # A ValueError that is not a ConfigError is a bug inside a study: it propagates (absl prints the traceback).
    main = self._main_raising(ValueError("operands could not be broadcast together"))
    with self.assertRaisesRegex(ValueError, "operands could not be broadcast"):
      main(["prog", f"--out_dir={self.create_tempdir().full_path}"])

  @pytest.mark.slow  # the command line in a process of its own
  def test_a_bug_exits_1_with_its_traceback(self):
    proc = subprocess.run([sys.executable, "-c", "import scaling, sys; from experiments import cli, benchmark\n"
                           "def run(config, out_dir): raise ValueError('a bug')\n"
                           "sys.exit(cli.main(benchmark.BenchmarkConfig, run, ['prog', '--out_dir=/dev/null/x']))"],
                          cwd=ROOT, env={**os.environ, "JAX_PLATFORMS": "cpu"}, capture_output=True, text=True,
                          timeout=120)
    self.assertEqual(proc.returncode, 1, proc.stderr)
    self.assertIn("Traceback", proc.stderr)
    self.assertIn("ValueError: a bug", proc.stderr)

  def test_other_errors_are_not_swallowed(self):
    def run(config, out_dir):
      raise RuntimeError("a bug")

    with self.assertRaisesRegex(RuntimeError, "a bug"):
      cli.main(benchmark.BenchmarkConfig, run, ["prog", f"--out_dir={self.create_tempdir().full_path}"])

  @pytest.mark.slow  # the command line in a process of its own (XLA's abort would end this one)
  def test_huge_width_is_refused_before_jax_aborts(self):
    # Before the estimate, XLA aborted the process (exit 134) on this width; a subprocess survives that.
    out = pathlib.Path(self.create_tempdir().full_path) / "out"
    proc = subprocess.run([sys.executable, "-m", "experiments.train", f"--width={HUGE}", "--steps=1",
                           f"--out_dir={out}"], cwd=ROOT, env={**os.environ, "JAX_PLATFORMS": "cpu"},
                          capture_output=True, text=True, timeout=120)
    experiment_main.assert_one_line_error(self, proc.returncode, proc.stdout, proc.stderr, f"--width={HUGE}",
                                          str(out))
    self.assertIn("optimizer state", proc.stderr)


if __name__ == "__main__":
  absltest.main()
