"""
Training helpers used by the demo, the benchmarks and the notebooks: L-BFGS through
``gpflow.optimizers.Scipy`` for collapsed models, Adam under ``tf.function`` with ``tf.data``
minibatches for any model, and Power-EP site sweeps alternated with Adam steps for
:class:`~gpflow_tight.PowerEPSGP` with site inference. All show a tqdm progress bar
(``progress=False`` switches it off) and call ``step_callback(step, loss)`` after each step.
:func:`fit_scipy` returns scipy's ``OptimizeResult`` (check ``result.success``; the loss history
is ``result.history``), :func:`fit_adam` the loss history, and the Power-EP helpers a
:class:`PowerEPTrace`.

A fault loses nothing: when a step fails (a factorisation that fails at an accepted point, a loss
or gradient that is NaN or infinite, a minibatch with NaN), the helper puts the model back to
the last parameters whose loss was finite and raises a :class:`TrainingError` that says which
step failed and why, and holds the history up to that point.
"""

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import gpflow
import numpy as np
import scipy.optimize
import tensorflow as tf
from gpflow.keras import tf_keras
from gpflow.models import ExternalDataTrainingLossMixin
from tqdm.auto import tqdm

from .validation import as_cholesky_error, check_count, check_positive, cholesky_checks

if TYPE_CHECKING:
    from .models import PowerEPSGP

__all__ = [
    "fit_scipy",
    "fit_adam",
    "minibatches",
    "run_power_ep",
    "fit_power_ep",
    "PowerEPTrace",
    "TrainingError",
]

StepCallback = Callable[[int, float], None]
_NOT_FINITE = "gpflow_tight: the loss or its gradient is NaN or infinite"


class TrainingError(RuntimeError):
    """
    A training helper stopped at a fault. The model holds the parameters (and, for Power EP, the
    sites) of the last step whose loss was finite, or its starting point if the first step
    failed.

    :ivar step: the step (iteration) that failed, counted from 1.
    :ivar history: the losses of the steps before it (for the Power-EP helpers, the
        :class:`PowerEPTrace`); ``history[-1]`` is the loss at the restored parameters. For
        :class:`~gpflow_tight.keras.KerasGPModel`, Keras's ``History`` of the completed epochs.
    :ivar result: scipy's ``OptimizeResult`` for :func:`fit_scipy` when scipy returned one,
        otherwise ``None``.
    """

    def __init__(self, message: str, step: int, history: Any, result: Any = None) -> None:
        super().__init__(message)
        self.step = step
        self.history = history
        self.result = result


def _reason(error: BaseException | None) -> str:
    """Why a step failed, with what to do about it."""
    if error is None or _NOT_FINITE in str(error):
        return (
            "the loss or its gradient is NaN or infinite there: the optimiser diverged (lower "
            "the learning rate) or the data hold NaN or inf values."
        )
    cholesky = as_cholesky_error(error) if isinstance(error, tf.errors.OpError) else None
    if cholesky is not None:
        return cholesky.message
    if not isinstance(error, tf.errors.OpError):
        return str(error)
    # the check's own message, without TensorFlow's "Graph execution error" frame and trace
    lines = [
        line.split(" : Tensor had")[0]
        for line in error.message.splitlines()
        if line.strip()
        and not line.startswith(("Graph execution error", "Detected at node", "  File ", "\t"))
    ]
    return " ".join(lines) if lines else error.message


def _fault(
    name: str,
    step: int,
    error: BaseException | None,
    history: Any,
    result: Any = None,
    history_holds: str = "the losses so far",
) -> TrainingError:
    kept = (
        "its starting point"
        if step == 1
        else f"the parameters of the last finite loss (step {step - 1}'s)"
    )
    return TrainingError(
        f"{name} stopped at step {step}: {_reason(error)} The model holds {kept}; "
        f"{history_holds} are in `error.history`.",
        step,
        history,
        result,
    )


def _cause(error: BaseException | None) -> BaseException | None:
    """What a :class:`TrainingError` is raised from: the package's CholeskyError if it is one."""
    if isinstance(error, tf.errors.OpError):
        return as_cholesky_error(error) or error
    return error


class _StepFaultError(Exception):
    """
    Raised inside scipy's callback or Keras's train function to end a run at a fault, past code
    that would drop its cause (``error``: TensorFlow's, or None).
    """

    def __init__(self, error: BaseException | None) -> None:
        super().__init__()
        self.error = error


class _LastGood:
    """
    Copies of ``variables`` (on their devices) at the last point whose loss was finite, saved
    inside the compiled step, so that a fault can put the model back without a host round trip
    per step.
    """

    def __init__(self, variables: Sequence[tf.Variable]) -> None:
        self.variables = tuple(variables)
        # under a tf.distribute strategy, every replica holds the same values: the first saves
        self.copies = tuple(
            tf.Variable(
                v,
                trainable=False,
                shape=v.shape,
                name="last_good",
                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
            )
            for v in self.variables
        )

    def save(self) -> list[Any]:
        return [copy.assign(v) for copy, v in zip(self.copies, self.variables)]

    def restore(self) -> None:
        for copy, v in zip(self.copies, self.variables):
            v.assign(copy)


def _assert_finite(loss: tf.Tensor, gradients: Sequence[Any]) -> tf.Operation:
    """A graph assertion that the loss and every gradient are finite (no host round trip)."""
    values = [loss] + [
        g.values if isinstance(g, tf.IndexedSlices) else g for g in gradients if g is not None
    ]
    finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(v)) for v in values])
    return tf.debugging.Assert(finite, [_NOT_FINITE])


def _checked_step(
    loss_fn: Callable[[], tf.Tensor],
    optimizer: Any,
    variables: Sequence[tf.Variable],
    last_good: _LastGood,
) -> tf.Tensor:
    """
    One optimiser step on ``loss_fn`` that changes nothing unless the loss and its gradients are
    finite (factorisations checked), saving the point of the finite loss in ``last_good``.
    """
    with tf.GradientTape() as tape, cholesky_checks(True):
        loss = loss_fn()
    gradients = tape.gradient(loss, variables)
    _apply_if_finite(loss, gradients, optimizer, variables, last_good)
    return loss


def _apply_if_finite(
    loss: tf.Tensor,
    gradients: Sequence[Any],
    optimizer: Any,
    variables: Sequence[tf.Variable],
    last_good: _LastGood,
) -> list[Any]:
    """
    Apply ``gradients`` only if they and ``loss`` are finite (else the step fails), after saving
    in ``last_good`` the point where ``loss`` was computed. Returns the saving ops, which run only
    if the check passed: later updates that must not happen on a failed step depend on them.
    """
    with tf.control_dependencies([_assert_finite(loss, gradients)]):
        saved = last_good.save()
    with tf.control_dependencies(saved):
        optimizer.apply_gradients(zip(gradients, variables))
    return saved


class _WatchedScipy(gpflow.optimizers.Scipy):  # type: ignore[misc]
    """
    GPflow's Scipy optimiser, watching the points scipy evaluates: ``best`` is the point of the
    lowest finite loss so far, ``failed`` the last point after it whose loss was not finite
    (``None`` if there is none). A run that ends at ``best`` with ``failed`` set stopped because
    trial points failed, not because it converged.
    """

    best: np.ndarray = np.empty(0)
    failed: np.ndarray | None = None

    def eval_func(self, *args: Any, **kwargs: Any) -> Callable[[np.ndarray], Any]:
        evaluate = super().eval_func(*args, **kwargs)
        lowest = np.inf

        def watched(x: np.ndarray) -> Any:
            nonlocal lowest
            loss, gradient = evaluate(x)
            if not np.isfinite(loss):
                self.failed = np.array(x)
            elif loss < lowest:
                lowest, self.best, self.failed = loss, np.array(x), None
            return loss, gradient

        return watched


def _training_loss(model: gpflow.models.BayesianModel, data: Any, helper: str) -> Any:
    """The model's loss closure on ``data``, refusing data that the model would ignore."""
    if isinstance(model, ExternalDataTrainingLossMixin):
        if data is None:
            raise ValueError(f"{type(model).__name__} takes its data in the loss: pass `data`.")
        return model.training_loss_closure(data, compile=False)
    if data is not None:
        raise ValueError(
            f"{type(model).__name__} holds its training data (given at construction), so "
            f"`{helper}` cannot use `data`: drop the argument, or build the model on the new data."
        )
    return model.training_loss


def fit_scipy(
    model: gpflow.models.BayesianModel,
    data: Any = None,
    maxiter: int = 1000,
    progress: bool = True,
    step_callback: StepCallback | None = None,
    **scipy_kwargs: Any,
) -> scipy.optimize.OptimizeResult:
    """
    Minimise ``model.training_loss`` with L-BFGS-B (``gpflow.optimizers.Scipy``), leaving the
    model at the optimiser's final point.

    Where a factorisation fails at a trial point of the line search, the loss is ``+inf``, which
    BFGS's line search backs off from. L-BFGS-B's (measured with scipy 1.17) does not: it ends
    the run at the iterate before the failed trial point with ``success == True``. So a run that
    ends at the point before a failed trial point is reported as it is: if it moved from its
    starting point, ``result.success`` is set to ``False`` and ``result.message`` says what
    happened (the model holds that iterate, a point with a finite loss); if it never moved, a
    :class:`TrainingError` is raised. If the run ends at, or accepts, a point whose loss is not
    finite, the model is put back to the last accepted iterate with a finite loss and a
    :class:`TrainingError` is raised. Each ``TrainingError`` has scipy's result as ``result``.

    :param data: the full training data for models that take it (e.g. SVGP); ``None`` for
        models that hold their data (SGPR, TightSGPR), which refuse it.
    :param maxiter: the most L-BFGS-B iterations.
    :param step_callback: called as ``step_callback(iteration, loss)`` after each iteration
        (counted from 1), with the model at that iteration's point.
    :param scipy_kwargs: passed on to ``scipy.optimize.minimize`` (e.g. ``tol``, ``method``,
        ``options``; ``maxiter`` is this function's argument, not an option).
    :return: scipy's ``OptimizeResult``, so that convergence is visible: ``result.success``
        (``False`` when, for example, ``maxiter`` stopped the run), ``result.message``,
        ``result.nit`` (iterations), ``result.fun`` (the final loss). Its extra field
        ``result.history`` is the list of losses (floats) after each iteration, at that
        iteration's point: ``len(result.history) == result.nit`` for L-BFGS-B, and
        ``result.history[-1]`` is ``result.fun`` (up to round-off) when ``nit > 0``.
    """
    name = "fit_scipy"
    options = dict(scipy_kwargs.pop("options", None) or {})
    if "maxiter" in options:
        raise ValueError(
            "Pass `maxiter` as fit_scipy's own argument, not in `options` (it also sets the "
            "progress bar's length)."
        )
    options["maxiter"] = maxiter
    loss = _training_loss(model, data, name)
    variables = model.trainable_variables
    history: list[float] = []
    last_good = [v.numpy() for v in variables]

    @tf.function  # one extra loss evaluation per iteration, at an accepted point
    def compiled_loss() -> tf.Tensor:
        with cholesky_checks(True):
            return loss()

    def checked_loss() -> float:
        try:
            value = float(compiled_loss().numpy())
        except tf.errors.InvalidArgumentError as error:
            raise _StepFaultError(error) from error
        if not np.isfinite(value):
            raise _StepFaultError(None)
        return value

    def failure() -> BaseException | None:
        """Why the loss at the model's point is not finite (None: not a failed check)."""
        try:
            checked_loss()
        except _StepFaultError as fault:
            return fault.error
        return None

    def restore() -> None:
        for variable, value in zip(variables, last_good):
            variable.assign(value)

    def move_to(x: np.ndarray) -> None:
        """Put the model at scipy's point ``x``."""
        _WatchedScipy.assign_tensors(
            variables, _WatchedScipy.unpack_tensors(variables, tf.convert_to_tensor(x))
        )

    with tqdm(total=maxiter, desc=type(model).__name__, disable=not progress) as bar:

        def record(step: int, variables: Any, values: Any) -> None:
            # the loss at this iteration's point, which need not be the last point evaluated
            for variable, value in zip(variables, values):
                variable.assign(value)
            history.append(checked_loss())
            last_good[:] = [np.array(value) for value in values]
            bar.set_postfix(loss=f"{history[-1]:.4g}", refresh=False)
            bar.update(1)
            if step_callback is not None:
                step_callback(step + 1, history[-1])

        optimizer = _WatchedScipy()
        start = optimizer.initial_parameters(variables).numpy()
        try:
            result = optimizer.minimize(
                loss,
                variables,
                options=options,
                step_callback=record,
                **scipy_kwargs,
            )
        except _StepFaultError as fault:
            restore()
            raise _fault(name, len(history) + 1, fault.error, history) from _cause(fault.error)
        result.history = history
        if not np.isfinite(result.fun):  # stopped where the loss is not finite: say why
            error = failure()
            restore()
            raise _fault(name, len(history) + 1, error, history, result) from _cause(error)
        if optimizer.failed is not None and np.array_equal(result.x, optimizer.best):
            # stopped at the point before a failed trial point: why did that one fail?
            move_to(optimizer.failed)
            error = failure()
            move_to(result.x)
            if np.array_equal(result.x, start):
                raise _no_progress(history, result, error) from _cause(error)
            result.success = False
            result.message = (
                f"STOPPED AT A FAILED TRIAL POINT, NOT CONVERGED: at the last point that the "
                f"line search tried: {_reason(error)} The line search did not back off from it, "
                f"and the run ended at the iterate before it (scipy: {result.message})"
            )
        bar.set_postfix_str(
            f"loss={result.fun:.4g}, {'converged' if result.success else 'NOT converged'}"
        )
    return result


def _no_progress(history: list[float], result: Any, error: BaseException | None) -> TrainingError:
    return TrainingError(
        "fit_scipy made no progress: every point that scipy's line search tried beyond the "
        f"starting point failed, and scipy ended at the start ({result.message}). At the last "
        f"point tried: {_reason(error)} The model holds its starting point; the losses so far "
        "are in `error.history`. If that does not help, start from other parameter values, or "
        "take smaller first steps (a few `fit_adam` steps with a small learning rate, then "
        "`fit_scipy`).",
        len(history) + 1,
        history,
        result,
    )


def minibatches(data: tuple[np.ndarray, ...], batch_size: int, seed: int = 0) -> tf.data.Dataset:
    """
    An endless ``tf.data`` stream of minibatches of ``data``: the stream of rows is a sequence
    of uniformly random permutations of the whole data set (one per epoch, reproducible from
    ``seed``), cut into batches of ``batch_size`` (a batch can span two epochs, so no row is
    dropped). When ``batch_size`` is at least the number of points, every element is the whole
    data in its original order.

    Each epoch's permutation is one ``tf.random.experimental.stateless_shuffle`` of the row
    indices (8 bytes per row), and each batch gathers its rows from ``data``. A
    ``Dataset.shuffle`` buffer would need to hold every row to give a uniform permutation (a
    smaller buffer only mixes rows that are close in the data's order), that is a second copy of
    the data plus per-element overhead, refilled one element at a time at the start of each
    epoch.
    """
    check_count(batch_size, "batch_size", minimum=1)
    rows = [len(x) for x in data]
    if len(set(rows)) > 1:
        raise ValueError(
            f"`data`: every part must have one row per data point, got {rows} rows; pass "
            "arrays of the same length."
        )
    num_data = rows[0]
    if num_data == 0:
        raise ValueError("`data` is empty: a batch needs at least one row of each part.")
    tensors = tuple(tf.convert_to_tensor(x) for x in data)
    if batch_size >= num_data:  # full batch: every step sees each point exactly once
        return tf.data.Dataset.from_tensors(tensors).repeat()

    def permutation(epoch: tf.Tensor) -> tf.Tensor:
        seed_pair = tf.stack([tf.constant(seed, tf.int64), epoch])
        return tf.random.experimental.stateless_shuffle(
            tf.range(num_data, dtype=tf.int64), seed_pair
        )

    def gather(rows: tf.Tensor) -> tuple[tf.Tensor, ...]:
        return tuple(tf.gather(x, rows) for x in tensors)

    return (
        tf.data.Dataset.counter()
        .map(permutation)
        .rebatch(batch_size, drop_remainder=True)
        .map(gather)
        .prefetch(tf.data.AUTOTUNE)
    )


def fit_adam(
    model: gpflow.models.BayesianModel,
    data: tuple[np.ndarray, ...] | None = None,
    iterations: int = 1000,
    batch_size: int | None = None,
    learning_rate: float = 0.01,
    progress: bool = True,
    seed: int = 0,
    step_callback: StepCallback | None = None,
) -> list[float]:
    """
    Minimise ``model.training_loss`` with ``gpflow.keras.tf_keras.optimizers.Adam`` under
    ``tf.function``.

    A step whose loss or gradient is not finite (a failed factorisation, a minibatch with NaN, a
    diverging step) changes nothing; the helper then puts the model back to the parameters of the
    last finite loss (those at which ``history[-1]`` was computed) and raises a
    :class:`TrainingError` that holds the history.

    :param data: the training data for models that take it in the loss; ``None`` for models
        that hold their data, which refuse it.
    :param batch_size: minibatch size (``None``: the full data in every step); only for models
        that take their data in the loss.
    :param step_callback: called as ``step_callback(step, loss)`` after each step (counted from
        1), with the loss of that step.
    :return: the loss of each step, at the parameters before its update (a minibatch estimate
        when minibatching).
    """
    name = "fit_adam"
    external = isinstance(model, ExternalDataTrainingLossMixin)
    if batch_size is not None and not external:
        raise ValueError(
            f"{type(model).__name__} holds its training data and uses all of it in every step, "
            "so `fit_adam` cannot use `batch_size`: drop it (or use a model that takes "
            "minibatches, such as TightSVGP)."
        )
    if batch_size is not None:
        check_count(batch_size, "batch_size", minimum=1)
    check_count(iterations, "iterations", minimum=0)
    _check_learning_rate(learning_rate)
    _training_loss(model, data, name)  # refuses what the model cannot use
    optimizer = tf_keras.optimizers.Adam(learning_rate)
    variables = model.trainable_variables
    last_good = _LastGood(variables)

    @tf.function
    def step(batch: Any) -> tf.Tensor:
        loss = (lambda: model.training_loss(batch)) if external else model.training_loss
        return _checked_step(loss, optimizer, variables, last_good)

    if external:
        assert data is not None
        batches = iter(minibatches(data, batch_size or len(data[0]), seed=seed))
    history: list[float] = []
    for number in tqdm(range(1, iterations + 1), desc=type(model).__name__, disable=not progress):
        try:
            history.append(float(step(next(batches) if external else None)))
        except tf.errors.InvalidArgumentError as error:
            last_good.restore()
            raise _fault(name, number, error, history) from _cause(error)
        if step_callback is not None:
            step_callback(number, history[-1])
    return history


@dataclass
class PowerEPTrace:
    """
    What :func:`run_power_ep` and :func:`fit_power_ep` did: the loss (negative energy; a
    minibatch estimate when minibatching), the largest relative change of a site in the
    iteration's last sweep, and the number of sites it left unchanged, one entry of each per
    iteration of :func:`fit_power_ep`; :func:`run_power_ep` records the changes of every sweep
    and one loss, at the sites it ends with.
    """

    loss: list[float] = field(default_factory=list)
    max_change: list[float] = field(default_factory=list)
    num_skipped: list[int] = field(default_factory=list)

    def converged(self, tolerance: float = 1e-4) -> bool:
        """Whether the last sweep changed no site by more than ``tolerance`` (relative)."""
        return bool(self.max_change) and self.max_change[-1] < tolerance


def _check_learning_rate(learning_rate: Any) -> None:
    """A number must be finite and positive (a ``tf_keras`` schedule is Adam's to check)."""
    if isinstance(learning_rate, int | float | np.number):
        check_positive(learning_rate, "learning_rate")


def _site_batches(num_data: int, batch_size: int | None, seed: int) -> Iterator[tf.Tensor | None]:
    """Row indices of each minibatch, a fresh permutation per epoch; ``None`` for full batch."""
    if batch_size is None or batch_size >= num_data:
        while True:
            yield None
    rng = np.random.default_rng(seed)
    while True:
        order = rng.permutation(num_data)
        for start in range(0, num_data - batch_size + 1, batch_size):
            yield tf.constant(order[start : start + batch_size])


def _compiled_sweep(model: "PowerEPSGP", damping: float, update: str) -> Callable[..., Any]:
    def sweep(indices: tf.Tensor | None) -> tuple[tf.Tensor, tf.Tensor]:
        result = model.sweep(indices, damping=damping, update=update)
        return result["max_change"], result["num_skipped"]

    return tf.function(sweep)


def run_power_ep(
    model: "PowerEPSGP",
    max_sweeps: int = 200,
    tolerance: float = 1e-6,
    damping: float = 0.5,
    update: str = "full",
    progress: bool = False,
) -> PowerEPTrace:
    """
    Power-EP sweeps over all data with the hyperparameters fixed, until no site changes by more
    than ``tolerance`` (relative) or ``max_sweeps`` is reached; check ``trace.converged()``.
    A sweep that fails (or makes a site non-finite) leaves the sites of the sweep before it and
    raises a :class:`TrainingError` that holds the trace. The trace has one site change per
    sweep and one loss, at the sites it ends with.
    """
    check_count(max_sweeps, "max_sweeps", minimum=1)
    sweep = _compiled_sweep(model, damping, update)
    trace = PowerEPTrace()
    last_good = _LastGood(model.variables)
    for number in tqdm(range(1, max_sweeps + 1), desc="Power EP", disable=not progress):
        try:
            change, skipped = sweep(None)
            error = None
        except tf.errors.InvalidArgumentError as failure:
            error = failure
            change = np.nan
        if not np.isfinite(float(change)):
            last_good.restore()
            raise _fault("run_power_ep", number, error, trace) from _cause(error)
        last_good.save()
        trace.max_change.append(float(change))
        trace.num_skipped.append(int(skipped))
        if trace.max_change[-1] < tolerance:
            break
    trace.loss.append(-float(model.log_marginal_likelihood()))
    return trace


def fit_power_ep(
    model: "PowerEPSGP",
    iterations: int = 1000,
    sweeps_per_iteration: int = 1,
    batch_size: int | None = None,
    learning_rate: float = 0.01,
    damping: float = 0.5,
    update: str = "full",
    progress: bool = True,
    seed: int = 0,
    step_callback: StepCallback | None = None,
) -> PowerEPTrace:
    """
    Train a :class:`~gpflow_tight.PowerEPSGP` with site inference as Bui et al. (2017, §3.9,
    §4.3) do: each iteration runs ``sweeps_per_iteration`` damped parallel sweeps on a
    minibatch of points (all points when ``batch_size`` is ``None``), then one Adam step on the
    energy of that minibatch with the sites held fixed, without waiting for the sites to
    converge. Run :func:`run_power_ep` afterwards to converge the sites at the final
    hyperparameters.

    An iteration whose sweep or Adam step fails (or gives a non-finite loss, site or gradient)
    puts the model (sites and hyperparameters) back to the state of the last finite loss and
    raises a :class:`TrainingError` that holds the trace.

    :param step_callback: called as ``step_callback(iteration, loss)`` after each iteration
        (counted from 1).
    """
    check_count(sweeps_per_iteration, "sweeps_per_iteration", minimum=1)
    if batch_size is not None:
        check_count(batch_size, "batch_size", minimum=1)
    check_count(iterations, "iterations", minimum=0)
    _check_learning_rate(learning_rate)
    sweep = _compiled_sweep(model, damping, update)
    optimizer = tf_keras.optimizers.Adam(learning_rate)
    variables = model.trainable_variables
    last_good = _LastGood(model.variables)  # the sites too

    @tf.function
    def step(indices: tf.Tensor | None) -> tf.Tensor:
        def loss() -> tf.Tensor:
            return -model.log_marginal_likelihood(indices) - model.log_prior_density()

        return _checked_step(loss, optimizer, variables, last_good)

    batches = _site_batches(model._num_rows, batch_size, seed)
    trace = PowerEPTrace()
    for number in tqdm(range(1, iterations + 1), desc=type(model).__name__, disable=not progress):
        indices = next(batches)
        try:
            for _ in range(sweeps_per_iteration):
                change, skipped = sweep(indices)
            loss = float(step(indices))
        except tf.errors.InvalidArgumentError as error:
            last_good.restore()
            raise _fault("fit_power_ep", number, error, trace) from _cause(error)
        trace.max_change.append(float(change))
        trace.num_skipped.append(int(skipped))
        trace.loss.append(loss)
        if step_callback is not None:
            step_callback(number, loss)
    return trace
