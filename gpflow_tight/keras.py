"""
Train any model with an external-data training loss (TightSVGP, SOLVEGP, VNNGP, the minibatch
GPLVM, GPflow's SVGP, ...) with Keras's ``compile()`` and ``fit()`` on a ``tf.data`` dataset,
through ``gpflow.keras.tf_keras``, so that Keras's callbacks (progress bar, ``EarlyStopping``,
``TensorBoard``, ``ModelCheckpoint``, learning-rate schedules) work unchanged. GPflow has no such
adaptor (GPflow issue 1207).

.. code-block:: python

    keras_model = gpflow_tight.keras.KerasGPModel(model)
    keras_model.compile(optimizer=tf_keras.optimizers.Adam(0.01))
    history = keras_model.fit(dataset.batch(256), epochs=20, callbacks=[...])

The dataset yields what ``model.training_loss`` takes (``(X, Y)``, or VNNGP's ``(X, Y,
neighbours)``). The reported ``loss`` is the mean over the epoch's batches of the negative
ELBO estimates (GPflow's scale: the whole data set's bound, not per point). ``predict()``
returns the predictive mean and variance of ``y``.

A fault loses nothing, as in :func:`~gpflow_tight.training.fit_adam`: a step whose loss or
gradient is not finite (a failed factorisation, a batch with NaN, a diverging step) changes
nothing, ``fit`` puts the model back to the parameters of the last finite loss and raises a
:class:`~gpflow_tight.training.TrainingError` with the failing step and Keras's ``History`` of
the completed epochs.
"""

import contextlib
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import tensorflow as tf
from gpflow.config import default_float
from gpflow.keras import tf_keras
from gpflow.models import BayesianModel, ExternalDataTrainingLossMixin

from .models.vnngp import VNNGP
from .training import _apply_if_finite, _cause, _fault, _LastGood, _StepFaultError
from .validation import cholesky_checks, explain_cholesky_failure

__all__ = ["KerasGPModel"]


class KerasGPModel(tf_keras.Model):  # type: ignore[misc]
    """
    A Keras model around a GPflow model with an external-data training loss. The GPflow model's
    variables are the Keras model's weights, so ``ModelCheckpoint`` and ``save_weights`` store
    them, and the optimiser given to ``compile()`` trains them.

    A step whose loss or gradient is not finite changes nothing and stops ``fit`` (or
    ``train_on_batch``) with a :class:`~gpflow_tight.training.TrainingError`, raised from the
    cause (a :class:`~gpflow_tight.CholeskyError` where a factorisation failed), with the model
    at the parameters of the last finite loss. Its ``step`` is the failing step, counted from 1
    since ``fit`` began, over all epochs; its ``history`` is Keras's ``History`` (what ``fit``
    returns) of the completed epochs. An error, not Keras's ``TerminateOnNaN`` (which stops
    after the step that wrote NaN into the weights) or a warning: training did not end as asked,
    and the caller hears of it as from the package's other training helpers.
    """

    def __init__(self, model: BayesianModel, **kwargs: Any) -> None:
        if not isinstance(model, ExternalDataTrainingLossMixin):
            raise TypeError(
                f"KerasGPModel trains models whose training loss takes the data (SVGP-like); "
                f"{type(model).__name__} holds its data: train it with "
                "`gpflow_tight.training.fit_scipy` or `fit_adam`."
            )
        super().__init__(**kwargs)
        self.gp_model = model
        # VNNGP's batches may carry a third part, its neighbour rows, which Keras passes in the
        # slot of `sample_weight`; other models' losses take (X, Y) only
        self._takes_third_part = isinstance(model, VNNGP)
        self.loss_tracker = tf_keras.metrics.Mean(name="loss", dtype=default_float())
        self._last_good: _LastGood | None = None  # made with the train function

    def call(self, inputs: Any, training: Any = None) -> tuple[tf.Tensor, tf.Tensor]:
        """
        The predictive mean and marginal variance of y at ``inputs``, cast to GPflow's default
        float. Keras converts numpy arrays given to ``predict()`` to float32: pass a
        ``tf.Tensor`` or a ``tf.data.Dataset`` to keep float64 inputs exact.
        """
        return self.gp_model.predict_y(tf.cast(inputs, default_float()))

    @property
    def metrics(self) -> list[Any]:
        """The running mean of the loss, which Keras resets at the start of each epoch."""
        return [self.loss_tracker]

    def replica_loss(self, data: Any) -> tuple[tf.Tensor, tf.Tensor]:
        """
        This replica's loss on its part of the batch, and its weight: the part's share of the
        whole batch. Each replica's loss is already an unbiased estimate of the whole objective
        (the data term is scaled by ``num_data`` over the local batch size), so the weighted sum
        over replicas is the estimate on the whole batch, however unevenly the batch splits.
        A replica with nothing to do (a last batch smaller than the number of replicas) weighs 0
        and its loss, which would divide by a batch size of 0, is not evaluated. Without a
        strategy the weight is 1.
        """
        with cholesky_checks(True):  # stop with advice where a factorisation fails
            return self._replica_loss(data)

    def _replica_loss(self, data: Any) -> tuple[tf.Tensor, tf.Tensor]:
        replica = tf.distribute.get_replica_context()
        if replica is None or replica.num_replicas_in_sync == 1:
            return self.gp_model.training_loss(data), tf.ones([], default_float())
        local_size = tf.cast(tf.shape(tf.nest.flatten(data)[0])[0], default_float())
        batch_size = replica.all_reduce(tf.distribute.ReduceOp.SUM, local_size)
        loss = tf.cond(
            local_size > 0,
            lambda: self.gp_model.training_loss(data),
            lambda: tf.zeros([], default_float()),
        )
        return loss, local_size / batch_size

    def weighted_gradients(self, data: Any) -> tuple[tf.Tensor, tf.Tensor, list[Any]]:
        """
        This replica's loss, weight (:meth:`replica_loss`) and weighted gradients. Weighting the
        gradients rather than the loss keeps each replica's backward pass exactly the
        single-device one on its part of the batch (another seed than 1 changes its round-off).
        """
        variables = self.gp_model.trainable_variables
        with tf.GradientTape() as tape:
            loss, weight = self.replica_loss(data)
        gradients = [_scale_gradient(g, weight) for g in tape.gradient(loss, variables)]
        return loss, weight, gradients

    def train_step(self, data: Any) -> dict[str, tf.Tensor]:
        """
        One optimiser step on a batch. Under a ``tf.distribute`` strategy the optimiser sums the
        replicas' :meth:`weighted_gradients`, which makes the step the single-device step on
        the whole batch.
        """
        loss, weight, gradients = self.weighted_gradients(data)
        assert self._last_good is not None, "made by make_train_function"
        variables = self.gp_model.trainable_variables
        checked = _apply_if_finite(loss, gradients, self.optimizer, variables, self._last_good)
        with tf.control_dependencies(checked):  # Keras counts the step only if it passed
            self.loss_tracker.update_state(loss, sample_weight=weight)
        return {"loss": self.loss_tracker.result()}

    def test_step(self, data: Any) -> dict[str, tf.Tensor]:
        """The loss on a batch, without a step: Keras's ``evaluate`` and ``validation_data``."""
        loss, weight = self.replica_loss(data)
        self.loss_tracker.update_state(loss, sample_weight=weight)
        return {"loss": self.loss_tracker.result()}

    def make_train_function(self, force: bool = False) -> Callable[..., Any]:
        """
        Keras's train function, which stops at a failed step (see :meth:`_stopping_at_faults`).
        The copies of the last good parameters are made here, with the function: under the
        strategy's scope, of the variables that the function trains.
        """
        cached: Callable[..., Any] | None = self.train_function  # type: ignore[has-type]
        if cached is not None and not force:
            return cached
        self._last_good = _LastGood(self.gp_model.trainable_variables)
        train_function = super().make_train_function(force=True)

        def checked_train_function(iterator: Any) -> Any:
            try:
                return train_function(iterator)
            except tf.errors.InvalidArgumentError as error:
                raise _StepFaultError(error) from error

        self.train_function = checked_train_function
        return checked_train_function

    @contextlib.contextmanager
    def _stopping_at_faults(self, method: str) -> Iterator[None]:
        """
        Turn a failed step into a :class:`~gpflow_tight.training.TrainingError` raised from its
        cause, with the model put back to the parameters of the last finite loss. (Outside
        Keras's ``fit``, whose traceback filter re-raises errors ``from None``.)
        """
        try:
            yield
        except _StepFaultError as fault:
            assert self._last_good is not None
            step = int(self._train_counter.numpy()) + 1  # the steps that passed, + 1
            self._last_good.restore()
            raise _fault(
                f"KerasGPModel.{method}",
                step,
                fault.error,
                self.history,
                history_holds="the logs of the completed epochs (Keras's `History`)",
            ) from _cause(fault.error)

    def fit(self, *args: Any, **kwargs: Any) -> Any:
        """
        Keras's ``fit``. A failed training step raises a
        :class:`~gpflow_tight.training.TrainingError` (see the class); a failed Cholesky
        factorisation elsewhere (validation data) a helpful ``CholeskyError``. The loss is the
        GPflow model's, which has no per-point weights: ``sample_weight``, ``class_weight`` and
        a third part of ``validation_data`` are refused (except for VNNGP, whose batches may
        carry its neighbour rows there).
        """
        self._refuse_weights("fit", args, kwargs)
        with self._stopping_at_faults("fit"), explain_cholesky_failure():
            return super().fit(*args, **kwargs)

    def train_on_batch(self, *args: Any, **kwargs: Any) -> Any:
        """Keras's ``train_on_batch``, which stops at a fault as ``fit`` does."""
        self._refuse_weights("train_on_batch", args, kwargs)
        with self._stopping_at_faults("train_on_batch"):
            return super().train_on_batch(*args, **kwargs)

    def evaluate(self, *args: Any, **kwargs: Any) -> Any:
        """Keras's ``evaluate`` (the mean loss over the batches); ``sample_weight`` is refused."""
        if "_use_cached_eval_dataset" not in kwargs:  # fit's validation, which fit checked
            self._refuse_weights("evaluate", args, kwargs)
        return super().evaluate(*args, **kwargs)

    def test_on_batch(self, *args: Any, **kwargs: Any) -> Any:
        """Keras's ``test_on_batch``; ``sample_weight`` is refused."""
        self._refuse_weights("test_on_batch", args, kwargs)
        return super().test_on_batch(*args, **kwargs)

    def _refuse_weights(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """
        Keras's per-point or per-class weights, given by name or position to ``method`` of
        ``tf_keras.Model``, which the GPflow model's loss cannot take. Keras passes a batch's
        third part in the slot of ``sample_weight``, which VNNGP's loss reads as its neighbour
        rows.
        """
        given = inspect.signature(getattr(tf_keras.Model, method)).bind_partial(
            None, *args, **kwargs
        )
        arguments = given.arguments
        names = ["class_weight"] + ([] if self._takes_third_part else ["sample_weight"])
        refused = [f"`{name}`" for name in names if arguments.get(name) is not None]
        validation = arguments.get("validation_data")
        if (
            not self._takes_third_part
            and isinstance(validation, tuple)
            and len(validation) == 3
            and validation[2] is not None
        ):
            refused.append("a third part of `validation_data` (Keras's sample weights)")
        if refused:
            raise ValueError(
                f"KerasGPModel.{method} cannot use {refused[0]}: the loss is the GPflow "
                f"model's ({type(self.gp_model).__name__}'s ELBO over the batch), which has no "
                "per-point or per-class weights: drop it."
            )


def _scale_gradient(gradient: Any, weight: tf.Tensor) -> Any:
    """``weight * gradient`` for a dense or sparse (``tf.IndexedSlices``) gradient, or ``None``."""
    if gradient is None:
        return None
    if isinstance(gradient, tf.IndexedSlices):
        return tf.IndexedSlices(gradient.values * weight, gradient.indices, gradient.dense_shape)
    return gradient * weight
