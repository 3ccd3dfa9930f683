"""
The fault matrix of issue 18: every public model against every kind of bad input a user gives
it, at construction, in a training minibatch (eagerly and under ``tf.function``) and at
prediction. Each cell of the tables below says what must happen:

* ``refused(...)``: a ``ValueError`` or ``TypeError`` whose message names the user's argument
  (the patterns: the argument, then what to do). Inside a compiled step, values that only the
  data know (NaN, inf) are checked by graph assertions, without a round trip to the host, so
  there the error is TensorFlow's ``InvalidArgumentError`` carrying the same message.
* ``handled(...)``: a finite result, equal to what the same input in its canonical form gives
  (``"cast"``: an int or float32 array cast to float64) or to GPflow's peer model
  (``"peer"``: see :func:`peer_prediction`; models without a peer are only checked finite).

No outcome may be silent (NaN or garbage without an error), and no message may be TensorFlow's
(an op's dtype or shape error), scipy's or a shape-check trace of an internal function.
"""

import functools
import re
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gpflow
import numpy as np
import pytest
import tensorflow as tf

import gpflow_tight as gt
from gpflow_tight import validation
from gpflow_tight.models import RelaxedSGPR, RelaxedSVGP

pytestmark = [
    pytest.mark.filterwarnings("ignore::gpflow_tight.validation.DtypeCastWarning"),
    # the Nyström GP's variances are negative at some of these test inputs (see test_classic.py)
    pytest.mark.filterwarnings("ignore::gpflow_tight.posteriors.NegativeVarianceWarning"),
]


# ------------------------------------------------------------------------------------------------
# The data every model sees in its canonical form

_rng = np.random.default_rng(18)
N = 20
X = np.sort(_rng.uniform(0, 6, (N, 1)), axis=0)
Y = np.sin(2 * X) + 0.2 * _rng.standard_normal((N, 1))
LABELS = (Y > 0).astype(float)
Z_U = np.linspace(0.3, 5.7, 5)[:, None]
Z_V = np.array([[0.9], [2.6], [4.4]])
X_NEW = np.linspace(-0.5, 6.5, 7)[:, None]
NOISE = 0.1

# Fragments of messages that must never reach a user: TensorFlow's op errors, shape-check traces
# of internal functions, scipy's messages.
RAW = (
    "Kuf_kernel_inducingpoints",
    "Tensor shape mismatch",
    "cannot compute",
    "Incompatible shapes",
    "must have the same dtype",
    "Matrix size-incompatible",
    "scipy",
    "\\x",  # non-ASCII text escaped by TensorFlow: K_uu\xe2\x81\xbb\xc2\xb9
    "\\'",  # quotes escaped by TensorFlow's assertions
)


def kernel(lengthscales: Any = 0.8) -> gpflow.kernels.Kernel:
    return gpflow.kernels.SquaredExponential(lengthscales=lengthscales)


def gaussian() -> gpflow.likelihoods.Likelihood:
    return gpflow.likelihoods.Gaussian(NOISE)


# ------------------------------------------------------------------------------------------------
# The models: how each is built from (X, Y, Z), what its loss takes, what names its messages use


@dataclass(frozen=True)
class Spec:
    """
    ``build(X, Y, Z, **kwargs)`` gives a model: from the data for models that hold it, for
    ``num_data = len(X)`` otherwise (``batch(X, Y)`` is then what the loss takes).
    ``names`` are how messages name X, Y and the data; ``variance`` is a keyword of the
    constructor that takes a variance; ``peer`` the GPflow model its predictions equal.
    """

    build: Callable[..., Any]
    holds_data: bool
    peer: str | None = None
    variance: str | None = None
    labels: bool = False
    batch: Callable[[Any, Any], tuple[Any, ...]] = lambda X, Y: (X, Y)
    names: dict[str, str] = field(
        default_factory=lambda: {"X": "`data` X", "Y": "`data` Y", "data": "`data`"}
    )
    x_is_data: bool = True  # False: the batch's X is not user data (the GPLVM's row indices)
    inducing: bool = True  # False: no inducing inputs (SoD, BCM): the cases of Z do not apply

    def data(self) -> tuple[np.ndarray, np.ndarray]:
        return X, LABELS if self.labels else Y

    def loss(self, model: Any, X: Any, Y: Any) -> tf.Tensor:
        return model.training_loss() if self.holds_data else model.training_loss(self.batch(X, Y))


def _held(cls: Any, **fixed: Any) -> Callable[..., Any]:
    def build(X: Any, Y: Any, Z: Any, **kwargs: Any) -> Any:
        kwargs = {"noise_variance": NOISE, **fixed, **kwargs}
        return cls((X, Y), kernel(), Z, **kwargs)

    return build


def _solve_gpr(cls: Any) -> Callable[..., Any]:
    def build(X: Any, Y: Any, Z: Any, **kwargs: Any) -> Any:
        return cls((X, Y), kernel(), Z, Z_V, **{"noise_variance": NOISE, **kwargs})

    return build


def _uncollapsed(cls: Any, *orthogonal: Any, **fixed: Any) -> Callable[..., Any]:
    def build(X: Any, Y: Any, Z: Any, **kwargs: Any) -> Any:
        kwargs = {"num_data": len(X), **fixed, **kwargs}
        return cls(kernel(), gaussian(), Z, *orthogonal, **kwargs)

    return build


def _sites(X: Any, Y: Any, Z: Any, **kwargs: Any) -> Any:
    return gt.PowerEPSGP((X, Y), kernel(), Z, likelihood=gpflow.likelihoods.Bernoulli(), **kwargs)


def _vnngp(X: Any, Y: Any, Z: Any, **kwargs: Any) -> Any:
    # inducing inputs at the training inputs, as in the paper, with a short lengthscale
    Z = X if Z is Z_U else Z
    if np.ndim(kwargs.get("q_sqrt", [[]])) == 0:  # a standard deviation for every q(u_j)
        kwargs["q_sqrt"] = np.full((len(Z), 1), kwargs["q_sqrt"])
    k = kernel(0.3)
    return gt.VNNGP(k, gaussian(), Z, 3, **{"num_data": len(X), **kwargs})


def _latent_var(X: Any, kwargs: dict[str, Any]) -> Any:
    variance = kwargs.pop("X_data_var", 0.1)
    return np.full(np.shape(X), variance) if np.ndim(variance) == 0 else variance


def _tight_gplvm(X: Any, Y: Any, Z: Any, **kwargs: Any) -> Any:
    """The latent means are X (Q = 1), the observations Y."""
    X_var = _latent_var(X, kwargs)
    return gt.TightBayesianGPLVM(Y, X, X_var, kernel(), inducing_variable=Z, **kwargs)


def _minibatch_gplvm(X: Any, Y: Any, Z: Any, **kwargs: Any) -> Any:
    X_var = _latent_var(X, kwargs)
    kwargs = {"num_data": len(X), "noise_variance": NOISE, **kwargs}
    num_data = kwargs.pop("num_data")
    return gt.MinibatchBayesianGPLVM(num_data, 1, X, X_var, kernel(), Z, **kwargs)


def _subset_of_data(X: Any, Y: Any, Z: Any, **kwargs: Any) -> Any:
    kwargs = {"noise_variance": NOISE, "active_set_size": min(8, len(X)), **kwargs}
    return gt.SoD((X, Y), kernel(), selection="entropy", **kwargs)


def _committee(X: Any, Y: Any, Z: Any, **kwargs: Any) -> Any:
    kwargs = {"noise_variance": NOISE, **kwargs}
    return gt.BCM((X, Y), kernel(), partition=min(3, max(len(X), 1)), **kwargs)


def _rows(X: Any, Y: Any) -> tuple[Any, ...]:
    """The minibatch GPLVM's batch: the row indices of q(x_n) and the observations."""
    return np.arange(len(X))[:, None], Y


LATENT = {"X": "`X_data_mean`", "Y": "`data`", "data": "`data`"}

SPECS = {
    "TightSGPR": Spec(_held(gt.TightSGPR), True, peer="sgpr", variance="noise_variance"),
    "RelaxedSGPR": Spec(
        _held(RelaxedSGPR, relaxation="beta"), True, peer="sgpr", variance="noise_variance"
    ),
    "SOLVEGPR": Spec(_solve_gpr(gt.SOLVEGPR), True, peer="union", variance="noise_variance"),
    "TightSOLVEGPR": Spec(
        _solve_gpr(gt.TightSOLVEGPR), True, peer="union", variance="noise_variance"
    ),
    "ODGPR": Spec(_solve_gpr(gt.ODGPR), True, peer="union", variance="noise_variance"),
    "PowerEPSGP": Spec(_held(gt.PowerEPSGP, alpha=0.5), True, variance="noise_variance"),
    "FITC": Spec(_held(gt.FITC), True, peer="fitc", variance="noise_variance"),
    "VFE": Spec(_held(gt.VFE), True, peer="sgpr", variance="noise_variance"),
    "DTC": Spec(_held(gt.DTC), True, peer="sgpr", variance="noise_variance"),
    "PITC": Spec(_held(gt.PITC, block_size=5), True, variance="noise_variance"),
    "PowerEPSGP-sites": Spec(_sites, True, peer="prior", labels=True),
    "SoR": Spec(_held(gt.SoR), True, variance="noise_variance"),
    "Nystrom": Spec(_held(gt.Nystrom), True, variance="noise_variance"),
    "SoD": Spec(_subset_of_data, True, variance="noise_variance", inducing=False),
    "BCM": Spec(_committee, True, variance="noise_variance", inducing=False),
    "TightBayesianGPLVM": Spec(
        _tight_gplvm, True, peer="bgplvm", variance="X_data_var", names=LATENT
    ),
    "TightSVGP": Spec(_uncollapsed(gt.TightSVGP), False, peer="prior", variance="beta"),
    "RelaxedSVGP": Spec(_uncollapsed(RelaxedSVGP, relaxation="optimal"), False, peer="prior"),
    "SOLVEGP": Spec(_uncollapsed(gt.SOLVEGP, Z_V), False, peer="prior"),
    "TightSOLVEGP": Spec(_uncollapsed(gt.TightSOLVEGP, Z_V), False, peer="prior", variance="beta"),
    "ODVGP": Spec(_uncollapsed(gt.ODVGP, Z_V), False, peer="prior"),
    "VNNGP": Spec(_vnngp, False, variance="q_sqrt"),
    "MinibatchBayesianGPLVM": Spec(
        _minibatch_gplvm,
        False,
        peer="prior",
        variance="noise_variance",
        batch=_rows,
        names=LATENT,
        x_is_data=False,
    ),
}
HELD = [name for name, spec in SPECS.items() if spec.holds_data]
EXTERNAL = [name for name, spec in SPECS.items() if not spec.holds_data]


def test_every_public_model_is_in_the_matrix():
    exported = {
        name
        for name in gt.__all__
        if isinstance(getattr(gt, name), type)
        and issubclass(getattr(gt, name), gpflow.models.GPModel)
    }
    aliases = {"TVBGPLVM"}  # the same class as TightBayesianGPLVM
    assert exported - aliases <= set(SPECS), f"add {exported - aliases - set(SPECS)} to SPECS"


@functools.cache
def canonical(name: str) -> Any:
    """The model built from the canonical data, shared by the tests that do not change it."""
    spec = SPECS[name]
    return spec.build(*spec.data(), Z_U)


@functools.cache
def compiled_loss(name: str) -> Any:
    """One ``tf.function`` of the canonical model's loss, traced again only for new shapes."""
    spec, model = SPECS[name], canonical(name)

    def loss(X: Any, Y: Any) -> tf.Tensor:
        return spec.loss(model, X, Y)

    return tf.function(loss)


# ------------------------------------------------------------------------------------------------
# Outcomes


@dataclass(frozen=True)
class Refused:
    patterns: tuple[str, ...]  # regular expressions; {X}, {Y}, {data} are the spec's names
    error: tuple[type, ...] = (ValueError, TypeError)


@dataclass(frozen=True)
class Handled:
    reference: str  # "cast", "peer" or "finite"


def refused(*patterns: str) -> Refused:
    return Refused(patterns)


def handled(reference: str) -> Handled:
    return Handled(reference)


def assert_refused(call: Callable[[], Any], spec: Spec, outcome: Refused, in_graph: bool = False):
    """
    ``call`` raises what ``outcome`` says, with every pattern in its message and nothing raw.
    ``in_graph``: a check of values inside a compiled function (a graph assertion).
    """
    with pytest.raises(Exception) as info:
        call()
    error, message = info.value, str(info.value)
    if in_graph:
        assert isinstance(error, tf.errors.InvalidArgumentError), f"{type(error)}: {message}"
    else:
        assert isinstance(error, outcome.error) and not isinstance(error, tf.errors.OpError), (
            f"{type(error).__name__}: {message}"
        )
    for pattern in outcome.patterns:
        expected = pattern.format(**{k: re.escape(v) for k, v in spec.names.items()})
        assert re.search(expected, message), f"{expected!r} not in {message!r}"
    for raw in RAW:
        assert raw not in message, f"raw message {raw!r} in {message!r}"
    assert message.isascii() or not in_graph, f"non-ASCII text in a graph assertion: {message!r}"


def assert_finite(*values: Any) -> None:
    for value in values:
        assert np.all(np.isfinite(np.asarray(value))), f"silent non-finite result: {value}"


def peer_prediction(name: str, model: Any, X: Any, Y: Any, Z: Any, Xnew: Any) -> Any:
    """
    What GPflow's peer predicts (mean, variance) with the model's kernel, likelihood and data,
    or ``None`` for models without a peer. ``"union"``: SGPR on both inducing sets, whose mean
    SOLVE-GP regression shares (its variance is the decoupled one); ``"prior"``: a model at
    its initial q(u) = p(u) predicts the prior.
    """
    peer = SPECS[name].peer
    data = (np.asarray(X, float), np.asarray(Y, float))
    if peer == "sgpr":
        reference = gpflow.models.SGPR(data, model.kernel, Z, noise_variance=NOISE)
    elif peer == "union":
        reference = gpflow.models.SGPR(
            data, model.kernel, np.vstack([Z, Z_V]), noise_variance=NOISE
        )
    elif peer == "fitc":
        reference = gpflow.models.GPRFITC(data, model.kernel, Z, noise_variance=NOISE)
    elif peer == "bgplvm":
        reference = gpflow.models.BayesianGPLVM(
            data[1], data[0], np.full(data[0].shape, 0.1), model.kernel, inducing_variable=Z
        )
    elif peer == "prior":
        variance = model.kernel(Xnew, full_cov=False)[:, None]
        return np.zeros_like(variance), variance
    else:
        return None
    return reference.predict_f(Xnew)


def assert_predicts_as_peer(name: str, model: Any, X: Any, Y: Any, Z: Any) -> None:
    mean, var = model.predict_f(X_NEW)
    assert_finite(mean, var)
    expected = peer_prediction(name, model, X, Y, Z, X_NEW)
    if expected is not None:
        np.testing.assert_allclose(mean, expected[0], rtol=1e-6, atol=1e-9)
        if SPECS[name].peer != "union":
            np.testing.assert_allclose(var, expected[1], rtol=1e-6, atol=1e-9)


# ------------------------------------------------------------------------------------------------
# Construction: data held by a model, and the settings every model takes


def _nan_at(array: np.ndarray, row: int = 3, value: float = np.nan) -> np.ndarray:
    array = array.astype(float).copy()
    array[row] = value
    return array


FINITE = "drop|impute|must be finite"  # what to do about NaN or inf
RANK = r"2-D|shape \["  # what to do about a vector

# case: (how it changes (X, Y, Z, kwargs), what must happen)
CONSTRUCTION: dict[str, tuple[Callable[..., Any], Any]] = {
    "X 1-D": (lambda X, Y, Z, kw: (X[:, 0], Y, Z, kw), refused("{X}", RANK)),
    "Y 1-D": (lambda X, Y, Z, kw: (X, Y[:, 0], Z, kw), refused("{Y}", RANK)),
    "X and Y rows differ": (lambda X, Y, Z, kw: (X, Y[:-1], Z, kw), refused("`", "row")),
    "X has D = 2, Z has 1": (
        lambda X, Y, Z, kw: (np.hstack([X, X]), Y, Z, kw),
        refused("{X}", "`inducing_variable`", "column"),
    ),
    "NaN in X": (lambda X, Y, Z, kw: (_nan_at(X), Y, Z, kw), refused("{X}", "NaN", FINITE)),
    "NaN in Y": (lambda X, Y, Z, kw: (X, _nan_at(Y), Z, kw), refused("{Y}", "NaN", FINITE)),
    "inf in Y": (
        lambda X, Y, Z, kw: (X, _nan_at(Y, value=np.inf), Z, kw),
        refused("{Y}", "inf", FINITE),
    ),
    "N = 0": (lambda X, Y, Z, kw: (X[:0], Y[:0], Z, kw), refused("{data}", "empty|at least one")),
    "N = 1": (lambda X, Y, Z, kw: (X[5:6], Y[5:6], Z, kw), handled("peer")),
    "float32 X and Y": (
        lambda X, Y, Z, kw: (X.astype(np.float32), Y.astype(np.float32), Z, kw),
        handled("cast"),
    ),
    "int X": (lambda X, Y, Z, kw: (np.round(3 * X).astype(int), Y, Z, kw), handled("cast")),
    "NaN in Z": (
        lambda X, Y, Z, kw: (X, Y, _nan_at(Z, 1), kw),
        refused("`inducing_variable`", "NaN", "finite"),
    ),
    "duplicate inducing points": (
        lambda X, Y, Z, kw: (X, Y, np.vstack([Z, Z[:2]]), kw),
        handled("peer"),
    ),
    "M > N (30 inducing points, 20 data)": (
        lambda X, Y, Z, kw: (X, Y, np.linspace(0, 6, 30)[:, None], kw),
        handled("peer"),
    ),
}
# cases of a model that holds no data: the number of points, and its inducing inputs
EXTERNAL_CONSTRUCTION = (
    "NaN in Z",
    "duplicate inducing points",
    "M > N (30 inducing points, 20 data)",
)
INDUCING_CONSTRUCTION = ("X has D = 2, Z has 1", *EXTERNAL_CONSTRUCTION)


def _canonical_form(X: Any, Y: Any) -> tuple[np.ndarray, np.ndarray]:
    return np.asarray(X, dtype=float), np.asarray(Y, dtype=float)


@pytest.mark.parametrize(
    "name, case",
    [
        (n, c)
        for n in HELD
        for c in CONSTRUCTION
        if SPECS[n].inducing or c not in INDUCING_CONSTRUCTION
    ]
    + [(n, c) for n in EXTERNAL for c in EXTERNAL_CONSTRUCTION],
)
def test_construction(name, case):
    spec = SPECS[name]
    change, outcome = CONSTRUCTION[case]
    X_case, Y_case, Z, kwargs = change(*spec.data(), Z_U, {})
    if (
        name == "VNNGP" and case == "duplicate inducing points"
    ):  # its neighbour sets need distinct Z
        outcome = refused("`inducing_variable`", "duplicate", r"np\.unique")
        Z = np.vstack([X, X[:2]])

    def build_and_use() -> tuple[Any, tf.Tensor, Any]:
        model = spec.build(X_case, Y_case, Z, **kwargs)
        batch = _canonical_form(X_case, Y_case)
        loss = spec.loss(model, *batch)
        return model, loss, model.predict_f(X_NEW)

    if isinstance(outcome, Refused):
        assert_refused(build_and_use, spec, outcome)
        return
    model, loss, (mean, var) = build_and_use()
    assert_finite(loss, mean, var)
    if outcome.reference == "cast":
        X_float, Y_float = _canonical_form(X_case, Y_case)
        reference = spec.build(X_float, Y_float, Z, **kwargs)
        np.testing.assert_allclose(loss, spec.loss(reference, X_float, Y_float), rtol=1e-12)
        expected = reference.predict_f(X_NEW)
        np.testing.assert_allclose(mean, expected[0], rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(var, expected[1], rtol=1e-12, atol=1e-14)
    elif outcome.reference == "peer":
        assert_predicts_as_peer(name, model, X_case, Y_case, Z)


@pytest.mark.parametrize("name", list(SPECS))
def test_ard_kernel_must_match_the_inputs(name, monkeypatch):
    """Two ARD lengthscales for one input column: refused at construction, naming `kernel`."""
    spec = SPECS[name]
    monkeypatch.setattr(sys.modules[__name__], "kernel", lambda value=0.8: kernel_2d(value))
    call = functools.partial(spec.build, *spec.data(), Z_U)
    assert_refused(call, spec, refused("`kernel`", "2 lengthscales", "reads 1 input column"))


def kernel_2d(lengthscale: float) -> gpflow.kernels.Kernel:
    return gpflow.kernels.SquaredExponential(lengthscales=[lengthscale, lengthscale])


NUM_DATA_MODELS = [n for n in EXTERNAL if n != "MinibatchBayesianGPLVM"]


@pytest.mark.parametrize("name", NUM_DATA_MODELS)
@pytest.mark.parametrize("num_data", [0, -3])
def test_num_data_must_be_positive(name, num_data):
    """N = 0 for a model without its data: refused at construction, not a silent bound."""
    spec = SPECS[name]
    call = functools.partial(spec.build, X, Y, Z_U, num_data=num_data)
    assert_refused(call, spec, refused("`num_data`", "positive"))


VARIANCES = [(n, value) for n, s in SPECS.items() if s.variance for value in (0.0, -1.0)]


@pytest.mark.parametrize("name, value", VARIANCES)
def test_variances_must_be_positive(name, value):
    spec = SPECS[name]
    call = functools.partial(spec.build, *spec.data(), Z_U, **{spec.variance: value})
    assert_refused(call, spec, refused(f"`{spec.variance}`", "positive|above|> ?0"))


# ------------------------------------------------------------------------------------------------
# Minibatches: what a loss sees in every training step, eagerly and compiled

# case: (how it changes the batch (X, Y), what must happen)
BATCHES: dict[str, tuple[Callable[..., Any], Any]] = {
    "X 1-D": (lambda X, Y: (X[:, 0], Y), refused("{X}", RANK)),
    "Y 1-D": (lambda X, Y: (X, Y[:, 0]), refused("{Y}", RANK)),
    "X and Y rows differ": (lambda X, Y: (X, Y[:-1]), refused("`", "row")),
    "X has D = 2, Z has 1": (lambda X, Y: (np.hstack([X, X]), Y), refused("{X}", "column")),
    "NaN in X": (lambda X, Y: (_nan_at(X), Y), refused("{X}", "NaN", FINITE)),
    "NaN in Y": (lambda X, Y: (X, _nan_at(Y)), refused("{Y}", "NaN", FINITE)),
    "inf in Y": (lambda X, Y: (X, _nan_at(Y, value=np.inf)), refused("{Y}", "inf", FINITE)),
    "N = 0": (lambda X, Y: (X[:0], Y[:0]), refused("{data}", "empty|at least one")),
    "N = 1": (lambda X, Y: (X[5:6], Y[5:6]), handled("cast")),
    "float32 X and Y": (
        lambda X, Y: (X.astype(np.float32), Y.astype(np.float32)),
        handled("cast"),
    ),
    "int X": (lambda X, Y: (np.round(3 * X).astype(int), Y), handled("cast")),
}
# Compiled, these are graph assertions: values, and an empty batch (which, known when tracing,
# may be a tf.cond branch that never runs: a replica without rows under tf.distribute).
GRAPH_CASES = ("NaN in X", "NaN in Y", "inf in Y", "N = 0")
X_CASES = ("X 1-D", "X has D = 2, Z has 1", "NaN in X", "int X")  # the GPLVM's X is row indices


# Compiled, a cast or a new shape costs a trace: the dtype cast is checked compiled once per model
# (the graph casts with an op), the other handled cases eagerly (they differ from the canonical
# batch in shape only, which the compiled loss treats alike).
COMPILED_HANDLED = ("float32 X and Y",)


def _batch_cases() -> list[tuple[str, str, str]]:
    cases = []
    for name in EXTERNAL:
        for case, (_, outcome) in BATCHES.items():
            if case in X_CASES and not SPECS[name].x_is_data:
                continue
            cases.append((name, case, "eager"))
            if isinstance(outcome, Refused) or case in COMPILED_HANDLED:
                cases.append((name, case, "compiled"))
    return cases


@pytest.mark.parametrize("name, case, mode", _batch_cases())
def test_minibatch(name, case, mode):
    spec, model = SPECS[name], canonical(name)
    change, outcome = BATCHES[case]
    X_batch, Y_batch = change(*spec.data())
    loss = compiled_loss(name) if mode == "compiled" else functools.partial(spec.loss, model)
    if isinstance(outcome, Refused):
        in_graph = mode == "compiled" and case in GRAPH_CASES
        assert_refused(lambda: loss(X_batch, Y_batch), spec, outcome, in_graph=in_graph)
        return
    value = loss(X_batch, Y_batch)
    assert_finite(value)
    X_float, Y_float = _canonical_form(X_batch, Y_batch)
    np.testing.assert_allclose(value, spec.loss(model, X_float, Y_float), rtol=1e-12)


def test_free_relaxation_needs_the_whole_data_in_every_step():
    """``relaxation="free"`` has one m_n per point: a minibatch is refused, not broadcast."""
    model = RelaxedSVGP(kernel(), gaussian(), Z_U, num_data=N, relaxation="free")
    spec = SPECS["RelaxedSVGP"]
    outcome = refused("whole training set", "relaxation=.beta")
    assert_refused(lambda: model.training_loss((X[:5], Y[:5])), spec, outcome)
    assert_refused(lambda: tf.function(model.training_loss)((X[:5], Y[:5])), spec, outcome)
    # a batch size that only the values know (a tf.data pipeline): a graph assertion
    signature = [(tf.TensorSpec([None, 1], tf.float64), tf.TensorSpec([None, 1], tf.float64))]
    loss = tf.function(model.training_loss, input_signature=signature)
    assert_refused(lambda: loss((X[:5], Y[:5])), spec, outcome, in_graph=True)
    np.testing.assert_allclose(loss((X, Y)), model.training_loss((X, Y)), rtol=1e-12)


# models that hold their data and take a likelihood, but only a Gaussian one: not PowerEPSGP
# and FITC, whose Power-EP sites take any scalar likelihood, nor the GPLVM, which takes none
GAUSSIAN_ONLY = [
    n for n in HELD if n not in ("PowerEPSGP", "PowerEPSGP-sites", "FITC", "TightBayesianGPLVM")
]


@pytest.mark.parametrize("name", GAUSSIAN_ONLY)
def test_models_for_gaussian_noise_refuse_other_likelihoods(name):
    """A Bernoulli likelihood: refused at construction, saying why, not at the first bound."""
    spec = SPECS[name]
    bernoulli = gpflow.likelihoods.Bernoulli()
    call = functools.partial(spec.build, X, LABELS, Z_U, noise_variance=None, likelihood=bernoulli)
    assert_refused(call, spec, refused("Gaussian", "likelihood"))


# ------------------------------------------------------------------------------------------------
# Classification: integer 0/1 labels, as GPflow's Bernoulli likelihood takes them


def _bernoulli(cls: Any, *orthogonal: Any, **fixed: Any) -> Callable[[], Any]:
    return lambda: cls(kernel(), gpflow.likelihoods.Bernoulli(), Z_U, *orthogonal, **fixed)


CLASSIFIERS = {
    "TightSVGP": _bernoulli(gt.TightSVGP, num_data=N),
    "RelaxedSVGP": _bernoulli(RelaxedSVGP, num_data=N, relaxation="beta"),
    "SOLVEGP": _bernoulli(gt.SOLVEGP, Z_V, num_data=N),
    "TightSOLVEGP": _bernoulli(gt.TightSOLVEGP, Z_V, num_data=N),
    "ODVGP": _bernoulli(gt.ODVGP, Z_V, num_data=N),
    "VNNGP": lambda: gt.VNNGP(
        gpflow.kernels.SquaredExponential(lengthscales=0.3),
        gpflow.likelihoods.Bernoulli(),
        X,
        3,
        num_data=N,
    ),
}


@pytest.mark.parametrize("name", list(CLASSIFIERS))
def test_integer_labels_in_a_minibatch_are_labels(name):
    model, labels = CLASSIFIERS[name](), LABELS.astype(np.int64)
    expected = model.training_loss((X, LABELS))
    np.testing.assert_allclose(model.training_loss((X, labels)), expected, rtol=1e-12)
    compiled = tf.function(model.training_loss)((X, labels))  # the same ops in another order
    assert_finite(compiled)
    np.testing.assert_allclose(compiled, expected, rtol=1e-10)


def test_integer_labels_of_power_ep_sites_are_labels():
    model, reference = _sites(X, LABELS.astype(np.int64), Z_U), _sites(X, LABELS, Z_U)
    for m in (model, reference):
        m.sweep()
    np.testing.assert_allclose(model.training_loss(), reference.training_loss(), rtol=1e-12)
    np.testing.assert_allclose(model.predict_y(X_NEW), reference.predict_y(X_NEW), rtol=1e-12)


# ------------------------------------------------------------------------------------------------
# Predictions

# case: (the inputs, what must happen)
PREDICTIONS: dict[str, tuple[Any, Any]] = {
    "Xnew 1-D": (X_NEW[:, 0], refused("`Xnew`", RANK)),
    "Xnew has D = 2, Z has 1": (np.hstack([X_NEW, X_NEW]), refused("`Xnew`", "column")),
    "NaN in Xnew": (_nan_at(X_NEW, 2), refused("`Xnew`", "NaN")),
    "inf in Xnew": (_nan_at(X_NEW, 2, np.inf), refused("`Xnew`", "NaN|inf")),
    "float32 Xnew": (X_NEW.astype(np.float32), handled("cast")),
    "int Xnew": (np.arange(7)[:, None], handled("cast")),
    "Xnew with no rows": (X_NEW[:0], handled("cast")),
    "before training": (X_NEW, handled("peer")),
}


@pytest.mark.parametrize("name, case", [(n, c) for n in SPECS for c in PREDICTIONS])
def test_prediction(name, case):
    spec, model = SPECS[name], canonical(name)
    Xnew, outcome = PREDICTIONS[case]
    if isinstance(outcome, Refused):
        assert_refused(lambda: model.predict_f(Xnew), spec, outcome)
        assert_refused(lambda: model.predict_y(Xnew), spec, outcome)
        return
    if outcome.reference == "peer":
        assert_predicts_as_peer(name, model, *spec.data(), Z_U)
        return
    mean, var = model.predict_f(Xnew)
    assert_finite(mean, var)
    expected = model.predict_f(np.asarray(Xnew, dtype=float))
    assert mean.shape == expected[0].shape and var.shape == expected[1].shape
    np.testing.assert_allclose(mean, expected[0], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(var, expected[1], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", list(SPECS))
def test_nan_in_a_compiled_prediction_is_a_graph_assertion(name):
    """No host round trip in a compiled prediction (a SavedModel's too): NaN inputs still fail."""
    spec, model = SPECS[name], canonical(name)
    predict = tf.function(model.predict_f)
    assert_finite(*predict(X_NEW))
    outcome = refused("`Xnew`", "NaN", "drop|impute")
    assert_refused(lambda: predict(_nan_at(X_NEW, 2)), spec, outcome, in_graph=True)


# ------------------------------------------------------------------------------------------------
# The validation layer's own behaviour


def test_a_cast_is_noted_once(monkeypatch):
    monkeypatch.setattr(validation, "_NOTED", set())
    X32, Y32 = X.astype(np.float32), Y.astype(np.float32)
    with pytest.warns(validation.DtypeCastWarning, match="`data` X has dtype float32") as caught:
        gt.TightSGPR((X32, Y32), kernel(), Z_U, noise_variance=NOISE)
    assert {str(w.message).split(" has")[0] for w in caught} == {"`data` X", "`data` Y"}
    assert caught[0].filename == __file__  # it points at the user's line
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gt.TightSGPR((X32, Y32), kernel(), Z_U, noise_variance=NOISE)


def test_a_message_through_a_compiled_function_is_ascii():
    """A Cholesky failure reported from a graph spells K_uu⁻¹ as K_uu^-1, not as escaped bytes."""
    assert validation.ascii_message("C_vv = K_vv - K_vu K_uu⁻¹ K_uv, B = I + AAᵀ, Ψ₂/σ²") == (
        "C_vv = K_vv - K_vu K_uu^-1 K_uv, B = I + AA^T, Psi2/sigma^2"
    )
    model = gt.SOLVEGPR((X, Y), kernel(), Z_U, Z_V, noise_variance=NOISE)
    model.orthogonal_inducing_variable.orthogonal.Z.assign(Z_U[1:4])  # on top of regular points
    with gpflow.config.as_context(gpflow.config.Config(jitter=0.0)):
        predict = tf.function(model.predict_f)
        with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape("K_uu^-1")) as info:
            predict(X_NEW)
    assert str(info.value).isascii()


def test_the_kernel_check_reads_every_part_of_a_kernel():
    """Sums, products, wrapped and multi-output kernels: each part against the columns it reads."""
    se, linear = gpflow.kernels.SquaredExponential, gpflow.kernels.Linear
    accepted = [
        se(lengthscales=[1.0, 1.0, 1.0]),
        se(lengthscales=[1.0, 1.0], active_dims=[0, 2]) + linear(variance=[1.0], active_dims=[1]),
        se(lengthscales=[1.0, 1.0], active_dims=slice(1, 3)) * se(),
        gpflow.kernels.Periodic(se(lengthscales=[1.0, 1.0, 1.0])),
        gpflow.kernels.SeparateIndependent([se(lengthscales=[1.0] * 3), linear()]),
        gpflow.kernels.ArcCosine(weight_variances=[1.0, 1.0, 1.0]),
        gpflow.kernels.Coregion(output_dim=2, rank=1, active_dims=[2]) * linear(active_dims=[0]),
    ]
    for k in accepted:
        validation.check_kernel(k, 3)
    refused_kernels = [
        se(lengthscales=[1.0, 1.0]),
        se(lengthscales=[1.0, 1.0, 1.0], active_dims=slice(0, 2)) + linear(),
        gpflow.kernels.Periodic(se(lengthscales=[1.0, 1.0])),
        gpflow.kernels.SharedIndependent(linear(variance=[1.0, 1.0]), output_dim=2),
        gpflow.kernels.SeparateIndependent([se(), se(lengthscales=[1.0] * 4)]),
        gpflow.kernels.ArcCosine(weight_variances=[1.0, 1.0]),
    ]
    for k in refused_kernels:
        with pytest.raises(ValueError, match="`kernel`: the .* kernel has .* but reads"):
            validation.check_kernel(k, 3)
