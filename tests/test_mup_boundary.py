"""Bad models at the μP boundary: each mistake is one ConfigError naming the argument, before any training.

The μP API (``scaling.coord_check``, ``scaling.transfer``, ``scaling.WidthParametrization``, ``scaling.parametrize``,
``scaling.infer_kinds``, ``scaling.PureModel``) gets the attention API's treatment: a corpus of bad inputs, each one
line naming the argument, and a property test of random small models with a random mistake. The training loop is
stubbed: a call that passes the boundary raises ``_Reached`` instead of training, so nothing here trains.

"Before compilation" is measured by calling each case twice: the first call compiles the small eager programs any
call does (the batches stacked over steps, a key); in the second, a compiled program can only be one of the model
(its init, its loss, its training), built afresh from new closures. The abstract checks compile none; the two that
need numbers (an init that draws NaN, a loss that is not finite at initialization) compile at most the model's init
and its loss at the smallest width, never the training program.
"""

import dataclasses
from typing import Any, Callable
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import flax.linen as nn
import hypothesis
from hypothesis import strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import optax

import scaling
from scaling.training.loop import run as loop_lib

_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_COMPILES = []


def _count_compiles(event, duration, **kwargs):
  del duration, kwargs
  if event == _COMPILE_EVENT:
    _COMPILES.append(event)


def setUpModule():
  jax.monitoring.register_event_duration_secs_listener(_count_compiles)


def tearDownModule():
  jax.monitoring.unregister_event_duration_listener(_count_compiles)


class _Reached(Exception):
  """What the stubbed training loop raises: the call passed every check of the boundary."""


def _no_training(*args, **kwargs):
  raise _Reached()


# ---------------------------------------------------------------------------------------------------------------
# Small models: an MLP of `depth` hidden layers, as a PureModel (a plain JAX function) or a flax.linen module.


@dataclasses.dataclass(frozen=True)
class Spec:
  """A small model and the call that studies it."""

  kind: str = "pure"          # "pure" or "linen"
  depth: int = 1              # hidden layers
  d_in: int = 4
  d_out: int = 2
  batch_size: int = 4
  widths: tuple[int, ...] = (8, 16)
  api: str = "coord_check"    # or "transfer"
  custom_optimizer: bool = False


def _nan_init(key, shape, dtype=jnp.float32):
  return jax.nn.initializers.lecun_normal()(key, shape, dtype).at[(0,) * len(shape)].set(jnp.nan)


class LinenMLP(nn.Module):
  width: int
  depth: int = 1
  d_out: int = 2
  extra: bool = False
  nan: bool = False

  @nn.compact
  def __call__(self, x):
    h = x
    for i in range(self.depth):
      init = _nan_init if self.nan and i == 0 else nn.initializers.lecun_normal()
      h = nn.relu(nn.Dense(self.width, kernel_init=init)(h))
    if self.extra:
      h = nn.Dense(self.width)(h)
    return nn.Dense(self.d_out)(h)


def pure_mlp(width: int, depth: int, d_in: int, d_out: int, extra: bool = False, nan: bool = False):
  def init(key):
    keys = jax.random.split(key, depth + 2)
    params = {"w_in": jax.random.normal(keys[0], (d_in, width)) / np.sqrt(d_in),
              "w_out": jax.random.normal(keys[1], (width, d_out)) / width}
    for i in range(depth - 1):
      params[f"w_hidden_{i}"] = jax.random.normal(keys[i + 2], (width, width)) / np.sqrt(width)
    if extra:
      params["w_extra"] = jnp.zeros((width, width))
    if nan:
      params["w_in"] = params["w_in"].at[0, 0].set(jnp.nan)
    return params

  def apply(params, x):
    h = jax.nn.relu(x @ params["w_in"])
    for i in range(depth - 1):
      h = jax.nn.relu(h @ params[f"w_hidden_{i}"])
    if "w_extra" in params:
      h = h + h @ params["w_extra"]
    return h @ params["w_out"]

  return scaling.PureModel(init, apply)


def factory(spec: Spec, *, extra_at: int | None = None, fixed: int | None = None, nan: bool = False,
            raise_at: int | None = None) -> Callable[[int], Any]:
  """``model(width)`` of ``spec``'s MLP; the options are mistakes: another parameter from width ``extra_at`` on, every
  width built at ``fixed``, NaN drawn in the first kernel, raising at width ``raise_at``."""

  def model(width):
    if raise_at is not None and width >= raise_at:
      raise RuntimeError(f"cannot build width {width}")
    extra = extra_at is not None and width >= extra_at
    width = fixed or width
    if spec.kind == "linen":
      return LinenMLP(width, spec.depth, spec.d_out, extra=extra, nan=nan)
    return pure_mlp(width, spec.depth, spec.d_in, spec.d_out, extra=extra, nan=nan)

  return model


def mse(model, batch):
  return jnp.mean((model(batch["x"]) - batch["y"]) ** 2)


def make_batch(spec: Spec, seed: int = 0) -> dict[str, jax.Array]:
  x = jax.random.normal(jax.random.key(seed), (spec.batch_size, spec.d_in))
  return {"x": x, "y": jnp.tanh(x[:, :1]) * jnp.ones((1, spec.d_out))}


def sgd(width, params, learning_rate):
  del width, params
  return optax.sgd(learning_rate)


# ---------------------------------------------------------------------------------------------------------------
# The studies, and the mistakes: name -> (what it changes in the call, exception type, the argument it names).


def _call(spec: Spec, **changes: Any) -> Callable[[], Any]:
  """The study ``spec`` describes, with ``changes`` to its arguments, as a thunk (its arrays made now)."""
  args = dict(model=factory(spec), loss_fn=mse, batches=make_batch(spec), optimizer=sgd if spec.custom_optimizer
              else None, widths=spec.widths, seeds=(0,))
  if spec.api == "coord_check":
    args.update(steps=1, learning_rate=1e-2)
    study = scaling.coord_check
  else:
    args.update(steps=2, log2_lrs=(-4.0,))
    study = scaling.transfer
  args.update(changes)
  model, loss_fn, batches, optimizer = (args.pop(name) for name in ("model", "loss_fn", "batches", "optimizer"))
  return lambda: study(model, loss_fn, batches, optimizer, progress=False, **args)


def _changing_batches(spec: Spec):
  first, later = make_batch(spec), make_batch(dataclasses.replace(spec, batch_size=spec.batch_size + 1), seed=1)
  return lambda step: first if step == 0 else later


MISTAKES = {
    # the factory
    "trees_differ": (lambda s: dict(model=factory(s, extra_at=max(s.widths))), scaling.ConfigError, "model"),
    "no_axis_grows": (lambda s: dict(model=factory(s, fixed=min(s.widths))), scaling.ConfigError, "model"),
    "factory_raises": (lambda s: dict(model=factory(s, raise_at=max(s.widths))), scaling.ConfigError, "model"),
    "init_draws_nan": (lambda s: dict(model=factory(s, nan=True)), scaling.ConfigError, "model"),
    # the loss
    "loss_not_scalar": (lambda s: dict(loss_fn=lambda m, b: (m(b["x"]) - b["y"]) ** 2), scaling.ConfigError,
                        "loss_fn"),
    "loss_tuple": (lambda s: dict(loss_fn=lambda m, b: (mse(m, b), {"aux": 1.0})), scaling.ConfigTypeError,
                   "loss_fn"),
    "loss_nan": (lambda s: dict(loss_fn=lambda m, b: mse(m, b) * jnp.nan), scaling.ConfigError, "loss_fn"),
    "loss_raises": (lambda s: dict(loss_fn=lambda m, b: m(b["inputs"])), scaling.ConfigError, "loss_fn"),
    "loss_one_argument": (lambda s: dict(loss_fn=lambda m: 0.0), scaling.ConfigTypeError, "loss_fn"),
    # the batches
    "batch_missing_key": (lambda s: dict(batches={"x": make_batch(s)["x"]}), scaling.ConfigError, "batches"),
    "batch_tuple": (lambda s: dict(batches=tuple(make_batch(s).values())), scaling.ConfigTypeError, "batches"),
    "batch_wrong_size": (lambda s: dict(batches={"x": make_batch(s)["x"], "y": jnp.zeros((s.batch_size + 1,
                                                                                            s.d_out))}),
                         scaling.ConfigError, "batches"),
    "batches_change_shape": (lambda s: dict(batches=_changing_batches(s)), scaling.ConfigError, "batches"),
    # the widths
    "widths_decreasing": (lambda s: dict(widths=s.widths[::-1]), scaling.ConfigError, "widths"),
    "widths_duplicate": (lambda s: dict(widths=(*s.widths, s.widths[-1])), scaling.ConfigError, "widths"),
    "widths_single": (lambda s: dict(widths=s.widths[:1]), scaling.ConfigError, "widths"),
    "widths_float": (lambda s: dict(widths=tuple(float(w) for w in s.widths)), scaling.ConfigError, "widths"),
    "widths_zero": (lambda s: dict(widths=(0, *s.widths)), scaling.ConfigError, "widths"),
    # the optimizer factory
    "optimizer_of_learning_rate": (lambda s: dict(optimizer=lambda lr: optax.sgd(lr)), scaling.ConfigTypeError,
                                   "optimizer"),
    "optimizer_optax_constructor": (lambda s: dict(optimizer=optax.adam), scaling.ConfigTypeError, "optimizer"),
    "optimizer_instance": (lambda s: dict(optimizer=optax.adam(1e-3)), scaling.ConfigTypeError, "optimizer"),
    "optimizer_returns_none": (lambda s: dict(optimizer=lambda w, p, lr: None), scaling.ConfigTypeError,
                               "optimizer"),
    # the seeds
    "seeds_float": (lambda s: dict(seeds=(0.5,)), scaling.ConfigTypeError, "seeds"),
}
# The checks that need numbers: the model's init (and its loss) at the smallest width are computed, nothing else.
NUMERIC = ("init_draws_nan", "loss_nan")


def _mistake_call(spec: Spec, name: str) -> Callable[[], Any]:
  return _call(spec, **MISTAKES[name][0](spec))


# Direct misuse of the other entry points: (name, call, exception type, argument named).
_BATCH = make_batch(Spec())
_WP = lambda model=None, loss_fn=mse, **kw: scaling.WidthParametrization(  # noqa: E731
    model or factory(Spec()), loss_fn, _BATCH, "mup", base_width=8, **kw)


class _Embed(nn.Module):
  width: int

  @nn.compact
  def __call__(self, ids):
    return nn.Dense(2)(nn.Embed(10, self.width)(ids).mean(axis=1))


DIRECT = (
    ("wp_trees_differ", lambda: _WP(factory(Spec(), extra_at=32)).roles(32), scaling.ConfigError, "model"),
    ("wp_no_axis_grows", lambda: _WP(factory(Spec(), fixed=8)).roles(16), scaling.ConfigError, "model"),
    ("wp_loss_not_scalar", lambda: _WP(loss_fn=lambda m, b: m(b["x"])).roles(16), scaling.ConfigError, "loss_fn"),
    ("wp_loss_raises", lambda: _WP(loss_fn=lambda m, b: m(b["inputs"])).roles(16), scaling.ConfigError, "loss_fn"),
    ("wp_loss_two_outputs", lambda: _WP(loss_fn=lambda m, b: (mse(m, b), 0.0)).model_at(16), scaling.ConfigTypeError,
     "loss_fn"),
    ("wp_factory_raises", lambda: _WP(factory(Spec(), raise_at=16)).roles(16), scaling.ConfigError, "model"),
    ("wp_width_zero", lambda: _WP().roles(0), scaling.ConfigError, "width"),
    ("wp_width_float", lambda: _WP().model_at(16.5), scaling.ConfigError, "width"),
    ("wp_loss_one_argument", lambda: _WP(loss_fn=lambda m: 0.0), scaling.ConfigTypeError, "loss_fn"),
    ("wp_embedding_float_ids",
     lambda: scaling.WidthParametrization(_Embed, mse, {"x": jnp.ones((4, 3)), "y": jnp.zeros((4, 2))}, "mup",
                                          base_width=8).roles(16), scaling.ConfigError, "example_batch"),
    ("pure_model_init_strings",
     lambda: _WP(lambda w: scaling.PureModel(lambda k: {"w": "a"}, lambda p, x: x)).roles(16), scaling.ConfigTypeError,
     "PureModel.init"),
    ("pure_model_int_parameter",
     lambda: _WP(lambda w: scaling.PureModel(lambda k: {"w": jnp.ones((4, w), jnp.int32)},
                                             lambda p, x: x @ p["w"])).roles(16), scaling.ConfigTypeError, "model"),
    ("pure_model_not_function", lambda: scaling.PureModel(3, lambda p, x: x), scaling.ConfigTypeError,
     "PureModel.init"),
    ("infer_kinds_same_shapes", lambda: scaling.infer_kinds({"w": jnp.ones((4, 8))}, {"w": jnp.ones((4, 8))}),
     scaling.ConfigError, "delta"),
    ("infer_kinds_different_trees", lambda: scaling.infer_kinds({"w": jnp.ones((4, 8))}, {"v": jnp.ones((4, 16))}),
     scaling.ConfigError, "base, delta and target"),
    ("infer_kinds_empty", lambda: scaling.infer_kinds({}, {}), scaling.ConfigError, "base, delta and target"),
    ("infer_kinds_not_arrays", lambda: scaling.infer_kinds([1, 2], [1, 2]), scaling.ConfigTypeError, "base"),
    ("parametrize_not_roles", lambda: scaling.parametrize({"w": "hidden"}, "mup"), scaling.ConfigTypeError, "roles"),
    ("coord_check_embedding_float_ids",
     lambda: scaling.coord_check(_Embed, mse, {"x": jnp.ones((4, 3)), "y": jnp.zeros((4, 2))}, widths=(8, 16),
                                 steps=1, seeds=(0,), progress=False), scaling.ConfigError, "batches"),
    ("coord_check_optimizer_breaks_on_params",
     lambda: scaling.coord_check(factory(Spec()), mse, _BATCH, lambda w, p, lr: optax.masked(optax.sgd(lr), {"a": 1}),
                                 widths=(8, 16), steps=1, seeds=(0,), progress=False), scaling.ConfigError,
     "optimizer"),
    ("coord_check_init_fn_drops_parameters",
     lambda: scaling.coord_check(factory(Spec()), mse, _BATCH, sgd, init=lambda w, p, k: {"w_in": p["w_in"]},
                                 widths=(8, 16), steps=1, seeds=(0,), progress=False), scaling.ConfigError, "init"),
    ("transfer_batches_raise",
     lambda: scaling.transfer(factory(Spec()), mse, lambda step: 1 / step, widths=(8, 16), steps=2, log2_lrs=(-4.0,),
                              progress=False), scaling.ConfigError, "batches"),
    ("transfer_seed_overflows",
     lambda: scaling.transfer(factory(Spec()), mse, _BATCH, widths=(8, 16), steps=2, log2_lrs=(-4.0,), seeds=(2**40,),
                              progress=False), scaling.ConfigError, "seeds"),
)

# Every mistake of MISTAKES on a PureModel and a linen model, through coord_check (scheme runs) and transfer (a
# custom optimizer factory): the corpus.
CORPUS_SPECS = {"pure_coord_check": Spec(), "linen_transfer_custom": Spec(kind="linen", api="transfer",
                                                                         custom_optimizer=True)}


def _corpus():
  for name in MISTAKES:
    for label, spec in CORPUS_SPECS.items():
      if name.startswith("optimizer_") and not spec.custom_optimizer:
        continue  # the scheme runs build their own optimizers
      yield f"{name}_{label}", spec, name


class BoundaryTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.enter_context(mock.patch.object(loop_lib, "run_training", _no_training))

  def _refused(self, call, kind, needle):
    """The error of ``call``: of ``kind`` (a ConfigError), one line, naming ``needle``."""
    with self.assertRaises(scaling.ConfigError) as caught:
      call()
    error = caught.exception
    self.assertIsInstance(error, kind, msg=str(error))
    self.assertIn(needle, str(error))
    self.assertNotIn("\n", str(error))
    return error

  @parameterized.named_parameters(*_corpus())
  def test_mistake_is_one_error_before_compiling(self, spec, name):
    _, kind, needle = MISTAKES[name]
    self._refused(_mistake_call(spec, name), kind, needle)  # compiles the eager ops any call compiles
    call = _mistake_call(spec, name)  # the same mistake, built afresh
    del _COMPILES[:]
    self._refused(call, kind, needle)
    self.assertLessEqual(len(_COMPILES), 2 if name in NUMERIC else 0, msg=f"{name}: compiled {len(_COMPILES)}")

  def test_init_nan_names_the_parameter(self):
    for spec, path in ((Spec(), "'w_in'"), (Spec(kind="linen"), "'Dense_0/kernel'")):
      error = self._refused(_call(spec, model=factory(spec, nan=True)), scaling.ConfigError, path)
      self.assertIn("NaN", str(error))

  @parameterized.named_parameters(*DIRECT)
  def test_direct_misuse(self, call, kind, needle):
    self._refused(call, kind, needle)

  def test_good_models_pass_the_boundary(self):
    # The corpus's models without a mistake reach the training loop (here stubbed): a PureModel through
    # coord_check's scheme runs, a linen module through transfer with an optimizer factory.
    for spec in CORPUS_SPECS.values():
      with self.assertRaises(_Reached):
        _call(spec)()

  @hypothesis.settings(max_examples=15, deadline=None)
  # The batch's sizes from small sets, so that the examples share the small eager programs every call compiles.
  @hypothesis.given(kind=st.sampled_from(("pure", "linen")), depth=st.integers(1, 3), d_in=st.sampled_from((3, 4)),
                    d_out=st.sampled_from((1, 2)), batch_size=st.sampled_from((2, 4)), base=st.sampled_from((4, 8)),
                    count=st.integers(2, 3), api=st.sampled_from(("coord_check", "transfer")),
                    custom_optimizer=st.booleans(), mistake=st.sampled_from(sorted(MISTAKES)))
  def test_random_model_with_random_mistake(self, kind, depth, d_in, d_out, batch_size, base, count, api,
                                             custom_optimizer, mistake):
    spec = Spec(kind, depth, d_in, d_out, batch_size, tuple(base * 2**i for i in range(count)), api,
                custom_optimizer or mistake.startswith("optimizer_"))
    _, kind_of_error, needle = MISTAKES[mistake]
    try:
      _mistake_call(spec, mistake)()
    except scaling.ConfigError as e:
      self.assertIsInstance(e, kind_of_error, msg=str(e))
      self.assertIn(needle, str(e))
      self.assertNotIn("\n", str(e))
    except _Reached:
      self.fail(f"{mistake} passed the boundary of {spec}")
    else:
      self.fail(f"{mistake} returned without training: {spec}")
    # the control: the same model without the mistake reaches the training loop
    with self.assertRaises(_Reached):
      _call(spec)()


if __name__ == "__main__":
  absltest.main()
