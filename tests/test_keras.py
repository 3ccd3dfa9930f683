"""KerasGPModel: Keras compile()/fit() for every model with an external-data training loss."""

import gpflow
import numpy as np
import pytest
import tensorflow as tf
from gpflow.keras import tf_keras
from gpflow.models import ExternalDataTrainingLossMixin

from gpflow_tight import TightSVGP
from gpflow_tight.keras import KerasGPModel
from gpflow_tight.models.base import InfiniteLossOnCholeskyFailure
from gpflow_tight.training import TrainingError
from gpflow_tight.validation import CholeskyError
from tests.model_zoo import CLASS_TWINS, MODEL_FACTORIES
from tests.test_training import DefinedBelowTwo, toy_data


def external_data_models():
    """The zoo's external-data models, one of each pair of relaxation-off twins."""
    names = []
    for name, make in sorted(MODEL_FACTORIES.items()):
        if name in CLASS_TWINS:
            continue
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


def test_per_point_weights_are_refused_by_name():
    """Keras would append them to the batch; the ELBO has no weights, so they are refused."""
    model, (X, Y) = MODEL_FACTORIES["TightSVGP"](np.random.default_rng(0))
    keras_model = KerasGPModel(model)
    keras_model.compile(optimizer=tf_keras.optimizers.Adam(0.01))
    before = [v.numpy() for v in model.trainable_variables]
    weights = np.ones(len(X))
    calls = [
        ("fit", "sample_weight", lambda: keras_model.fit(X, Y, sample_weight=weights, verbose=0)),
        ("fit", "class_weight", lambda: keras_model.fit(X, Y, class_weight={0: 1.0}, verbose=0)),
        ("train_on_batch", "sample_weight", lambda: keras_model.train_on_batch(X, Y, weights)),
        ("evaluate", "sample_weight", lambda: keras_model.evaluate(X, Y, sample_weight=weights)),
        ("test_on_batch", "sample_weight", lambda: keras_model.test_on_batch(X, Y, weights)),
    ]
    calls.append(
        (
            "fit",
            "validation_data",
            lambda: keras_model.fit(X, Y, validation_data=(X, Y, weights), verbose=0),
        )
    )
    for method, name, call in calls:
        with pytest.raises(ValueError, match=f"KerasGPModel.{method} cannot use .*`{name}`"):
            call()
    for got, expected in zip(model.trainable_variables, before):
        np.testing.assert_array_equal(got.numpy(), expected)


def test_vnngp_batches_carry_their_neighbour_rows_in_the_third_part():
    """Keras passes a third part in the slot of ``sample_weight``: VNNGP's neighbour rows."""
    model, data = MODEL_FACTORIES["VNNGP"](np.random.default_rng(0))
    X, Y, neighbors = (tf.convert_to_tensor(part) for part in data)  # Keras casts numpy to f32
    keras_model = KerasGPModel(model)
    keras_model.compile(optimizer=tf_keras.optimizers.Adam(0.01))
    expected = model.training_loss((X, Y, neighbors)).numpy()
    np.testing.assert_allclose(keras_model.test_on_batch(X, Y, neighbors), expected, rtol=1e-12)
    history = keras_model.fit(
        batches((X, Y, neighbors), 40),
        validation_data=(X, Y, neighbors),
        validation_batch_size=40,  # one batch: the whole-data loss
        verbose=0,
    )
    after = model.training_loss((X, Y, neighbors)).numpy()
    np.testing.assert_allclose(history.history["val_loss"][0], after, rtol=1e-12)
    assert np.isfinite(keras_model.train_on_batch(X, Y, neighbors))
    with pytest.raises(ValueError, match="cannot use `class_weight`"):
        keras_model.fit(batches((X, Y, neighbors)), class_weight={0: 1.0}, verbose=0)


def test_a_failed_cholesky_is_explained():
    """A factorisation that fails at the first step: nothing changes, and the error advises."""
    X = np.linspace(0, 1, 20)[:, None]
    model = TightSVGP(
        gpflow.kernels.SquaredExponential(lengthscales=1e4),
        gpflow.likelihoods.Gaussian(),
        np.zeros((3, 1)),  # coincident inducing points
    )
    start = [v.numpy() for v in model.trainable_variables]
    keras_model = KerasGPModel(model)
    keras_model.compile(optimizer=tf_keras.optimizers.Adam(0.01))
    with gpflow.config.as_context(gpflow.config.Config(jitter=0.0)):
        with pytest.raises(TrainingError, match="^KerasGPModel.fit stopped at step 1: ") as info:
            keras_model.fit(batches((X, np.sin(X))), epochs=1, verbose=0)
    assert "jitter" in str(info.value) and "The model holds its starting point" in str(info.value)
    assert isinstance(info.value.__cause__, CholeskyError)
    assert info.value.step == 1 and info.value.history.history == {}
    for got, expected in zip(model.trainable_variables, start):
        np.testing.assert_array_equal(got.numpy(), expected)


class _SVGPDefinedBelowTwo(DefinedBelowTwo, InfiniteLossOnCholeskyFailure, gpflow.models.SVGP):
    pass


def _defined_below_two():
    """SVGP with q(u) started near the data, so that Adam raises v steadily towards 2."""
    Z = np.linspace(-3, 3, 5)[:, None]
    model = _SVGPDefinedBelowTwo(
        gpflow.kernels.SquaredExponential(variance=1.8),
        gpflow.likelihoods.Gaussian(0.5),
        Z,
        num_data=40,
        whiten=False,
        q_mu=3 * np.sin(2 * Z),
    )
    return model, toy_data(np.random.default_rng(0))


def _reference_fault(model, dataset, steps, learning_rate):
    """
    Plain Adam steps until the first non-finite loss: its step (from 1), and the parameters and
    loss where the step before it computed its loss.
    """
    optimizer = tf_keras.optimizers.Adam(learning_rate)
    variables = model.trainable_variables
    kept, kept_loss = None, None
    for step, batch in enumerate(list(dataset) * steps, start=1):
        loss = model.training_loss(batch).numpy()
        if not np.isfinite(loss):
            return step, kept, kept_loss
        kept, kept_loss = [v.numpy() for v in variables], loss
        optimizer.minimize(lambda batch=batch: model.training_loss(batch), variables)
    raise AssertionError("no fault")


@pytest.mark.parametrize("fault", ["factorisation", "NaN"])
def test_a_fault_mid_training_puts_the_model_back(fault):
    """
    A step that fails (the factorisation of [[1, v/2], [v/2, 1]] once Adam takes v past 2, or a
    batch with NaN in Y for GPflow's SVGP, whose loss is NaN there) stops fit with the model at
    the parameters where the step before it computed its loss, as a plain Adam loop finds them,
    and Keras's History of the completed epochs.
    """
    if fault == "factorisation":
        make, learning_rate = _defined_below_two, 0.1
        cause, reason = CholeskyError, r"Cholesky decomposition was not successful for \[\[1, v/2"
    else:

        def make():
            model, (X, Y) = _defined_below_two()
            svgp = gpflow.models.SVGP(
                model.kernel, model.likelihood, model.inducing_variable, num_data=40
            )
            Y = Y.copy()
            Y[25] = np.nan  # the third batch of ten
            return svgp, (X, Y)

        learning_rate = 0.01
        cause, reason = tf.errors.InvalidArgumentError, "the loss or its gradient is NaN or inf"
    reference, data = make()
    dataset = batches(data, 10)  # four steps an epoch
    step, kept, kept_loss = _reference_fault(reference, dataset, 10, learning_rate)
    assert step == {"factorisation": 16, "NaN": 3}[fault]  # in the fourth and the first epoch

    model, data = make()
    keras_model = KerasGPModel(model)
    keras_model.compile(optimizer=tf_keras.optimizers.Adam(learning_rate))
    with pytest.raises(
        TrainingError, match=f"^KerasGPModel.fit stopped at step {step}: {reason}"
    ) as info:
        keras_model.fit(dataset, epochs=10, verbose=0)
    error = info.value
    assert isinstance(error.__cause__, cause)
    assert isinstance(error.__cause__, CholeskyError) == (fault == "factorisation")
    assert error.step == step
    assert f"the parameters of the last finite loss (step {step - 1}'s)" in str(error)
    completed = (step - 1) // 4
    assert error.history is keras_model.history and error.history.epoch == list(range(completed))
    assert len(error.history.history.get("loss", [])) == completed
    for got, expected in zip(model.trainable_variables, kept):
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-11, atol=1e-13)
    batch = list(dataset)[(step - 2) % 4]  # the batch of the last finite loss
    np.testing.assert_allclose(model.training_loss(batch).numpy(), kept_loss, rtol=1e-11)
