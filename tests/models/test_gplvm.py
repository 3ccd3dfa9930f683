"""
TightBayesianGPLVM and MinibatchBayesianGPLVM (Bui, Ashman & Turner 2025, §5) against
gpflow.models.BayesianGPLVM (Titsias & Lawrence 2010), GPflow's per-point psi statistics and dense
numpy formulas; their psi-statistic projection in float32.
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


def test_seeded_sampled_relaxation_is_a_fixed_sample_average(rng):
    """With a ``seed`` the draws are the same at every evaluation (eager and compiled), so the
    objective is deterministic; it is the sample average over exactly those draws (dense numpy
    from the draws themselves), and another seed gives another sample. L-BFGS trains it."""
    Y, X_mean, X_var, Z = make_problem(rng, num_data=12)
    kernel = se_kernel()
    sampled = gpflow_tight.relaxation.SampledOptimalRelaxation(5, seed=7)
    model = build(TightBayesianGPLVM, Y, X_mean, X_var, Z, kernel, relaxation=sampled)
    first = model.elbo().numpy()
    assert model.elbo().numpy() == first
    assert tf.function(model.elbo)().numpy() == pytest.approx(first, rel=1e-14)
    other = gpflow_tight.relaxation.SampledOptimalRelaxation(5, seed=8)
    assert build(TightBayesianGPLVM, Y, X_mean, X_var, Z, relaxation=other).elbo().numpy() != first

    noise = sampled.standard_normal([5, 12, 2]).numpy()
    np.testing.assert_array_equal(noise, sampled.standard_normal([5, 12, 2]).numpy())
    iv = gpflow.inducing_variables.InducingPoints(Z)
    Kuu = gpflow.covariances.Kuu(iv, kernel, jitter=gpflow.config.default_jitter()).numpy()
    points = (X_mean + np.sqrt(X_var) * noise).reshape(-1, 2)
    Kuf = gpflow.covariances.Kuf(iv, kernel, points).numpy()
    d = 1.2 - np.sum(Kuf * np.linalg.solve(Kuu, Kuf), axis=0)
    none = build(TightBayesianGPLVM, Y, X_mean, X_var, Z, kernel, relaxation="none")
    trace = -0.5 * Y.shape[1] * np.sum(expected_residuals(kernel, X_mean, X_var, Z)) / NOISE
    expected = none.elbo().numpy() - trace - 0.5 * Y.shape[1] * np.sum(np.log1p(d / NOISE)) / 5
    np.testing.assert_allclose(first, expected, rtol=1e-10)

    with pytest.raises(TypeError, match="`seed` must be an int"):
        gpflow_tight.relaxation.SampledOptimalRelaxation(5, seed=0.5)
    with pytest.raises(AttributeError, match="fixed at construction"):
        sampled.seed = 3
    result = gpflow_tight.training.fit_scipy(model, maxiter=30, progress=False)
    assert result.fun < -first and model.elbo().numpy() == pytest.approx(-result.fun, rel=1e-12)


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
    for full_cov in (False, True):
        ours = model.predict_f(X_new, full_cov=full_cov)
        theirs = standard.predict_f(X_new, full_cov=full_cov)
        for a, b in zip(ours, theirs):  # B from the projection, not GPflow's: round-off apart
            scale = np.abs(b.numpy()).max()
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-12 * scale)


def optimal_q_u(kernel, Y, X_mean, X_var, Z, whiten, noise=NOISE):
    """Titsias's optimal q(u) for the collapsed GPLVM bound, per output column."""
    q_x = gpflow.probability_distributions.DiagonalGaussian(X_mean, X_var)
    iv = gpflow.inducing_variables.InducingPoints(Z)
    psi1 = gpflow.expectations.expectation(q_x, (kernel, iv)).numpy()
    psi2 = gpflow.expectations.expectation(q_x, (kernel, iv), (kernel, iv)).numpy().sum(0)
    Kuu = gpflow.covariances.Kuu(iv, kernel, jitter=gpflow.config.default_jitter()).numpy()
    Sigma = np.linalg.inv(Kuu + psi2 / noise)
    mean, cov = Kuu @ Sigma @ psi1.T @ Y / noise, Kuu @ Sigma @ Kuu
    if whiten:
        L = np.linalg.cholesky(Kuu)
        mean, cov = np.linalg.solve(L, mean), np.linalg.solve(L, np.linalg.solve(L, cov).T)
    cov = 0.5 * (cov + cov.T)
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
    with pytest.raises(ValueError, match="`X_data_mean` has 2 columns .the latent dimension Q."):
        TightBayesianGPLVM(Y, X_mean, X_var, se_kernel(), inducing_variable=Z[:, :1])
    with pytest.raises(ValueError, match="strictly positive"):
        TightBayesianGPLVM(Y, X_mean, -X_var, se_kernel(), inducing_variable=Z)
    with pytest.raises(ValueError, match="shape"):
        TightBayesianGPLVM(Y, X_mean[:5], X_var[:5], se_kernel(), inducing_variable=Z)
    with pytest.raises(ValueError, match="relaxation"):
        TightBayesianGPLVM(Y, X_mean, X_var, se_kernel(), inducing_variable=Z, relaxation="x")
    with pytest.raises(ValueError, match="finite"):
        TightBayesianGPLVM(np.full_like(Y, np.nan), X_mean, X_var, se_kernel(), inducing_variable=Z)
    with pytest.raises(ValueError, match="`X_data_mean` has 2 columns .the latent dimension Q."):
        MinibatchBayesianGPLVM(len(Y), 5, X_mean, X_var, se_kernel(), Z[:, :1])
    for prior, error, match in (
        (dict(X_prior_var=np.zeros_like(X_var)), ValueError, "`X_prior_var` must hold finite"),
        (dict(X_prior_var=-np.ones_like(X_var)), ValueError, "`X_prior_var` must hold finite"),
        (dict(X_prior_var=np.full_like(X_var, np.inf)), ValueError, "`X_prior_var`.*inf"),
        (dict(X_prior_mean=np.full_like(X_mean, np.nan)), ValueError, "`X_prior_mean`.*NaN"),
        (dict(X_prior_mean=X_mean[:5]), ValueError, "`X_prior_mean` must have the shape"),
        (dict(X_prior_var=np.ones(2)), ValueError, r"`X_prior_var` must have the shape.*np.full"),
        (dict(X_prior_var=2.0), ValueError, r"`X_prior_var` must have the shape.*np.full"),
    ):
        with pytest.raises(error, match=match):
            TightBayesianGPLVM(Y, X_mean, X_var, se_kernel(), inducing_variable=Z, **prior)
        with pytest.raises(error, match=match):
            MinibatchBayesianGPLVM(len(Y), Y.shape[1], X_mean, X_var, se_kernel(), Z, **prior)


def test_given_priors_enter_the_kl_as_gpflows(rng):
    """A prior p(X) other than N(0, I) gives GPflow's BayesianGPLVM's bound (relaxation
    "none"), and the same in the minibatch model at its optimal q(u)."""
    Y, X_mean, X_var, Z = make_problem(rng)
    prior = dict(X_prior_mean=0.3 * X_mean, X_prior_var=np.full_like(X_var, 2.0))
    ours = build(TightBayesianGPLVM, Y, X_mean, X_var, Z, relaxation="none", **prior)
    theirs = build(gpflow.models.BayesianGPLVM, Y, X_mean, X_var, Z, **prior)
    np.testing.assert_allclose(ours.elbo().numpy(), theirs.elbo().numpy(), rtol=1e-12)
    q_mu, q_sqrt = optimal_q_u(se_kernel(), Y, X_mean, X_var, Z, True)
    minibatch = minibatch_model(Y, X_mean, X_var, Z, tight=False, q_mu=q_mu, q_sqrt=q_sqrt, **prior)
    np.testing.assert_allclose(
        minibatch.elbo(minibatch.training_data(Y)).numpy(), theirs.elbo().numpy(), rtol=1e-9
    )


def test_minibatch_settings_read_when_compiling_are_fixed(rng):
    """`num_data` and `whiten` are read when a loss is traced: changing them later would leave
    a compiled loss behind, so it is refused (as VNNGP's `num_data`)."""
    Y, X_mean, X_var, Z = make_problem(rng)
    model = minibatch_model(Y, X_mean, X_var, Z)
    loss = tf.function(lambda: model.training_loss(model.training_data(Y)))
    before = loss().numpy()
    for name, value in (("num_data", 10 * len(Y)), ("whiten", False)):
        with pytest.raises(AttributeError, match=f"`{name}` of MinibatchBayesianGPLVM is fixed"):
            setattr(model, name, value)
    assert loss().numpy() == before


def test_posterior_says_what_to_use_instead(rng):
    """GPflow's BayesianGPLVM has no posterior() (an AttributeError); ours says what to use."""
    Y, X_mean, X_var, Z = make_problem(rng)
    for model in (
        build(TightBayesianGPLVM, Y, X_mean, X_var, Z),
        minibatch_model(Y, X_mean, X_var, Z),
    ):
        with pytest.raises(NotImplementedError, match=r"predict_f\(X_latent\).*infer_latent"):
            model.posterior()


def test_relaxation_arguments(rng):
    """Names, the "analytic" alias and relaxation objects give the same bounds; other kinds and
    misplaced arguments are refused; the relaxation is fixed at construction."""
    Y, X_mean, X_var, Z = make_problem(rng)
    relaxation = gpflow_tight.relaxation

    def collapsed(**kwargs):
        return build(TightBayesianGPLVM, Y, X_mean, X_var, Z, **kwargs)

    analytic = collapsed().elbo().numpy()
    for kwargs in (
        dict(relaxation="analytic"),
        dict(relaxation="optimal"),
        dict(relaxation=relaxation.OptimalRelaxation()),
    ):
        np.testing.assert_array_equal(collapsed(**kwargs).elbo().numpy(), analytic)
    none = collapsed(relaxation="none").elbo().numpy()
    np.testing.assert_array_equal(collapsed(relaxation=relaxation.NoRelaxation()).elbo(), none)
    assert none < analytic

    sampled = collapsed(relaxation="sampled", num_samples=7)
    assert isinstance(sampled.relaxation, relaxation.SampledOptimalRelaxation)
    assert sampled.num_samples == 7 and collapsed().num_samples is None
    same = collapsed(relaxation=relaxation.SampledOptimalRelaxation(7))
    tf.random.set_seed(4)
    first = sampled.elbo().numpy()
    tf.random.set_seed(4)
    np.testing.assert_array_equal(same.elbo().numpy(), first)

    with pytest.raises(ValueError, match="'analytic', 'none', 'optimal', 'sampled'"):
        collapsed(relaxation="beta")
    with pytest.raises(ValueError, match="cannot use a BetaRelaxation"):
        collapsed(relaxation=relaxation.BetaRelaxation(0.3))
    with pytest.raises(ValueError, match="to the relaxation object"):
        collapsed(relaxation=relaxation.SampledOptimalRelaxation(3), num_samples=3)
    with pytest.raises(ValueError, match="at least 1"):
        collapsed(relaxation="sampled", num_samples=0)
    with pytest.raises(ValueError, match="only used with relaxation='sampled'"):
        collapsed(relaxation="analytic", num_samples=5)
    with pytest.raises(AttributeError, match="fixed at construction"):
        sampled.relaxation.num_samples = 2000
    model = collapsed()
    with pytest.raises(AttributeError, match="fixed at construction"):
        model.relaxation = relaxation.NoRelaxation()

    rows = minibatch_model(Y, X_mean, X_var, Z).training_data(Y)
    tight = minibatch_model(Y, X_mean, X_var, Z).elbo(rows).numpy()
    loose = minibatch_model(Y, X_mean, X_var, Z, tight=False).elbo(rows).numpy()
    assert loose < tight
    for kwargs, expected in (
        (dict(tight=True), tight),
        (dict(relaxation="analytic"), tight),
        (dict(relaxation=relaxation.OptimalRelaxation()), tight),
        (dict(relaxation="none"), loose),
    ):
        model = minibatch_model(Y, X_mean, X_var, Z, **kwargs)
        np.testing.assert_array_equal(model.elbo(rows).numpy(), expected)
        assert model.tight == (expected == tight)
    with pytest.raises(ValueError, match="not both"):
        minibatch_model(Y, X_mean, X_var, Z, tight=True, relaxation="optimal")
    with pytest.raises(ValueError, match="'analytic', 'none', 'optimal'"):
        minibatch_model(Y, X_mean, X_var, Z, relaxation="sampled")


def test_expected_projection_against_dense_formulas(rng):
    """A = L⁻¹Ψ1ᵀ, AAᵀ + V = L⁻¹(Σ_n Ψ2_n)L⁻ᵀ and ⟨d_n⟩, from GPflow's per-point statistics."""
    from gpflow_tight.projection import expected_projection, inducing_cholesky

    Y, X_mean, X_var, Z = make_problem(rng)
    kernel = se_kernel()
    iv = gpflow.inducing_variables.InducingPoints(Z)
    q_x = gpflow.probability_distributions.DiagonalGaussian(X_mean, X_var)
    psi0 = gpflow.expectations.expectation(q_x, kernel)
    psi1 = gpflow.expectations.expectation(q_x, (kernel, iv))
    psi2 = gpflow.expectations.expectation(q_x, (kernel, iv), (kernel, iv))
    L = inducing_cholesky(iv, kernel)
    residual = expected_residuals(kernel, X_mean, X_var, Z)
    dense_A = np.linalg.solve(L.numpy(), psi1.numpy().T)
    dense = np.linalg.solve(L.numpy(), np.linalg.solve(L.numpy(), psi2.numpy().sum(0)).T)
    for centred in (True, False):  # float64 contracts directly by default; both forms agree
        projection = expected_projection(psi0, psi1, psi2, L, centred=centred)
        np.testing.assert_allclose(projection.A, dense_A, rtol=1e-10)
        AAT = projection.A.numpy() @ projection.A.numpy().T + projection.V.numpy()
        np.testing.assert_allclose(AAT, dense, rtol=1e-10, atol=1e-10 * np.abs(dense).max())
        np.testing.assert_allclose(projection.residual, residual, rtol=1e-9, atol=1e-13)


def test_centred_and_direct_expected_projection_have_the_same_gradients(rng):
    """The two forms of the custom-gradient contraction against each other, in float64."""
    from gpflow_tight.projection import expected_projection, inducing_cholesky

    Y, X_mean, X_var, Z = make_problem(rng)
    kernel = se_kernel()
    iv = gpflow.inducing_variables.InducingPoints(Z)
    mean = tf.Variable(X_mean)
    gradients = []
    for centred in (True, False):
        with tf.GradientTape() as tape:
            q_x = gpflow.probability_distributions.DiagonalGaussian(mean, X_var)
            psi = [
                gpflow.expectations.expectation(q_x, kernel),
                gpflow.expectations.expectation(q_x, (kernel, iv)),
                gpflow.expectations.expectation(q_x, (kernel, iv), (kernel, iv)),
            ]
            projection = expected_projection(*psi, inducing_cholesky(iv, kernel), centred)
            value = tf.reduce_sum(tf.math.log1p(projection.residual)) + tf.reduce_sum(
                projection.V * tf.linalg.matmul(projection.A, projection.A, transpose_b=True)
            )
        variables = [mean, *kernel.trainable_variables]
        gradients.append([g.numpy() for g in tape.gradient(value, variables)])
    for centred_gradient, direct_gradient in zip(*gradients):
        np.testing.assert_allclose(centred_gradient, direct_gradient, rtol=1e-9, atol=1e-12)


def float32_problem(rng):
    """An ill-conditioned K_uu (30 inducing inputs, lengthscale 2, in 2-D) at jitter 1e-3."""
    X = rng.standard_normal((100, 2))
    Y = np.sin(X @ rng.standard_normal((2, 5))) + 0.3 * rng.standard_normal((100, 5))
    X_mean = X + 0.3 * rng.standard_normal(X.shape)
    Z = X_mean[rng.choice(100, 30, replace=False)]
    return Y, X_mean, np.full(X.shape, 0.1), Z


def bounds_in(dtype, Y, X_mean, X_var, Z, q_u):
    config = gpflow.config.Config(float=dtype, jitter=1e-3)
    with gpflow.config.as_context(config):
        cast = [np.asarray(a, dtype) for a in (Y, X_mean, X_var, Z)]

        def kernel():
            return gpflow.kernels.SquaredExponential(lengthscales=np.array([2.0, 2.0], dtype))

        def collapsed(model_class, **kwargs):
            model = model_class(*cast[:3], kernel(), inducing_variable=cast[3], **kwargs)
            model.likelihood.variance.assign(0.1)
            return model.elbo().numpy()

        minibatch = MinibatchBayesianGPLVM(
            len(Y), Y.shape[1], *cast[1:3], kernel(), cast[3], noise_variance=0.1,
            q_mu=q_u[0].astype(dtype), q_sqrt=q_u[1].astype(dtype),
        )  # fmt: skip
        return dict(
            gpflow=collapsed(gpflow.models.BayesianGPLVM),
            none=collapsed(TightBayesianGPLVM, relaxation="none"),
            analytic=collapsed(TightBayesianGPLVM),
            minibatch=minibatch.elbo((np.arange(len(Y))[:, None], cast[0])).numpy(),
        )


def test_float32_bounds_are_as_accurate_as_their_psi_statistics(rng):
    """
    expected_projection centres Ψ2_n before L⁻¹ touches it, so in float32 the bounds lie within
    0.25 nats of float64 on three such problems (at most 0.16 here and over 12 others), where
    GPflow's BayesianGPLVM, forming L⁻¹(Σ_n Ψ2_n)L⁻ᵀ directly, is off by 0.37–0.79; with
    per-point traces against an explicit K_uu⁻¹ these bounds had been off by up to 2.3.
    """
    for _ in range(3):
        Y, X_mean, X_var, Z = float32_problem(rng)
        with gpflow.config.as_context(gpflow.config.Config(jitter=1e-3)):
            kernel = gpflow.kernels.SquaredExponential(lengthscales=[2.0, 2.0])
            q_u = optimal_q_u(kernel, Y, X_mean, X_var, Z, whiten=True, noise=0.1)
        exact = bounds_in(np.float64, Y, X_mean, X_var, Z, q_u)
        rounded = bounds_in(np.float32, Y, X_mean, X_var, Z, q_u)
        errors = {name: abs(float(rounded[name]) - exact[name]) for name in exact}
        for name in ("none", "analytic", "minibatch"):
            assert errors[name] < min(0.25, errors["gpflow"]), errors


@pytest.mark.parametrize("centre", [True, False])
def test_sum_and_trace_gradient_matches_autodiff(rng, centre):
    """The custom gradient of the fused (centring,) sum and contraction equals TensorFlow's own
    (also for non-symmetric inputs), for both outputs used, either one alone, and under
    tf.function."""
    from gpflow_tight.projection import _sum_and_trace

    psi1 = tf.constant(rng.standard_normal((7, 3)))
    psi2 = tf.constant(rng.standard_normal((7, 3, 3)))
    weights = tf.constant(rng.standard_normal((3, 3)))
    g_total, g_trace = rng.standard_normal((3, 3)), rng.standard_normal(7)
    inputs = [psi1, psi2, weights]

    def plain(psi1, psi2, weights):
        centred = psi2 - psi1[:, :, None] * psi1[:, None, :] if centre else psi2
        return tf.reduce_sum(centred, 0), tf.einsum("ab,nab->n", weights, centred)

    def gradients(function):
        results = []
        for k in range(3):
            with tf.GradientTape() as tape:
                tape.watch(inputs)
                total, trace = function(*inputs)
                value = [
                    tf.reduce_sum(total * g_total) + tf.reduce_sum(trace * g_trace),
                    tf.reduce_sum(total * g_total),
                    tf.reduce_sum(trace * g_trace),
                ][k]
            results.append(tape.gradient(value, inputs))
        return results

    def fused_op(psi1, psi2, weights):
        return _sum_and_trace(psi1, psi2, weights, centre)

    for fused in (fused_op, tf.function(fused_op)):
        for output, expected in zip(fused(*inputs), plain(*inputs)):
            np.testing.assert_allclose(output, expected, rtol=1e-12)
        for got, expected in zip(gradients(fused), gradients(plain)):
            for g, e in zip(got, expected):
                np.testing.assert_allclose(g, np.zeros(g.shape) if e is None else e, atol=1e-12)


# ------------------------------------------------------------------ held-out rows: q(x*) and ℓ*


def se_numpy(A, B, variance=1.2, lengthscales=(1.0, 1.5)):
    """se_kernel() in numpy."""
    scaled = (A[:, None, :] - B[None, :, :]) / np.asarray(lengthscales)
    return variance * np.exp(-0.5 * np.sum(scaled**2, axis=-1))


def dense_q_u(kind, rng, Y, X_mean, X_var, Z):
    """
    A model and its q(u_p) = N(m_p, S_p) in the original (unwhitened) coordinates, in numpy:
    Titsias's optimal q(u) for the collapsed model, a random one for the minibatch model.
    """
    if kind == "minibatch":
        q_mu = rng.standard_normal((len(Z), Y.shape[1]))
        q_sqrt = np.tril(0.3 * rng.standard_normal((Y.shape[1], len(Z), len(Z))), -1)
        q_sqrt += np.eye(len(Z)) * rng.uniform(0.3, 0.8, (Y.shape[1], len(Z), 1))
        model = minibatch_model(Y, X_mean, X_var, Z, q_mu=q_mu, q_sqrt=q_sqrt)
        L = np.linalg.cholesky(se_numpy(Z, Z) + 1e-6 * np.eye(len(Z)))
        return model, L @ q_mu, L @ q_sqrt @ np.transpose(q_sqrt, (0, 2, 1)) @ L.T
    model = build(TightBayesianGPLVM, Y, X_mean, X_var, Z, relaxation=kind)
    mean, q_sqrt = optimal_q_u(se_kernel(), Y, X_mean, X_var, Z, whiten=False)
    return model, mean, q_sqrt @ np.transpose(q_sqrt, (0, 2, 1))


def dense_predictions(X, Z, q_mean, q_covs):
    """Means [J, P], variances carried by q(u) [J, P] and residuals d(x) [J] at points X."""
    Kuu = se_numpy(Z, Z) + 1e-6 * np.eye(len(Z))
    Kux = se_numpy(Z, X)
    W = np.linalg.solve(Kuu, Kux)
    carried = np.einsum("mj,pmk,kj->jp", W, q_covs, W)
    return W.T @ q_mean, carried, 1.2 - np.sum(Kux * W, axis=0)


def dense_row_bounds(Y_new, mean, var, Z, q_mean, q_covs, tight, prior_mean=0.0, prior_var=1.0):
    """
    ℓ* of each row by 40 x 40 Gauss-Hermite quadrature over q(x*) (Q = 2): E[Σ_p log N(y_p;
    f_p, σ²)] with f_p ~ q(f_p | x*) = N(μ_p(x*), s_p(x*) + m d(x*)), the relaxation's term on
    ⟨d⟩ (tight: -½ log(1 + ⟨d⟩/σ²); else -⟨d⟩/2σ²) and the KL to the prior.
    """
    nodes, weights = np.polynomial.hermite.hermgauss(40)
    grid = np.stack(np.meshgrid(nodes, nodes, indexing="ij"), -1).reshape(-1, 2)
    w = np.outer(weights, weights).reshape(-1) / np.pi
    bounds = []
    for y, mu, s in zip(Y_new, mean, var):
        f_mean, carried, residual = dense_predictions(mu + np.sqrt(2 * s) * grid, Z, q_mean, q_covs)
        squares = w @ (np.sum((y - f_mean) ** 2 + carried, axis=1))
        d = w @ residual
        term = -0.5 * np.log1p(d / NOISE) if tight else -0.5 * d / NOISE
        ratio = s / prior_var
        kl = 0.5 * np.sum(ratio - 1 - np.log(ratio) + (mu - prior_mean) ** 2 / prior_var)
        P = len(y)
        bounds.append(-0.5 * P * np.log(2 * np.pi * NOISE) - 0.5 * squares / NOISE + P * term - kl)
    return np.array(bounds)


@pytest.mark.parametrize("kind", ["analytic", "none", "minibatch"])
def test_held_out_row_bound_against_dense_quadrature(rng, kind):
    """(a) ℓ* at given q(x*) (and a non-standard prior) against Gauss-Hermite quadrature."""
    Y, X_mean, X_var, Z = make_problem(rng)
    model, q_mean, q_covs = dense_q_u(kind, rng, Y, X_mean, X_var, Z)
    Y_new = rng.standard_normal((4, 5))
    mean, var = rng.standard_normal((4, 2)), rng.uniform(0.05, 0.5, (4, 2))
    got = model.predict_log_density_new(Y_new, mean, var, X_prior_mean=0.3, X_prior_var=2.0)
    expected = dense_row_bounds(
        Y_new, mean, var, Z, q_mean, q_covs, kind != "none", prior_mean=0.3, prior_var=2.0
    )
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-9)
    signature = [tf.TensorSpec([None, n], tf.float64) for n in (5, 2, 2)]
    prior = dict(X_prior_mean=0.3, X_prior_var=2.0)
    compiled = tf.function(
        lambda *args: model.predict_log_density_new(*args, **prior), input_signature=signature
    )  # traced with an unknown number of rows
    np.testing.assert_allclose(compiled(Y_new, mean, var).numpy(), got.numpy(), rtol=1e-12)


def optimal_q_u_kl(Y, X_mean, X_var, Z):
    """Σ_p KL[N(m_p, S) ‖ N(0, K_uu)] of Titsias's optimal q(u), in numpy."""
    mean, q_sqrt = optimal_q_u(se_kernel(), Y, X_mean, X_var, Z, whiten=False)
    Kuu = se_numpy(Z, Z) + 1e-6 * np.eye(len(Z))
    S = q_sqrt[0] @ q_sqrt[0].T
    trace, logdets = np.trace(np.linalg.solve(Kuu, S)), np.linalg.slogdet(Kuu)[1]
    logdets -= np.linalg.slogdet(S)[1]
    mahalanobis = np.sum(mean * np.linalg.solve(Kuu, mean))
    return 0.5 * (Y.shape[1] * (trace - len(Z) + logdets) + mahalanobis)


@pytest.mark.parametrize("relaxation", ["none", "analytic", "sampled"])
def test_training_rows_sum_to_the_collapsed_bound(rng, relaxation):
    """
    ℓ_n at the training rows' q(x_n), summed, minus KL[q(u) ‖ p(u)] of the optimal q(u) is the
    model's own bound: the held-out objective is the bound the model trains (for "sampled",
    with the same draws).
    """
    Y, X_mean, X_var, Z = make_problem(rng)
    kwargs = dict(num_samples=3) if relaxation == "sampled" else {}
    model = build(TightBayesianGPLVM, Y, X_mean, X_var, Z, relaxation=relaxation, **kwargs)
    tf.random.set_seed(2)
    bound = model.elbo().numpy()
    tf.random.set_seed(2)
    rows = model.predict_log_density_new(Y, X_mean, X_var).numpy()
    np.testing.assert_allclose(
        np.sum(rows) - optimal_q_u_kl(Y, X_mean, X_var, Z), bound, rtol=1e-10
    )


@pytest.mark.parametrize("whiten", [True, False])
def test_minibatch_rows_sum_to_its_bound(rng, whiten):
    Y, X_mean, X_var, Z = make_problem(rng)
    model = minibatch_model(Y, X_mean, X_var, Z, whiten=whiten, q_mu=rng.standard_normal((8, 5)))
    rows = model.predict_log_density_new(Y, X_mean, X_var).numpy()
    expected = model.elbo(model.training_data(Y)).numpy()
    np.testing.assert_allclose(np.sum(rows) - model.prior_kl().numpy(), expected, rtol=1e-10)


def test_held_out_gradient_at_training_rows_is_the_models_gradient(rng):
    """
    (b) Envelope theorem: q(u) is optimal for the collapsed bound, so the gradient of ℓ_n with
    q(u) held fixed, at the training q(x_n), is the model's gradient with respect to q(x_n).
    """
    Y, X_mean, X_var, Z = make_problem(rng)
    model = build(TightBayesianGPLVM, Y, X_mean, X_var, Z)
    mean_u, var_u = (
        model.X_data_mean.unconstrained_variable,
        model.X_data_var.unconstrained_variable,
    )
    with tf.GradientTape() as tape:
        bound = model.elbo()
    d_mean, d_var_u = tape.gradient(bound, [mean_u, var_u])
    d_var = d_var_u.numpy() / tf.sigmoid(var_u).numpy()  # var = softplus(u)
    mean, var = tf.Variable(X_mean), tf.Variable(X_var)  # copies: q(u) stays at the model's
    with tf.GradientTape() as tape:
        rows = tf.reduce_sum(model.predict_log_density_new(Y, mean, var))
    got_mean, got_var = tape.gradient(rows, [mean, var])
    np.testing.assert_allclose(got_mean.numpy(), d_mean.numpy(), rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(got_var.numpy(), d_var, rtol=1e-8, atol=1e-12)


def held_out_gradients(model, Y_new, mean, var):
    """The gradient of Σ ℓ* with respect to μ* and log s* (the optimiser's coordinates)."""
    mean, log_var = tf.Variable(np.asarray(mean)), tf.Variable(np.log(np.asarray(var)))
    with tf.GradientTape() as tape:
        bound = tf.reduce_sum(model.predict_log_density_new(Y_new, mean, tf.exp(log_var)))
    return np.concatenate([g.numpy().ravel() for g in tape.gradient(bound, [mean, log_var])])


@pytest.mark.parametrize("kind", ["analytic", "minibatch"])
def test_infer_latent_is_a_stationary_point_and_changes_no_parameter(rng, kind):
    """
    (b) From its default start and from the prior, infer_latent ends where ℓ* is higher and its
    gradient is 1e-3 of the gradient at the prior or less (measured: 1e-4; L-BFGS-B stops on a
    relative reduction of 2e-9), and no variable of the model changes.
    """
    Y, X_mean, X_var, Z = make_problem(rng)
    model, _, _ = dense_q_u(kind, rng, Y, X_mean, X_var, Z)
    Y_new = Y[:4] + 0.3 * rng.standard_normal((4, 5))
    before = [v.numpy().copy() for v in model.variables]
    prior = np.zeros((4, 2)), np.ones((4, 2))
    for start in (None, prior):
        mean, var = (
            model.infer_latent(Y_new) if start is None else model.infer_latent(Y_new, *start)
        )
        assert mean.shape == var.shape == (4, 2) and np.all(var.numpy() > 0)
        for got, expected in zip(model.variables, before):
            np.testing.assert_array_equal(got.numpy(), expected)
        at_optimum = model.predict_log_density_new(Y_new, mean, var).numpy()
        assert np.all(at_optimum >= model.predict_log_density_new(Y_new, *prior).numpy())
        gradient = np.abs(held_out_gradients(model, Y_new, mean, var)).max()
        assert gradient <= 1e-3 * np.abs(held_out_gradients(model, Y_new, *prior)).max()
    # predict_log_density_new without q(x*) infers it
    np.testing.assert_allclose(model.predict_log_density_new(Y_new).numpy(), at_optimum, rtol=1e-6)


def test_infer_latent_recovers_the_training_rows_of_a_converged_model(rng):
    """
    (b) With the model trained to convergence, q(x_n) of a training row maximises ℓ_n: started
    0.2 away, infer_latent returns it. Training stops with |∂F/∂μ_n| ≲ 1e-3, so q(x_n) is a
    stationary point to about that accuracy (measured: means within 6e-6, variances within
    1.5e-4 relative).
    """
    X = rng.standard_normal((40, 2))
    Y = np.sin(X @ rng.standard_normal((2, 5))) + 0.1 * rng.standard_normal((40, 5))
    model = build(
        TightBayesianGPLVM, Y, X + 0.1 * rng.standard_normal(X.shape), np.full(X.shape, 0.1), X[:8]
    )
    options = dict(maxiter=5000, ftol=1e-15, gtol=1e-9)
    gpflow.optimizers.Scipy().minimize(
        model.training_loss, model.trainable_variables, options=options
    )
    with tf.GradientTape() as tape:
        bound = model.elbo()
    gradient = tape.gradient(bound, model.X_data_mean.unconstrained_variable).numpy()
    assert np.abs(gradient).max() < 1e-4
    mean_n, var_n = model.X_data_mean.numpy()[:5], model.X_data_var.numpy()[:5]
    mean, var = model.infer_latent(Y[:5], mean_n + 0.2, 2 * var_n, tol=1e-12)
    np.testing.assert_allclose(mean.numpy(), mean_n, atol=1e-4)
    np.testing.assert_allclose(var.numpy(), var_n, rtol=2e-3)


@pytest.mark.parametrize("kind", ["analytic", "minibatch"])
def test_held_out_log_density_is_a_lower_bound(rng, kind):
    """
    (c) ℓ* ≤ log ∫ p(x*) Π_p N(y_p; μ_p(x*), v_p(x*) + σ²) dx*, the held-out density of the
    model's predictions with x* integrated out, by a dense 2-D grid (step 0.02 on [-7, 7]²,
    trapezoid: exact to round-off for this smooth, Gaussian-tailed integrand); and the bound
    with m_n = 1 is lower still.
    """
    Y, X_mean, X_var, Z = make_problem(rng)
    model, q_mean, q_covs = dense_q_u(kind, rng, Y, X_mean, X_var, Z)
    Y_new = Y[:3] + 0.3 * rng.standard_normal((3, 5))
    mean, var = model.infer_latent(Y_new)
    bound = model.predict_log_density_new(Y_new, mean, var).numpy()
    axis = np.linspace(-7, 7, 701)
    grid = np.stack(np.meshgrid(axis, axis, indexing="ij"), -1).reshape(-1, 2)
    f_mean, carried, residual = dense_predictions(grid, Z, q_mean, q_covs)
    scale = np.sqrt(carried + residual[:, None] + NOISE)
    log_prior = np.sum(norm.logpdf(grid), axis=1) + 2 * np.log(axis[1] - axis[0])
    for y, value in zip(Y_new, bound):
        exact = np.logaddexp.reduce(log_prior + np.sum(norm.logpdf(y, f_mean, scale), axis=1))
        assert value <= exact + 1e-10 * abs(exact)
    if kind == "analytic":
        loose = build(TightBayesianGPLVM, Y, X_mean, X_var, Z, relaxation="none")
        assert np.all(loose.predict_log_density_new(Y_new, mean, var).numpy() < bound)


def test_held_out_rows_bad_input(rng):
    Y, X_mean, X_var, Z = make_problem(rng)
    model = build(TightBayesianGPLVM, Y, X_mean, X_var, Z)
    mean, var = np.zeros((2, 2)), np.ones((2, 2))
    cases = [
        (lambda: model.infer_latent(Y[:2, :3]), ValueError, r"\[N\*, 5\]"),
        (lambda: model.infer_latent(Y[0]), ValueError, r"y\[None, :\]"),
        (lambda: model.infer_latent(Y[:0]), ValueError, "non-empty"),
        (lambda: model.infer_latent(np.full((2, 5), np.nan)), ValueError, "`Y_new` must be finite"),
        (lambda: model.infer_latent(np.full((2, 5), "a")), TypeError, "`Y_new` must hold numbers"),
        (lambda: model.infer_latent(Y[:2], mean), ValueError, "`initial_mean` and `initial_var`"),
        (lambda: model.infer_latent(Y[:2], mean, -var), ValueError, "`initial_var`"),
        (lambda: model.infer_latent(Y[:2], X_prior_var=0.0), ValueError, "`X_prior_var`"),
        (lambda: model.predict_log_density_new(Y[:2], mean), ValueError, "`X_new_var`"),
        (
            lambda: model.predict_log_density_new(Y[:2], np.zeros((3, 2)), var),
            ValueError,
            "X_new_mean",
        ),
        (lambda: model.predict_log_density_new(Y[:2], mean, 0 * var), ValueError, "`X_new_var`"),
    ]
    for call, error, message in cases:
        with pytest.raises(error, match=message):
            call()
    model.mean_function = gpflow.functions.Constant()  # BayesianGPLVM's bound ignores it
    with pytest.raises(ValueError, match="mean_function"):
        model.infer_latent(Y[:2])


# ------------------------------------------------------------------ faults


def faulty(kind, rng):
    """A model (and its data) with a singular K_uu at jitter 0 (set by the caller)."""
    Y, X_mean, X_var, Z = make_problem(rng)
    if kind == "collapsed":
        model, data = build(TightBayesianGPLVM, Y, X_mean, X_var, Z), None
    else:
        model = minibatch_model(Y, X_mean, X_var, Z)
        data = model.training_data(Y)
    model.kernel.lengthscales.assign([1e8, 1e8])
    return model, data, Y


@pytest.mark.parametrize("kind", ["collapsed", "minibatch"])
def test_a_failed_factorisation_raises_in_predictions_and_gives_no_finite_loss(rng, kind):
    """Every predict path raises CholeskyError with advice (GPflow's would return NaN on CPU);
    the training loss, eager or compiled, is not finite (+inf; GPflow's is NaN)."""
    with gpflow.config.as_context(gpflow.config.Config(jitter=0.0)):
        model, data, Y = faulty(kind, rng)
        X_new, Y_new = rng.standard_normal((3, 2)), Y[:3]
        calls = [
            lambda: model.predict_f(X_new),
            lambda: model.predict_f(X_new, full_cov=True),
            lambda: model.predict_y(X_new),
            lambda: model.predict_log_density((X_new, Y_new)),
            lambda: model.infer_latent(Y_new),
            lambda: model.predict_log_density_new(Y_new, X_new, np.ones((3, 2))),
            model.elbo if data is None else lambda: model.elbo(data),
        ]
        for call in calls:
            with pytest.raises(gpflow_tight.CholeskyError, match="jitter"):
                call()
        args = () if data is None else (data,)
        assert not np.isfinite(model.training_loss(*args).numpy())
        assert not np.isfinite(model.training_loss_closure(*args, compile=True)().numpy())


def test_empty_data_is_refused(rng):
    Y, X_mean, X_var, Z = make_problem(rng)
    with pytest.raises(ValueError, match="`data` is empty"):
        TightBayesianGPLVM(Y[:0], X_mean[:0], X_var[:0], se_kernel(), inducing_variable=Z)
    for num_data, num_outputs, name in ((0, 5, "num_data"), (40, 0, "num_outputs")):
        with pytest.raises(ValueError, match=f"`{name}` must be at least 1"):
            MinibatchBayesianGPLVM(num_data, num_outputs, X_mean, X_var, se_kernel(), Z)


@pytest.mark.parametrize(
    "q, match",
    [
        (dict(q_mu=np.zeros((8, 1))), r"`q_mu` must have shape \[M, P\] = \[8, 5\], got \[8, 1\]"),
        (dict(q_mu=np.zeros((10, 5))), r"`q_mu` must have shape \[M, P\] = \[8, 5\]"),
        (
            dict(q_mu=np.zeros((8, 5)), q_sqrt=np.eye(8)[None]),
            r"`q_sqrt` must have shape \[P, M, M\] = \[5, 8, 8\], got \[1, 8, 8\]",
        ),
    ],
)
def test_minibatch_q_of_the_wrong_shape_is_refused(rng, q, match):
    """A q(u) for one output was taken for five (a wrong bound, predictions of one column)."""
    Y, X_mean, X_var, Z = make_problem(rng)
    with pytest.raises(ValueError, match=match):
        MinibatchBayesianGPLVM(40, 5, X_mean, X_var, se_kernel(), Z, **q)


def test_minibatch_loss_checks_its_batches(rng):
    """NaN in a minibatch, rows out of range, float rows and the wrong width are refused,
    eagerly (ValueError/TypeError) and in a compiled loss (graph assertions)."""
    Y, X_mean, X_var, Z = make_problem(rng)
    model = minibatch_model(Y, X_mean, X_var, Z)
    rows, values = model.training_data(Y)
    with_nan = values.copy()
    with_nan[3, 1] = np.nan
    out_of_range = rows.copy()
    out_of_range[5] = 40
    eager = [
        (
            (rows, with_nan),
            ValueError,
            r"`data` Y contains 1 NaN or infinite value\(s\) \(rows \[3\]",
        ),
        ((out_of_range, values), ValueError, r"in \[0, num_data = 40\)"),
        ((rows.astype(float), values), TypeError, "integer row indices"),
        ((rows, values[:, :3]), ValueError, r"\[B, 5\]"),
    ]
    for data, error, message in eager:
        with pytest.raises(error, match=message):
            model.training_loss(data)
    with pytest.raises(TypeError, match="tuple"):  # training_loss: GPflow's shape check first
        model.elbo(values)
    for data, message in (
        ((rows, with_nan), "`data` Y contains NaN"),
        ((out_of_range, values), "num_data = 40"),
    ):
        with pytest.raises(tf.errors.InvalidArgumentError, match=message):
            model.training_loss_closure(data, compile=True)()
    good = model.training_loss_closure((rows, values), compile=True)()
    np.testing.assert_allclose(
        good.numpy(), model.training_loss((rows, values)).numpy(), rtol=1e-12
    )


# ------------------------------------------------------------------ float32


def test_positive_definite_b_is_a_projection_that_keeps_ordinary_round_off():
    """
    _positive_definite_b against a dense eigenvalue clip: eigenvalues below ½ raised to ½, the
    result no further from the exact B than the input (projection onto a convex set holding
    it), a B that needs nothing unchanged to the bit, the correction constant under
    differentiation, NaN passed through, float64 untouched.
    """
    from gpflow_tight.models.gplvm import _positive_definite_b

    rng = np.random.default_rng(0)
    G = rng.standard_normal((6, 3))
    exact = np.eye(6) + G @ G.T  # eigenvalues ≥ 1, three equal to 1
    Q = np.linalg.qr(rng.standard_normal((6, 6)))[0]
    error = Q @ np.diag([-2.0, -0.8, 0.3, 0.1, -0.2, 0.05]) @ Q.T
    rounded = (exact + error).astype(np.float32)
    got = _positive_definite_b(tf.constant(rounded)).numpy().astype(np.float64)
    values, vectors = np.linalg.eigh(rounded.astype(np.float64))
    expected = vectors @ np.diag(np.maximum(values, 0.5)) @ vectors.T
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert np.linalg.eigvalsh(got).min() > 0.5 - 1e-5
    assert np.linalg.norm(got - exact) <= np.linalg.norm(rounded - exact)
    fine = (exact + 0.1 * error).astype(np.float32)  # eigenvalues above ½: no correction
    np.testing.assert_array_equal(_positive_definite_b(tf.constant(fine)).numpy(), fine)
    weights = tf.constant(rng.standard_normal((6, 6)), tf.float32)
    B = tf.Variable(rounded)
    with tf.GradientTape() as tape:
        value = tf.reduce_sum(weights * _positive_definite_b(B))
    np.testing.assert_array_equal(tape.gradient(value, B).numpy(), weights.numpy())
    assert np.all(np.isnan(_positive_definite_b(tf.fill([3, 3], np.float32(np.nan))).numpy()))
    double = tf.constant(exact + error)
    assert _positive_definite_b(double) is double


def float32_model(dtype, jitter, Y, X_mean, X_var, Z, model_class=TightBayesianGPLVM):
    with gpflow.config.as_context(gpflow.config.Config(float=dtype, jitter=jitter)):
        kernel = gpflow.kernels.SquaredExponential(lengthscales=np.array([2.0, 2.0], dtype))
        cast = [np.asarray(a, dtype) for a in (Y, X_mean, X_var, Z)]
        model = model_class(*cast[:3], kernel, inducing_variable=cast[3])
        model.likelihood.variance.assign(0.1)
    return model


def test_float32_predictions_are_finite_and_warn_below_the_documented_jitter(rng):
    """
    At jitter 1e-6, K_uu of float32_problem is so ill-conditioned that float32's B is indefinite:
    GPflow's BayesianGPLVM predicts NaN there; ours predicts finite values and warns at
    construction. At jitter 1e-3, float32 predictions match float64 within 5e-3 (absolute for
    the means, of order 1; relative for the variances), 5x the largest error measured on these
    problems (8.9e-4 and 1.2e-3).
    """
    for _ in range(3):
        problem = float32_problem(rng)
        with pytest.warns(RuntimeWarning, match="jitter to at least 0.001"):
            model = float32_model(np.float32, 1e-6, *problem)
        X_new = problem[1][:20].astype(np.float32)
        with gpflow.config.as_context(gpflow.config.Config(float=np.float32, jitter=1e-6)):
            mean, var = model.predict_f(X_new)
            assert np.all(np.isfinite(mean.numpy())) and np.all(var.numpy() > 0)
            assert np.isfinite(model.elbo().numpy())
            gpflow_model = float32_model(np.float32, 1e-6, *problem, gpflow.models.BayesianGPLVM)
            assert np.all(np.isnan(gpflow_model.predict_f(X_new)[0].numpy()))
        predictions = {}
        for dtype in (np.float64, np.float32):
            model = float32_model(dtype, 1e-3, *problem)
            with gpflow.config.as_context(gpflow.config.Config(float=dtype, jitter=1e-3)):
                predictions[dtype] = [p.numpy() for p in model.predict_f(X_new.astype(dtype))]
        (mean32, var32), (mean64, var64) = predictions[np.float32], predictions[np.float64]
        np.testing.assert_allclose(mean32, mean64, atol=5e-3)
        np.testing.assert_allclose(var32, var64, rtol=5e-3)


def test_float32_adam_training_agrees_with_float64(rng):
    """
    At jitter 1e-3, 1000 Adam steps in float32 and in float64 from the same (float32-rounded)
    start reach the same optimum: the bound at the float32 parameters, evaluated in float64, is
    within 0.03 nats of the float64 one, and the predictions within 0.02 (means, of order 1)
    and 5 % (variances): 10x the largest differences measured over three such problems (0.0026
    nats, 1.9e-3, 0.5 %), and below the float32 bound's own round-off at given parameters
    (0.05-0.16 nats, test_float32_bounds_are_as_accurate_as_their_psi_statistics).
    """
    num_data, num_outputs = 40, 5
    T = np.sort(rng.uniform(-2, 2, (num_data, 1)), axis=0)
    frequencies, phases = rng.uniform(0.5, 1.5, num_outputs), rng.uniform(0, 3, num_outputs)
    Y = np.sin(T * frequencies + phases) + 0.1 * rng.standard_normal((num_data, num_outputs))
    X_mean = gpflow.utilities.ops.pca_reduce(tf.constant(Y), 1).numpy()
    Z = X_mean[np.linspace(0, num_data - 1, 8).astype(int)]
    Y, X_mean, Z = (a.astype(np.float32) for a in (Y, X_mean, Z))

    def model_in(dtype):
        kernel = gpflow.kernels.SquaredExponential(lengthscales=np.ones(1, dtype))
        X_var = np.full((num_data, 1), 0.1, dtype)
        cast = [a.astype(dtype) for a in (Y, X_mean, Z)]
        model = TightBayesianGPLVM(*cast[:2], X_var, kernel, inducing_variable=cast[2])
        model.likelihood.variance.assign(0.1)
        return model

    def trained_in(dtype):
        with gpflow.config.as_context(gpflow.config.Config(float=dtype, jitter=1e-3)):
            model = model_in(dtype)
            optimizer = gpflow.keras.tf_keras.optimizers.Adam(0.02)
            step = tf.function(
                lambda: optimizer.minimize(model.training_loss, model.trainable_variables)
            )
            for _ in range(1000):
                step()
            return gpflow.utilities.read_values(model)

    results = {}
    with gpflow.config.as_context(gpflow.config.Config(jitter=1e-3)):
        model = model_in(np.float64)
        for dtype in (np.float64, np.float32):
            values = {k: v.astype(np.float64) for k, v in trained_in(dtype).items()}
            gpflow.utilities.multiple_assign(model, values)
            X_new = np.linspace(-2, 2, 20)[:, None]
            results[dtype] = [model.elbo().numpy()] + [p.numpy() for p in model.predict_f(X_new)]
    (bound32, mean32, var32), (bound64, mean64, var64) = results[np.float32], results[np.float64]
    assert abs(bound32 - bound64) < 0.03
    np.testing.assert_allclose(mean32, mean64, atol=0.02)
    np.testing.assert_allclose(var32, var64, rtol=0.05)


@pytest.mark.parametrize("whiten", [True, False])
def test_minibatch_predictions_are_gpflows_conditional(rng, whiten):
    """predict_f from the package's projection against gpflow.conditionals.conditional, in every
    combination of full_cov and full_output_cov (GPflow's shapes for independent outputs)."""
    Y, X_mean, X_var, Z = make_problem(rng)
    q_sqrt = np.tril(0.3 * rng.standard_normal((5, 8, 8)), -1) + 0.5 * np.eye(8)
    model = minibatch_model(
        Y, X_mean, X_var, Z, whiten=whiten, q_mu=rng.standard_normal((8, 5)), q_sqrt=q_sqrt
    )
    X_new = rng.standard_normal((6, 2))
    for full_cov in (False, True):
        for full_output_cov in (False, True):
            expected = gpflow.conditionals.conditional(
                X_new, model.inducing_variable, model.kernel, model.q_mu, q_sqrt=model.q_sqrt,
                full_cov=full_cov, white=whiten, full_output_cov=full_output_cov,
            )  # fmt: skip
            got = model.predict_f(X_new, full_cov=full_cov, full_output_cov=full_output_cov)
            for a, b in zip(got, expected):
                assert a.shape == b.shape
                scale = np.abs(b.numpy()).max()
                np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-12 * scale)
