"""
Input checks and error translation shared by all models: bad input fails early with a
message that names the argument and the fix.

Where the checks run:

* **At construction**, on numpy arrays: :func:`check_regression_data` (data held by a model),
  :func:`check_num_data`, :func:`check_noise_variance`, :func:`check_inducing_variable` and
  :func:`check_input_dim`. A ``ValueError`` or ``TypeError`` names the argument.
* **On every minibatch a loss sees and on every prediction input**: :func:`checked_batch` and
  :func:`checked_inputs`, which models apply before their own shape checks
  (:func:`checks_arguments`). Eagerly they raise ``ValueError``/``TypeError``. Inside
  ``tf.function`` what the trace knows (ranks, columns, dtypes, static row counts) raises the
  same errors when the function is traced; what only the values know (NaN or inf, row counts
  of unknown size) becomes a graph assertion, so a compiled step makes no round trip to the
  host: a failure is TensorFlow's ``InvalidArgumentError`` carrying the same message.
* **Dtypes.** Real numbers of another dtype than ``gpflow.config.default_float()`` (float32
  data under the float64 default, integer inputs) are cast to it, with a one-time
  :class:`DtypeCastWarning`; integer labels stay integers where the likelihood takes them
  (as GPflow's classification likelihoods do). Anything else (booleans, complex numbers,
  strings, objects) is refused with a ``TypeError``.

Messages that go into TensorFlow ops are ASCII (:func:`ascii_message`; :func:`graph_message`
for assertions, whose messages TensorFlow prints escaped): ``K_uu⁻¹`` would otherwise reach the
user as ``K_uu\\xe2\\x81\\xbb\\xc2\\xb9``. Failed Cholesky factorisations are not data checks:
inside a training objective they give a non-finite loss (:func:`training_objective`), which an
optimiser can handle; bad data always raises.
"""

import contextlib
import contextvars
import functools
import inspect
import unicodedata
import warnings
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import numpy as np
import tensorflow as tf
from gpflow.config import default_float, default_likelihood_positive_minimum

__all__ = [
    "CholeskyError",
    "ConstructorOnly",
    "DtypeCastWarning",
    "as_default_float",
    "ascii_message",
    "graph_message",
    "check_regression_data",
    "checked_matrix",
    "as_checked_batch",
    "is_checked_batch",
    "check_batch",
    "checked_batch",
    "checked_inputs",
    "checked_xnew",
    "checked_test_data",
    "checks_arguments",
    "check_input_dim",
    "check_inducing_variable",
    "check_kernel",
    "check_count",
    "check_shape",
    "checked_indices",
    "check_num_data",
    "check_noise_variance",
    "check_positive",
    "inducing_input_dim",
    "check_static_inputs",
    "held_data",
    "require",
    "checked_cholesky",
    "checked_prediction",
    "check_cholesky_factor",
    "cholesky_checks",
    "training_objective",
    "explain_cholesky_failure",
    "as_cholesky_error",
]

_T = TypeVar("_T")

KUU = "K_uu (the covariance of the inducing variables)"
_CHOLESKY_ADVICE = (
    "Cholesky decomposition was not successful for {what}: the matrix is not numerically "
    "positive definite. Typical causes and fixes: inducing points that (nearly) coincide (remove "
    "duplicates or use fewer inducing points), a lengthscale much larger than the spread of "
    "the inputs, or too little jitter (raise it with "
    "`gpflow.config.set_default_jitter(1e-4)` or "
    "`with gpflow.config.as_context(gpflow.config.Config(jitter=1e-4)): ...`). "
    "Running in float64 (`gpflow.config.set_default_float(np.float64)`) also helps. If this "
    "happens during training, a diverging optimiser step may have made the parameters NaN or "
    "inf: lower the learning rate."
)
_ADVICE_START = "Cholesky decomposition was not successful for "

# the mathematical symbols of the package's messages, spelt in ASCII (longest first)
_ASCII_SPELLING = {
    "⁻¹": "^-1",
    "⁻ᵀ": "^-T",
    "ᵀ": "^T",
    "²": "^2",
    "Ψ": "Psi",
    "ψ": "psi",
    "σ": "sigma",
    "α": "alpha",
    "β": "beta",
    "ε": "eps",
    "Λ": "Lambda",
    "Δ": "Delta",
    "μ": "mu",
    "‖": "||",
    "≥": ">=",
    "≤": "<=",
    "≠": "!=",
    "−": "-",
    "×": "x",
    "…": "...",
}


def graph_message(text: str) -> str:
    """
    The message of a graph assertion (``tf.debugging.assert_*``): :func:`ascii_message`, with
    quotes as backticks (TensorFlow prints an assertion's message escaped, ``\\'``) and without
    a final full stop (TensorFlow appends one).
    """
    return ascii_message(text).replace("'", "`").replace('"', "`").rstrip(".")


def ascii_message(text: str) -> str:
    """
    ``text`` in ASCII, for messages that go into TensorFlow ops (TensorFlow shows non-ASCII
    text of some ops as escaped UTF-8 bytes, ``K_uu\\xe2\\x81\\xbb\\xc2\\xb9``): the package's
    mathematical symbols spelt out (``K_uu⁻¹`` is ``K_uu^-1``), other characters by their
    compatibility decomposition (subscript digits become digits), or escaped.
    """
    for symbol, spelling in _ASCII_SPELLING.items():
        text = text.replace(symbol, spelling)
    text = unicodedata.normalize("NFKC", text)
    return text.encode("ascii", "backslashreplace").decode("ascii")


class CholeskyError(tf.errors.InvalidArgumentError, ValueError):
    """
    A Cholesky factorisation failed; the message says what to do about it. It is the
    ``tf.errors.InvalidArgumentError`` that TensorFlow (and GPflow's models) raise there, so code
    written for GPflow catches it unchanged, and a ``ValueError``.
    """

    def __init__(self, message: str, cause: tf.errors.OpError | None = None) -> None:
        super().__init__(
            None if cause is None else cause.node_def,
            None if cause is None else cause.op,
            message,
        )

    def __reduce__(self) -> tuple[Any, ...]:  # picklable, as TensorFlow's errors are
        return (type(self), (self.message,))


class DtypeCastWarning(UserWarning):
    """
    Data of another dtype than GPflow's default float were cast to it (shown once per argument
    and dtype). Pass arrays of ``gpflow.config.default_float()`` to skip the cast.
    """


# Whether check_cholesky_factor checks: True or False when set by cholesky_checks, None (the
# default: check, except inside a training objective) otherwise.
_CHECKS: contextvars.ContextVar[bool | None] = contextvars.ContextVar(
    "gpflow_tight_cholesky_checks", default=None
)


@contextlib.contextmanager
def cholesky_checks(enabled: bool) -> Iterator[None]:
    """
    Check every Cholesky factor computed (and traced) inside the context (``True``), also in
    training objectives, or none (``False``).
    """
    token = _CHECKS.set(enabled)
    try:
        yield
    finally:
        _CHECKS.reset(token)


@contextlib.contextmanager
def training_objective() -> Iterator[None]:
    """
    The context of a model's ``training_loss``: a failed factorisation gives a non-finite loss,
    as in GPflow's models (the models' ``training_loss`` reports it as ``+inf``:
    :class:`~gpflow_tight.models.base.InfiniteLossOnCholeskyFailure`); unless
    :func:`cholesky_checks` asked for checks (the training helpers of
    :mod:`gpflow_tight.training` do, to stop with advice). Data checks are not affected: bad
    data always raises.
    """
    if _CHECKS.get() is None:
        with cholesky_checks(False):
            yield
    else:
        yield


def check_cholesky_factor(factor: tf.Tensor, what: str) -> tf.Tensor:
    """
    Pass ``factor`` through, failing with advice if it holds NaN or inf. On CPU, TensorFlow
    returns a NaN factor for a matrix that is not positive definite instead of raising; this
    check (cheap: O(M^2)) turns that into an error, eagerly and inside ``tf.function`` (when
    traced), except inside a training objective (:func:`training_objective`). The message is
    ASCII (:func:`ascii_message`).
    """
    if _CHECKS.get() is False:
        return factor
    return tf.debugging.check_numerics(factor, ascii_message(_CHOLESKY_ADVICE.format(what=what)))


def checked_prediction(mean: tf.Tensor, var: tf.Tensor, what: str = KUU) -> tuple[Any, Any]:
    """
    A prediction computed by GPflow's code (whose factorisation of ``what`` gives NaN instead of
    an error on CPU), failing with the Cholesky advice if it is not finite: its inputs were
    checked to be finite, so only a failed factorisation (or parameters a diverging optimiser made
    NaN, which the advice names too) can make it so. O(N*) per call.
    """
    return check_cholesky_factor(mean, what), check_cholesky_factor(var, what)


def checked_cholesky(matrix: tf.Tensor, what: str) -> tf.Tensor:
    """``tf.linalg.cholesky`` followed by :func:`check_cholesky_factor`."""
    return check_cholesky_factor(tf.linalg.cholesky(matrix), what)


@contextlib.contextmanager
def explain_cholesky_failure(what: str = KUU) -> Iterator[None]:
    """
    Re-raise TensorFlow's Cholesky failures (and GPflow's non-finite Cholesky factor checks) as
    :class:`CholeskyError` with advice. Other errors pass through unchanged.

    TensorFlow raises these errors when an op runs: eagerly inside this context, or when a
    compiled function is called, so wrap the call site.
    """
    try:
        yield
    except tf.errors.InvalidArgumentError as error:
        advice = as_cholesky_error(error, what)
        if advice is None:
            raise
        raise advice from error


def as_cholesky_error(error: tf.errors.OpError, what: str = KUU) -> CholeskyError | None:
    """
    The :class:`CholeskyError` with advice for a TensorFlow error raised by a failed Cholesky
    factorisation (or by a named check of a factor), ``None`` for any other error.
    """
    if isinstance(error, CholeskyError):
        return error
    message = str(error)
    if "cholesky" not in message.lower():
        return None
    if _ADVICE_START in message:  # a named check already said which matrix failed
        advice = message[message.index(_ADVICE_START) :].split(" : Tensor had")[0]
        return CholeskyError(advice, error)
    return CholeskyError(ascii_message(_CHOLESKY_ADVICE.format(what=what)), error)


# ------------------------------------------------------------------------------------------------
# Dtypes

_NOTED: set[tuple[str, str, str]] = set()


def _quoted(name: str) -> str:
    """How messages name an argument: "data X" is the part X of ``data``, "`data` X"."""
    argument, _, part = name.partition(" ")
    return f"`{argument}` {part}" if part else f"`{argument}`"


def _user_stacklevel() -> int:
    """The ``stacklevel`` of a warning that points at the first frame outside the libraries."""
    frame, level = inspect.currentframe(), 1
    libraries = ("gpflow_tight", "gpflow", "tensorflow", "check_shapes", "tf_keras", "keras")
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if level > 1 and module.split(".")[0] not in libraries:
            return level - 1  # warnings.warn adds its own frame
        frame, level = frame.f_back, level + 1
    return 1


def _note_cast(name: str, dtype: Any, target: Any) -> None:
    """Warn once per argument and pair of dtypes that ``name`` is cast to ``target``."""
    key = (name, np.dtype(dtype).name, np.dtype(target).name)
    if key in _NOTED:
        return
    _NOTED.add(key)
    lost = (
        " (this rounds the values)" if np.dtype(target).itemsize < np.dtype(dtype).itemsize else ""
    )
    warnings.warn(
        f"{_quoted(name)} has dtype {key[1]}: it is cast to {key[2]}, GPflow's default float "
        f"(`gpflow.config.default_float()`){lost}. Pass {key[2]} arrays to skip the cast. "
        "(Shown once.)",
        DtypeCastWarning,
        stacklevel=_user_stacklevel(),
    )


def _real_dtype(dtype: Any, name: str) -> np.dtype:
    """``dtype`` as numpy's, if it holds real numbers (floats or integers); else a TypeError."""
    try:
        numpy_dtype = np.dtype(tf.as_dtype(dtype).as_numpy_dtype)
    except TypeError:
        numpy_dtype = np.dtype(dtype)
    if numpy_dtype.kind not in "fiu":
        raise TypeError(
            f"{_quoted(name)} must hold real numbers (floats or integers), got dtype "
            f"{numpy_dtype}; convert it, e.g. with `np.asarray(value, dtype=float)`."
        )
    return numpy_dtype


def _target_dtype(dtype: np.dtype, name: str, cast_integers: bool) -> np.dtype:
    """The dtype ``name`` is used in: GPflow's default float, or integers kept as they are."""
    target: np.dtype = np.dtype(default_float())
    if dtype == target or (dtype.kind in "iu" and not cast_integers):
        return dtype
    _note_cast(name, dtype, target)
    return target


def _as_array(value: Any, name: str, cast_integers: bool = True) -> np.ndarray:
    """``value`` as a numpy array of real numbers, cast as the dtype policy says."""
    if isinstance(value, tf.Variable | tf.Tensor):
        value = value.numpy()
    try:
        array = np.asarray(value)
    except Exception as error:  # pragma: no cover - numpy raises many types here
        raise TypeError(
            f"{_quoted(name)} must be array-like, got {type(value).__name__}."
        ) from error
    dtype = _real_dtype(array.dtype, name)
    return array.astype(_target_dtype(dtype, name, cast_integers), copy=False)


def as_default_float(value: Any, name: str) -> np.ndarray:
    """
    ``value`` (array-like or an eager tensor) as a numpy array of GPflow's default float: other
    real dtypes are cast, with a one-time :class:`DtypeCastWarning` naming ``name``; anything else
    is a ``TypeError`` naming it.
    """
    return _as_array(value, name)


def _as_tensor(value: Any, name: str, cast_integers: bool = True) -> tf.Tensor:
    """``value`` as a tensor of real numbers, cast (by an op: no copy) as the policy says."""
    if not tf.is_tensor(value):
        value = _as_array(value, name, cast_integers)
    dtype = _real_dtype(value.dtype, name)
    target = _target_dtype(dtype, name, cast_integers)
    tensor = tf.convert_to_tensor(value)
    return tensor if target == dtype else tf.cast(tensor, target)


# ------------------------------------------------------------------------------------------------
# Shapes and values


def inducing_input_dim(inducing_variable: Any) -> int | None:
    """The input dimension D of inducing variables ([M, D, ...]), or ``None`` if unknown."""
    shape = getattr(inducing_variable, "shape", None)
    if shape is None or len(shape) < 2 or shape[1] is None:
        return None
    return int(shape[1])


def _rank_error(name: str, shape: Any, columns: str) -> ValueError:
    return ValueError(
        f"{_quoted(name)} must be a 2-D array [N, {columns}] with one row per point, got shape "
        f"{tuple(shape)}; reshape a vector `v` of N values with `v[:, None]` (or a single point "
        "with `v[None, :]`)."
    )


def _columns_error(name: str, input_dim: int, shape: Any) -> ValueError:
    return ValueError(
        f"{_quoted(name)} must have {input_dim} columns, one per input dimension of the model's "
        f"inducing inputs (`inducing_variable`, D = {input_dim}), got shape {tuple(shape)}."
    )


def _nonfinite_error(name: str, array: np.ndarray, fix: str) -> ValueError | None:
    """The error for the NaN or infinite entries of ``array`` (with their rows), or ``None``."""
    bad = ~np.isfinite(array)
    if not bad.any():
        return None
    rows = np.unique(np.nonzero(bad)[0]) if array.ndim else np.array([0])
    return ValueError(
        f"{_quoted(name)} contains {bad.sum()} NaN or infinite value(s) (rows "
        f"{rows[:5].tolist()}{'...' if rows.size > 5 else ''}); {fix}."
    )


def check_input_dim(shape: Any, input_dim: int | None, name: str) -> None:
    """``ValueError`` unless ``shape`` ([..., N, D]) has ``input_dim`` columns (if both known)."""
    columns = None if len(shape) == 0 else shape[-1]
    if input_dim is not None and columns is not None and int(columns) != input_dim:
        raise _columns_error(name, input_dim, shape)


def check_static_inputs(X: Any, input_dim: int | None, name: str) -> None:
    """
    What the trace knows of inputs ``X`` [..., N, D]: at least two axes and ``input_dim``
    columns (a ``ValueError`` naming ``name`` otherwise). Cheap: no values are read.
    """
    shape = getattr(X, "shape", None)
    if shape is None:
        shape = np.shape(X)
    shape = tf.TensorShape(shape)
    if shape.rank is not None and shape.rank < 2:
        raise _rank_error(name, shape, "D")
    if shape.rank is not None:
        check_input_dim(shape, input_dim, name)


def _check_rows_and_values(X: np.ndarray, Y: np.ndarray, name: str) -> None:
    """One row per data point in X and Y, and only finite values (with the offending rows)."""
    if X.shape[0] != Y.shape[0]:
        raise ValueError(
            f"{_quoted(name)}: X has {X.shape[0]} rows but Y has {Y.shape[0]}; they must have "
            "one row per data point."
        )
    for label, array in (("X", X), ("Y", Y)):
        error = _nonfinite_error(f"{name} {label}", array, "drop or impute them")
        if error is not None:
            raise error


def checked_matrix(value: Any, name: str, columns: str = "D") -> np.ndarray:
    """
    An array [N, ``columns``] a model holds (not a batch): real numbers, cast to GPflow's default
    float (a one-time :class:`DtypeCastWarning`), 2-D, and finite; a ``ValueError`` or
    ``TypeError`` naming ``name`` (and the offending rows) otherwise.
    """
    array = _as_array(value, name)
    if array.ndim != 2:
        raise _rank_error(name, array.shape, columns)
    error = _nonfinite_error(name, array, "drop or impute them")
    if error is not None:
        raise error
    return array


def check_regression_data(
    data: Any, name: str = "data", *, input_dim: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """
    Check a regression data tuple ``(X, Y)`` held by a model: two 2-D arrays of real numbers
    with the same, non-zero number of rows, only finite values and, if ``input_dim`` is given,
    that many columns of X. Returns them as numpy arrays of GPflow's default float (other real
    dtypes are cast, with a one-time :class:`DtypeCastWarning`).
    """
    if not isinstance(data, tuple | list) or len(data) != 2:
        raise TypeError(f"{_quoted(name)} must be a tuple (X, Y), got {type(data).__name__}.")
    X = _as_array(data[0], f"{name} X")
    Y = _as_array(data[1], f"{name} Y")
    for label, array, columns in (("X", X, "D"), ("Y", Y, "P")):
        if array.ndim != 2:
            raise _rank_error(f"{name} {label}", array.shape, columns)
    _check_rows_and_values(X, Y, name)
    if X.shape[0] == 0:
        raise ValueError(f"{_quoted(name)} is empty: X and Y need at least one row.")
    check_input_dim(X.shape, input_dim, f"{name} X")
    return X, Y


def held_data(data: Any, checked: tuple[np.ndarray, ...], name: str = "data") -> tuple[Any, ...]:
    """
    What a model holds as its data: the checked arrays, except where the user passed a
    ``tf.Variable`` (to assign new data later), which is kept if it has GPflow's default float.
    """
    held = []
    for label, given, array in zip(("X", "Y"), data, checked):
        if isinstance(given, tf.Variable):
            if given.dtype != default_float():
                raise TypeError(
                    f"`{name}` {label} is a tf.Variable of dtype {given.dtype.name}; create it "
                    f"with `dtype=gpflow.config.default_float()` ({np.dtype(default_float())})."
                )
            held.append(given)
        else:
            held.append(array)
    return tuple(held)


def check_positive(value: Any, name: str) -> np.ndarray:
    """Check that every entry of ``value`` is finite and strictly positive."""
    array = np.asarray(value, dtype=float)
    if not np.all(np.isfinite(array)) or np.any(array <= 0):
        raise ValueError(f"{_quoted(name)} must be finite and strictly positive, got {value!r}.")
    return array


def gaussian_likelihood(likelihood: Any, noise_variance: Any, why: str) -> Any:
    """
    The Gaussian likelihood of a model built with GPflow's ``likelihood=``/``noise_variance=``
    pair: ``likelihood`` itself, or a new ``gpflow.likelihoods.Gaussian`` with
    ``noise_variance`` (1.0 when neither is given). Both at once, or a likelihood that is not
    Gaussian (``why`` says why the model needs one), is refused.
    """
    from gpflow.likelihoods import Gaussian

    if likelihood is None:
        return Gaussian(1.0 if noise_variance is None else noise_variance)
    if noise_variance is not None:
        raise ValueError("Pass either `likelihood` or `noise_variance`, not both.")
    check_gaussian_likelihood(likelihood, why)
    return likelihood


def check_gaussian_likelihood(likelihood: Any, why: str) -> None:
    """
    Refuse a ``likelihood`` that is not a ``gpflow.likelihoods.Gaussian`` (``None``, GPflow's
    default Gaussian, passes); ``why`` says why the model needs one.
    """
    from gpflow.likelihoods import Gaussian

    if likelihood is not None and not isinstance(likelihood, Gaussian):
        raise TypeError(
            f"`likelihood` must be a gpflow.likelihoods.Gaussian ({why}), got "
            f"{type(likelihood).__name__}."
        )


def check_noise_variance(value: Any, name: str = "noise_variance") -> None:
    """
    ``None`` or finite and above GPflow's lower bound of a Gaussian likelihood's variance
    (``gpflow.config.default_likelihood_positive_minimum()``).
    """
    if value is None or callable(value) or isinstance(value, tf.Module):
        return
    array = np.asarray(value.numpy() if hasattr(value, "numpy") else value, dtype=float)
    lower = default_likelihood_positive_minimum()
    if not np.all(np.isfinite(array)) or np.any(array <= lower):
        raise ValueError(
            f"{_quoted(name)} must be a finite variance above {lower} (GPflow's lower bound, "
            f"`gpflow.config.default_likelihood_positive_minimum()`), got {value!r}; pass the "
            "variance (not the standard deviation), e.g. 0.1."
        )


def check_count(
    value: Any, name: str, minimum: int | None = 1, maximum: int | None = None, hint: str = ""
) -> int:
    """
    ``value`` as a Python int: a whole number (a Python or numpy integer, not a bool) from
    ``minimum`` to ``maximum`` (``None``: unbounded); a ``TypeError`` or ``ValueError`` naming
    ``name`` (with ``hint`` after the range) otherwise.
    """
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"`{name}` must be an int, got {value!r}.")
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        bounds = [f"at least {minimum}"] if minimum is not None else []
        bounds += [f"at most {maximum}"] if maximum is not None else []
        raise ValueError(f"`{name}` must be {' and '.join(bounds)}{hint}, got {value}.")
    return int(value)


def check_shape(value: Any, shape: tuple[int, ...], name: str, layout: str) -> None:
    """
    ``value`` has exactly ``shape``, whose axes ``layout`` names (e.g. ``"[M, L]"``); a
    ``ValueError`` naming ``name`` otherwise.
    """
    expected = [int(size) for size in shape]
    if list(np.shape(value)) != expected:
        raise ValueError(
            f"`{name}` must have shape {layout} = {expected}, got {list(np.shape(value))}."
        )


def checked_indices(
    indices: Any, size: int, name: str, *, size_name: str = "", allow_empty: bool = True
) -> tf.Tensor:
    """
    ``indices`` as an integer tensor of row indices in ``[0, size)`` (``size_name`` names the
    bound in messages; not empty unless ``allow_empty``): eagerly a ``TypeError`` or
    ``ValueError`` naming ``name``; inside ``tf.function`` graph assertions, without a round
    trip to the host, ahead of the gathers (which would fail with TensorFlow's own message on a
    CPU, and read zeros on a GPU).
    """
    indices = tf.convert_to_tensor(indices)
    if not indices.dtype.is_integer:
        raise TypeError(
            f"{_quoted(name)} must be integer row indices, got dtype {indices.dtype.name}."
        )
    bound = f"{size_name} = {size}" if size_name else str(size)
    message = f"{_quoted(name)} must be row indices in [0, {bound})"
    if tf.executing_eagerly():
        values = indices.numpy()
        if not allow_empty and values.size == 0:
            raise ValueError(f"{message}, got none.")
        if values.size and (values.min() < 0 or values.max() >= size):
            raise ValueError(f"{message}, got {values.min()}..{values.max()}.")
        return indices
    in_range = (indices >= 0) & (indices < tf.cast(size, indices.dtype))
    checks = [_graph_assert(tf.reduce_all(in_range), message)]
    if not allow_empty:
        checks.append(_graph_assert(tf.size(indices) > 0, f"{message}, got none"))
    with tf.control_dependencies(checks):
        return tf.identity(indices)


def check_num_data(value: Any) -> None:
    """``num_data``: ``None`` or a positive whole number (the number of training points)."""
    if value is None:
        return
    number = value.numpy() if hasattr(value, "numpy") else value
    array = np.asarray(number)
    valid = (
        array.ndim == 0
        and array.dtype.kind in "fiu"
        and np.isfinite(array)
        and array >= 1
        and float(array) == int(array)
    )
    if isinstance(number, bool) or not valid:
        raise ValueError(
            "`num_data` must be the number of training points, a positive integer (or None, "
            f"to take each batch as the whole data set), got {value!r}."
        )


def check_inducing_variable(inducing_variable: Any, name: str = "inducing_variable") -> None:
    """
    Inducing variables as a user gives them: an array [M, D] of real numbers, or inducing
    variables (``gpflow.inducing_variables``) whose parameters (inputs Z, scales, ...) are all
    finite. Check an array before GPflow wraps it (its ``Parameter`` fails on NaN with a raw
    TensorFlow message).
    """
    if isinstance(inducing_variable, tf.Module):
        arrays = [np.asarray(p.numpy()) for p in getattr(inducing_variable, "parameters", ())]
    else:
        value = inducing_variable
        arrays = [
            np.asarray(value.numpy() if isinstance(value, tf.Variable | tf.Tensor) else value)
        ]
        _real_dtype(arrays[0].dtype, name)  # GPflow's Parameter casts it to the default float
        if arrays[0].ndim != 2:
            raise _rank_error(name, arrays[0].shape, "D")
    for array in arrays:
        error = _nonfinite_error(name, array, "replace them with finite inducing inputs")
        if error is not None:
            raise error


def _kernel_parts(kernel: Any) -> Iterator[Any]:
    """``kernel`` and every kernel inside it (sums, products, multi-output and wrapped kernels)."""
    yield kernel
    for attribute in ("kernels", "latent_kernels"):
        for part in getattr(kernel, attribute, None) or ():
            yield from _kernel_parts(part)
    for attribute in ("kernel", "base_kernel"):
        part = getattr(kernel, attribute, None)
        if isinstance(part, tf.Module):
            yield from _kernel_parts(part)


def check_kernel(kernel: Any, input_dim: int | None, name: str = "kernel") -> None:
    """
    A kernel's ARD parameters (the lengthscales of a stationary kernel, the variances of a linear
    one, the weight variances of an arc-cosine one) have one entry per input column the kernel
    reads (``active_dims``, else all ``input_dim``): a ``ValueError`` naming ``name`` otherwise,
    where TensorFlow would fail later with a broadcast error.
    """
    if input_dim is None:
        return
    for part in _kernel_parts(kernel):
        if not getattr(part, "ard", False):
            continue
        for label in ("lengthscales", "weight_variances", "variance"):  # the ARD parameter
            parameter = getattr(part, label, None)
            if parameter is not None and len(parameter.shape) == 1:
                break
        else:
            continue
        active = getattr(part, "active_dims", slice(None))
        columns = len(range(input_dim)[active]) if isinstance(active, slice) else len(active)
        if int(parameter.shape[-1]) != columns:
            raise ValueError(
                f"{_quoted(name)}: the {type(part).__name__} kernel has {parameter.shape[-1]} "
                f"{label} (one per input dimension, ARD) but reads {columns} input columns "
                f"(the inputs have D = {input_dim}); give it {columns} {label}, a single one, or "
                "select its columns with `active_dims`."
            )


class _CheckedBatch(tuple):  # type: ignore[type-arg]
    """A batch :func:`checked_batch` has checked: checked again (by a nested call), it passes."""


def as_checked_batch(*parts: Any) -> tuple[Any, ...]:
    """
    A batch a model's own check has checked (e.g. row indices and observations): a nested call
    of :func:`checked_batch` passes it through, and :func:`is_checked_batch` says so.
    """
    return _CheckedBatch(parts)


def is_checked_batch(data: Any) -> bool:
    """Whether ``data`` was checked already (:func:`as_checked_batch`, :func:`checked_batch`)."""
    return isinstance(data, _CheckedBatch)


def _static(dimension: Any) -> int | None:
    return None if dimension is None else int(dimension)


def checked_batch(
    data: Any,
    *,
    input_dim: int | None = None,
    name: str = "data",
    cast_integer_labels: bool = True,
    num_rows: int | None = None,
    allow_empty: bool = False,
    fix_rows: str = "",
) -> tuple[Any, ...]:
    """
    A batch ``(X, Y, ...)`` passed to a loss (or to ``predict_log_density``), checked and cast:
    X [N, D] and Y [N, P] of real numbers (cast to GPflow's default float; integer Y kept if
    not ``cast_integer_labels``), the same number of rows, at least one (unless
    ``allow_empty``) or exactly ``num_rows``, ``input_dim`` columns of X, finite values. Later
    elements (e.g. VNNGP's neighbours) are passed through.

    Eagerly every failure is a ``ValueError``/``TypeError``. Inside ``tf.function`` the static
    facts are checked when tracing (the same errors) and the values by graph assertions that
    the returned tensors depend on (``InvalidArgumentError`` with the same message).

    :param fix_rows: what to do when the batch has not ``num_rows`` rows.
    """
    if isinstance(data, _CheckedBatch):  # e.g. training_loss -> elbo: checked once
        return data
    if not isinstance(data, tuple | list) or len(data) < 2:
        raise TypeError(
            f"{_quoted(name)} must be a tuple (X, Y) of arrays [N, D] and [N, P], got "
            f"{type(data).__name__}."
        )
    X = _as_tensor(data[0], f"{name} X")
    Y = _as_tensor(data[1], f"{name} Y", cast_integers=cast_integer_labels)
    for label, tensor, columns in (("X", X, "D"), ("Y", Y, "P")):
        if tensor.shape.rank is not None and tensor.shape.rank != 2:
            raise _rank_error(f"{name} {label}", tensor.shape, columns)
    rows_x, rows_y = _static(X.shape[0]), _static(Y.shape[0])
    rows_message = (
        f"{_quoted(name)}: X has {{}} rows but Y has {{}}; they must have one row per data point."
    )
    if rows_x is not None and rows_y is not None and rows_x != rows_y:
        raise ValueError(rows_message.format(rows_x, rows_y))
    if X.shape.rank == 2:
        check_input_dim(X.shape, input_dim, f"{name} X")
    empty_message = f"{_quoted(name)} is empty: a batch needs at least one row of X and Y"
    count_message = f"{_quoted(name)} must hold exactly {num_rows} rows (num_data)"
    if fix_rows:
        count_message += f"; {fix_rows}"
    if tf.executing_eagerly():
        if not allow_empty and rows_x == 0:
            raise ValueError(f"{empty_message}.")
        if num_rows is not None and rows_x != num_rows:
            raise ValueError(f"{count_message}; got {rows_x}.")
        _check_rows_and_values(X.numpy(), Y.numpy(), name)
        return _CheckedBatch((X, Y, *data[2:]))

    # A batch known to be empty when tracing may be a branch that never runs (a replica without
    # rows under tf.distribute, guarded by tf.cond): its count is checked when it runs.
    if num_rows is not None and rows_x not in (None, 0, num_rows):
        raise ValueError(f"{count_message}; got {rows_x}.")
    rows, assertions = tf.shape(X)[0], []
    if rows_x is None or rows_y is None:
        message = f"{_quoted(name)}: X and Y must have the same number of rows (one per data point)"
        assertions.append(_graph_assert(tf.equal(rows, tf.shape(Y)[0]), message))
    if not allow_empty and not rows_x:
        assertions.append(_graph_assert(rows > 0, empty_message))
    if num_rows is not None and not rows_x:
        assertions.append(_graph_assert(tf.equal(rows, num_rows), count_message))
    if input_dim is not None and X.shape.rank == 2 and X.shape[1] is None:
        message = _columns_error(f"{name} X", input_dim, ("N", "D")).args[0]
        assertions.append(_graph_assert(tf.equal(tf.shape(X)[1], input_dim), message))
    X, Y = _finite_after(assertions, ((X, f"{name} X"), (Y, f"{name} Y")))
    return _CheckedBatch((X, Y, *data[2:]))


def require(condition: tf.Tensor, message: str) -> Any:
    """
    Every element of the boolean tensor ``condition`` must hold: eagerly a ``ValueError`` with
    ``message``; inside ``tf.function`` a graph assertion carrying it, returned for the caller's
    control dependencies (no round trip to the host).
    """
    if tf.executing_eagerly():
        if not bool(tf.reduce_all(condition)):
            raise ValueError(message)
        return None
    return _graph_assert(tf.reduce_all(condition), message)


def _graph_assert(condition: tf.Tensor, message: str) -> Any:
    """
    A graph assertion that ``condition`` holds when the graph runs (``tf.debugging.assert_*``
    would fail when tracing where the values are known then, also in a branch that never runs).
    """
    return tf.debugging.Assert(condition, [graph_message(message)])


def _finite_after(
    assertions: list[Any], tensors: tuple[tuple[tf.Tensor, str], ...]
) -> tuple[tf.Tensor, ...]:
    """``tensors``, checked for NaN or inf, after ``assertions`` (graph mode)."""
    checked = []
    with tf.control_dependencies([a for a in assertions if a is not None]):
        for tensor, name in tensors:
            if tensor.dtype.is_floating:
                message = (
                    f"{_quoted(name)} contains NaN or infinite values: drop or impute those rows"
                )
                checked.append(tf.debugging.check_numerics(tensor, ascii_message(message)))
            else:  # integer labels are always finite
                checked.append(tf.identity(tensor))
    return tuple(checked)


def checked_inputs(Xnew: Any, *, input_dim: int | None = None, name: str = "Xnew") -> tf.Tensor:
    """
    Inputs of a prediction, checked and cast to GPflow's default float: [..., N, D] with
    ``input_dim`` columns and finite values (N may be 0). Eagerly a ``ValueError``/
    ``TypeError``; inside ``tf.function`` static facts when tracing, values by a graph assertion.
    """
    X = _as_tensor(Xnew, name)
    if X.shape.rank is not None and X.shape.rank < 2:
        raise _rank_error(name, X.shape, "D")
    if X.shape.rank is not None:
        check_input_dim(X.shape, input_dim, name)
    if tf.executing_eagerly():
        error = _nonfinite_error(
            name, X.numpy(), "the prediction there would be NaN: drop or impute them"
        )
        if error is not None:
            raise error
        return X
    assertions = []
    if input_dim is not None and (X.shape.rank is None or X.shape[-1] is None):
        message = _columns_error(name, input_dim, ("N", "D")).args[0]
        assertions.append(_graph_assert(tf.equal(tf.shape(X)[-1], input_dim), message))
    (checked,) = _finite_after(assertions, ((X, name),))
    return checked


def checked_xnew(model: Any, Xnew: Any) -> tf.Tensor:
    """
    The prediction inputs of a model or posterior, checked and cast (:func:`checked_inputs`)
    against the input dimension of its inducing variables: the check that
    ``checks_arguments(checked_xnew, "Xnew", "predict_f", ...)`` gives its methods.
    """
    return checked_inputs(Xnew, input_dim=inducing_input_dim(model.inducing_variable))


def checked_test_data(model: Any, data: Any) -> tuple[Any, ...]:
    """
    Held-out ``(X, Y)`` for a model's ``predict_log_density``, checked and cast
    (:func:`checked_batch`, no rows allowed) against its inducing variables' input dimension.
    """
    return checked_batch(
        data, input_dim=inducing_input_dim(model.inducing_variable), allow_empty=True
    )


def check_batch(X: Any, Y: Any) -> None:
    """
    Check a (mini)batch passed to an ELBO: X and Y with one row per data point, at least one,
    and finite values. Raises ``ValueError`` when run eagerly and, inside ``tf.function``, for
    what the trace knows (row counts); the values become graph assertions
    (``InvalidArgumentError`` with the same message). Prefer :func:`checked_batch`, which also
    checks shapes, casts, and returns the tensors the checks guard.
    """
    mismatch = "`data`: X has {} rows but Y has {}; they must have one row per data point."
    empty = "`data` is empty: a batch needs at least one row of X and Y"
    if tf.executing_eagerly():
        X, Y = np.asarray(X), np.asarray(Y)
        _check_rows_and_values(X, Y, "data")
        if X.shape[0] == 0:
            raise ValueError(f"{empty}.")
        return
    rows_x, rows_y = _static(X.shape[0]), _static(Y.shape[0])
    if rows_x is not None and rows_y is not None and rows_x != rows_y:
        raise ValueError(mismatch.format(rows_x, rows_y))
    rows = tf.shape(X)[0]
    if rows_x is None or rows_y is None:
        message = "`data`: X and Y must have the same number of rows (one per data point)"
        _graph_assert(tf.equal(rows, tf.shape(Y)[0]), message)
    if not rows_x:  # known to be empty: maybe a branch that never runs (tf.cond)
        _graph_assert(rows > 0, empty)
    for label, tensor in (("X", X), ("Y", Y)):
        if tf.as_dtype(tensor.dtype).is_floating:  # integer class labels are always finite
            tf.debugging.assert_all_finite(
                tensor,
                message=graph_message(
                    f"`data` {label} contains NaN or infinite values: drop or impute them"
                ),
            )


# ------------------------------------------------------------------------------------------------
# Checks before a method's own shape checks


def checks_arguments(
    check: Callable[[Any, Any], Any], argument: str, *methods: str
) -> Callable[[type[_T]], type[_T]]:
    """
    Class decorator: each of ``methods`` (as the class has it, with its ``check_shapes``) first
    replaces its argument ``argument`` (the first one) by ``check(self, value)``. The check
    runs before the method's shape checks, so a bad argument gets the check's error that names
    it, not a shape-check trace. The wrapper keeps the method's shape checks for
    ``inherit_check_shapes`` in subclasses; a method already wrapped with the same check is
    left alone.
    """

    def decorate(cls: type[_T]) -> type[_T]:
        for name in methods:
            method = getattr(cls, name)
            if getattr(method, "__argument_check__", None) is check:
                continue
            setattr(cls, name, _checking(method, check, argument))
        return cls

    return decorate


def _checking(method: Callable[..., Any], check: Callable[[Any, Any], Any], argument: str) -> Any:
    @functools.wraps(method)
    def checked(self: Any, *args: Any, **kwargs: Any) -> Any:
        if args:
            args = (check(self, args[0]), *args[1:])
        elif argument in kwargs:
            kwargs[argument] = check(self, kwargs[argument])
        return method(self, *args, **kwargs)

    checked.__argument_check__ = check  # type: ignore[attr-defined]
    return checked


class ConstructorOnly:
    """
    Mixin for models, posteriors and relaxations whose Python settings decide the structure of
    their computation graph (a relaxation kind, a power, a number of samples, a prediction mode):
    the attributes named in ``_constructor_only``
    are set once, in the constructor. A later assignment would be ignored by functions that
    were already compiled, so it is refused with an ``AttributeError`` that says to build a new
    model instead.
    """

    _constructor_only: tuple[str, ...] = ()
    # why and what to do instead, for settings where the general advice does not fit
    _constructor_only_advice: dict[str, str] = {}

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self._constructor_only and name in self.__dict__:
            advice = self._constructor_only_advice.get(name) or (
                "(compiled functions would keep the old value): build a new model (or "
                f"relaxation, or posterior) with `{name}=...` instead and copy the parameters "
                "into it with "
                "`gpflow.utilities.multiple_assign(new, gpflow.utilities.parameter_dict(old))`."
            )
            raise AttributeError(
                f"`{name}` of {type(self).__name__} is fixed at construction {advice}"
            )
        super().__setattr__(name, value)

    def __setstate__(self, state: Any) -> None:
        """``copy.deepcopy`` (and ``gpflow.utilities.freeze``): arrays among the settings stay
        read-only in the copy, as the constructor left them."""
        self.__dict__.update(state)
        for name in self._constructor_only:
            if isinstance(self.__dict__.get(name), np.ndarray):
                self.__dict__[name].setflags(write=False)

    def __delattr__(self, name: str) -> None:
        if name in self._constructor_only:
            raise AttributeError(
                f"`{name}` of {type(self).__name__} is fixed at construction and cannot be "
                "deleted: build a new model with the setting you need instead."
            )
        super().__delattr__(name)
