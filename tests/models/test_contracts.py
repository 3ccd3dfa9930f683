"""
The contracts users rely on: code written for GPflow's SGPR and SVGP runs unchanged on every
subclass; posteriors follow GPflow's cache contract; settings that decide a compiled graph are
fixed at construction; a relaxation is honoured wherever a model accepts it.
"""

import gpflow
import numpy as np
import pytest
import tensorflow as tf
from gpflow.posteriors import PrecomputeCacheType

import gpflow_tight as gt
from gpflow_tight.models import RelaxedSGPR, RelaxedSVGP
from tests.reference import log_gauss, se_kernel

VARIANCE, LENGTHSCALE, NOISE = 1.1, 0.8, 0.1
Z_U = np.linspace(0.3, 5.7, 5)[:, None]
Z_V = np.array([[0.9], [2.6], [4.4]])


def data(rng, num_data=30, num_outputs=1):
    X = np.sort(rng.uniform(0, 6, (num_data, 1)), axis=0)
    Y = np.sin(2 * X) + 0.2 * rng.standard_normal((num_data, num_outputs))
    return X, Y


def kernel():
    return gpflow.kernels.SquaredExponential(variance=VARIANCE, lengthscales=LENGTHSCALE)


SGPR_LIKE = {
    "TightSGPR": lambda d: gt.TightSGPR(d, kernel(), Z_U, noise_variance=NOISE),
    "RelaxedSGPR-beta": lambda d: RelaxedSGPR(
        d, kernel(), Z_U, noise_variance=NOISE, relaxation="beta"
    ),
    "SOLVEGPR": lambda d: gt.SOLVEGPR(d, kernel(), Z_U, Z_V, noise_variance=NOISE),
    "TightSOLVEGPR": lambda d: gt.TightSOLVEGPR(d, kernel(), Z_U, Z_V, noise_variance=NOISE),
}

SVGP_LIKE = {
    "TightSVGP": lambda: gt.TightSVGP(kernel(), gpflow.likelihoods.Gaussian(NOISE), Z_U),
    "RelaxedSVGP-free": lambda: RelaxedSVGP(
        kernel(), gpflow.likelihoods.Gaussian(NOISE), Z_U, relaxation="free", num_data=30
    ),
    "SOLVEGP": lambda: gt.SOLVEGP(kernel(), gpflow.likelihoods.Gaussian(NOISE), Z_U, Z_V),
    "TightSOLVEGP": lambda: gt.TightSOLVEGP(kernel(), gpflow.likelihoods.Gaussian(NOISE), Z_U, Z_V),
}


def code_written_for_sgpr(model, Xnew):
    """What a GPflow user (or Trieste's SGPR wrapper) does with an SGPR."""
    assert isinstance(model, gpflow.models.SGPR)
    q_mu, q_cov = model.compute_qu()
    num_inducing = model.inducing_variable.num_inducing
    assert q_mu.shape == (num_inducing, model.data[1].shape[1])
    assert q_cov.shape == (num_inducing, num_inducing)
    mean, var = model.predict_f(Xnew)
    cached = model.posterior(PrecomputeCacheType.TENSOR).predict_f(Xnew)
    np.testing.assert_allclose(cached[0], mean, rtol=1e-10)
    np.testing.assert_allclose(cached[1], var, rtol=1e-10)
    model.predict_y(Xnew)
    loss = model.training_loss_closure(compile=True)()
    np.testing.assert_allclose(-loss, model.elbo(), rtol=1e-12)
    assert model.elbo() <= model.upper_bound()
    return q_mu, q_cov


@pytest.mark.parametrize("name", SGPR_LIKE)
def test_code_written_for_sgpr_runs_unchanged(rng, name):
    X, Y = data(rng)
    model = SGPR_LIKE[name]((X, Y))
    q_mu, q_cov = code_written_for_sgpr(model, rng.uniform(0, 6, (7, 1)))
    # SGPR's promise: at the inducing inputs the posterior is q(u) (up to the jitter)
    mean, var = model.predict_f(Z_U)
    np.testing.assert_allclose(mean, q_mu, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(var[:, 0], np.diag(q_cov), rtol=1e-3, atol=1e-5)


def code_written_for_svgp(model, data, Xnew):
    """What a GPflow user does with an SVGP."""
    assert isinstance(model, gpflow.models.SVGP)
    mean, var = model.predict_f(Xnew)
    cached = model.posterior(PrecomputeCacheType.TENSOR).predict_f(Xnew)
    np.testing.assert_allclose(cached[0], mean, rtol=1e-10)
    np.testing.assert_allclose(cached[1], var, rtol=1e-10)
    assert model.prior_kl().shape == ()
    loss = model.training_loss_closure(data, compile=True)()
    np.testing.assert_allclose(-loss, model.elbo(data), rtol=1e-12)
    optimizer = gpflow.keras.tf_keras.optimizers.Adam(0.01)
    optimizer.minimize(model.training_loss_closure(data), model.trainable_variables)
    return model.predict_log_density(data)


@pytest.mark.parametrize("name", SVGP_LIKE)
def test_code_written_for_svgp_runs_unchanged(rng, name):
    X, Y = data(rng)
    model = SVGP_LIKE[name]()
    log_density = code_written_for_svgp(model, (X, Y), rng.uniform(0, 6, (7, 1)))
    assert log_density.shape == (30,)


def variable_cache_follows_gpflow(model, Xnew, change):
    """GPflow's VARIABLE cache: predictions change only on update_cache()."""
    posterior = model.posterior(PrecomputeCacheType.VARIABLE)
    before = [t.numpy() for t in posterior.predict_f(Xnew)]
    np.testing.assert_allclose(before, [t.numpy() for t in posterior.fused_predict_f(Xnew)])
    change()
    stale = [t.numpy() for t in posterior.predict_f(Xnew)]
    fresh = [t.numpy() for t in posterior.fused_predict_f(Xnew)]
    np.testing.assert_array_equal(stale, before)
    assert np.max(np.abs(np.array(fresh) - np.array(before))) > 1e-6
    posterior.update_cache()
    np.testing.assert_allclose([t.numpy() for t in posterior.predict_f(Xnew)], fresh, rtol=1e-12)
    np.testing.assert_allclose(
        [t.numpy() for t in model.posterior(PrecomputeCacheType.TENSOR).predict_f(Xnew)],
        fresh,
        rtol=1e-12,
    )


@pytest.mark.parametrize("name", ["SOLVEGPR", "TightSOLVEGPR"])
def test_collapsed_orthogonal_posterior_cache(rng, name):
    model = SGPR_LIKE[name](data(rng))
    # the noise variance moves only the optimal q, which the cache holds (as in GPflow, the
    # kernel's cross-covariances with the test inputs are always evaluated live)
    variable_cache_follows_gpflow(
        model, rng.uniform(0, 6, (6, 1)), lambda: model.likelihood.variance.assign(0.5)
    )


@pytest.mark.parametrize("full_cov", [False, True])
@pytest.mark.parametrize("name", ["SOLVEGP", "TightSOLVEGP"])
def test_orthogonal_posterior_cache(rng, name, full_cov):
    model = SVGP_LIKE[name]()
    model.q_mu.assign(rng.standard_normal(model.q_mu.shape))
    Xnew = rng.uniform(0, 6, (6, 1))
    fused = model.posterior(PrecomputeCacheType.NOCACHE).fused_predict_f(Xnew, full_cov=full_cov)
    for cache in (PrecomputeCacheType.TENSOR, PrecomputeCacheType.VARIABLE):
        cached = model.posterior(cache).predict_f(Xnew, full_cov=full_cov)
        np.testing.assert_allclose(cached[0], fused[0], rtol=1e-12)
        np.testing.assert_allclose(cached[1], fused[1], rtol=1e-12)
    variable_cache_follows_gpflow(
        model, Xnew, lambda: model.q_mu_orthogonal.assign(np.ones(model.q_mu_orthogonal.shape))
    )


def test_variable_cache_updates_inside_tf_function(rng):
    model = SGPR_LIKE["SOLVEGPR"](data(rng))
    posterior = model.posterior(PrecomputeCacheType.VARIABLE)
    Xnew = rng.uniform(0, 6, (4, 1))
    model.likelihood.variance.assign(0.5)
    tf.function(posterior.update_cache)()
    np.testing.assert_allclose(
        posterior.predict_f(Xnew)[1], posterior.fused_predict_f(Xnew)[1], rtol=1e-12
    )


@pytest.mark.parametrize(
    "build, attribute, value",
    [
        (lambda d: SGPR_LIKE["TightSGPR"](d), "exact_predictive_variance", True),
        (lambda d: SGPR_LIKE["TightSGPR"](d), "relaxation", "none"),
        (lambda d: SGPR_LIKE["SOLVEGPR"](d), "bound", "thesis"),
        (lambda d: SVGP_LIKE["TightSVGP"](), "relaxation", "free"),
    ],
)
def test_settings_that_shape_the_graph_are_constructor_only(rng, build, attribute, value):
    model = build(data(rng))
    before = model.training_loss() if isinstance(model, gpflow.models.SGPR) else None
    with pytest.raises(AttributeError, match="fixed at construction"):
        setattr(model, attribute, value)
    with pytest.raises(AttributeError, match="fixed at construction"):
        delattr(model, attribute)  # and set anew
    if before is not None:
        assert model.training_loss().numpy() == before.numpy()


ORTHOGONAL_MODELS = {  # name -> builder(data, Z_u, Z_v)
    "SOLVEGPR": lambda d, u, v: gt.SOLVEGPR(d, kernel(), u, v, noise_variance=NOISE),
    "TightSOLVEGPR": lambda d, u, v: gt.TightSOLVEGPR(d, kernel(), u, v, noise_variance=NOISE),
    "ODGPR": lambda d, u, v: gt.ODGPR(d, kernel(), u, v, noise_variance=NOISE),
    "SOLVEGP": lambda d, u, v: gt.SOLVEGP(kernel(), gpflow.likelihoods.Gaussian(NOISE), u, v),
    "TightSOLVEGP": lambda d, u, v: gt.TightSOLVEGP(
        kernel(), gpflow.likelihoods.Gaussian(NOISE), u, v
    ),
    "ODVGP": lambda d, u, v: gt.ODVGP(kernel(), gpflow.likelihoods.Gaussian(NOISE), u, v),
}


@pytest.mark.parametrize("name", ORTHOGONAL_MODELS)
def test_inducing_sets_of_the_orthogonal_models_move_in_place_only(rng, name):
    """The orthogonal set holds the regular one, so replacing either object would leave the
    other behind: it is refused, with the way to move the points, which takes effect also in a
    compiled loss (the model built at the new points gives the same loss)."""
    d = data(rng)
    model = ORTHOGONAL_MODELS[name](d, Z_U, Z_V)
    held = isinstance(model, gpflow.models.SGPR)
    if not held:  # at q = the (whitened) prior the ELBO would not depend on the inducing inputs
        model.q_mu.assign(np.full(model.q_mu.shape, 0.5))
        model.q_mu_orthogonal.assign(np.full(model.q_mu_orthogonal.shape, -0.3))
    loss = tf.function(lambda: model.training_loss() if held else model.training_loss(d))
    before = loss().numpy()
    for attribute, points in (
        ("inducing_variable", ""),
        ("orthogonal_inducing_variable", ".orthogonal"),
    ):
        with pytest.raises(AttributeError, match=f"fixed at construction.*{attribute}{points}.Z"):
            setattr(model, attribute, gpflow.inducing_variables.InducingPoints(Z_U + 0.3))
    assert loss().numpy() == before

    model.inducing_variable.Z.assign(Z_U + 0.3)
    model.orthogonal_inducing_variable.orthogonal.Z.assign(Z_V - 0.2)
    moved = ORTHOGONAL_MODELS[name](d, Z_U + 0.3, Z_V - 0.2)
    gpflow.utilities.multiple_assign(moved, gpflow.utilities.parameter_dict(model))
    expected = moved.training_loss() if held else moved.training_loss(d)
    assert abs(loss().numpy() - before) > 1e-3
    np.testing.assert_allclose(loss().numpy(), expected.numpy(), rtol=1e-12)


@pytest.mark.parametrize("separate", [False, True])
def test_a_regular_set_replaced_inside_a_multi_output_set_is_refused_when_used(rng, separate):
    """Replacing the points object inside a shared or separate set (below the attribute the
    model guards) would leave the orthogonal set computing with the old one: the next use says
    so; moving the points in place works."""
    mo = gpflow.inducing_variables
    if separate:
        kernel_ = gpflow.kernels.SeparateIndependent([kernel(), kernel()])
        regular = mo.SeparateIndependentInducingVariables([mo.InducingPoints(Z_U) for _ in "ab"])
    else:
        kernel_ = gpflow.kernels.SharedIndependent(kernel(), output_dim=2)
        regular = mo.SharedIndependentInducingVariables(mo.InducingPoints(Z_U))
    model = gt.SOLVEGP(kernel_, gpflow.likelihoods.Gaussian(NOISE), regular, Z_V, num_latent_gps=2)
    d = data(rng, num_outputs=2)
    model.q_mu.assign(np.full(model.q_mu.shape, 0.5))  # at the prior Z would not matter
    before = model.elbo(d).numpy()
    inner = regular.inducing_variable_list[0] if separate else regular.inducing_variable
    inner.Z.assign(Z_U + 0.3)  # in place: used
    assert model.elbo(d).numpy() != before
    if separate:
        regular.inducing_variable_list[0] = mo.InducingPoints(Z_U)
    else:
        regular.inducing_variable = mo.InducingPoints(Z_U)
    for use in (lambda: model.elbo(d), lambda: model.predict_f(d[0]), model.prior_kl):
        with pytest.raises(ValueError, match="regular inducing set was replaced after"):
            use()


def test_posterior_refuses_exact_predictive_variance(rng):
    model = gt.TightSGPR(
        data(rng), kernel(), Z_U, noise_variance=NOISE, exact_predictive_variance=True
    )
    with pytest.raises(ValueError, match="default_posterior"):
        model.posterior()
    Xnew = rng.uniform(0, 6, (4, 1))
    default = model.default_posterior().predict_f(Xnew)
    correction = model.exact_variance_correction(Xnew)
    np.testing.assert_allclose(model.predict_f(Xnew)[1][:, 0], default[1][:, 0] + correction)


def union_residual_covariance(X1, X2, Z, jitter, lengthscale=LENGTHSCALE):
    """k(x, x') - k(x, Z)(K_ZZ + εI)⁻¹k(Z, x') for the union Z = Z_u ∪ Z_v."""
    K1Z, K2Z = se_kernel(X1, Z, VARIANCE, lengthscale), se_kernel(X2, Z, VARIANCE, lengthscale)
    KZZ = se_kernel(Z, Z, VARIANCE, lengthscale) + jitter * np.eye(len(Z))
    return se_kernel(X1, X2, VARIANCE, lengthscale) - K1Z @ np.linalg.solve(KZZ, K2Z.T)


def test_tight_solve_gpr_exact_variance_uses_the_residual_given_both_sets(rng):
    """
    Eq. 12 of Bui et al. (2025) with the residual D given Z_u ∪ Z_v, added to SOLVEGPR's own
    predictive variance: c_*f D⁻¹ S_f D⁻¹ c_f* - c_*f D⁻¹ c_f*, S_f = M^½ D M^½ (dense).
    """
    X, Y = data(rng)
    model = gt.TightSOLVEGPR(
        (X, Y), kernel(), Z_U, Z_V, noise_variance=NOISE, exact_predictive_variance=True
    )
    Xnew = rng.uniform(0, 6, (7, 1))
    jitter = gpflow.config.default_jitter()
    Z = np.vstack([Z_U, Z_V])
    D = union_residual_covariance(X, X, Z, jitter)
    C = union_residual_covariance(Xnew, X, Z, jitter)
    m = NOISE / (np.diag(D) + NOISE)
    W = np.linalg.solve(D + jitter * np.eye(len(X)), C.T)
    S = np.sqrt(m)[:, None] * D * np.sqrt(m)[None, :]
    expected = np.einsum("nk,nm,mk->k", W, S, W) - np.einsum("kn,nk->k", C, W)
    default = model.default_posterior().predict_f(Xnew)[1][:, 0].numpy()
    np.testing.assert_allclose(model.predict_f(Xnew)[1][:, 0] - default, expected, rtol=1e-6)


def test_tight_solve_gpr_exact_variance_at_training_inputs(rng):
    """
    At x_n the correction is -(1 - m_n) d_n with d_n the residual given both sets. The identity
    is exact without jitter; the jitter added to D_ff moves it, so it is checked with a small
    jitter and a short lengthscale, where D_ff is well conditioned.
    """
    jitter, lengthscale = 1e-9, 0.3
    X, Y = data(rng, num_data=12)
    short = gpflow.kernels.SquaredExponential(variance=VARIANCE, lengthscales=lengthscale)
    with gpflow.config.as_context(gpflow.config.Config(jitter=jitter)):
        model = gt.TightSOLVEGPR(
            (X, Y), short, Z_U, Z_V, noise_variance=NOISE, exact_predictive_variance=True
        )
        correction = model.exact_variance_correction(X).numpy()
    d = np.diag(union_residual_covariance(X, X, np.vstack([Z_U, Z_V]), jitter, lengthscale))
    # the jitter of 1e-9 on D_ff moves the smallest corrections by up to ~1e-7
    np.testing.assert_allclose(correction, -(1 - NOISE / (d + NOISE)) * d, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("relaxation", ["beta", "free"])
def test_collapsed_bound_with_a_fixed_relaxation_against_dense(rng, relaxation):
    """
    log N(y | 0, Q_ff + σ²I) - ½Σ m_n d_n/σ² + ½Σ(1 + log m_n - m_n) (Bui et al. 2025, eq. 8
    collapsed), and never above the optimal relaxation (T-SGPR, eq. 9).
    """
    X, Y = data(rng)
    model = RelaxedSGPR((X, Y), kernel(), Z_U, noise_variance=NOISE, relaxation=relaxation)
    if relaxation == "beta":
        model.relaxation.beta.assign([0.37])
    else:
        model.relaxation.m.assign(rng.uniform(0.2, 1.5, (30, 1)))
    jitter = gpflow.config.default_jitter()
    D = union_residual_covariance(X, X, Z_U, jitter)
    d = np.diag(D)
    Q = se_kernel(X, X, VARIANCE, LENGTHSCALE) - D
    m = 0.37 / (d + 0.37) if relaxation == "beta" else model.relaxation.m.numpy()[:, 0]
    expected = (
        log_gauss(Y, Q + NOISE * np.eye(30))
        - 0.5 * np.sum(m * d / NOISE)
        + 0.5 * np.sum(1 + np.log(m) - m)
    )
    np.testing.assert_allclose(model.elbo(), expected, rtol=1e-9)
    tight = gt.TightSGPR((X, Y), kernel(), Z_U, noise_variance=NOISE)
    assert model.elbo() <= tight.elbo()


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda d: gt.TightSGPR(d, kernel(), Z_U, relaxation="sampled"), "must be one of"),
        (
            lambda d: gt.TightSVGP(
                kernel(), gpflow.likelihoods.Bernoulli(), Z_U, relaxation="optimal"
            ),
            "Gaussian likelihood",
        ),
        (
            lambda d: gt.TightSVGP(
                kernel(),
                gpflow.likelihoods.Gaussian(),
                Z_U,
                relaxation=gt.relaxation.SampledOptimalRelaxation(),
            ),
            "cannot use a SampledOptimalRelaxation",
        ),
    ],
)
def test_a_relaxation_a_model_cannot_honour_is_refused(rng, build, match):
    with pytest.raises(ValueError, match=match):
        build(data(rng))


@pytest.mark.parametrize("name", ["TightSGPR", "RelaxedSGPR-beta"])
def test_logdet_term_takes_sgpr_common_tensors(rng, name):
    """CGLB-style code passes SGPR's own CommonTensors to logdet_term: same value."""
    model = SGPR_LIKE[name](data(rng))
    np.testing.assert_allclose(
        model.logdet_term(model._common_calculation()),
        model.logdet_term(model.common_terms()),
        rtol=1e-12,
    )


def test_posterior_settings_are_constructor_only(rng):
    X, Y = data(rng)
    model = gt.PowerEPSGP((X, Y), kernel(), Z_U, alpha=0.5, noise_variance=NOISE)
    posterior = model.posterior()
    for name, value in (("alpha", 0.9), ("blocks", None), ("sites", None)):
        with pytest.raises(AttributeError, match="fixed at construction"):
            setattr(posterior, name, value)
    relaxation = gt.relaxation.BetaRelaxation(0.3)
    with pytest.raises(AttributeError, match="fixed at construction"):
        relaxation.beta = gpflow.Parameter(0.5)


def test_collapsed_orthogonal_posterior_without_a_mean_function(rng):
    X, Y = data(rng)
    model = gt.SOLVEGPR((X, Y), kernel(), Z_U, Z_V, noise_variance=NOISE)
    posterior = gt.posteriors.CollapsedOrthogonalPosterior(
        model.kernel,
        model.data,
        model.orthogonal_inducing_variable,
        model.likelihood,
        precompute_cache=PrecomputeCacheType.TENSOR,
    )
    Xnew = rng.uniform(0, 6, (5, 1))
    np.testing.assert_allclose(posterior.predict_f(Xnew)[0], model.predict_f(Xnew)[0], rtol=1e-12)
