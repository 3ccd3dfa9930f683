"""KerasGPModel: Keras compile()/fit() for every model with an external-data training loss."""

import gpflow
import numpy as np
import pytest
import tensorflow as tf
from gpflow.keras import tf_keras
from gpflow.models import ExternalDataTrainingLossMixin

from gpflow_tight import TightSVGP
from gpflow_tight.keras import KerasGPModel
from gpflow_tight.validation import CholeskyError
from tests.model_zoo import MODEL_FACTORIES


def external_data_models():
    names = []
    for name, make in sorted(MODEL_FACTORIES.items()):
        model, _ = make(np.random.default_rng(0))
        if isinstance(model, ExternalDataTrainingLossMixin):
            names.append(name)
    return names


EXTERNAL = external_data_models()


def batches(data, batch_size=16):
    return tf.data.Dataset.from_tensor_slices(tuple(data)).batch(batch_size)


@pytest.mark.parametrize("name", EXTERNAL)
def test_fit_equals_a_manual_adam_loop(name):
    """Two epochs of fit() take the steps of a compiled hand-written Adam loop, to round-off."""
    trained = []
    for use_keras in (True, False):
        model, data = MODEL_FACTORIES[name](np.random.default_rng(1))
        optimizer = tf_keras.optimizers.Adam(0.01)
        if use_keras:
            keras_model = KerasGPModel(model)
            keras_model.compile(optimizer=optimizer)
            history = keras_model.fit(batches(data), epochs=2, verbose=0)
            assert len(history.history["loss"]) == 2
        else:

            @tf.function
            def step(batch, model=model, optimizer=optimizer):
                loss = model.training_loss_closure(batch, compile=False)
                optimizer.minimize(loss, model.trainable_variables)

            for _ in range(2):
                for batch in batches(data):
                    step(batch)
        trained.append(model)
    # both compiled: they agree to round-off
    assert len(trained[0].trainable_variables) == len(trained[1].trainable_variables) > 0
    for got, expected in zip(trained[0].trainable_variables, trained[1].trainable_variables):
        np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-11, atol=1e-13)


def test_keras_callbacks_work(tmp_path):
    model, data = MODEL_FACTORIES["TightSVGP"](np.random.default_rng(2))
    keras_model = KerasGPModel(model)
    keras_model.compile(optimizer=tf_keras.optimizers.Adam(0.01))

    def schedule(epoch, rate):
        return 0.01 * 0.5**epoch

    callbacks = [
        tf_keras.callbacks.EarlyStopping(monitor="loss", patience=0, min_delta=1e9),
        tf_keras.callbacks.ModelCheckpoint(str(tmp_path / "weights"), save_weights_only=True),
        tf_keras.callbacks.LearningRateScheduler(schedule),
        tf_keras.callbacks.TensorBoard(str(tmp_path / "logs")),
    ]
    history = keras_model.fit(batches(data), epochs=10, callbacks=callbacks, verbose=0)
    assert len(history.history["loss"]) == 2  # stopped by EarlyStopping
    # the schedule set the optimiser's rate at the start of each epoch
    assert float(keras_model.optimizer.learning_rate) == pytest.approx(0.005)
    np.testing.assert_allclose(history.history["lr"], [0.01, 0.005], rtol=1e-6)
    assert any((tmp_path / "logs").rglob("events.out.tfevents.*"))

    restored, _ = MODEL_FACTORIES["TightSVGP"](np.random.default_rng(2))
    KerasGPModel(restored).load_weights(str(tmp_path / "weights"))
    assert len(restored.trainable_variables) == len(model.trainable_variables) > 0
    for got, expected in zip(restored.trainable_variables, model.trainable_variables):
        np.testing.assert_array_equal(got.numpy(), expected.numpy())

    evaluation = keras_model.evaluate(batches(data, 40), verbose=0)
    np.testing.assert_allclose(evaluation, model.training_loss(data).numpy(), rtol=1e-10)
    mean, var = keras_model.predict(tf.data.Dataset.from_tensors(data[0][:5]), verbose=0)
    expected_mean, expected_var = model.predict_y(data[0][:5])
    # Keras runs a compiled graph, predict_y runs eagerly: equal up to round-off
    np.testing.assert_allclose(mean, expected_mean, rtol=1e-6)
    np.testing.assert_allclose(var, expected_var, rtol=1e-6)


def test_models_that_hold_their_data_are_refused():
    model, _ = MODEL_FACTORIES["TightSGPR"](np.random.default_rng(0))
    with pytest.raises(TypeError, match="fit_scipy"):
        KerasGPModel(model)


def test_a_failed_cholesky_is_explained():
    X = np.linspace(0, 1, 20)[:, None]
    model = TightSVGP(
        gpflow.kernels.SquaredExponential(lengthscales=1e4),
        gpflow.likelihoods.Gaussian(),
        np.zeros((3, 1)),  # coincident inducing points
    )
    keras_model = KerasGPModel(model)
    keras_model.compile(optimizer=tf_keras.optimizers.Adam(0.01))
    with gpflow.config.as_context(gpflow.config.Config(jitter=0.0)):
        with pytest.raises(CholeskyError, match="jitter"):
            keras_model.fit(batches((X, np.sin(X))), epochs=1, verbose=0)
