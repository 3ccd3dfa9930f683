"""
GPflow's model utilities on every model of tests/model_zoo.py, each trained a few Adam steps so
that no parameter is at its initial value: ``print_summary`` (both formats) lists every
parameter and variable, ``freeze`` gives a constant model that predicts exactly as the original,
``copy.deepcopy`` gives an independent model, ``set_trainable(model, False)`` leaves a loss that
still evaluates, ``parameter_dict``/``multiple_assign`` move a trained state into a new model, and
``posterior()`` predicts as ``predict_f``. The GPLVMs have no ``posterior()`` (as GPflow's
``BayesianGPLVM``): that is asserted as the error they raise.
"""

import copy

import gpflow
import IPython.core.display
import numpy as np
import pytest
import tensorflow as tf
from gpflow.keras import tf_keras
from gpflow.utilities import leaf_components

from tests.model_zoo import MODEL_FACTORIES

NAMES = sorted(MODEL_FACTORIES)
LATENT = {"TightBayesianGPLVM", "MinibatchBayesianGPLVM"}  # predict from 2-D latent points
NO_POSTERIOR = LATENT  # no posterior (nor has GPflow's BayesianGPLVM): a message says why
ADAM_STEPS = 5


def loss_closure(model, data):
    kwargs = {} if data is None else {"data": data}
    return model.training_loss_closure(compile=False, **kwargs)


def trained(name):
    """The zoo's model after a few Adam steps (every trainable parameter has moved)."""
    model, data = MODEL_FACTORIES[name](np.random.default_rng(7))
    initial = [v.numpy() for v in model.trainable_variables]
    optimizer = tf_keras.optimizers.Adam(0.05)
    loss = loss_closure(model, data)
    for _ in range(ADAM_STEPS):
        optimizer.minimize(loss, model.trainable_variables)
    for before, variable in zip(initial, model.trainable_variables):
        assert not np.array_equal(before, variable.numpy()), variable.name
    return model, data


def inputs(name):
    """Seven prediction points: inputs on [0, 6], or 2-D latent points for the GPLVMs."""
    x = np.linspace(0, 6, 7)[:, None]
    return np.hstack([x / 3 - 1, np.cos(x)]) if name in LATENT else x


def assert_same_predictions(got, expected, name, rtol=0.0):
    """Equal predictions (mean, variance): bit for bit unless ``rtol`` is given."""
    for a, b, what in zip(got, expected, ("mean", "variance")):
        np.testing.assert_allclose(
            a.numpy(), b.numpy(), rtol=rtol, atol=0, err_msg=f"{name}: {what}"
        )


def assert_same_model(got, got_data, expected, expected_data, name, rtol=0.0):
    """The predictions at the test inputs (:func:`assert_same_predictions`) and the loss agree."""
    Xnew = inputs(name)
    assert_same_predictions(got.predict_f(Xnew), expected.predict_f(Xnew), name, rtol)
    np.testing.assert_allclose(
        loss_closure(got, got_data)().numpy(),
        loss_closure(expected, expected_data)().numpy(),
        rtol=1e-12,
    )


def leaf_paths(model):
    """Every path print_summary lists (a shared variable's paths are merged with newlines)."""
    return [path for key in leaf_components(model) for path in key.split("\n")]


@pytest.mark.parametrize("name", NAMES)
def test_print_summary_lists_every_parameter_in_both_formats(name, capsys, monkeypatch):
    model, _ = trained(name)
    paths = leaf_paths(model)
    assert any(path.endswith(".kernel.lengthscales") for path in paths)

    gpflow.utilities.print_summary(model, fmt="simple")
    simple = capsys.readouterr().out
    shown = []
    monkeypatch.setattr(IPython.core.display, "display_html", shown.append)
    gpflow.utilities.print_summary(model, fmt="notebook")
    (html,) = shown
    for text in (simple, html.data):
        for path in paths:
            assert path in text, f"{name}: {path} missing from the summary"
    assert "<table>" in html.data


@pytest.mark.parametrize("name", NAMES)
def test_freeze_predicts_exactly_as_the_original_without_variables_to_train(name):
    model, data = trained(name)
    frozen = gpflow.utilities.freeze(model)
    assert frozen.trainable_variables == ()
    assert not any(isinstance(v, tf.Variable) for v in leaf_components(frozen).values())
    assert_same_model(frozen, data, model, data, name)


@pytest.mark.parametrize("name", NAMES)
def test_deepcopy_is_an_independent_model(name):
    model, _ = trained(name)
    Xnew = inputs(name)
    expected = model.predict_f(Xnew)
    variance = model.kernel.variance.numpy()
    copied = copy.deepcopy(model)
    assert_same_predictions(copied.predict_f(Xnew), expected, name)

    copied.kernel.variance.assign(2 * variance)
    assert model.kernel.variance.numpy() == variance
    assert_same_predictions(model.predict_f(Xnew), expected, name)
    assert not np.array_equal(copied.predict_f(Xnew)[1].numpy(), expected[1].numpy())


@pytest.mark.parametrize("name", NAMES)
def test_set_trainable_false_leaves_nothing_to_train_and_the_loss_unchanged(name):
    model, data = trained(name)
    expected = loss_closure(model, data)().numpy()
    gpflow.utilities.set_trainable(model, False)
    assert model.trainable_variables == ()
    loss = loss_closure(model, data)().numpy()
    assert np.isfinite(loss)
    np.testing.assert_allclose(loss, expected, rtol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_parameter_dict_and_multiple_assign_move_a_trained_state(name):
    model, data = trained(name)
    Xnew = inputs(name)
    fresh, fresh_data = MODEL_FACTORIES[name](np.random.default_rng(7))
    assert not np.array_equal(fresh.predict_f(Xnew)[0].numpy(), model.predict_f(Xnew)[0].numpy())

    # multiple_assign sets constrained values: the inverse transform (softplus, ...) rounds
    gpflow.utilities.multiple_assign(fresh, gpflow.utilities.parameter_dict(model))
    got = gpflow.utilities.read_values(fresh)
    for path, value in gpflow.utilities.read_values(model).items():
        np.testing.assert_allclose(got[path], value, rtol=1e-12, err_msg=f"{name}: {path}")
    assert_same_model(fresh, fresh_data, model, data, name, rtol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_posterior_predicts_as_predict_f(name):
    model, _ = trained(name)
    Xnew = inputs(name)
    if name in NO_POSTERIOR:
        with pytest.raises(NotImplementedError, match="has no posterior.*infer_latent"):
            model.posterior()
        return
    expected = model.predict_f(Xnew)
    for cache in gpflow.posteriors.PrecomputeCacheType:
        posterior = model.posterior(cache)
        predictions = [posterior.fused_predict_f(Xnew)]
        if cache is not gpflow.posteriors.PrecomputeCacheType.NOCACHE:
            predictions.append(posterior.predict_f(Xnew))
        for mean, var in predictions:
            np.testing.assert_allclose(mean, expected[0], rtol=1e-12, err_msg=f"{name} {cache}")
            np.testing.assert_allclose(var, expected[1], rtol=1e-12, err_msg=f"{name} {cache}")
