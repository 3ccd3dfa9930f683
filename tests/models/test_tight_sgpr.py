import gpflow
import numpy as np
import pytest
import tensorflow as tf

import gpflow_tight
from gpflow_tight import TightSGPR
from tests.reference import (
    collapsed_bounds,
    exact_tight_predictive_variance,
    nystrom_parts,
    se_kernel,
)

VARIANCE, LENGTHSCALE, NOISE = 1.3, 0.7, 0.05


def make_problem(rng, num_data=40, num_inducing=6, num_outputs=1):
    X = rng.uniform(-3, 3, (num_data, 2))
    Y = np.sin(X[:, :1]) * np.cos(X[:, 1:]) + 0.2 * rng.standard_normal((num_data, num_outputs))
    Z = rng.uniform(-3, 3, (num_inducing, 2))
    return X, Y, Z


def kernel():
    return gpflow.kernels.SquaredExponential(variance=VARIANCE, lengthscales=LENGTHSCALE)


def models(X, Y, Z, noise=NOISE):
    sgpr = gpflow.models.SGPR((X, Y), kernel(), Z, noise_variance=noise)
    tight = TightSGPR((X, Y), kernel(), Z, noise_variance=noise)
    return sgpr, tight


@pytest.mark.parametrize("num_outputs", [1, 3])
def test_elbo_equals_dense_f4(rng, num_outputs):
    X, Y, Z = make_problem(rng, num_outputs=num_outputs)
    _, tight = models(X, Y, Z)
    reference = collapsed_bounds(X, Y, Z, VARIANCE, LENGTHSCALE, NOISE)
    np.testing.assert_allclose(tight.elbo().numpy(), reference["F4"], rtol=1e-10)


def test_heteroscedastic_elbo_equals_dense_f4(rng):
    """A Gaussian likelihood whose variance is a function of x: F4 with sigma_n^2 per point."""
    X, Y, Z = make_problem(rng)
    noise_function = gpflow.functions.Polynomial(degree=2, w=np.array([0.05, 0.01, 0.02]))
    likelihood = gpflow.likelihoods.Gaussian(variance=noise_function)
    tight = TightSGPR((X[:, :1], Y), kernel(), Z[:, :1], likelihood=likelihood)
    noise = 0.05 + 0.01 * X[:, 0] + 0.02 * X[:, 0] ** 2
    reference = collapsed_bounds(X[:, :1], Y, Z[:, :1], VARIANCE, LENGTHSCALE, noise)
    np.testing.assert_allclose(tight.elbo().numpy(), reference["F4"], rtol=1e-10)


@pytest.mark.parametrize("relaxation", ["optimal", "none"])
def test_constant_noise_path_equals_the_per_point_path(rng, relaxation):
    """
    A constant noise variance (or scale) takes the path that never scales the M x N matrix by
    sigma; a constant *function* of x takes the per-point path: same bound, same gradients.
    """
    from gpflow_tight.models.tight_sgpr import constant_noise_variance

    X, Y, Z = make_problem(rng, num_outputs=2)
    likelihoods = {
        "variance": gpflow.likelihoods.Gaussian(variance=NOISE),
        "scale": gpflow.likelihoods.Gaussian(scale=NOISE**0.5),
        "function": gpflow.likelihoods.Gaussian(variance=gpflow.functions.Constant(NOISE)),
    }
    assert constant_noise_variance(likelihoods["function"]) is None
    assert constant_noise_variance(gpflow.likelihoods.Bernoulli()) is None
    values = {}
    for name, likelihood in likelihoods.items():
        model = gpflow_tight.RelaxedSGPR(
            (X, Y), kernel(), Z, likelihood=likelihood, relaxation=relaxation
        )
        if name != "function":
            np.testing.assert_allclose(constant_noise_variance(likelihood), NOISE, rtol=1e-14)
        with tf.GradientTape() as tape:
            elbo = model.elbo()
        kernel_grads = tape.gradient(
            elbo, model.kernel.trainable_variables + model.inducing_variable.trainable_variables
        )
        values[name] = [elbo.numpy()] + [g.numpy() for g in kernel_grads]
    reference = collapsed_bounds(X, Y, Z, VARIANCE, LENGTHSCALE, NOISE)
    expected = reference["F4" if relaxation == "optimal" else "F1"]
    for name, (elbo, *grads) in values.items():
        np.testing.assert_allclose(elbo, expected, rtol=1e-10, err_msg=name)
        for g, g_ref in zip(grads, values["function"][1:]):
            np.testing.assert_allclose(g, g_ref, rtol=1e-9, atol=1e-12, err_msg=name)


@pytest.mark.parametrize("seed", range(5))
def test_bound_ordering(seed):
    """SGPR <= F5 (Artemev) <= TightSGPR <= F8 (Appendix A) <= log p(y) (paper eq. 13)."""
    rng = np.random.default_rng(seed)
    X, Y, Z = make_problem(rng, num_data=30, num_inducing=rng.integers(2, 8))
    noise = 10 ** rng.uniform(-2, 0)
    sgpr, tight = models(X, Y, Z, noise=noise)
    gpr = gpflow.models.GPR((X, Y), kernel(), noise_variance=noise)
    reference = collapsed_bounds(X, Y, Z, VARIANCE, LENGTHSCALE, noise)
    f1, f4 = sgpr.elbo().numpy(), tight.elbo().numpy()
    np.testing.assert_allclose(f1, reference["F1"], rtol=1e-10)
    np.testing.assert_allclose(
        gpr.log_marginal_likelihood().numpy(), reference["logml"], rtol=1e-10
    )
    assert f1 <= reference["F5"] <= f4 <= reference["F8"] <= reference["logml"]


def test_inducing_points_at_data_recover_gpr(rng):
    X, Y, _ = make_problem(rng, num_data=25)
    with gpflow.config.as_context(gpflow.config.Config(jitter=1e-10)):
        _, tight = models(X, Y, X.copy())
        gpr = gpflow.models.GPR((X, Y), kernel(), noise_variance=NOISE)
        np.testing.assert_allclose(
            tight.elbo().numpy(), gpr.log_marginal_likelihood().numpy(), rtol=1e-7
        )


def test_predictions_and_qu_equal_sgpr(rng):
    X, Y, Z = make_problem(rng, num_outputs=2)
    sgpr, tight = models(X, Y, Z)
    Xnew = rng.uniform(-3, 3, (7, 2))
    for full_cov in (False, True):
        for a, b in zip(sgpr.predict_f(Xnew, full_cov=full_cov), tight.predict_f(Xnew, full_cov)):
            np.testing.assert_allclose(a, b, rtol=1e-12)
    for a, b in zip(sgpr.predict_y(Xnew), tight.predict_y(Xnew)):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    Ynew = rng.standard_normal((7, 2))
    np.testing.assert_allclose(
        sgpr.predict_log_density((Xnew, Ynew)), tight.predict_log_density((Xnew, Ynew)), rtol=1e-12
    )
    for a, b in zip(sgpr.compute_qu(), tight.compute_qu()):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    posterior = tight.posterior()
    assert isinstance(posterior, gpflow.posteriors.SGPRPosterior)
    np.testing.assert_allclose(posterior.predict_f(Xnew)[1], sgpr.predict_f(Xnew)[1], rtol=1e-10)


def test_exact_predictive_variance_matches_dense_formula(rng):
    X, Y, Z = make_problem(rng, num_data=30)
    tight = TightSGPR((X, Y), kernel(), Z, noise_variance=NOISE, exact_predictive_variance=True)
    _, q_cov = tight.compute_qu()
    Xnew = rng.uniform(-3, 3, (9, 2))
    expected = exact_tight_predictive_variance(
        X, Z, Xnew, VARIANCE, LENGTHSCALE, NOISE, q_cov.numpy()
    )
    mean, var = tight.predict_f(Xnew)
    np.testing.assert_allclose(var[:, 0], expected, rtol=1e-6)
    _, full = tight.predict_f(Xnew, full_cov=True)
    np.testing.assert_allclose(np.diag(full[0]), expected, rtol=1e-6)
    np.testing.assert_allclose(full[0], np.transpose(full[0]), rtol=1e-10)
    default_mean, _ = models(X, Y, Z)[1].predict_f(Xnew)
    np.testing.assert_allclose(mean, default_mean, rtol=1e-12)


def test_exact_variance_at_training_inputs_is_cheap_form(rng):
    """
    At x_n the exact variance is m_n d_n + k_nu K_uu^-1 S_u K_uu^-1 k_un (Bui, Ashman & Turner
    2025, after eq. 12). The identity is exact without jitter; the jitter added to D_ff moves it
    by about the jitter, so it is checked with a small jitter.
    """
    jitter = 1e-9
    X, Y, Z = make_problem(rng, num_data=30)
    with gpflow.config.as_context(gpflow.config.Config(jitter=jitter)):
        tight = TightSGPR((X, Y), kernel(), Z, noise_variance=NOISE, exact_predictive_variance=True)
        _, q_cov = tight.compute_qu()
        _, exact_var = tight.predict_f(X)
    Kfu = se_kernel(X, Z, VARIANCE, LENGTHSCALE)
    Kuu = se_kernel(Z, Z, VARIANCE, LENGTHSCALE) + jitter * np.eye(len(Z))
    projection = np.linalg.solve(Kuu, Kfu.T).T
    d = np.diag(nystrom_parts(X, Z, VARIANCE, LENGTHSCALE, jitter=jitter)[2])
    m = NOISE / (d + NOISE)
    expected = m * d + np.sum((projection @ q_cov.numpy()) * projection, axis=1)
    np.testing.assert_allclose(exact_var[:, 0], expected, rtol=1e-6)


def test_scipy_training_improves_bound_and_stays_below_gpr(rng):
    X, Y, Z = make_problem(rng)
    _, tight = models(X, Y, Z)
    before = tight.elbo().numpy()
    result = gpflow_tight.training.fit_scipy(tight, maxiter=50, progress=False)
    after = tight.elbo().numpy()
    assert after > before
    assert result.history[-1] == pytest.approx(-after, rel=1e-8)
    gpr = gpflow.models.GPR((X, Y), tight.kernel, likelihood=tight.likelihood)
    assert after <= gpr.log_marginal_likelihood().numpy()


def test_gradients_finite_and_compiled_loss_matches(rng):
    X, Y, Z = make_problem(rng)
    _, tight = models(X, Y, Z)
    loss = tight.training_loss_closure(compile=True)
    with tf.GradientTape() as tape:
        value = loss()
    gradients = tape.gradient(value, tight.trainable_variables)
    assert all(np.all(np.isfinite(g.numpy())) for g in gradients)
    np.testing.assert_allclose(value.numpy(), -tight.elbo().numpy(), rtol=1e-12)


def test_float32(rng):
    X, Y, Z = make_problem(rng)
    gpflow.config.set_default_float(np.float32)
    tight32 = TightSGPR(
        (X.astype(np.float32), Y.astype(np.float32)),
        kernel(),
        Z.astype(np.float32),
        noise_variance=NOISE,
    )
    value = tight32.elbo()
    assert value.dtype == tf.float32
    reference = collapsed_bounds(X, Y, Z, VARIANCE, LENGTHSCALE, NOISE)["F4"]
    np.testing.assert_allclose(value.numpy(), reference, rtol=1e-3)
    gpflow_tight.training.fit_scipy(tight32, maxiter=5, progress=False)
    assert np.isfinite(tight32.elbo().numpy())


def test_checkpoint_round_trip(rng, tmp_path):
    X, Y, Z = make_problem(rng)
    _, tight = models(X, Y, Z)
    gpflow_tight.training.fit_scipy(tight, maxiter=10, progress=False)
    path = tf.train.Checkpoint(model=tight).write(str(tmp_path / "ckpt"))
    _, restored = models(X, Y, Z)
    tf.train.Checkpoint(model=restored).read(path).assert_consumed()
    np.testing.assert_allclose(restored.elbo().numpy(), tight.elbo().numpy(), rtol=1e-12)


@pytest.mark.parametrize(
    "data, match",
    [
        ((np.zeros((5, 1)), np.zeros((4, 1))), "5 rows but Y has 4"),
        ((np.zeros(5), np.zeros((5, 1))), "2-D array"),
        ((np.array([[0.0], [np.nan]]), np.zeros((2, 1))), "NaN or infinite"),
        ((np.zeros((2, 1)), np.array([[0.0], [np.inf]])), "NaN or infinite"),
        ((np.zeros((0, 1)), np.zeros((0, 1))), "empty"),
    ],
)
def test_bad_data_raises_clear_error(data, match):
    with pytest.raises(ValueError, match=match):
        TightSGPR(data, kernel(), np.zeros((2, 1)))


@pytest.mark.parametrize(
    "model_class, counterpart",
    [
        ("RelaxedSGPR", "RelaxedSVGP"),
        ("TightSGPR", "TightSVGP"),
        ("SOLVEGPR", "SOLVEGP"),
        ("TightSOLVEGPR", "TightSOLVEGP"),
        ("ODGPR", "ODVGP"),
    ],
)
def test_collapsed_models_refuse_non_gaussian_likelihoods(model_class, counterpart):
    """
    GPflow's SGPR takes any likelihood and fails at the first bound (``variance_at``); the
    collapsed models refuse a non-Gaussian one at construction and name the uncollapsed peer.
    """
    cls = getattr(gpflow_tight, model_class)
    X, Y = np.linspace(0.0, 1.0, 6)[:, None], np.zeros((6, 1))
    points = (
        (np.zeros((2, 1)), np.ones((1, 1)))
        if "SOLVE" in model_class or "OD" in model_class
        else (np.zeros((2, 1)),)
    )
    with pytest.raises(
        TypeError, match=rf"`likelihood` must be a gpflow.likelihoods.Gaussian.*{counterpart}\)"
    ):
        cls((X, Y), kernel(), *points, likelihood=gpflow.likelihoods.Bernoulli())
    gaussian = gpflow.likelihoods.Gaussian(0.3)
    assert cls((X, Y), kernel(), *points, likelihood=gaussian).likelihood is gaussian


def test_cholesky_failure_says_what_to_do(rng):
    X, Y, _ = make_problem(rng)
    Z = np.repeat(X[:1], 3, axis=0)  # coincident inducing points: K_uu is singular
    with gpflow.config.as_context(gpflow.config.Config(jitter=0.0)):
        _, tight = models(X, Y, Z)
        with pytest.raises(gpflow_tight.CholeskyError, match="jitter"):
            tight.elbo()
        # a training loss is NaN there, as SGPR's (line searches back off); the helpers explain
        assert not np.isfinite(tight.training_loss_closure(compile=True)().numpy())
        with pytest.raises(gpflow_tight.TrainingError, match="inducing points") as info:
            gpflow_tight.training.fit_scipy(tight, maxiter=2, progress=False)
        assert isinstance(info.value.__cause__, gpflow_tight.CholeskyError)


def test_sharing_a_gpflow_sgpr_gives_its_bound_and_trains_it(rng):
    """
    ``RelaxedSGPR.sharing(sgpr)`` computes SGPR's own loss and gradients from the same
    parameter objects, so optimising it trains ``sgpr``; ``TightSGPR.sharing`` is the tight
    bound of an independently built TightSGPR; anything but an SGPR is refused.
    """
    X = rng.uniform(0.0, 5.0, size=(40, 2))
    Y = np.sin(X).sum(1, keepdims=True) + 0.1 * rng.standard_normal((40, 1))
    sgpr = gpflow.models.SGPR(
        (X, Y),
        gpflow.kernels.SquaredExponential(lengthscales=[1.0, 2.0]),
        X[:8].copy(),
        mean_function=gpflow.mean_functions.Constant(0.3),
        noise_variance=0.2,
    )
    fast = gpflow_tight.RelaxedSGPR.sharing(sgpr)
    assert all(a is b for a, b in zip(fast.trainable_variables, sgpr.trainable_variables))
    assert len(fast.trainable_variables) == len(sgpr.trainable_variables)

    def loss_and_gradients(model):
        with tf.GradientTape() as tape:
            loss = model.training_loss()
        return loss, tape.gradient(loss, sgpr.trainable_variables)

    expected, got = loss_and_gradients(sgpr), loss_and_gradients(fast)
    np.testing.assert_allclose(got[0].numpy(), expected[0].numpy(), rtol=1e-12)
    for g, e in zip(got[1], expected[1]):
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-9, atol=1e-12)

    tight = TightSGPR.sharing(sgpr)
    built = TightSGPR(
        (X, Y),
        gpflow.kernels.SquaredExponential(lengthscales=[1.0, 2.0]),
        X[:8].copy(),
        mean_function=gpflow.mean_functions.Constant(0.3),
        noise_variance=0.2,
    )
    np.testing.assert_allclose(tight.elbo().numpy(), built.elbo().numpy(), rtol=1e-12)

    before = sgpr.training_loss().numpy()
    gpflow.optimizers.Scipy().minimize(
        fast.training_loss_closure(), sgpr.trainable_variables, options=dict(maxiter=10)
    )
    np.testing.assert_allclose(sgpr.training_loss().numpy(), fast.training_loss().numpy())
    assert sgpr.training_loss().numpy() < before

    svgp = gpflow.models.SVGP(gpflow.kernels.SquaredExponential(), gpflow.likelihoods.Gaussian(), X)
    with pytest.raises(TypeError, match="gpflow.models.SGPR"):
        gpflow_tight.RelaxedSGPR.sharing(svgp)
