"""
TightBayesianGPLVM and MinibatchBayesianGPLVM against gpflow.models.BayesianGPLVM, GPflow's
per-point psi statistics and dense numpy formulas (spec/tight.md §6).
"""

import gpflow
import numpy as np
import pytest
import tensorflow as tf
from scipy.stats import norm

import gpflow_tight
from gpflow_tight import MinibatchBayesianGPLVM, TightBayesianGPLVM

NOISE = 0.3


def make_problem(rng, num_data=40, num_outputs=5, latent_dim=2, num_inducing=8):
    Y = rng.standard_normal((num_data, num_outputs))
    X_mean = rng.standard_normal((num_data, latent_dim))
    X_var = rng.uniform(0.05, 0.5, (num_data, latent_dim))
    Z = rng.standard_normal((num_inducing, latent_dim))
    return Y, X_mean, X_var, Z


def se_kernel():
    return gpflow.kernels.SquaredExponential(variance=1.2, lengthscales=[1.0, 1.5])


def build(model_class, Y, X_mean, X_var, Z, kernel=None, **kwargs):
    model = model_class(Y, X_mean, X_var, kernel or se_kernel(), inducing_variable=Z, **kwargs)
    model.likelihood.variance.assign(NOISE)
    return model


def expected_residuals(kernel, X_mean, X_var, Z):
    """⟨d_n⟩ = ⟨k_nn⟩ - tr(K_uu⁻¹ ⟨k_un k_nu⟩) from GPflow's per-point expectations."""
    q_x = gpflow.probability_distributions.DiagonalGaussian(X_mean, X_var)
    iv = gpflow.inducing_variables.InducingPoints(Z)
    psi0 = gpflow.expectations.expectation(q_x, kernel).numpy()
    psi2 = gpflow.expectations.expectation(q_x, (kernel, iv), (kernel, iv)).numpy()
    Kuu = gpflow.covariances.Kuu(iv, kernel, jitter=gpflow.config.default_jitter()).numpy()
    return psi0 - np.einsum("ij,nji->n", np.linalg.inv(Kuu), psi2)


@pytest.mark.parametrize(
    "kernel, num_inducing",
    [
        (se_kernel, 8),
        (lambda: gpflow.kernels.Linear(variance=[0.7, 1.1]), 2),  # rank-2 kernel: M = Q
        (gpflow.kernels.Matern52, 8),
    ],
    ids=["se", "linear", "matern52-quadrature"],
)
def test_bounds_against_bayesian_gplvm(rng, kernel, num_inducing):
    """m_n = 1 is BayesianGPLVM's bound; the analytic bound exceeds it by exactly
    (P/2) Σ_n [⟨d_n⟩/σ² - log(1 + ⟨d_n⟩/σ²)]."""
    Y, X_mean, X_var, Z = make_problem(rng, num_inducing=num_inducing)
    standard = build(gpflow.models.BayesianGPLVM, Y, X_mean, X_var, Z, kernel())
    untightened = build(TightBayesianGPLVM, Y, X_mean, X_var, Z, kernel(), relaxation="none")
    tight = build(TightBayesianGPLVM, Y, X_mean, X_var, Z, kernel())
    reference = standard.elbo().numpy()
    np.testing.assert_allclose(untightened.elbo().numpy(), reference, rtol=1e-10)
    x = expected_residuals(kernel(), X_mean, X_var, Z) / NOISE
    gain = 0.5 * Y.shape[1] * np.sum(x - np.log1p(x))
    assert gain > 0
    np.testing.assert_allclose(  # the difference of two bounds: round-off of the bound itself
        tight.elbo().numpy() - reference, gain, rtol=1e-8, atol=1e-12 * abs(reference)
    )


def test_paper_relaxation_is_at_least_the_analytic_one(rng):
    """Jensen: ⟨log(1 + d(x)/σ²)⟩ ≤ log(1 + ⟨d⟩/σ²). Tolerance: 4 Monte Carlo standard errors
    of the mean of 20 independent estimates."""
    Y, X_mean, X_var, Z = make_problem(rng)
    X_var = X_var * 4  # wide q(x): a visible Jensen gap
    analytic = build(TightBayesianGPLVM, Y, X_mean, X_var, Z).elbo().numpy()
    sampled = build(TightBayesianGPLVM, Y, X_mean, X_var, Z, relaxation="sampled", num_samples=50)
    tf.random.set_seed(1)
    draws = np.array([sampled.elbo().numpy() for _ in range(20)])
    error = draws.std(ddof=1) / np.sqrt(len(draws))
    assert draws.mean() - analytic > 4 * error


def test_sampled_relaxation_is_unbiased(rng):
    """The Monte Carlo term against the same expectation by 2-D Gauss-Hermite quadrature."""
    Y, X_mean, X_var, Z = make_problem(rng, num_data=6)
    kernel = se_kernel()
    model = build(
        TightBayesianGPLVM, Y, X_mean, X_var, Z, kernel, relaxation="sampled", num_samples=4000
    )
    none = build(TightBayesianGPLVM, Y, X_mean, X_var, Z, kernel, relaxation="none")
    iv = gpflow.inducing_variables.InducingPoints(Z)
    Kuu = gpflow.covariances.Kuu(iv, kernel, jitter=gpflow.config.default_jitter()).numpy()
    nodes, weights = np.polynomial.hermite.hermgauss(30)
    grid = np.stack(np.meshgrid(nodes, nodes, indexing="ij"), -1).reshape(-1, 2)
    w = np.outer(weights, weights).reshape(-1) / np.pi
    total = 0.0
    for mean, var in zip(X_mean, X_var):
        points = mean + np.sqrt(2 * var) * grid
        Kuf = gpflow.covariances.Kuf(iv, kernel, points).numpy()
        d = 1.2 - np.sum(Kuf * np.linalg.solve(Kuu, Kuf), axis=0)
        total += w @ np.log1p(np.maximum(d, 0) / NOISE)
    trace = -0.5 * Y.shape[1] * np.sum(expected_residuals(kernel, X_mean, X_var, Z)) / NOISE
    expected = none.elbo().numpy() - trace - 0.5 * Y.shape[1] * total
    tf.random.set_seed(3)
    draws = np.array([model.elbo().numpy() for _ in range(10)])
    assert abs(draws.mean() - expected) < 4 * draws.std(ddof=1) / np.sqrt(len(draws)) + 1e-9


def test_predict_log_density_at_latent_points(rng):
    Y, X_mean, X_var, Z = make_problem(rng)
    model = build(TightBayesianGPLVM, Y, X_mean, X_var, Z)
    X_new, Y_new = rng.standard_normal((7, 2)), rng.standard_normal((7, 5))
    mean, var = model.predict_f(X_new)
    reference = np.sum(norm.logpdf(Y_new, mean.numpy(), np.sqrt(var.numpy() + NOISE)), axis=1)
    np.testing.assert_allclose(model.predict_log_density((X_new, Y_new)).numpy(), reference)
    standard = build(gpflow.models.BayesianGPLVM, Y, X_mean, X_var, Z)
    for ours, theirs in zip(model.predict_f(X_new), standard.predict_f(X_new)):
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-12)


def optimal_q_u(kernel, Y, X_mean, X_var, Z, whiten):
    """Titsias's optimal q(u) for the collapsed GPLVM bound, per output column."""
    q_x = gpflow.probability_distributions.DiagonalGaussian(X_mean, X_var)
    iv = gpflow.inducing_variables.InducingPoints(Z)
    psi1 = gpflow.expectations.expectation(q_x, (kernel, iv)).numpy()
    psi2 = gpflow.expectations.expectation(q_x, (kernel, iv), (kernel, iv)).numpy().sum(0)
    Kuu = gpflow.covariances.Kuu(iv, kernel, jitter=gpflow.config.default_jitter()).numpy()
    Sigma = np.linalg.inv(Kuu + psi2 / NOISE)
    mean, cov = Kuu @ Sigma @ psi1.T @ Y / NOISE, Kuu @ Sigma @ Kuu
    if whiten:
        L = np.linalg.cholesky(Kuu)
        mean, cov = np.linalg.solve(L, mean), np.linalg.solve(L, np.linalg.solve(L, cov).T)
    return mean, np.tile(np.linalg.cholesky(cov)[None], [Y.shape[1], 1, 1])


def minibatch_model(Y, X_mean, X_var, Z, **kwargs):
    return MinibatchBayesianGPLVM(
        len(Y), Y.shape[1], X_mean, X_var, se_kernel(), Z, noise_variance=NOISE, **kwargs
    )


@pytest.mark.parametrize("whiten", [True, False])
@pytest.mark.parametrize("tight", [True, False])
def test_minibatch_bound_at_optimal_q_u_equals_collapsed_bound(rng, whiten, tight):
    Y, X_mean, X_var, Z = make_problem(rng)
    q_mu, q_sqrt = optimal_q_u(se_kernel(), Y, X_mean, X_var, Z, whiten)
    model = minibatch_model(
        Y, X_mean, X_var, Z, whiten=whiten, tight=tight, q_mu=q_mu, q_sqrt=q_sqrt
    )
    collapsed = build(
        TightBayesianGPLVM, Y, X_mean, X_var, Z, relaxation="analytic" if tight else "none"
    )
    np.testing.assert_allclose(
        model.elbo(model.training_data(Y)).numpy(), collapsed.elbo().numpy(), rtol=1e-9
    )
    other = minibatch_model(Y, X_mean, X_var, Z, whiten=whiten, tight=tight)
    assert other.elbo(model.training_data(Y)).numpy() < collapsed.elbo().numpy()


def test_minibatch_estimate_is_unbiased(rng):
    Y, X_mean, X_var, Z = make_problem(rng)
    model = minibatch_model(Y, X_mean, X_var, Z, q_mu=rng.standard_normal((8, 5)))
    rows, values = model.training_data(Y)
    partition = rng.permutation(len(Y)).reshape(5, 8)
    estimates = [model.elbo((rows[b], values[b])).numpy() for b in partition]
    np.testing.assert_allclose(np.mean(estimates), model.elbo((rows, values)).numpy(), rtol=1e-12)


def test_training(rng, tmp_path):
    Y, X_mean, X_var, Z = make_problem(rng, num_data=60)
    collapsed = build(TightBayesianGPLVM, Y, X_mean, X_var, Z)
    start = collapsed.elbo().numpy()
    gpflow_tight.training.fit_scipy(collapsed, maxiter=30, progress=False)
    assert collapsed.elbo().numpy() > start
    path = tf.train.Checkpoint(model=collapsed).write(str(tmp_path / "ckpt"))
    restored = build(TightBayesianGPLVM, Y, X_mean, X_var, Z)
    tf.train.Checkpoint(model=restored).read(path)
    np.testing.assert_allclose(restored.elbo().numpy(), collapsed.elbo().numpy(), rtol=1e-12)

    minibatch = minibatch_model(Y, X_mean, X_var, Z)
    data = minibatch.training_data(Y)
    history = gpflow_tight.training.fit_adam(
        minibatch, data, iterations=200, batch_size=20, learning_rate=0.02, progress=False
    )
    assert np.mean(history[-20:]) < np.mean(history[:20])
    assert np.all(np.isfinite(minibatch.predict_f(X_mean)[0].numpy()))


def test_bad_input_raises_clear_errors(rng):
    Y, X_mean, X_var, Z = make_problem(rng)
    with pytest.raises(ValueError, match="latent space has Q = 2"):
        TightBayesianGPLVM(Y, X_mean, X_var, se_kernel(), inducing_variable=Z[:, :1])
    with pytest.raises(ValueError, match="strictly positive"):
        TightBayesianGPLVM(Y, X_mean, -X_var, se_kernel(), inducing_variable=Z)
    with pytest.raises(ValueError, match="shape"):
        TightBayesianGPLVM(Y, X_mean[:5], X_var[:5], se_kernel(), inducing_variable=Z)
    with pytest.raises(ValueError, match="relaxation"):
        TightBayesianGPLVM(Y, X_mean, X_var, se_kernel(), inducing_variable=Z, relaxation="x")
    with pytest.raises(ValueError, match="finite"):
        TightBayesianGPLVM(np.full_like(Y, np.nan), X_mean, X_var, se_kernel(), inducing_variable=Z)
    with pytest.raises(ValueError, match="latent space has Q = 2"):
        MinibatchBayesianGPLVM(len(Y), 5, X_mean, X_var, se_kernel(), Z[:, :1])


def test_fused_psi2_gradient_matches_autodiff(rng):
    """The custom gradient of the fused sum-and-contract equals TensorFlow's own, for both
    outputs used, either one alone, and under tf.function."""
    from gpflow_tight.models.gplvm import _sum_and_contract

    flat = tf.constant(rng.standard_normal((7, 9)))
    weights = tf.constant(rng.standard_normal(9))
    g_total, g_contracted = rng.standard_normal(9), rng.standard_normal(7)

    def objectives(total, contracted):
        return (
            tf.reduce_sum(total * g_total) + tf.reduce_sum(contracted * g_contracted),
            tf.reduce_sum(total * g_total),
            tf.reduce_sum(contracted * g_contracted),
        )

    def gradients(function):
        results = []
        for k in range(3):
            with tf.GradientTape() as tape:
                tape.watch([flat, weights])
                value = objectives(*function(flat, weights))[k]
            results.append(tape.gradient(value, [flat, weights]))
        return results

    plain = gradients(lambda a, w: (tf.reduce_sum(a, 0), tf.linalg.matvec(a, w)))
    for fused in (_sum_and_contract, tf.function(_sum_and_contract)):
        for got, expected in zip(gradients(fused), plain):
            for g, e in zip(got, expected):
                np.testing.assert_allclose(g, np.zeros(g.shape) if e is None else e, atol=1e-12)
