"""
Input checks and error translation shared by all models: bad input fails early with a
message that names the argument and the fix.
"""

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

import numpy as np
import tensorflow as tf

__all__ = [
    "CholeskyError",
    "ConstructorOnly",
    "check_regression_data",
    "check_batch",
    "check_positive",
    "checked_cholesky",
    "check_cholesky_factor",
    "cholesky_checks",
    "training_objective",
    "explain_cholesky_failure",
    "as_cholesky_error",
]

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
    as in GPflow's models, so that a line search (scipy's L-BFGS-B, BFGS) backs off and carries
    on; unless :func:`cholesky_checks` asked for checks (the training helpers of
    :mod:`gpflow_tight.training` do, to stop with advice).
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
    traced), except inside a training objective (:func:`training_objective`).
    """
    if _CHECKS.get() is False:
        return factor
    return tf.debugging.check_numerics(factor, _CHOLESKY_ADVICE.format(what=what))


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
    return CholeskyError(_CHOLESKY_ADVICE.format(what=what), error)


def _as_2d_array(value: Any, name: str) -> np.ndarray:
    if isinstance(value, tf.Variable | tf.Tensor):
        value = value.numpy()
    try:
        array = np.asarray(value)
    except Exception as error:  # pragma: no cover - numpy raises many types here
        raise TypeError(f"`{name}` must be array-like, got {type(value).__name__}.") from error
    if array.dtype == object or not np.issubdtype(array.dtype, np.number):
        raise TypeError(f"`{name}` must hold numbers, got dtype {array.dtype}.")
    if array.ndim != 2:
        raise ValueError(
            f"`{name}` must be a 2-D array of shape [N, {'D' if name.endswith('X') else 'P'}], "
            f"got shape {array.shape}; reshape a vector `v` with `v[:, None]`."
        )
    return array


def _check_rows_and_values(X: np.ndarray, Y: np.ndarray, name: str) -> None:
    """One row per data point in X and Y, and only finite values (with the offending rows)."""
    if X.shape[0] != Y.shape[0]:
        raise ValueError(
            f"`{name}`: X has {X.shape[0]} rows but Y has {Y.shape[0]}; they must have one row "
            "per data point."
        )
    for label, array in (("X", X), ("Y", Y)):
        bad = ~np.isfinite(array)
        if bad.any():
            rows = np.unique(np.nonzero(bad)[0])
            raise ValueError(
                f"`{name}` {label} contains {bad.sum()} NaN or infinite value(s) (rows "
                f"{rows[:5].tolist()}{'...' if rows.size > 5 else ''}); drop or impute them."
            )


def check_regression_data(data: Any, name: str = "data") -> tuple[np.ndarray, np.ndarray]:
    """
    Check a regression data tuple ``(X, Y)``: two 2-D numeric arrays with the same, non-zero
    number of rows and only finite values. Returns them as numpy arrays.
    """
    if not isinstance(data, tuple | list) or len(data) != 2:
        raise TypeError(f"`{name}` must be a tuple (X, Y), got {type(data).__name__}.")
    X = _as_2d_array(data[0], f"{name} X")
    Y = _as_2d_array(data[1], f"{name} Y")
    _check_rows_and_values(X, Y, name)
    if X.shape[0] == 0:
        raise ValueError(f"`{name}` is empty: X and Y need at least one row.")
    return X, Y


def check_positive(value: Any, name: str) -> np.ndarray:
    """Check that every entry of ``value`` is finite and strictly positive."""
    array = np.asarray(value, dtype=float)
    if not np.all(np.isfinite(array)) or np.any(array <= 0):
        raise ValueError(f"`{name}` must be finite and strictly positive, got {value!r}.")
    return array


def check_batch(X: Any, Y: Any) -> None:
    """
    Check a (mini)batch passed to an ELBO: X and Y with one row per data point and finite values.
    Raises ``ValueError`` when run eagerly; inside ``tf.function`` the same checks become graph
    assertions (``InvalidArgumentError`` with the same message).
    """
    if tf.executing_eagerly():
        _check_rows_and_values(np.asarray(X), np.asarray(Y), "data")
        return
    tf.debugging.assert_equal(
        tf.shape(X)[0], tf.shape(Y)[0], message="`data`: X and Y must have the same number of rows"
    )
    for label, tensor in (("X", X), ("Y", Y)):
        if tf.as_dtype(tensor.dtype).is_floating:  # integer class labels are always finite
            tf.debugging.assert_all_finite(
                tensor, message=f"`data` {label} contains NaN or infinite values"
            )


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

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self._constructor_only and name in self.__dict__:
            raise AttributeError(
                f"`{name}` of {type(self).__name__} is fixed at construction (compiled functions "
                f"would keep the old value): build a new model (or relaxation, or posterior) with "
                f"`{name}=...` instead and copy the parameters into it with "
                "`gpflow.utilities.multiple_assign(new, gpflow.utilities.parameter_dict(old))`."
            )
        super().__setattr__(name, value)

    def __delattr__(self, name: str) -> None:
        if name in self._constructor_only:
            raise AttributeError(
                f"`{name}` of {type(self).__name__} is fixed at construction and cannot be "
                "deleted: build a new model with the setting you need instead."
            )
        super().__delattr__(name)
