"""
Properties that every model of the package must have, over the list in tests/model_zoo.py:
saving and restoring with ``tf.train.Checkpoint`` loses nothing, including the optimiser state
for resumed training. (Serving in a process without GPflow: tests/integration/test_saved_model.py.)
"""

import inspect

import gpflow
import numpy as np
import pytest
import tensorflow as tf
from gpflow.keras import tf_keras

import gpflow_tight
from tests.model_zoo import CLASS_TWINS, COVERED_BY, MODEL_FACTORIES


def test_every_exported_model_is_in_the_zoo():
    exported = {
        name
        for name in gpflow_tight.__all__
        if inspect.isclass(getattr(gpflow_tight, name))
        and issubclass(getattr(gpflow_tight, name), gpflow.models.GPModel)
    }
    missing = exported - set(MODEL_FACTORIES) - set(COVERED_BY)
    assert not missing, f"add a factory for {sorted(missing)} to tests/model_zoo.py"


@pytest.mark.parametrize("name, twin", CLASS_TWINS.items())
def test_class_twins_differ_by_the_default_relaxation_only(name, twin):
    """What lets the Keras and tf.distribute tests take one model of each pair."""
    model, _ = MODEL_FACTORIES[name](np.random.default_rng(0))
    twin_model, _ = MODEL_FACTORIES[twin](np.random.default_rng(0))
    assert type(twin_model).__bases__ == (type(model),)
    bookkeeping = {"__module__", "__qualname__", "__doc__", "__abstractmethods__", "_abc_impl"}
    bookkeeping.add("__slotnames__")  # cached on the class by copy.deepcopy (copyreg)
    own = set(vars(type(twin_model))) - bookkeeping
    assert own == {"_default_relaxation"}


def _loss_closure(model, data):
    if data is None:
        return model.training_loss_closure(compile=False)
    return model.training_loss_closure(data, compile=False)


def _state(model):
    """Every variable of the model (trainable or not: site state, neighbour tables, ...)."""
    return [v.numpy() for v in model.variables]


@pytest.mark.parametrize("name", sorted(MODEL_FACTORIES))
def test_checkpoint_round_trip_resumes_training_exactly(name, tmp_path):
    make = MODEL_FACTORIES[name]
    model, data = make(np.random.default_rng(3))
    optimizer = tf_keras.optimizers.Adam(0.01)
    loss = _loss_closure(model, data)
    for _ in range(3):
        optimizer.minimize(loss, model.trainable_variables)
    path = tf.train.Checkpoint(model=model, optimizer=optimizer).write(str(tmp_path / "ckpt"))

    restored, restored_data = make(np.random.default_rng(3))
    restored_optimizer = tf_keras.optimizers.Adam(0.01)
    tf.train.Checkpoint(model=restored, optimizer=restored_optimizer).read(path)
    for got, expected in zip(_state(restored), _state(model)):
        np.testing.assert_array_equal(got, expected)
    assert len(_state(restored)) == len(_state(model)) > 0
    restored_loss = _loss_closure(restored, restored_data)
    np.testing.assert_allclose(restored_loss().numpy(), loss().numpy(), rtol=1e-12)

    # One more step from the restored Adam moments equals one more step of the original.
    optimizer.minimize(loss, model.trainable_variables)
    restored_optimizer.minimize(restored_loss, restored.trainable_variables)
    for got, expected in zip(_state(restored), _state(model)):
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-14)


def test_export_rejects_a_bad_input_dim(tmp_path):
    from gpflow_tight.serving import export_predictions

    model, _ = MODEL_FACTORIES["TightSGPR"](np.random.default_rng(0))
    with pytest.raises(ValueError, match="input_dim"):
        export_predictions(model, str(tmp_path / "m"), input_dim=0)


@pytest.mark.parametrize("name", sorted(MODEL_FACTORIES))
def test_a_failed_factorisation_gives_an_infinite_training_loss(name):
    """
    GPflow's contract: ``training_loss_closure(compile=True)`` is a ``tf.function``, and where a
    Cholesky factorisation fails the loss is not finite rather than an error (GPflow's models give
    NaN; ours give +inf, which scipy's line searches can back off from). The training helpers
    stop with the package's advice instead, and a failed Adam step changes no parameter.
    """
    model, data = MODEL_FACTORIES[name](np.random.default_rng(3))
    closure = model.training_loss_closure(**({} if data is None else {"data": data}))
    assert isinstance(closure, tf.types.experimental.PolymorphicFunction)
    with gpflow.config.as_context(gpflow.config.Config(jitter=0.0)):
        # every kernel matrix becomes the matrix of ones: singular
        lengthscales = model.kernel.lengthscales
        lengthscales.assign(tf.fill(tf.shape(lengthscales), tf.constant(1e8, lengthscales.dtype)))
        closure = model.training_loss_closure(**({} if data is None else {"data": data}))
        assert closure().numpy() == np.inf
        before = _state(model)
        with pytest.raises(gpflow_tight.TrainingError, match="step 1: Cholesky.*jitter") as info:
            gpflow_tight.training.fit_adam(model, data, iterations=1, progress=False)
        assert isinstance(info.value.__cause__, gpflow_tight.CholeskyError)
        for got, expected in zip(_state(model), before):
            np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("name", sorted(MODEL_FACTORIES))
def test_a_failed_factorisation_raises_in_predictions(name):
    """Predictions never return NaN silently: a failed factorisation raises CholeskyError."""
    model, _ = MODEL_FACTORIES[name](np.random.default_rng(3))
    input_dim = gpflow_tight.validation.inducing_input_dim(model.inducing_variable)
    Xnew = np.tile(np.linspace(0.0, 6.0, 7)[:, None], [1, input_dim])
    with gpflow.config.as_context(gpflow.config.Config(jitter=0.0)):
        lengthscales = model.kernel.lengthscales  # every kernel matrix the matrix of ones
        lengthscales.assign(tf.fill(tf.shape(lengthscales), tf.constant(1e8, lengthscales.dtype)))
        for predict in (model.predict_f, model.predict_y):
            with pytest.raises(gpflow_tight.CholeskyError, match="jitter"):
                predict(Xnew)
        # compiled, TensorFlow's error (the advice where the package factorises, GPflow's
        # message where GPflow's posterior does): still never a silent NaN
        with pytest.raises(tf.errors.InvalidArgumentError, match="(?i)cholesky"):
            tf.function(model.predict_f)(Xnew)


def _loss_and_gradients(model, data):
    """A training step's computation: the loss and its gradients (dense)."""
    with tf.GradientTape() as tape:
        loss = model.training_loss() if data is None else model.training_loss(data)
    gradients = tape.gradient(loss, model.trainable_variables)
    return loss, [tf.convert_to_tensor(g) for g in gradients]


# ops that call back into Python on the host (tf.py_function, tf.numpy_function)
HOST_OPS = {"PyFunc", "PyFuncStateless", "EagerPyFunc"}


@pytest.mark.graph_shape_checks
@pytest.mark.parametrize("name", sorted(MODEL_FACTORIES))
def test_a_training_step_has_no_host_round_trip(name):
    """
    The compiled step (and every function it calls) runs on the device: no Python callbacks.
    It is traced with every shape check on (the other tests check shapes as users do, in eager
    calls only: tests/conftest.py).
    """
    model, data = MODEL_FACTORIES[name](np.random.default_rng(0))
    step = tf.function(lambda: _loss_and_gradients(model, data))
    graph = step.get_concrete_function().graph.as_graph_def()
    ops = {node.op for node in graph.node}
    for function in graph.library.function:
        ops |= {node.op for node in function.node_def}
    assert not ops & HOST_OPS, f"{name}'s training step calls Python: {ops & HOST_OPS}"


@pytest.mark.parametrize("name", sorted(MODEL_FACTORIES))
def test_a_training_step_compiles_under_xla(name):
    """``tf.function(jit_compile=True)`` gives the loss and gradients of the plain graph."""
    model, data = MODEL_FACTORIES[name](np.random.default_rng(0))
    plain = tf.function(lambda: _loss_and_gradients(model, data))
    xla = tf.function(lambda: _loss_and_gradients(model, data), jit_compile=True)
    (loss, gradients), (xla_loss, xla_gradients) = plain(), xla()
    np.testing.assert_allclose(xla_loss, loss, rtol=1e-12)
    scale = max(float(np.max(np.abs(g))) for g in gradients)  # gradients zero at an optimum
    for got, expected in zip(xla_gradients, gradients):
        np.testing.assert_allclose(got, expected, rtol=1e-7, atol=1e-10 * scale)
