"""
SoR and the Nyström GP (spec/powerep.md §4.1, §4.2, §4.9): against dense numpy formulas written
here from the spec, gpflow.models.GPR and the DTC preset they share an objective with.

Property ids (spec §6) in this file:
23 SoR mean ≡ DTC mean; Σ_DTC − Σ_SoR = K_** − Q_** ⪰ 0; SoR marginal ≡ DTC marginal.
24 Nyström variance ≤ exact GP variance (elementwise); it may be negative.
25 Nyström eigen-construction with p = m: Σ_i λ̃_i ũ_i ũ_iᵀ ≡ K_nm K_mm⁻¹ K_mn.
"""

import warnings

import gpflow
import numpy as np
import pytest
import tensorflow as tf
from gpflow.posteriors import PrecomputeCacheType

import gpflow_tight
from gpflow_tight import DTC, NegativeVarianceWarning, Nystrom, SoR
from gpflow_tight.projection import project
from tests.reference import log_gauss, nystrom_parts, se_kernel

VARIANCE, LENGTHSCALE, NOISE, JITTER = 1.3, 0.7, 0.05, 1e-6
MODELS = {"SoR": SoR, "Nystrom": Nystrom}

# Nyström variances are negative at most test inputs of these small 2-D problems (6 inducing
# inputs for 40 points): the tests that are about the warning record it themselves
pytestmark = pytest.mark.filterwarnings("ignore::gpflow_tight.NegativeVarianceWarning")


def make_problem(rng, num_data=40, num_inducing=6, num_outputs=1):
    X = rng.uniform(-3, 3, (num_data, 2))
    Y = np.sin(X[:, :1]) * np.cos(X[:, 1:]) + 0.2 * rng.standard_normal((num_data, num_outputs))
    Z = rng.uniform(-3, 3, (num_inducing, 2))
    return X, Y, Z


def kernel():
    return gpflow.kernels.SquaredExponential(variance=VARIANCE, lengthscales=LENGTHSCALE)


def dense(A, B):
    return se_kernel(A, B, VARIANCE, LENGTHSCALE)


def dense_sigma(X, Z, noise=NOISE):
    """Σ = (K_uu + σ⁻² K_uf K_fu)⁻¹ (spec §4.5), with the package's jitter on K_uu."""
    Kuu = dense(Z, Z) + JITTER * np.eye(len(Z))
    Kuf = dense(Z, X)
    return np.linalg.inv(Kuu + Kuf @ Kuf.T / noise)


def dense_sor(X, Y, Z, Xnew, noise=NOISE):
    """SoR predictive (spec §4.1 / §4.5): σ⁻² K_*u Σ K_uf y and K_*u Σ K_u*."""
    Sigma = dense_sigma(X, Z, noise)
    Ksu = dense(Xnew, Z)
    return Ksu @ Sigma @ dense(Z, X) @ Y / noise, Ksu @ Sigma @ Ksu.T


def dense_nystrom(X, Y, Z, Xnew, noise=NOISE):
    """Nyström predictive (spec §4.2): k_*f (Q + σ²I)⁻¹ y, K_** − K_*f (Q + σ²I)⁻¹ K_f*."""
    _, Qff, _ = nystrom_parts(X, Z, VARIANCE, LENGTHSCALE, jitter=JITTER)
    inverse = np.linalg.inv(Qff + noise * np.eye(len(X)))
    Ksf = dense(Xnew, X)
    return Ksf @ inverse @ Y, dense(Xnew, Xnew) - Ksf @ inverse @ Ksf.T


def dense_q_star(Z, Xnew):
    """Q_** = K_*u K_uu⁻¹ K_u*."""
    Kuu = dense(Z, Z) + JITTER * np.eye(len(Z))
    Ksu = dense(Xnew, Z)
    return Ksu @ np.linalg.solve(Kuu, Ksu.T)


# --- property 23: SoR -------------------------------------------------------------------------


@pytest.mark.parametrize("num_outputs", [1, 2])
def test_objective_is_dtc_and_the_dense_marginal(rng, num_outputs):
    """SoR's, the Nyström GP's and DTC's objective: log N(y; 0, Q_ff + σ²I), dense."""
    X, Y, Z = make_problem(rng, num_outputs=num_outputs)
    _, Qff, _ = nystrom_parts(X, Z, VARIANCE, LENGTHSCALE, jitter=JITTER)
    reference = log_gauss(Y, Qff + NOISE * np.eye(len(X)))
    dtc = DTC((X, Y), kernel(), Z, noise_variance=NOISE).log_marginal_likelihood().numpy()
    np.testing.assert_allclose(dtc, reference, rtol=1e-10)
    for cls in (SoR, Nystrom):
        model = cls((X, Y), kernel(), Z, noise_variance=NOISE)
        assert model.log_marginal_likelihood().numpy() == pytest.approx(dtc, rel=1e-13)
        objective = model.maximum_log_likelihood_objective().numpy()
        assert objective == pytest.approx(dtc, rel=1e-13)
        np.testing.assert_allclose(model.training_loss().numpy(), -objective, rtol=1e-13)


def test_sor_mean_is_dtc_and_covariances_differ_by_the_prior_residual(rng):
    X, Y, Z = make_problem(rng)
    Xnew = rng.uniform(-4, 4, (9, 2))
    sor = SoR((X, Y), kernel(), Z, noise_variance=NOISE)
    dtc = DTC((X, Y), kernel(), Z, noise_variance=NOISE)
    sor_mean, sor_cov = sor.predict_f(Xnew, full_cov=True)
    dtc_mean, dtc_cov = dtc.predict_f(Xnew, full_cov=True)
    np.testing.assert_allclose(sor_mean.numpy(), dtc_mean.numpy(), rtol=1e-12, atol=1e-14)
    gap = dense(Xnew, Xnew) - dense_q_star(Z, Xnew)  # K_** − Q_**, dense
    np.testing.assert_allclose((dtc_cov - sor_cov).numpy()[0], gap, atol=1e-10)
    assert np.linalg.eigvalsh(gap).min() > -1e-10  # ⪰ 0, so DTC's variance ≥ SoR's
    # and SoR's own dense formula
    mean, cov = dense_sor(X, Y, Z, Xnew)
    np.testing.assert_allclose(sor_mean.numpy(), mean, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(sor_cov.numpy()[0], cov, atol=1e-10)
    np.testing.assert_allclose(sor.predict_f(Xnew)[1].numpy()[:, 0], np.diag(cov), atol=1e-10)


def test_sor_variance_vanishes_away_from_the_inducing_inputs_where_dtc_returns_to_the_prior(rng):
    X, Y, Z = make_problem(rng)
    far = np.array([[30.0, 30.0], [-25.0, 40.0]])
    sor = SoR((X, Y), kernel(), Z, noise_variance=NOISE)
    dtc = DTC((X, Y), kernel(), Z, noise_variance=NOISE)
    sor_mean, sor_var = sor.predict_f(far)
    assert np.all(np.abs(sor_var.numpy()) < 1e-12)
    assert np.all(np.abs(sor_mean.numpy()) < 1e-12)
    np.testing.assert_allclose(dtc.predict_f(far)[1].numpy(), VARIANCE, rtol=1e-12)
    # predict_y: only the noise is left
    np.testing.assert_allclose(sor.predict_y(far)[1].numpy(), NOISE, rtol=1e-10)


# --- property 24: the Nyström GP --------------------------------------------------------------


@pytest.mark.parametrize("num_outputs", [1, 2])
def test_nystrom_equals_the_dense_formula(rng, num_outputs):
    X, Y, Z = make_problem(rng, num_outputs=num_outputs)
    Z = X[rng.choice(len(X), 6, replace=False)]  # a subset of the data, as Williams & Seeger
    Xnew = rng.uniform(-4, 4, (9, 2))
    mean_function = gpflow.mean_functions.Constant(0.4)
    model = Nystrom((X, Y + 0.4), kernel(), Z, noise_variance=NOISE, mean_function=mean_function)
    mean, cov = dense_nystrom(X, Y, Z, Xnew)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NegativeVarianceWarning)  # negative at most points
        got_mean, got_cov = model.predict_f(Xnew, full_cov=True)
        got_var = model.predict_f(Xnew)[1]
    np.testing.assert_allclose(got_mean.numpy(), mean + 0.4, rtol=1e-9, atol=1e-10)
    assert got_cov.shape == (num_outputs, len(Xnew), len(Xnew))
    for p in range(num_outputs):
        np.testing.assert_allclose(got_cov.numpy()[p], cov, atol=1e-10)
        np.testing.assert_allclose(got_var.numpy()[:, p], np.diag(cov), atol=1e-10)


def test_nystrom_at_the_inducing_inputs_is_dtc(rng):
    """E = K_f* − Q_f* vanishes at test inputs among the inducing inputs (up to the jitter)."""
    X, Y, Z = make_problem(rng)
    nystrom = Nystrom((X, Y), kernel(), Z, noise_variance=NOISE)
    dtc = DTC((X, Y), kernel(), Z, noise_variance=NOISE)
    for ours, theirs in zip(nystrom.predict_f(Z), dtc.predict_f(Z)):
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("noise", [0.05, 1e-3])
def test_nystrom_variance_is_at_most_the_exact_gp_variance(rng, noise):
    X, Y, Z = make_problem(rng)
    Z = X[:6]
    Xnew = np.concatenate([rng.uniform(-4, 4, (20, 2)), X[:10]])
    model = Nystrom((X, Y), kernel(), Z, noise_variance=noise)
    exact = gpflow.models.GPR((X, Y), kernel(), noise_variance=noise)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NegativeVarianceWarning)  # may be negative at 1e-3
        var = model.predict_f(Xnew)[1].numpy()
    exact_var = exact.predict_f(Xnew)[1].numpy()
    assert np.all(var <= exact_var + 1e-9)
    assert np.max(var - exact_var) < 0  # strictly below away from coincident inputs


def test_negative_variance_warns_naming_the_points_and_benign_case_does_not(rng):
    X, Y, _ = make_problem(rng)
    Z = X[:5]
    model = Nystrom((X, Y), kernel(), Z, noise_variance=1e-4)  # spec §4.2: small noise
    _, reference = dense_nystrom(X, Y, Z, X, noise=1e-4)
    negative = np.flatnonzero(np.diag(reference) < 0)
    assert negative.size > 0  # the constructed case is a negative one, by the dense formula
    with pytest.warns(NegativeVarianceWarning) as record:
        _, var = model.predict_f(X)
    message = str(record[0].message)
    assert f"{negative.size} of {len(X)} test points" in message
    assert ", ".join(str(i) for i in negative[:3]) in message
    assert "inducing points" in message and "noise variance" in message and "DTC" in message
    np.testing.assert_allclose(var.numpy()[:, 0], np.diag(reference), rtol=1e-6)  # not clipped
    # every way of predicting says so
    for predict in (
        lambda: model.predict_y(X),
        lambda: model.predict_log_density((X, Y)),
        lambda: model.posterior().predict_f(X),
        lambda: model.predict_f(X, full_cov=True),
    ):
        with pytest.warns(NegativeVarianceWarning):
            predict()
    # benign: with every data point an inducing input, Q_ff = K_ff (up to the jitter) and the
    # Nyström GP is the exact GP; no warning
    benign = Nystrom((X, Y), kernel(), X, noise_variance=1e-2)
    Xnew = rng.uniform(-3, 3, (10, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error", NegativeVarianceWarning)
        var = benign.predict_f(Xnew)[1].numpy()
    exact = gpflow.models.GPR((X, Y), kernel(), noise_variance=1e-2).predict_f(Xnew)[1].numpy()
    assert np.all(var > 0)
    np.testing.assert_allclose(var, exact, rtol=1e-3, atol=1e-6)  # jitter-limited


def test_nystrom_eigen_construction_is_the_projection(rng):
    """
    Property 25 (spec §4.2): from K_mm's eigenpairs (λ_i^(m), u_i^(m)), λ̃_i = (n/m) λ_i^(m) and
    ũ_i = √(m/n) K_nm u_i^(m) / λ_i^(m) give Σ_i λ̃_i ũ_i ũ_iᵀ = K_nm K_mm⁻¹ K_mn, the Q_ff = AᵀA
    of the package's projection (the m points a subset of the n).
    """
    X, _, _ = make_problem(rng)
    n, m = len(X), 7
    Z = X[rng.choice(n, m, replace=False)]
    eigenvalues, eigenvectors = np.linalg.eigh(dense(Z, Z) + JITTER * np.eye(m))
    lam = n / m * eigenvalues
    U = np.sqrt(m / n) * dense(X, Z) @ eigenvectors / eigenvalues
    reconstruction = (U * lam) @ U.T
    A = project(gpflow.inducing_variables.InducingPoints(Z), kernel(), tf.constant(X)).A.numpy()
    np.testing.assert_allclose(A.T @ A, reconstruction, atol=1e-9)
    _, Qff, _ = nystrom_parts(X, Z, VARIANCE, LENGTHSCALE, jitter=JITTER)
    np.testing.assert_allclose(reconstruction, Qff, atol=1e-9)


# --- the GPflow contract: one posterior behind every prediction -------------------------------


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_prediction_goes_through_the_posterior(rng, name):
    X, Y, Z = make_problem(rng, num_outputs=2)
    Xnew = rng.uniform(-4, 4, (6, 2))
    model = MODELS[name]((X, Y), kernel(), Z, noise_variance=NOISE)
    mean, var = model.predict_f(Xnew)
    for cache in (PrecomputeCacheType.TENSOR, PrecomputeCacheType.VARIABLE):
        posterior = model.posterior(cache)
        for got, expected in zip(posterior.predict_f(Xnew), (mean, var)):
            np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-12, atol=1e-15)
    _, full = model.predict_f(Xnew, full_cov=True)
    np.testing.assert_allclose(np.diagonal(full.numpy(), axis1=1, axis2=2).T, var, atol=1e-13)
    _, output_cov = model.predict_f(Xnew, full_output_cov=True)  # independent outputs
    np.testing.assert_allclose(np.diagonal(output_cov.numpy(), axis1=1, axis2=2), var, rtol=1e-13)
    y_mean, y_var = model.predict_y(Xnew)
    np.testing.assert_allclose(y_mean.numpy(), mean.numpy(), rtol=1e-13)
    np.testing.assert_allclose(y_var.numpy(), var.numpy() + NOISE, rtol=1e-13)
    Ynew = rng.standard_normal((6, 2))
    y_var = var.numpy() + NOISE  # may be negative for Nyström: the Gaussian density formula
    with np.errstate(invalid="ignore"):
        reference = -0.5 * (np.log(2 * np.pi * y_var) + (Ynew - mean.numpy()) ** 2 / y_var)
    got = model.predict_log_density((Xnew, Ynew)).numpy()
    positive = np.all(y_var > 0, axis=1)
    np.testing.assert_allclose(got[positive], reference.sum(1)[positive], rtol=1e-12)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_compiled_predictions_equal_eager(rng, name):
    X, Y, Z = make_problem(rng)
    Xnew = rng.uniform(-4, 4, (5, 2))
    model = MODELS[name]((X, Y), kernel(), Z, noise_variance=NOISE)
    # (the compiled training loss is DTC's, tested in test_power_ep.py)
    eager = model.predict_f(Xnew, full_cov=True)
    # autograph=False: tracing is then seconds, not a minute (AutoGraph transpiles the whole
    # call tree, GPflow's and check_shapes' included), and the graph is the same: the prediction
    # code branches on Python values only. PowerEPSGP's compiled predictions, which share all
    # but _conditional_with_precompute, go through AutoGraph in tests/test_every_model.py.
    predict = tf.function(lambda X: model.predict_f(X, full_cov=True), autograph=False)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        compiled = predict(Xnew)
    for got, expected in zip(compiled, eager):
        np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-12, atol=1e-15)
    # the negative-variance check adds no Python callback (nor anything else) to the graph
    graph = predict.get_concrete_function(Xnew).graph.as_graph_def()
    ops = {node.op for node in graph.node}
    for function in graph.library.function:
        ops |= {node.op for node in function.node_def}
    assert not ops & {"PyFunc", "PyFuncStateless", "EagerPyFunc", "PrintV2"}
    # Nyström predictions are not checked in a graph: tracing says so, once
    said = [w for w in record if issubclass(w.category, NegativeVarianceWarning)]
    assert len(said) == (1 if name == "Nystrom" else 0)
    if said:
        assert "not checked" in str(said[0].message)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_float32(rng, name):
    X, Y, Z = make_problem(rng)
    gpflow.config.set_default_float(np.float32)
    f32 = [a.astype(np.float32) for a in (X, Y, Z)]
    model = MODELS[name]((f32[0], f32[1]), kernel(), f32[2], noise_variance=NOISE)
    value = model.log_marginal_likelihood()
    assert value.dtype == tf.float32
    _, Qff, _ = nystrom_parts(X, Z, VARIANCE, LENGTHSCALE, jitter=JITTER)
    np.testing.assert_allclose(value.numpy(), log_gauss(Y, Qff + NOISE * np.eye(len(X))), 1e-3)
    mean, var = model.predict_f(f32[0][:5])
    assert mean.dtype == var.dtype == tf.float32
    reference = (dense_sor if name == "SoR" else dense_nystrom)(X, Y, Z, X[:5])[0]
    np.testing.assert_allclose(mean.numpy(), reference, atol=1e-3)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_scipy_step_decreases_the_loss_and_checkpoint_restores(rng, name, tmp_path):
    X, Y, Z = make_problem(rng)
    model = MODELS[name]((X, Y), kernel(), Z, noise_variance=NOISE)
    before = model.training_loss().numpy()
    gpflow.optimizers.Scipy().minimize(
        model.training_loss, model.trainable_variables, options=dict(maxiter=3), compile=False
    )  # (the compiled loss is DTC's, tested in test_power_ep.py)
    assert model.training_loss().numpy() < before
    path = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    restored = MODELS[name]((X, Y), kernel(), Z, noise_variance=NOISE)
    tf.train.Checkpoint(model=restored).read(path).assert_consumed()
    Xnew = rng.uniform(-4, 4, (5, 2))
    for got, expected in zip(restored.predict_f(Xnew), model.predict_f(Xnew)):
        np.testing.assert_array_equal(got.numpy(), expected.numpy())


# --- drop-in and bad input ------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_failed_factorisation_raises_in_predictions(name):
    """As tests/test_every_model.py asks of every model: never a silent NaN."""
    X = np.linspace(0, 6, 20)[:, None]
    model = MODELS[name]((X, np.sin(X)), kernel(), X[::4], noise_variance=NOISE)
    with gpflow.config.as_context(gpflow.config.Config(jitter=0.0)):
        model.kernel.lengthscales.assign(1e8)  # every kernel matrix the matrix of ones
        for predict in (model.predict_f, model.predict_y, lambda X: model.posterior().predict_f(X)):
            with pytest.raises(gpflow_tight.CholeskyError, match="jitter"):
                predict(X)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_sgpr_constructor_and_exports(rng, name):
    X, Y, Z = make_problem(rng)
    cls = MODELS[name]
    assert getattr(gpflow_tight, name) is cls and name in gpflow_tight.__all__
    model = cls(
        (X, Y),
        kernel(),
        gpflow.inducing_variables.InducingPoints(Z),
        mean_function=gpflow.mean_functions.Zero(),
        num_latent_gps=1,
        likelihood=gpflow.likelihoods.Gaussian(NOISE),
    )
    assert isinstance(model, DTC)
    np.testing.assert_allclose(
        model.log_marginal_likelihood().numpy(),
        cls((X, Y), kernel(), Z, noise_variance=NOISE).log_marginal_likelihood().numpy(),
        rtol=1e-14,
    )


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(likelihood=gpflow.likelihoods.Bernoulli()), TypeError, "`likelihood`.*Gaussian"),
        (
            dict(likelihood=gpflow.likelihoods.Gaussian(), noise_variance=0.1),
            ValueError,
            "not both",
        ),
        (dict(noise_variance=-1.0), ValueError, "noise_variance"),
        (dict(num_latent_gps=3), ValueError, "num_latent_gps"),
        (dict(alpha=0.5), TypeError, "alpha"),
    ],
)
def test_bad_settings_raise_clear_errors(rng, name, kwargs, error, match):
    X, Y, Z = make_problem(rng, num_data=20)
    with pytest.raises(error, match=match):
        MODELS[name]((X, Y), kernel(), Z, **kwargs)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_bad_data_and_test_inputs_raise_clear_errors(rng, name):
    X, Y, Z = make_problem(rng, num_data=20)
    with pytest.raises(ValueError, match="rows"):
        MODELS[name]((X, Y[:5]), kernel(), Z)
    with pytest.raises(ValueError, match="inducing_variable|columns"):
        MODELS[name]((X, Y), kernel(), Z[:, :1])
    model = MODELS[name]((X, Y), kernel(), Z, noise_variance=NOISE)
    with pytest.raises(ValueError, match="Xnew"):
        model.predict_f(np.zeros((3, 3)))
