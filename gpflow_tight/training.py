"""
Training helpers used by the demo, the benchmarks and the notebooks: L-BFGS through
``gpflow.optimizers.Scipy`` for collapsed models, and Adam under ``tf.function`` with ``tf.data``
minibatches for any model. Both show a tqdm progress bar (``progress=False`` switches it off) and
return the loss history.
"""

from collections.abc import Callable
from typing import Any

import gpflow
import numpy as np
import tensorflow as tf
from gpflow.keras import tf_keras
from gpflow.models import ExternalDataTrainingLossMixin
from tqdm.auto import tqdm

from .validation import explain_cholesky_failure

__all__ = ["fit_scipy", "fit_adam", "minibatches"]


def fit_scipy(
    model: gpflow.models.BayesianModel,
    data: Any = None,
    maxiter: int = 1000,
    progress: bool = True,
    **scipy_kwargs: Any,
) -> list[float]:
    """
    Minimise ``model.training_loss`` with L-BFGS-B (``gpflow.optimizers.Scipy``).

    :param data: the full training data for models that take it (e.g. SVGP); ``None`` for
        models that hold their data (SGPR, TightSGPR).
    :return: the loss after each iteration.
    """
    loss: Callable[[], tf.Tensor]
    if isinstance(model, ExternalDataTrainingLossMixin):
        if data is None:
            raise ValueError(f"{type(model).__name__} takes its data in the loss: pass `data`.")
        loss = model.training_loss_closure(data)
    else:
        loss = model.training_loss
    history: list[float] = []
    compiled_loss = tf.function(loss)  # one extra compiled loss evaluation per iteration
    with tqdm(total=maxiter, desc=type(model).__name__, disable=not progress) as bar:

        def record(step: int, variables: Any, values: Any) -> None:
            history.append(float(compiled_loss().numpy()))
            bar.set_postfix(loss=f"{history[-1]:.4g}", refresh=False)
            bar.update(1)

        with explain_cholesky_failure():
            gpflow.optimizers.Scipy().minimize(
                loss,
                model.trainable_variables,
                options=dict(maxiter=maxiter),
                step_callback=record,
                **scipy_kwargs,
            )
    return history


def minibatches(data: tuple[np.ndarray, ...], batch_size: int, seed: int = 0) -> tf.data.Dataset:
    """
    An endless ``tf.data`` stream of minibatches of ``data``: reshuffled each epoch, or the whole
    data in every element when ``batch_size`` is at least the number of points.
    """
    num_data = len(data[0])
    dataset = tf.data.Dataset.from_tensor_slices(data)
    if batch_size >= num_data:  # full batch: every step sees each point exactly once
        return dataset.batch(num_data).repeat()
    # shuffle before repeat, so that each epoch is a permutation of the data
    return (
        dataset.shuffle(min(num_data, 10_000), seed=seed, reshuffle_each_iteration=True)
        .repeat()
        .batch(batch_size, drop_remainder=True)
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
        with tf.GradientTape() as tape:
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
