"""
Training helpers used by the demo, the benchmarks and the notebooks: L-BFGS through
``gpflow.optimizers.Scipy`` for collapsed models, Adam under ``tf.function`` with ``tf.data``
minibatches for any model, and Power-EP site sweeps alternated with Adam steps for
:class:`~gpflow_tight.PowerEPSGP` with site inference. All show a tqdm progress bar
(``progress=False`` switches it off). :func:`fit_scipy` returns scipy's ``OptimizeResult`` (check
``result.success``; the loss history is ``result.history``), :func:`fit_adam` the loss history,
and the Power-EP helpers a :class:`PowerEPTrace`.
"""

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import gpflow
import numpy as np
import scipy.optimize
import tensorflow as tf
from gpflow.keras import tf_keras
from gpflow.models import ExternalDataTrainingLossMixin
from tqdm.auto import tqdm

from .validation import cholesky_checks, explain_cholesky_failure

if TYPE_CHECKING:
    from .models import PowerEPSGP

__all__ = ["fit_scipy", "fit_adam", "minibatches", "run_power_ep", "fit_power_ep", "PowerEPTrace"]


def fit_scipy(
    model: gpflow.models.BayesianModel,
    data: Any = None,
    maxiter: int = 1000,
    progress: bool = True,
    **scipy_kwargs: Any,
) -> scipy.optimize.OptimizeResult:
    """
    Minimise ``model.training_loss`` with L-BFGS-B (``gpflow.optimizers.Scipy``), leaving the
    model at the optimiser's final point.

    :param data: the full training data for models that take it (e.g. SVGP); ``None`` for
        models that hold their data (SGPR, TightSGPR).
    :param maxiter: the most L-BFGS-B iterations.
    :param scipy_kwargs: passed on to ``scipy.optimize.minimize`` (e.g. ``tol``, ``method``).
    :return: scipy's ``OptimizeResult``, so that convergence is visible: ``result.success``
        (``False`` when, for example, ``maxiter`` stopped the run), ``result.message``,
        ``result.nit`` (iterations), ``result.fun`` (the final loss). Its extra field
        ``result.history`` is the list of losses (floats) after each iteration, at that
        iteration's point: ``len(result.history) == result.nit`` for L-BFGS-B, and
        ``result.history[-1]`` is ``result.fun`` (up to round-off) when ``nit > 0``.
    """
    loss: Callable[[], tf.Tensor]
    if isinstance(model, ExternalDataTrainingLossMixin):
        if data is None:
            raise ValueError(f"{type(model).__name__} takes its data in the loss: pass `data`.")
        loss = model.training_loss_closure(data)
    else:
        loss = model.training_loss
    history: list[float] = []

    @tf.function  # one extra loss evaluation per iteration, at an accepted point
    def compiled_loss() -> tf.Tensor:
        with cholesky_checks(True):
            return loss()

    with tqdm(total=maxiter, desc=type(model).__name__, disable=not progress) as bar:

        def record(step: int, variables: Any, values: Any) -> None:
            # the loss at this iteration's point, which need not be the last point evaluated
            for variable, value in zip(variables, values):
                variable.assign(value)
            history.append(float(compiled_loss().numpy()))
            bar.set_postfix(loss=f"{history[-1]:.4g}", refresh=False)
            bar.update(1)

        with explain_cholesky_failure():
            # the loss is NaN where a factorisation fails, and the line search backs off
            result = gpflow.optimizers.Scipy().minimize(
                loss,
                model.trainable_variables,
                options=dict(maxiter=maxiter),
                step_callback=record,
                **scipy_kwargs,
            )
            if not np.isfinite(result.fun):  # stopped where the loss is not finite: say why
                compiled_loss()
        bar.set_postfix_str(
            f"loss={result.fun:.4g}, {'converged' if result.success else 'NOT converged'}"
        )
    result.history = history
    return result


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
    num_data = len(data[0])
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
) -> list[float]:
    """
    Minimise ``model.training_loss`` with ``gpflow.keras.tf_keras.optimizers.Adam`` under
    ``tf.function``.

    :param data: the training data for models that take it in the loss; ``None`` for models
        that hold their data.
    :param batch_size: minibatch size (``None``: the full data in every step).
    :return: the loss after each step (a minibatch estimate when minibatching).
    """
    optimizer = tf_keras.optimizers.Adam(learning_rate)
    variables = model.trainable_variables
    external = isinstance(model, ExternalDataTrainingLossMixin)
    if external and data is None:
        raise ValueError(f"{type(model).__name__} takes its data in the loss: pass `data`.")

    @tf.function
    def step(batch: Any) -> tf.Tensor:
        with tf.GradientTape() as tape, cholesky_checks(True):  # a failed step changes nothing
            loss = model.training_loss(batch) if external else model.training_loss()
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    if external:
        assert data is not None
        batches = iter(minibatches(data, batch_size or len(data[0]), seed=seed))
    history: list[float] = []
    with explain_cholesky_failure():
        for _ in tqdm(range(iterations), desc=type(model).__name__, disable=not progress):
            history.append(float(step(next(batches) if external else None)))
    return history


@dataclass
class PowerEPTrace:
    """
    What :func:`run_power_ep` and :func:`fit_power_ep` did, one entry per iteration: the loss
    (negative energy; a minibatch estimate when minibatching), the largest relative change of a
    site in the iteration's last sweep, and the number of sites it left unchanged.
    """

    loss: list[float] = field(default_factory=list)
    max_change: list[float] = field(default_factory=list)
    num_skipped: list[int] = field(default_factory=list)

    def converged(self, tolerance: float = 1e-4) -> bool:
        """Whether the last sweep changed no site by more than ``tolerance`` (relative)."""
        return bool(self.max_change) and self.max_change[-1] < tolerance


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
    """
    sweep = _compiled_sweep(model, damping, update)
    trace = PowerEPTrace()
    with explain_cholesky_failure():
        for _ in tqdm(range(max_sweeps), desc="Power EP", disable=not progress):
            change, skipped = sweep(None)
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
) -> PowerEPTrace:
    """
    Train a :class:`~gpflow_tight.PowerEPSGP` with site inference as Bui et al. (2017, §3.9,
    §4.3) do: each iteration runs ``sweeps_per_iteration`` damped parallel sweeps on a
    minibatch of points (all points when ``batch_size`` is ``None``), then one Adam step on the
    energy of that minibatch with the sites held fixed, without waiting for the sites to
    converge. Run :func:`run_power_ep` afterwards to converge the sites at the final
    hyperparameters.
    """
    if sweeps_per_iteration < 1:
        raise ValueError(f"`sweeps_per_iteration` must be at least 1, got {sweeps_per_iteration}.")
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"`batch_size` must be a positive int or None, got {batch_size}.")
    sweep = _compiled_sweep(model, damping, update)
    optimizer = tf_keras.optimizers.Adam(learning_rate)
    variables = model.trainable_variables

    def step(indices: tf.Tensor | None) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = -model.log_marginal_likelihood(indices) - model.log_prior_density()
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    compiled_step = tf.function(step)
    batches = _site_batches(model.num_data, batch_size, seed)
    trace = PowerEPTrace()
    with explain_cholesky_failure():
        for _ in tqdm(range(iterations), desc=type(model).__name__, disable=not progress):
            indices = next(batches)
            for _ in range(sweeps_per_iteration):
                change, skipped = sweep(indices)
            trace.max_change.append(float(change))
            trace.num_skipped.append(int(skipped))
            trace.loss.append(float(compiled_step(indices)))
    return trace
