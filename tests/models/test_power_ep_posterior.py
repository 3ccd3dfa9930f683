"""
PowerEPPosterior with GPflow's posterior contract, for both ways of defining q(u) (closed form
and sites): built from parts (not the model), fused predictions equal cached ones for every
cache type, and a VARIABLE cache changes only on update_cache(), also under tf.function.
"""

import inspect

import gpflow
import numpy as np
import pytest
import tensorflow as tf
from gpflow.posteriors import PrecomputeCacheType

from gpflow_tight import PowerEPSGP
from gpflow_tight.posteriors import PowerEPPosterior

CACHES = [PrecomputeCacheType.TENSOR, PrecomputeCacheType.VARIABLE]


def kernel():
    return gpflow.kernels.SquaredExponential(variance=1.3, lengthscales=0.8)


def regression(rng, num_data=30, num_outputs=2):
    X = rng.uniform(-3, 3, (num_data, 1))
    Y = np.sin(2 * X) * np.ones(num_outputs) + 0.2 * rng.standard_normal((num_data, num_outputs))
    return X, Y


def closed_form_model(rng, **kwargs):
    X, Y = regression(rng)
    Z = np.linspace(-3, 3, 6)[:, None]
    mean_function = gpflow.mean_functions.Constant(0.3)
    return PowerEPSGP(
        (X, Y), kernel(), Z, noise_variance=0.1, mean_function=mean_function, **kwargs
    )


def sites_model(rng):
    X, Y = regression(rng, num_outputs=1)
    Z = np.linspace(-3, 3, 6)[:, None]
    model = PowerEPSGP(
        (X, (Y > 0).astype(float)),
        kernel(),
        Z,
        alpha=0.5,
        likelihood=gpflow.likelihoods.Bernoulli(),
        mean_function=gpflow.mean_functions.Constant(0.2),
    )
    model.sweep()
    return model


MODELS = {
    "closed_form": lambda rng: closed_form_model(rng, alpha=0.5),
    "per_point_alpha": lambda rng: closed_form_model(rng, alpha=np.linspace(0, 1, 30)),
    "blocks": lambda rng: closed_form_model(
        rng, alpha=[0.3, 1.0, 0.0], blocks=[np.arange(k, 30, 3) for k in range(3)]
    ),
    "sites": sites_model,
}


def assert_predictions_equal(ours, theirs, rtol=1e-12):
    for got, expected in zip(ours, theirs):
        np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=rtol, atol=1e-14)


def test_constructor_has_sgpr_posteriors_arguments():
    """GPflow's SGPRPosterior arguments first (no model), then what defines q(u)."""
    ours = list(inspect.signature(PowerEPPosterior).parameters)
    theirs = list(inspect.signature(gpflow.posteriors.SGPRPosterior).parameters)
    assert ours[: len(theirs) - 1] == theirs[:-1]  # all but precompute_cache, which is last
    assert ours[-1] == theirs[-1] == "precompute_cache"
    assert {"alpha", "blocks", "sites"} <= set(ours)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_posterior_from_parts_equals_the_models(rng, name):
    model = MODELS[name](rng)
    sites = (model.site_precision, model.site_shift) if name == "sites" else None
    posterior = PowerEPPosterior(
        model.kernel,
        model.data,
        model.inducing_variable,
        model.likelihood,
        model.num_latent_gps,
        model.mean_function,
        alpha=None if sites else model.alpha,
        blocks=model.blocks,
        sites=sites,
        precompute_cache=PrecomputeCacheType.TENSOR,
    )
    Xnew = rng.uniform(-4, 4, (5, 1))
    assert_predictions_equal(posterior.predict_f(Xnew), model.predict_f(Xnew))
    L, LB, c = model.whitened_posterior()
    for cached, expected in zip(posterior.cache, (L, LB, c)):
        np.testing.assert_array_equal(cached.numpy(), expected.numpy())


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("full_cov", [False, True])
@pytest.mark.parametrize("full_output_cov", [False, True])
def test_fused_equals_cached(rng, name, cache, full_cov, full_output_cov):
    model = MODELS[name](rng)
    posterior = model.posterior(cache)
    Xnew = rng.uniform(-4, 4, (5, 1))
    fused = posterior.fused_predict_f(Xnew, full_cov=full_cov, full_output_cov=full_output_cov)
    cached = posterior.predict_f(Xnew, full_cov=full_cov, full_output_cov=full_output_cov)
    assert_predictions_equal(cached, fused)
    mean, var = model.predict_f(Xnew)  # the model predicts with the fused form
    if not full_cov and not full_output_cov:
        assert_predictions_equal(fused, (mean, var))
    elif not full_cov:  # [N, P, P], diagonal: the outputs are independent given u
        np.testing.assert_allclose(fused[1].numpy(), tf.linalg.diag(var).numpy(), rtol=1e-12)


def test_nocache_posterior_needs_update_cache(rng):
    model = closed_form_model(rng, alpha=0.5)
    posterior = model.posterior(PrecomputeCacheType.NOCACHE)
    Xnew = rng.uniform(-4, 4, (5, 1))
    with pytest.raises(ValueError, match="update_cache"):
        posterior.predict_f(Xnew)
    posterior.update_cache(PrecomputeCacheType.TENSOR)
    assert_predictions_equal(posterior.predict_f(Xnew), model.predict_f(Xnew))


def change_q(model):
    """Change what enters q(u) but not the test conditional: the noise, or the sites."""
    if model.inference == "sites":
        model.sweep(damping=1.0)
    else:
        model.likelihood.variance.assign(0.3)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_variable_cache_changes_only_on_update_cache(rng, name):
    model = MODELS[name](rng)
    Xnew = rng.uniform(-4, 4, (5, 1))
    variable = model.posterior(PrecomputeCacheType.VARIABLE)
    tensor = model.posterior(PrecomputeCacheType.TENSOR)
    compiled = tf.function(variable.predict_f)
    before = variable.predict_f(Xnew)
    assert_predictions_equal(compiled(Xnew), before)
    cache_before = [value.numpy() for value in variable.cache]

    change_q(model)
    after = model.predict_f(Xnew)
    assert not np.allclose(after[0].numpy(), before[0].numpy())
    assert_predictions_equal(variable.predict_f(Xnew), before)  # the cache kept its values...
    assert_predictions_equal(compiled(Xnew), before)
    assert_predictions_equal(tensor.predict_f(Xnew), before)
    assert_predictions_equal(variable.fused_predict_f(Xnew), after)  # ...fused follows

    # the kernel and inducing inputs enter the test conditional too; the cache still waits
    model.kernel.variance.assign(2.0)
    model.inducing_variable.Z.assign(model.inducing_variable.Z + 0.1)
    for value, old in zip(variable.cache, cache_before):
        np.testing.assert_array_equal(value.numpy(), old)

    cache = variable.cache
    variable.update_cache()
    assert all(new is old for new, old in zip(variable.cache, cache))  # the same variables
    after = model.predict_f(Xnew)
    assert_predictions_equal(variable.predict_f(Xnew), after)
    assert_predictions_equal(compiled(Xnew), after)  # the compiled function reads them
    tensor.update_cache()
    assert_predictions_equal(tensor.predict_f(Xnew), after)


def test_variable_cache_follows_new_data_only_on_update_cache(rng):
    """Data held in variables of unknown length, as in GPflow's posterior tests."""
    X, Y = regression(rng)
    Z = np.linspace(-3, 3, 6)[:, None]
    data = (tf.Variable(X, shape=[None, 1]), tf.Variable(Y, shape=[None, 2]))
    likelihood = gpflow.likelihoods.Gaussian(0.1)
    posterior = PowerEPPosterior(
        kernel(),
        data,
        gpflow.inducing_variables.InducingPoints(Z),
        likelihood,
        2,
        gpflow.mean_functions.Zero(),
        alpha=0.4,
        precompute_cache=PrecomputeCacheType.VARIABLE,
    )
    Xnew = rng.uniform(-4, 4, (5, 1))
    before = posterior.predict_f(Xnew)
    X_new_data, Y_new_data = regression(rng, num_data=45)
    data[0].assign(X_new_data)
    data[1].assign(Y_new_data)
    assert_predictions_equal(posterior.predict_f(Xnew), before)
    posterior.update_cache()
    reference = PowerEPSGP((X_new_data, Y_new_data), kernel(), Z, alpha=0.4, likelihood=likelihood)
    assert_predictions_equal(posterior.predict_f(Xnew), reference.predict_f(Xnew))


def test_alpha_zero_and_one_are_gpflows_posteriors(rng):
    X, Y = regression(rng)
    Z = np.linspace(-3, 3, 6)[:, None]
    Xnew = rng.uniform(-4, 4, (5, 1))
    for alpha, reference in ((0.0, gpflow.models.SGPR), (1.0, gpflow.models.GPRFITC)):
        theirs = reference((X, Y), kernel(), Z, noise_variance=0.1)
        ours = PowerEPPosterior(
            theirs.kernel,
            theirs.data,
            theirs.inducing_variable,
            theirs.likelihood,
            theirs.num_latent_gps,
            theirs.mean_function,
            alpha=alpha,
            precompute_cache=PrecomputeCacheType.TENSOR,
        )
        for full_cov in (False, True):
            assert_predictions_equal(
                ours.predict_f(Xnew, full_cov=full_cov),
                theirs.predict_f(Xnew, full_cov=full_cov),
                rtol=1e-9,
            )


def test_settings_are_read_only_and_bad_combinations_fail(rng):
    model = closed_form_model(rng, alpha=np.full(30, 0.5))
    posterior = model.posterior()
    with pytest.raises(ValueError, match="read-only"):
        posterior.alpha[0] = 1.0
    parts = (
        model.kernel,
        model.data,
        model.inducing_variable,
        model.likelihood,
        model.num_latent_gps,
    )
    sites = (tf.Variable(tf.zeros(30, tf.float64)), tf.Variable(tf.zeros(30, tf.float64)))
    with pytest.raises(ValueError, match="exactly one"):
        PowerEPPosterior(*parts, precompute_cache=None)
    with pytest.raises(ValueError, match="exactly one"):
        PowerEPPosterior(*parts, alpha=0.5, sites=sites, precompute_cache=None)
    with pytest.raises(ValueError, match="blocks"):
        PowerEPPosterior(*parts, sites=sites, blocks=[np.arange(30)], precompute_cache=None)
    with pytest.raises(ValueError, match="one per data point"):
        PowerEPPosterior(*parts, alpha=[0.5, 0.5], precompute_cache=None)
