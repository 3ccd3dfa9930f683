"""
PowerEPSGP with Power-EP site updates (Bui, Yan & Turner 2017, §3.4 and App. F): the energy
against its per-point definition, the Gaussian case against the closed form, probit
classification against textbook EP and the SVGP ELBO, and the tilted moments against scipy.
Equation, section and Remark numbers are the paper's.

Property ids used in this file's comments and docstrings (the others are in test_power_ep.py):
10 Gaussian likelihood: one undamped full sweep gives the closed-form sites (y_n, α d_n + σ²)
   (§3.6, Remark 4); fractional sweeps (eqs. 108-109) converge as τ^(k) = τ* (1 - (1 - α)^k)
   (docs/power_ep.md, "Erratum (Remark 4)").
11 the energy (eq. 110) at the regression fixed point equals the closed form, eq. 128.
15 at arbitrary sites the energy equals eq. 110 evaluated point by point with explicit cavities
   (vectorised form derived in docs/power_ep.md, "Energy").
16 at fixed sites, F_α - ELBO(q) = O(α) as α → 0 (App. G.2).
17 at a converged fixed point the energy is stationary in the sites.
18 probit tilted moments (§3.8, App. G.2): the α = 1 closed form equals quadrature and autodiff,
   and quadrature moments equal scipy integration.
19 α = 1 with Z = X is textbook EP for GP classification (App. I.5; Rasmussen & Williams 2006,
   Algorithm 3.5).
20 log-concave likelihood: every new site variance v_new ≥ d_n, so the sites stay valid.
21 a fixed point is a fixed point: one more sweep leaves the sites unchanged.
"""

import warnings

import gpflow
import numpy as np
import pytest
import tensorflow as tf
from scipy.stats import norm

from gpflow_tight import ExactProbit, PowerEPSGP, exact_probit
from gpflow_tight.tilted import tilted_moments
from gpflow_tight.training import fit_power_ep, run_power_ep
from gpflow_tight.validation import DtypeCastWarning
from tests.reference import nystrom_parts, se_kernel
from tests.reference_power_ep import (
    energy_by_definition,
    gaussian_log_normaliser,
    quadrature_log_normaliser,
    site_posterior,
    textbook_ep_classification,
)

VARIANCE, LENGTHSCALE, NOISE = 1.3, 0.9, 0.05


def kernel():
    return gpflow.kernels.SquaredExponential(variance=VARIANCE, lengthscales=LENGTHSCALE)


def regression_problem(rng, num_data=30, num_inducing=6):
    X = rng.uniform(-3, 3, (num_data, 1))
    Y = np.sin(2 * X) + 0.2 * rng.standard_normal((num_data, 1))
    Z = np.linspace(-3, 3, num_inducing)[:, None]
    return X, Y, Z


def classification_problem(rng, num_data=30, num_inducing=6):
    X = rng.uniform(-3, 3, (num_data, 1))
    labels = (np.sin(2 * X) + 0.5 * rng.standard_normal((num_data, 1)) > 0).astype(float)
    Z = np.linspace(-3, 3, num_inducing)[:, None]
    return X, labels, Z


def dense_matrices(X, Z):
    Kuu = se_kernel(Z, Z, VARIANCE, LENGTHSCALE) + 1e-6 * np.eye(len(Z))
    Kuf = se_kernel(Z, X, VARIANCE, LENGTHSCALE)
    return Kuu, Kuf, np.full(len(X), VARIANCE)


def set_random_sites(model, rng, scale=2.0):
    model.site_precision.assign(rng.uniform(0.0, scale, model.num_data))
    model.site_shift.assign(rng.normal(0.0, scale, model.num_data))


def probit_log_lik(y, jitter):
    sign = 2 * y - 1
    return lambda f: np.log(jitter + (1 - 2 * jitter) * norm.cdf(sign * f))


# --- the Gaussian likelihood: site updates reach the closed form (properties 10-11) ----------


@pytest.mark.parametrize("alpha", [1.0, 0.5, 0.2])
def test_one_full_sweep_reaches_the_closed_form(rng, alpha):
    X, Y, Z = regression_problem(rng)
    sites = PowerEPSGP((X, Y), kernel(), Z, alpha=alpha, noise_variance=NOISE, inference="sites")
    closed = PowerEPSGP((X, Y), kernel(), Z, alpha=alpha, noise_variance=NOISE)
    sites.sweep(damping=1.0, update="full")
    _, _, Dff = nystrom_parts(X, Z, VARIANCE, LENGTHSCALE)
    variance = alpha * np.diag(Dff) + NOISE  # (g_n, v_n) = (y_n, α d_n + σ²)
    np.testing.assert_allclose(sites.site_precision.numpy(), 1 / variance, rtol=1e-10)
    np.testing.assert_allclose(sites.site_shift.numpy(), Y[:, 0] / variance, rtol=1e-10)
    np.testing.assert_allclose(
        sites.log_marginal_likelihood().numpy(),
        closed.log_marginal_likelihood().numpy(),
        rtol=1e-10,
    )
    Xnew = rng.uniform(-4, 4, (6, 1))
    for ours, theirs in zip(sites.predict_f(Xnew, True), closed.predict_f(Xnew, True)):
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-9, atol=1e-12)


def test_fractional_updates_converge_geometrically(rng):
    """Fractional updates (eqs. 108-109): after k sweeps from τ = 0, τ^(k) = τ* (1 - (1 - α)^k)."""
    X, Y, Z = regression_problem(rng)
    alpha = 0.3
    model = PowerEPSGP((X, Y), kernel(), Z, alpha=alpha, noise_variance=NOISE, inference="sites")
    _, _, Dff = nystrom_parts(X, Z, VARIANCE, LENGTHSCALE)
    target = 1 / (alpha * np.diag(Dff) + NOISE)
    for k in range(1, 6):
        model.sweep(damping=1.0, update="fractional")
        np.testing.assert_allclose(
            model.site_precision.numpy(), target * (1 - (1 - alpha) ** k), rtol=1e-10
        )


# --- the energy (property 15) ----------------------------------------------------------------


@pytest.mark.parametrize(
    "likelihood, alpha",
    [
        ("gaussian", 0.5),
        ("gaussian", 1.0),
        ("probit", 1.0),
        ("probit", 0.4),
        ("exact_probit", 1.0),
        ("exact_probit", 0.7),
    ],
)
def test_energy_equals_its_definition_at_arbitrary_sites(rng, likelihood, alpha):
    if likelihood == "gaussian":
        X, Y, Z = regression_problem(rng, num_data=15)
        lik = gpflow.likelihoods.Gaussian(NOISE)

        def log_normaliser(n, mean, var):
            return gaussian_log_normaliser(Y[n, 0], mean, var, alpha, NOISE)

    else:
        X, Y, Z = classification_problem(rng, num_data=15)
        jitter = 1e-3 if likelihood == "probit" else 0.0
        invlink = gpflow.likelihoods.utils.inv_probit if jitter else exact_probit
        lik = gpflow.likelihoods.Bernoulli(invlink=invlink)

        def log_normaliser(n, mean, var):
            return quadrature_log_normaliser(probit_log_lik(Y[n, 0], jitter), mean, var, alpha)

    model = PowerEPSGP(
        (X, Y),
        kernel(),
        Z,
        alpha=alpha,
        likelihood=lik,
        inference="sites",
        num_gauss_hermite_points=200,
    )
    set_random_sites(model, rng)
    Kuu, Kuf, kdiag = dense_matrices(X, Z)
    reference = energy_by_definition(
        Kuu,
        Kuf,
        kdiag,
        model.site_precision.numpy(),
        model.site_shift.numpy(),
        alpha,
        log_normaliser,
    )
    np.testing.assert_allclose(model.log_marginal_likelihood().numpy(), reference, rtol=1e-9)


def test_minibatch_energy_is_unbiased(rng):
    X, Y, Z = classification_problem(rng, num_data=24)
    model = PowerEPSGP((X, Y), kernel(), Z, alpha=0.5, likelihood=gpflow.likelihoods.Bernoulli())
    set_random_sites(model, rng)
    partition = rng.permutation(24).reshape(4, 6)
    estimates = [model.log_marginal_likelihood(tf.constant(batch)).numpy() for batch in partition]
    np.testing.assert_allclose(
        np.mean(estimates), model.log_marginal_likelihood().numpy(), rtol=1e-12
    )


def test_sites_posterior_equals_dense_natural_parameters(rng):
    X, Y, Z = classification_problem(rng)
    model = PowerEPSGP((X, Y), kernel(), Z, alpha=0.5, likelihood=gpflow.likelihoods.Bernoulli())
    set_random_sites(model, rng)
    Kuu, Kuf, _ = dense_matrices(X, Z)
    m_u, S_u = site_posterior(Kuu, Kuf, model.site_precision.numpy(), model.site_shift.numpy())
    q_mean, q_cov = model.compute_qu()
    np.testing.assert_allclose(q_mean.numpy()[:, 0], m_u, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(q_cov.numpy(), S_u, rtol=1e-8, atol=1e-10)


# --- tilted moments (property 18) ------------------------------------------------------------


def test_probit_closed_form_equals_quadrature_and_autodiff(rng):
    num = 12
    X = np.zeros((num, 1))
    Y = rng.integers(0, 2, (num, 1)).astype(float)
    mean = tf.constant(rng.normal(0, 2, num))
    var = tf.constant(rng.uniform(0.05, 4, num))
    alpha = tf.ones(num, dtype=tf.float64)
    for invlink in (gpflow.likelihoods.utils.inv_probit, exact_probit):
        lik = gpflow.likelihoods.Bernoulli(invlink=invlink)
        with tf.GradientTape(persistent=True) as outer:
            outer.watch(mean)
            with tf.GradientTape() as inner:
                inner.watch(mean)
                closed = tilted_moments(lik, X, Y, mean, var, alpha, alpha_is_one=True)
            d1 = inner.gradient(closed.log_normaliser, mean)
        d2 = outer.gradient(d1, mean)
        quadrature = tilted_moments(lik, X, Y, mean, var, alpha, num_gauss_hermite_points=60)
        for ours, theirs in zip(closed, quadrature):
            np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(closed.d1.numpy(), d1.numpy(), rtol=1e-10)
        np.testing.assert_allclose(closed.d2.numpy(), d2.numpy(), rtol=1e-10)


@pytest.mark.parametrize("alpha", [0.1, 0.5, 0.9])
@pytest.mark.parametrize("jitter, rtol", [(0.0, 1e-10), (1e-3, 1e-8)])
def test_quadrature_moments_equal_scipy_integration(rng, alpha, jitter, rtol):
    """
    log Z̃ by scipy.integrate.quad; d1, d2 by central finite differences of it. Gauss-Hermite
    converges fast for the exact probit; GPflow's jittered probit raised to a small power bends
    sharply where Φ(f) ≈ ε, and 200 nodes still leave errors up to 4e-9 (measured).
    """
    num = 6
    X = np.zeros((num, 1))
    Y = rng.integers(0, 2, (num, 1)).astype(float)
    mean, var = rng.normal(0, 1.5, num), rng.uniform(0.1, 3, num)
    invlink = gpflow.likelihoods.utils.inv_probit if jitter else exact_probit
    ours = tilted_moments(
        gpflow.likelihoods.Bernoulli(invlink=invlink),
        X,
        Y,
        tf.constant(mean),
        tf.constant(var),
        tf.fill([num], tf.constant(alpha, tf.float64)),
        num_gauss_hermite_points=200,
    )
    h = 1e-3
    for n in range(num):
        log_lik = probit_log_lik(Y[n, 0], jitter)
        values = [
            quadrature_log_normaliser(log_lik, mean[n] + k * h, var[n], alpha) for k in (-1, 0, 1)
        ]
        np.testing.assert_allclose(ours.log_normaliser.numpy()[n], values[1], rtol=rtol)
        np.testing.assert_allclose(ours.d1.numpy()[n], (values[2] - values[0]) / (2 * h), rtol=1e-6)
        np.testing.assert_allclose(
            ours.d2.numpy()[n], (values[2] - 2 * values[1] + values[0]) / h**2, rtol=1e-4
        )


# --- classification fixed points (properties 17, 19-21) --------------------------------------


def test_inducing_points_at_data_alpha_one_is_textbook_ep(rng):
    X, Y, _ = classification_problem(rng, num_data=16)
    X = np.linspace(-3, 3, 16)[:, None]  # evenly spread: K is well conditioned
    with gpflow.config.as_context(gpflow.config.Config(jitter=1e-9)):
        model = PowerEPSGP(
            (X, Y), kernel(), X.copy(), alpha=1.0, likelihood=gpflow.likelihoods.Bernoulli()
        )
        trace = run_power_ep(model, max_sweeps=500, tolerance=1e-11, damping=0.7)
        assert trace.converged(1e-11)
        mean, _ = model.predict_f(X)
    K = se_kernel(X, X, VARIANCE, LENGTHSCALE)
    tau, nu, posterior_mean = textbook_ep_classification(K, 2 * Y[:, 0] - 1, jitter=1e-3)
    np.testing.assert_allclose(model.site_precision.numpy(), tau, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(model.site_shift.numpy(), nu, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(mean.numpy()[:, 0], posterior_mean, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_energy_is_stationary_in_the_sites_at_the_fixed_point(rng, alpha):
    X, Y, Z = classification_problem(rng)
    model = PowerEPSGP((X, Y), kernel(), Z, alpha=alpha, likelihood=gpflow.likelihoods.Bernoulli())

    def site_gradient_norm():
        with tf.GradientTape() as tape:
            tape.watch([model.site_precision, model.site_shift])  # not trainable
            energy = model.log_marginal_likelihood()
        gradients = tape.gradient(energy, [model.site_precision, model.site_shift])
        return max(np.max(np.abs(g.numpy())) for g in gradients)

    set_random_sites(model, rng, scale=0.5)
    away = site_gradient_norm()
    trace = run_power_ep(model, max_sweeps=300, tolerance=1e-12)
    assert trace.converged(1e-10)
    assert site_gradient_norm() < 1e-7 * max(1.0, away)
    assert away > 1e-2


def test_exact_probit_sites_stay_valid(rng):
    """Property 20: log-concave likelihood ⇒ v_new ≥ d_n, i.e. α τ_n d_n ≤ 1 at the fixed point."""
    X, Y, Z = classification_problem(rng, num_data=40)
    alpha = 0.6
    model = PowerEPSGP(
        (X, Y), kernel(), Z, alpha=alpha, likelihood=gpflow.likelihoods.Bernoulli(exact_probit)
    )
    trace = run_power_ep(model, tolerance=1e-10, max_sweeps=400)
    assert trace.converged(1e-10) and max(trace.num_skipped) == 0
    _, _, Dff = nystrom_parts(X, Z, VARIANCE, LENGTHSCALE)
    assert np.all(alpha * model.site_precision.numpy() * np.diag(Dff) <= 1 + 1e-9)
    before = model.site_precision.numpy().copy()
    result = model.sweep(damping=1.0)
    assert result["max_change"].numpy() < 1e-8  # property 21: the fixed point is a fixed point
    np.testing.assert_allclose(model.site_precision.numpy(), before, rtol=1e-8)


def svgp_elbo_at(model, X, Y, Z):
    """Titsias/Hensman ELBO (gpflow.models.SVGP, unwhitened) at the q(u) of the model's sites."""
    q_mean, q_cov = model.compute_qu()
    svgp = gpflow.models.SVGP(
        kernel(),
        gpflow.likelihoods.Bernoulli(),
        Z,
        whiten=False,
        q_mu=q_mean.numpy(),
        q_sqrt=np.linalg.cholesky(q_cov.numpy())[None],
    )
    return svgp.elbo((X, Y)).numpy()


def test_energy_tends_to_the_svgp_elbo_as_alpha_vanishes(rng):
    """Property 16: at fixed sites, F_α - ELBO(q) = O(α)."""
    X, Y, Z = classification_problem(rng)
    precision, shift = rng.uniform(0, 2, len(X)), rng.normal(0, 2, len(X))
    gaps = []
    for alpha in (1e-2, 1e-3, 1e-4):
        model = PowerEPSGP(
            (X, Y), kernel(), Z, alpha=alpha, likelihood=gpflow.likelihoods.Bernoulli()
        )
        model.site_precision.assign(precision)
        model.site_shift.assign(shift)
        gaps.append(model.log_marginal_likelihood().numpy() - svgp_elbo_at(model, X, Y, Z))
    np.testing.assert_allclose(np.array(gaps[:-1]) / np.array(gaps[1:]), 10, rtol=0.05)


def test_small_alpha_fixed_point_approaches_the_svgp_optimum(rng):
    """As α → 0 the Power-EP fixed point tends to the optimum of the SVGP ELBO over q(u)."""
    X, Y, Z = classification_problem(rng)
    svgp = gpflow.models.SVGP(kernel(), gpflow.likelihoods.Bernoulli(), Z, whiten=False)
    gpflow.set_trainable(svgp.kernel, False)
    gpflow.set_trainable(svgp.inducing_variable, False)
    gpflow.optimizers.Scipy().minimize(
        svgp.training_loss_closure((X, Y)),
        svgp.trainable_variables,
        options=dict(maxiter=2000, gtol=1e-12, ftol=1e-15),
    )
    optimum = svgp.elbo((X, Y)).numpy()
    gaps = []
    for alpha in (0.1, 0.01):
        model = PowerEPSGP(
            (X, Y), kernel(), Z, alpha=alpha, likelihood=gpflow.likelihoods.Bernoulli()
        )
        assert run_power_ep(model, tolerance=1e-10, damping=1.0).converged(1e-10)
        gaps.append(abs(model.log_marginal_likelihood().numpy() - optimum))
        mean_gap = np.max(np.abs(model.compute_qu()[0].numpy()[:, 0] - svgp.q_mu.numpy()[:, 0]))
        assert mean_gap < 5 * alpha
    assert gaps[1] < gaps[0] / 5 and gaps[1] < 0.05


# --- training, minibatches, saving, precision -----------------------------------------------


def test_minibatch_sweep_updates_only_its_points(rng):
    X, Y, Z = classification_problem(rng)
    model = PowerEPSGP((X, Y), kernel(), Z, alpha=0.5, likelihood=gpflow.likelihoods.Bernoulli())
    batch = np.array([3, 7, 11])
    model.sweep(tf.constant(batch))
    changed = np.flatnonzero(model.site_precision.numpy() != 0)
    np.testing.assert_array_equal(changed, batch)


def test_fit_power_ep_trains_and_converges(rng):
    X, Y, Z = classification_problem(rng, num_data=60)
    model = PowerEPSGP((X, Y), kernel(), Z, alpha=0.5, likelihood=gpflow.likelihoods.Bernoulli())
    run_power_ep(model)
    start = -model.log_marginal_likelihood().numpy()
    trace = fit_power_ep(model, iterations=60, batch_size=20, learning_rate=0.05, progress=False)
    assert len(trace.loss) == 60 and np.all(np.isfinite(trace.loss))
    final = run_power_ep(model, tolerance=1e-8)
    assert final.converged(1e-8)
    assert final.loss[-1] < start
    probabilities, _ = model.predict_y(X)
    assert np.mean((probabilities.numpy() > 0.5) == (Y > 0.5)) > 0.7
    log_density = model.predict_log_density((X, Y))
    assert log_density.shape == (60,) and np.all(np.isfinite(log_density.numpy()))


def test_checkpoint_restores_sites_and_optimiser_state(rng, tmp_path):
    X, Y, Z = classification_problem(rng)
    model = PowerEPSGP((X, Y), kernel(), Z, alpha=0.5, likelihood=gpflow.likelihoods.Bernoulli())
    fit_power_ep(model, iterations=5, progress=False)
    path = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    restored = PowerEPSGP((X, Y), kernel(), Z, alpha=0.5, likelihood=gpflow.likelihoods.Bernoulli())
    tf.train.Checkpoint(model=restored).read(path).assert_consumed()
    np.testing.assert_array_equal(restored.site_precision.numpy(), model.site_precision.numpy())
    np.testing.assert_array_equal(restored.site_shift.numpy(), model.site_shift.numpy())
    np.testing.assert_allclose(
        restored.log_marginal_likelihood().numpy(),
        model.log_marginal_likelihood().numpy(),
        rtol=1e-13,
    )


def test_site_settings_are_fixed_at_construction(rng):
    """alpha and the quadrature decide the compiled sweep; the sites are state."""
    X, Y, Z = classification_problem(rng)
    model = PowerEPSGP((X, Y), kernel(), Z, alpha=0.5, likelihood=gpflow.likelihoods.Bernoulli())
    for name, value in (("alpha", 1.0), ("num_gauss_hermite_points", 20), ("inference", "x")):
        with pytest.raises(AttributeError, match=rf"`{name}`.*new model"):
            setattr(model, name, value)
    with pytest.raises(ValueError, match="read-only"):
        model.alpha[...] = 1.0
    assert model.alpha == 0.5
    assert {v.name for v in model.variables} >= {"site_precision:0", "site_shift:0"}


def test_compiled_sweep_and_energy_match_eager(rng):
    X, Y, Z = classification_problem(rng)
    eager = PowerEPSGP((X, Y), kernel(), Z, alpha=0.5, likelihood=gpflow.likelihoods.Bernoulli())
    compiled = PowerEPSGP((X, Y), kernel(), Z, alpha=0.5, likelihood=gpflow.likelihoods.Bernoulli())
    sweep = tf.function(lambda: compiled.sweep(damping=0.5))
    for _ in range(3):
        eager.sweep(damping=0.5)
        sweep()
    np.testing.assert_allclose(
        compiled.site_precision.numpy(), eager.site_precision.numpy(), rtol=1e-12
    )
    np.testing.assert_allclose(
        compiled.training_loss_closure(compile=True)().numpy(),
        eager.training_loss().numpy(),
        rtol=1e-12,
    )


def test_float32_classification(rng):
    X, Y, Z = classification_problem(rng)
    gpflow.config.set_default_float(np.float32)
    model = PowerEPSGP(
        (X.astype(np.float32), Y.astype(np.float32)),
        kernel(),
        Z.astype(np.float32),
        alpha=0.5,
        likelihood=gpflow.likelihoods.Bernoulli(),
    )
    trace = run_power_ep(model, tolerance=1e-4)
    assert trace.converged(1e-4)
    value = model.log_marginal_likelihood()
    assert value.dtype == tf.float32
    gpflow.config.set_default_float(np.float64)
    reference = PowerEPSGP(
        (X, Y), kernel(), Z, alpha=0.5, likelihood=gpflow.likelihoods.Bernoulli()
    )
    run_power_ep(reference, tolerance=1e-10)
    np.testing.assert_allclose(
        value.numpy(),
        reference.log_marginal_likelihood().numpy(),
        rtol=1e-4,
    )


@pytest.mark.parametrize("likelihood", [gpflow.likelihoods.Bernoulli, ExactProbit])
def test_integer_labels_are_the_float_labels(rng, likelihood):
    """
    Integer 0/1 labels, as GPflow's SVGP takes them, are cast to GPflow's default float at
    construction (with a one-time DtypeCastWarning): the sweeps, the energy and every
    prediction are those of the same labels given as floats, and GPflow's SVGP at the same
    q(u) has the same predictive log density (the closed-form probit predictive).
    """
    X, Y, Z = classification_problem(rng)
    labels = Y.astype(np.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DtypeCastWarning)
        integers = PowerEPSGP((X, labels), kernel(), Z, alpha=0.5, likelihood=likelihood())
    floats = PowerEPSGP((X, Y), kernel(), Z, alpha=0.5, likelihood=likelihood())
    assert integers.data[1].dtype == tf.float64
    for _ in range(3):
        integers.sweep()
        floats.sweep()
    np.testing.assert_array_equal(integers.site_precision.numpy(), floats.site_precision.numpy())
    np.testing.assert_array_equal(integers.site_shift.numpy(), floats.site_shift.numpy())
    assert integers.training_loss().numpy() == floats.training_loss().numpy()
    Xnew = rng.uniform(-3, 3, (6, 1))
    for got, expected in zip(integers.predict_y(Xnew), floats.predict_y(Xnew)):
        np.testing.assert_array_equal(got.numpy(), expected.numpy())
    new_labels = rng.integers(0, 2, (6, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DtypeCastWarning)
        density = integers.predict_log_density((Xnew, new_labels)).numpy()
    mean, var = integers.predict_f(Xnew)
    z = (2 * new_labels - 1) * mean.numpy() / np.sqrt(1 + var.numpy())
    expected = norm.logcdf(z)[:, 0]
    if likelihood is gpflow.likelihoods.Bernoulli:  # GPflow's probit: ε + (1 - 2ε) Φ
        expected = np.log(1e-3 + (1 - 2e-3) * norm.cdf(z))[:, 0]
    np.testing.assert_allclose(density, expected, rtol=1e-7)
    q_mu, q_cov = integers.compute_qu()
    svgp = gpflow.models.SVGP(kernel(), likelihood(), Z, whiten=False, q_diag=False)
    svgp.q_mu.assign(q_mu)
    svgp.q_sqrt.assign(np.linalg.cholesky(q_cov.numpy())[None])
    np.testing.assert_allclose(
        svgp.predict_log_density((Xnew, new_labels)).numpy(), density, rtol=1e-7
    )


# --- bad input ------------------------------------------------------------------------------


def test_bad_classification_settings_raise_clear_errors(rng):
    X, Y, Z = classification_problem(rng, num_data=10)
    bernoulli = gpflow.likelihoods.Bernoulli()
    with pytest.raises(ValueError, match=r"\(Y \+ 1\) / 2"):
        PowerEPSGP((X, 2 * Y - 1), kernel(), Z, likelihood=bernoulli)
    with pytest.raises(ValueError, match="labels in"):
        PowerEPSGP((X, Y + 0.5), kernel(), Z, likelihood=bernoulli)
    with pytest.raises(ValueError, match="one output column"):
        PowerEPSGP((X, np.hstack([Y, Y])), kernel(), Z, likelihood=bernoulli)
    with pytest.raises(ValueError, match="SVGP"):
        PowerEPSGP((X, Y), kernel(), Z, alpha=0.0, likelihood=bernoulli)
    with pytest.raises(ValueError, match="Gaussian likelihoods"):
        PowerEPSGP((X, Y), kernel(), Z, likelihood=bernoulli, block_size=5)
    with pytest.raises(TypeError, match="scalar likelihood"):
        PowerEPSGP((X, Y), kernel(), Z, likelihood=gpflow.likelihoods.Softmax(2))
    model = PowerEPSGP((X, Y), kernel(), Z, likelihood=bernoulli)
    with pytest.raises(ValueError, match="damping"):
        model.sweep(damping=0.0)
    with pytest.raises(ValueError, match="update"):
        model.sweep(update="sequential")
    with pytest.raises(ValueError, match="sweeps_per_iteration"):
        fit_power_ep(model, iterations=1, sweeps_per_iteration=0, progress=False)
    with pytest.raises(ValueError, match="batch_size"):
        fit_power_ep(model, iterations=1, batch_size=0, progress=False)
    closed = PowerEPSGP((X, np.sin(X)), kernel(), Z)
    with pytest.raises(ValueError, match="inference='sites'"):
        closed.sweep()
    with pytest.raises(ValueError, match="indices"):
        closed.log_marginal_likelihood(tf.constant([0, 1]))


def test_bad_row_indices_are_refused_eagerly_and_compiled(rng):
    """Out-of-range rows would read zeros on a GPU (a gather there does not fail), and an empty
    batch would scale the energy's data terms by N / 0."""
    X, Y, Z = classification_problem(rng, num_data=10)
    model = PowerEPSGP((X, Y), kernel(), Z, likelihood=gpflow.likelihoods.Bernoulli())
    before = model.site_precision.numpy().copy()
    for bad in ([0, 10], [-1], []):
        with pytest.raises(ValueError, match=r"`indices` must be row indices in \[0, 10\)"):
            model.sweep(tf.constant(bad, tf.int32))
        with pytest.raises(ValueError, match=r"`indices` must be row indices in \[0, 10\)"):
            model.log_marginal_likelihood(tf.constant(bad, tf.int32))
    with pytest.raises(TypeError, match="`indices` must be integer"):
        model.sweep(tf.constant([1.0]))
    with pytest.raises(ValueError, match=r"`indices` must be a vector \[B\]"):
        model.log_marginal_likelihood(tf.constant([[0], [1]]))
    compiled_sweep = tf.function(lambda rows: model.sweep(rows)["max_change"])
    compiled_energy = tf.function(model.log_marginal_likelihood)
    for bad in ([0, 10], [-1], []):
        for compiled in (compiled_sweep, compiled_energy):
            with pytest.raises(tf.errors.InvalidArgumentError, match=r"indices.*\[0, 10\)"):
                compiled(tf.constant(bad, tf.int32))
    np.testing.assert_array_equal(model.site_precision.numpy(), before)  # nothing was written
    rows = tf.constant([3, 7])
    np.testing.assert_allclose(
        compiled_energy(rows).numpy(), model.log_marginal_likelihood(rows).numpy(), rtol=1e-12
    )


@pytest.mark.parametrize(
    "likelihood, Y, match",
    [
        (gpflow.likelihoods.Poisson(), -1.0, "non-negative counts for a Poisson"),
        (gpflow.likelihoods.Exponential(), -1.0, "non-negative values for a Exponential"),
        (gpflow.likelihoods.Gamma(), 0.0, "positive values for a Gamma"),
        (gpflow.likelihoods.Beta(), 1.5, r"values in \[0, 1\] for a Beta"),
        (gpflow.likelihoods.Beta(), -0.1, r"values in \[0, 1\] for a Beta"),
    ],
)
def test_data_outside_the_likelihoods_support_is_refused(rng, likelihood, Y, match):
    """Outside the support every site update was skipped (Poisson, Gamma: the energy -inf or
    NaN) or the energy was finite and meaningless (Beta +194, Exponential +1.5e8)."""
    X, _, Z = regression_problem(rng, num_data=10)
    inside = {gpflow.likelihoods.Beta: [0.0, 0.5, 1.0]}.get(type(likelihood), [0.0, 1.0, 3.0])
    if isinstance(likelihood, gpflow.likelihoods.Gamma):
        inside = [0.1, 1.0, 3.0]
    data = np.resize(inside, (10, 1))
    PowerEPSGP((X, data), kernel(), Z, likelihood=likelihood)  # inside: accepted
    data[3] = Y
    with pytest.raises(ValueError, match=f"`data` Y must hold {match} likelihood; 1 do not"):
        PowerEPSGP((X, data), kernel(), Z, likelihood=likelihood)


@pytest.mark.parametrize(
    "points, error", [(0, ValueError), (-3, ValueError), (2.7, TypeError), ("20", TypeError)]
)
def test_bad_quadrature_sizes_are_refused_at_construction(rng, points, error):
    X, Y, Z = classification_problem(rng, num_data=10)
    with pytest.raises(error, match="`num_gauss_hermite_points`"):
        PowerEPSGP(
            (X, Y),
            kernel(),
            Z,
            likelihood=gpflow.likelihoods.Bernoulli(),
            num_gauss_hermite_points=points,
        )
