"""ExactProbit against scipy: log-likelihood, predictive and variational expectations."""

import gpflow
import numpy as np
import pytest
import tensorflow as tf
from gpflow.quadrature import NDiagGHQuadrature
from scipy import integrate, stats

from gpflow_tight import ExactProbit, PowerEPSGP, exact_probit


def gaussian_expectation(function, mean, variance):
    """E[function(f)] under N(mean, variance), by adaptive quadrature."""
    sd = np.sqrt(variance)
    integrand = lambda f: function(f) * stats.norm.pdf(f, mean, sd)  # noqa: E731
    return integrate.quad(integrand, mean - 12 * sd, mean + 12 * sd, epsabs=0, epsrel=1e-12)[0]


F = np.array([-40.0, -9.0, -2.0, 0.0, 0.3, 5.0, 9.0, 40.0])[:, None]


def test_log_prob_is_log_phi_in_both_tails():
    likelihood = ExactProbit()
    for y in (0.0, 1.0):
        Y = np.full_like(F, y)
        got = likelihood.log_prob(F, F, Y).numpy()
        expected = stats.norm.logcdf((2 * y - 1) * F[:, 0])
        # log Φ(f) near 0 is known to absolute, not relative, precision
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-15)
    # the same model through GPflow's Bernoulli cancels to -inf in the upper tail
    naive = gpflow.likelihoods.Bernoulli(invlink=exact_probit).log_prob(F, F, np.zeros_like(F))
    assert not np.all(np.isfinite(naive.numpy()))


def test_a_label_other_than_one_counts_as_zero_as_in_gpflow():
    """GPflow's Bernoulli reads y != 1 (e.g. -1) as 0; so does ExactProbit, in every method."""
    likelihood, bernoulli = ExactProbit(), gpflow.likelihoods.Bernoulli(invlink=exact_probit)
    F_mid = F[2:5]  # where GPflow's log(1 - Φ(f)) keeps its precision
    Fvar = np.full_like(F_mid, 0.7)
    for label in (-1.0, 2.0):
        Y, zeros = np.full_like(F_mid, label), np.zeros_like(F_mid)
        got = likelihood.log_prob(F_mid, F_mid, Y).numpy()
        np.testing.assert_allclose(got, likelihood.log_prob(F_mid, F_mid, zeros).numpy())
        np.testing.assert_allclose(got, bernoulli.log_prob(F_mid, F_mid, Y).numpy(), rtol=1e-12)
        for method in ("predict_log_density", "variational_expectations"):
            got = getattr(likelihood, method)(F_mid, F_mid, Fvar, Y).numpy()
            expected = getattr(likelihood, method)(F_mid, F_mid, Fvar, zeros).numpy()
            np.testing.assert_allclose(got, expected)
            reference = getattr(bernoulli, method)(F_mid, F_mid, Fvar, Y).numpy()
            np.testing.assert_allclose(got, reference, rtol=1e-9)


@pytest.mark.parametrize("mean, variance", [(0.3, 0.5), (-2.0, 4.0), (12.0, 0.1)])
def test_predictions_equal_quadrature(mean, variance):
    likelihood = ExactProbit()
    Fmu, Fvar = np.array([[mean]]), np.array([[variance]])
    # p(y = 1) and p(y = 0) integrated separately, so that both keep their relative precision
    p = gaussian_expectation(stats.norm.cdf, mean, variance)
    q = gaussian_expectation(lambda f: stats.norm.cdf(-f), mean, variance)
    got_mean, got_var = likelihood.predict_mean_and_var(Fmu, Fmu, Fvar)
    np.testing.assert_allclose(got_mean.numpy()[0, 0], p, rtol=1e-10)
    np.testing.assert_allclose(got_var.numpy()[0, 0], p * q, rtol=1e-8)
    for y, log_probability in ((1.0, np.log1p(-q)), (0.0, np.log(q))):
        got = likelihood.predict_log_density(Fmu, Fmu, Fvar, np.array([[y]])).numpy()[0]
        np.testing.assert_allclose(got, log_probability, rtol=1e-9)


@pytest.mark.parametrize("mean, variance", [(0.3, 0.5), (-2.0, 4.0), (12.0, 0.1)])
def test_variational_expectations_equal_quadrature(mean, variance):
    likelihood = ExactProbit(quadrature=NDiagGHQuadrature(1, 100))  # GPflow's default is 20
    Fmu, Fvar = np.array([[mean]]), np.array([[variance]])
    for y in (0.0, 1.0):
        expected = gaussian_expectation(
            lambda f, s=2 * y - 1: stats.norm.logcdf(s * f), mean, variance
        )
        got = likelihood.variational_expectations(Fmu, Fmu, Fvar, np.array([[y]])).numpy()[0]
        np.testing.assert_allclose(got, expected, rtol=1e-8)


def test_power_ep_treats_it_as_the_exact_probit(rng):
    X = rng.uniform(-3, 3, (40, 1))
    Y = (np.sin(2 * X) + 0.3 * rng.standard_normal(X.shape) > 0).astype(float)
    values = []
    for likelihood in (ExactProbit(), gpflow.likelihoods.Bernoulli(invlink=exact_probit)):
        for alpha in (1.0, 0.5):
            model = PowerEPSGP(
                (X, Y),
                gpflow.kernels.SquaredExponential(),
                X[::8].copy(),
                alpha=alpha,
                likelihood=likelihood,
            )
            for _ in range(5):
                model.sweep()
            values.append(model.log_marginal_likelihood().numpy())
    np.testing.assert_allclose(values[:2], values[2:], rtol=1e-12)


def test_svgp_trains_with_it_in_float32():
    with gpflow.config.as_context(gpflow.config.Config(float=np.float32)):
        X = np.linspace(-3, 3, 50, dtype=np.float32)[:, None]
        Y = (X > 0).astype(np.float32)
        model = gpflow.models.SVGP(
            gpflow.kernels.SquaredExponential(), ExactProbit(), X[::10].copy(), num_data=50
        )
        optimizer = gpflow.keras.tf_keras.optimizers.Adam(0.05)
        step = tf.function(
            lambda: optimizer.minimize(
                model.training_loss_closure((X, Y)), model.trainable_variables
            )
        )
        before = model.training_loss((X, Y)).numpy()
        for _ in range(30):
            step()
        after = model.training_loss((X, Y)).numpy()
    assert after.dtype == np.float32 and np.isfinite(after) and after < before
