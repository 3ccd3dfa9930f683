"""
SOLVEGPR, TightSOLVEGPR, SOLVEGP and TightSOLVEGP against dense references written from
Fernlund 2022 and docs/solve.md, Derivations (tests/reference_solve.py), GPflow's SGPR/SVGP/GPR
and the package's T-models. Eqs. 5.xx and "Algorithm 3" are Fernlund 2022's; eqs. 9 and 14 are
Bui, Ashman & Turner 2025's. L_thesis is eq. 5.33 (= SGPR on Z_u ∪ Z_v), L_SOLVE = L_thesis -
Delta the exact collapsed SOLVE-GP bound (docs/solve.md, Derivations), L_OD the bound of ODVGP
(S_v = C_vv) at the same q(u) and m_v, and T- marks the tighter (eq. 9/14) versions.

Property ids used in this file's docstrings:
S1  bound="thesis" equals gpflow SGPR on Z_u ∪ Z_v, also after moving a point from Z_v to Z_u.
S2  with no orthogonal (or no regular) points, every model equals SGPR/SVGP (T-SGPR/T-SVGP).
S3  the predictive mean equals SGPR's on Z_u ∪ Z_v, for any Z_u and Z_v.
S4  the predictive covariance is eq. 5.15 at the optimal q; SGPR's on the union if K_uf C_fv = 0.
S5  L_OD <= L_SOLVE <= L_thesis <= log p(y).
S6  L_SOLVE = L_thesis - Delta with Delta >= 0, the uncollapsed ELBO at the optimal q (eq. 5.26).
S7  the uncollapsed ELBO is stationary at eq. 5.26.
S8  for any q, the uncollapsed ELBO is at most L_SOLVE.
S9  T-thesis = T-SGPR (eq. 9) on the union, T-solve = T-thesis - Delta, and each T-bound >= plain.
S10 T-SOLVEGP (eq. 14) at eq. 5.26 with beta = sigma^2 is the collapsed T-solve bound;
    beta = sigma^2 is optimal and beta -> inf gives SOLVEGP.
S11 a port of Algorithm 3 agrees once its line 20 is corrected (docs/solve.md, errata).
S12 Z_u ∪ Z_v = X: L_thesis = log p(y) and d = 0, but L_SOLVE < log p(y).
S13 adding points to Z_v never lowers L_SOLVE or L_thesis, and L_SOLVE >= SGPR(Z_u).
S14 Delta ~ 0 for well-separated u and v, Delta > 0 for overlapping ones.
S15 bound="thesis" has the gradients of SGPR on the union (the same objective).
S16 whitened and unwhitened SOLVEGP agree for corresponding q.
S17 compute_qu()/compute_qv() exported into SOLVEGP give L_SOLVE and the same predictions.
S18 T-SOLVEGP predicts as SOLVEGP; its training-input variance is m_n d_n + s_n.
S19 shapes (full_cov, full_output_cov, several outputs, mean function) and float32.
"""

import gpflow
import numpy as np
import pytest
import tensorflow as tf
from gpflow.covariances import Kuf, Kuu
from gpflow.inducing_variables import (
    InducingPoints,
    SeparateIndependentInducingVariables,
    SharedIndependentInducingVariables,
)
from gpflow.posteriors import PrecomputeCacheType

from gpflow_tight import (
    SOLVEGP,
    SOLVEGPR,
    CholeskyError,
    FrequencyInducingFeatures,
    OrthogonalInducingVariables,
    TightSGPR,
    TightSOLVEGP,
    TightSOLVEGPR,
    TightSVGP,
)
from gpflow_tight.covariances import Kuv
from tests.reference import log_gauss
from tests.reference_solve import (
    algorithm3,
    optimal_q,
    predictive,
    solve_blocks,
    thesis_bound,
    uncollapsed_elbo,
)

VARIANCE, LENGTHSCALE, NOISE = 1.2, 0.6, 0.05


def kernel():
    return gpflow.kernels.SquaredExponential(variance=VARIANCE, lengthscales=LENGTHSCALE)


def problem(rng, num_data=50, num_outputs=1):
    X = np.sort(rng.uniform(0, 6, (num_data, 1)), axis=0)
    Y = np.sin(2 * X) + 0.2 * rng.standard_normal((num_data, num_outputs))
    Z_u = np.linspace(0.3, 5.7, 5)[:, None]
    Z_v = np.array([[0.8], [2.1], [3.9], [5.2]])  # interleaved with Z_u: Delta > 0
    return X, Y, Z_u, Z_v


def collapsed(cls, X, Y, Z_u, Z_v, **kwargs):
    return cls((X, Y), kernel(), Z_u, Z_v, noise_variance=NOISE, **kwargs)


def uncollapsed_at(cls, q, Z_u, Z_v, whiten=False, **kwargs):
    """An uncollapsed model holding q = (m_u, S_u, m_v, S_v) (non-whitened values)."""
    m_u, S_u, m_v, S_v = (np.asarray(t) for t in q)
    num_outputs = m_u.shape[1]
    return cls(
        kernel(),
        gpflow.likelihoods.Gaussian(NOISE),
        Z_u,
        Z_v,
        whiten=False,
        q_mu=m_u,
        q_sqrt=np.tile(np.linalg.cholesky(S_u), (num_outputs, 1, 1)),
        q_mu_orthogonal=m_v,
        q_sqrt_orthogonal=np.tile(np.linalg.cholesky(S_v), (num_outputs, 1, 1)),
        **kwargs,
    )


def whitened_copy(model, Z_u, Z_v, cls=SOLVEGP, **kwargs):
    """The same q in whitened coordinates (S16): m̃ = L⁻¹m, R̃ = L⁻¹R."""
    b = solve_blocks(np.zeros((1, 1)), Z_u, Z_v, VARIANCE, LENGTHSCALE)
    L_u, L_v = np.linalg.cholesky(b["K_uu"]), np.linalg.cholesky(b["C_vv"])
    return cls(
        kernel(),
        gpflow.likelihoods.Gaussian(NOISE),
        Z_u,
        Z_v,
        whiten=True,
        q_mu=np.linalg.solve(L_u, model.q_mu.numpy()),
        q_sqrt=np.linalg.solve(L_u, model.q_sqrt.numpy()),
        q_mu_orthogonal=np.linalg.solve(L_v, model.q_mu_orthogonal.numpy()),
        q_sqrt_orthogonal=np.linalg.solve(L_v, model.q_sqrt_orthogonal.numpy()),
        **kwargs,
    )


# ------------------------------------------------------------------ collapsed bounds


@pytest.mark.parametrize("num_outputs", [1, 2])
def test_thesis_bound_is_sgpr_on_the_union(rng, num_outputs):
    """S1, also after relabelling a point from Z_v to Z_u."""
    X, Y, Z_u, Z_v = problem(rng, num_outputs=num_outputs)
    union = gpflow.models.SGPR((X, Y), kernel(), np.vstack([Z_u, Z_v]), noise_variance=NOISE)
    thesis = collapsed(SOLVEGPR, X, Y, Z_u, Z_v, bound="thesis")
    relabelled = collapsed(SOLVEGPR, X, Y, np.vstack([Z_u, Z_v[:1]]), Z_v[1:], bound="thesis")
    expected = union.elbo().numpy()
    np.testing.assert_allclose(thesis.elbo().numpy(), expected, rtol=1e-10)
    np.testing.assert_allclose(relabelled.elbo().numpy(), expected, rtol=1e-10)
    b = solve_blocks(X, Z_u, Z_v, VARIANCE, LENGTHSCALE)
    np.testing.assert_allclose(thesis.elbo().numpy(), thesis_bound(Y, b, NOISE), rtol=1e-9)


@pytest.mark.parametrize("num_outputs", [1, 2])
def test_solve_bound_is_the_uncollapsed_elbo_at_the_optimal_q(rng, num_outputs):
    """S6: L_SOLVE = dense uncollapsed ELBO at eq. 5.26, = L_thesis - P Delta with Delta > 0."""
    X, Y, Z_u, Z_v = problem(rng, num_outputs=num_outputs)
    b = solve_blocks(X, Z_u, Z_v, VARIANCE, LENGTHSCALE)
    expected = uncollapsed_elbo(Y, b, NOISE, *optimal_q(Y, b, NOISE))
    model = collapsed(SOLVEGPR, X, Y, Z_u, Z_v)
    np.testing.assert_allclose(model.elbo().numpy(), expected, rtol=1e-9)
    gap = thesis_bound(Y, b, NOISE) - expected
    assert gap > 1e-3
    np.testing.assert_allclose(model.decoupling_kl().numpy(), gap, rtol=1e-6)


def test_bound_ordering(rng):
    """S5: L_OD <= L_SOLVE <= L_thesis <= log p(y); S13: L_SOLVE >= SGPR(Z_u)."""
    X, Y, Z_u, Z_v = problem(rng)
    b = solve_blocks(X, Z_u, Z_v, VARIANCE, LENGTHSCALE)
    m_u, S_u, m_v, _ = optimal_q(Y, b, NOISE)
    od = uncollapsed_elbo(Y, b, NOISE, m_u, S_u, m_v, b["C_vv"])  # ODVGP: S_v = C_vv
    solve = collapsed(SOLVEGPR, X, Y, Z_u, Z_v).elbo().numpy()
    thesis = collapsed(SOLVEGPR, X, Y, Z_u, Z_v, bound="thesis").elbo().numpy()
    exact = gpflow.models.GPR((X, Y), kernel(), noise_variance=NOISE).log_marginal_likelihood()
    sgpr_u = gpflow.models.SGPR((X, Y), kernel(), Z_u, noise_variance=NOISE).elbo().numpy()
    assert od < solve < thesis < exact.numpy()
    assert solve > sgpr_u


def test_adding_an_orthogonal_point_never_lowers_the_bound(rng):
    """S13 for the 'solve' bound, and for 'thesis' (Titsias's monotonicity)."""
    X, Y, Z_u, Z_v = problem(rng)
    for bound in ("solve", "thesis"):
        values = [
            collapsed(SOLVEGPR, X, Y, Z_u, Z_v[:j], bound=bound).elbo().numpy()
            for j in range(len(Z_v) + 1)
        ]
        assert np.all(np.diff(values) > -1e-9), (bound, values)


def test_separated_sets_have_no_gap(rng):
    """S14: Delta ~ 0 when u and v explain separate data clusters, > 0 when they overlap."""
    X = np.vstack([rng.uniform(0, 2, (30, 1)), rng.uniform(20, 22, (30, 1))])
    Y = np.sin(3 * X) + 0.1 * rng.standard_normal(X.shape)
    Z_u, Z_v = np.linspace(0, 2, 4)[:, None], np.linspace(20, 22, 4)[:, None]
    separated = collapsed(SOLVEGPR, X, Y, Z_u, Z_v)
    assert separated.decoupling_kl().numpy() < 1e-10
    overlapping = collapsed(SOLVEGPR, X, Y, Z_u, Z_u + 0.3)
    assert overlapping.decoupling_kl().numpy() > 1e-2


def test_orthogonal_points_at_every_datum_give_the_exact_evidence_for_thesis_only(rng):
    """S12: Z_u ∪ Z_v = X (tiny jitter): L_thesis = log p(y) and d = 0; L_SOLVE < log p(y)."""
    X = np.linspace(0, 6, 12)[:, None]
    Y = np.sin(X) + 0.1 * rng.standard_normal(X.shape)
    with gpflow.config.as_context(gpflow.config.Config(jitter=1e-12)):
        thesis = collapsed(SOLVEGPR, X, Y, X[::2], X[1::2], bound="thesis")
        tight = collapsed(TightSOLVEGPR, X, Y, X[::2], X[1::2], bound="thesis")
        solve = collapsed(SOLVEGPR, X, Y, X[::2], X[1::2])
        exact = gpflow.models.GPR((X, Y), kernel(), noise_variance=NOISE)
        logml = exact.log_marginal_likelihood().numpy()
        np.testing.assert_allclose(thesis.elbo().numpy(), logml, rtol=1e-7)
        np.testing.assert_allclose(tight.elbo().numpy(), thesis.elbo().numpy(), rtol=1e-7)
        assert solve.elbo().numpy() < logml - 1e-3


def test_no_orthogonal_points_is_sgpr(rng):
    """S2: M_v = 0 gives SGPR(Z_u), M_u = 0 gives SGPR(Z_v); the T-variant gives T-SGPR."""
    X, Y, Z_u, _ = problem(rng)
    empty = np.zeros((0, 1))
    sgpr = gpflow.models.SGPR((X, Y), kernel(), Z_u, noise_variance=NOISE)
    tight = TightSGPR((X, Y), kernel(), Z_u, noise_variance=NOISE)
    Xnew = np.linspace(-1, 7, 9)[:, None]
    mean, var = sgpr.predict_f(Xnew)
    for Z_regular, Z_orthogonal in ((Z_u, empty), (empty, Z_u)):
        for bound in ("solve", "thesis"):
            model = collapsed(SOLVEGPR, X, Y, Z_regular, Z_orthogonal, bound=bound)
            np.testing.assert_allclose(model.elbo().numpy(), sgpr.elbo().numpy(), rtol=1e-10)
            got_mean, got_var = model.predict_f(Xnew)
            np.testing.assert_allclose(got_mean, mean, atol=1e-9)
            np.testing.assert_allclose(got_var, var, atol=1e-9)
            t_model = collapsed(TightSOLVEGPR, X, Y, Z_regular, Z_orthogonal, bound=bound)
            np.testing.assert_allclose(t_model.elbo().numpy(), tight.elbo().numpy(), rtol=1e-10)


def test_tight_collapsed_bounds(rng):
    """S9: T-thesis = T-SGPR on the union = dense; T-solve = T-thesis - Delta; T >= plain."""
    X, Y, Z_u, Z_v = problem(rng)
    b = solve_blocks(X, Z_u, Z_v, VARIANCE, LENGTHSCALE)
    union = TightSGPR((X, Y), kernel(), np.vstack([Z_u, Z_v]), noise_variance=NOISE)
    t_thesis = collapsed(TightSOLVEGPR, X, Y, Z_u, Z_v, bound="thesis").elbo().numpy()
    t_solve_model = collapsed(TightSOLVEGPR, X, Y, Z_u, Z_v)
    np.testing.assert_allclose(t_thesis, union.elbo().numpy(), rtol=1e-10)
    np.testing.assert_allclose(t_thesis, thesis_bound(Y, b, NOISE, tight=True), rtol=1e-9)
    np.testing.assert_allclose(
        t_solve_model.elbo().numpy(),
        t_thesis - t_solve_model.decoupling_kl().numpy(),
        rtol=1e-10,
    )
    exact = gpflow.models.GPR((X, Y), kernel(), noise_variance=NOISE).log_marginal_likelihood()
    for bound in ("solve", "thesis"):
        plain = collapsed(SOLVEGPR, X, Y, Z_u, Z_v, bound=bound).elbo().numpy()
        tight = collapsed(TightSOLVEGPR, X, Y, Z_u, Z_v, bound=bound).elbo().numpy()
        assert plain < tight < exact.numpy()


def test_algorithm3_port_and_its_line_20_erratum(rng):
    """S11: the corrected Algorithm 3 agrees with SOLVEGPR('thesis'); the printed line 20 not."""
    X, Y, Z_u, Z_v = problem(rng)
    Xnew = np.linspace(-0.5, 6.5, 15)[:, None]
    bound, mean, var = algorithm3(X, Y[:, 0], Z_u, Z_v, Xnew, VARIANCE, LENGTHSCALE, NOISE)
    model = collapsed(SOLVEGPR, X, Y, Z_u, Z_v, bound="thesis")
    got_mean, got_var = model.predict_f(Xnew)
    np.testing.assert_allclose(model.elbo().numpy(), bound, rtol=1e-9)
    np.testing.assert_allclose(got_mean[:, 0], mean, atol=1e-8)
    np.testing.assert_allclose(got_var[:, 0], var, atol=1e-8)
    _, printed_mean, _ = algorithm3(
        X, Y[:, 0], Z_u, Z_v, Xnew, VARIANCE, LENGTHSCALE, NOISE, printed_line_20=True
    )
    assert np.max(np.abs(printed_mean - mean)) > 1e-2


# ------------------------------------------------------------------ collapsed predictions


def test_predictions_mean_is_sgpr_union_and_variance_is_mean_field(rng):
    """S3, S4: the mean of SGPR on Z_u ∪ Z_v; the covariance of eq. 5.15 with the optimal q."""
    X, Y, Z_u, Z_v = problem(rng, num_outputs=2)
    Xnew = np.linspace(-1, 7, 20)[:, None]
    b = solve_blocks(X, Z_u, Z_v, VARIANCE, LENGTHSCALE)
    ref_mean, ref_cov = predictive(Xnew, Z_u, Z_v, b, *optimal_q(Y, b, NOISE))
    union = gpflow.models.SGPR((X, Y), kernel(), np.vstack([Z_u, Z_v]), noise_variance=NOISE)
    model = collapsed(SOLVEGPR, X, Y, Z_u, Z_v)
    mean, var = model.predict_f(Xnew)
    _, cov = model.predict_f(Xnew, full_cov=True)
    np.testing.assert_allclose(mean, union.predict_f(Xnew)[0], atol=1e-8)
    np.testing.assert_allclose(mean, ref_mean, atol=1e-8)
    np.testing.assert_allclose(var, np.tile(np.diag(ref_cov)[:, None], (1, 2)), atol=1e-8)
    np.testing.assert_allclose(cov, np.tile(ref_cov, (2, 1, 1)), atol=1e-8)
    assert np.max(np.abs(var - union.predict_f(Xnew)[1])) > 1e-4  # not SGPR's variance
    for cache in (PrecomputeCacheType.TENSOR, PrecomputeCacheType.VARIABLE):
        cached_mean, cached_var = model.posterior(cache).predict_f(Xnew)
        np.testing.assert_allclose(cached_mean, mean, atol=1e-12)
        np.testing.assert_allclose(cached_var, var, atol=1e-12)
    y_mean, y_var = model.predict_y(Xnew)
    np.testing.assert_allclose(y_var, var + NOISE, atol=1e-12)
    density = model.predict_log_density((Xnew, np.zeros((20, 2))))
    expected = -0.5 * np.log(2 * np.pi * (var + NOISE)) - 0.5 * mean**2 / (var + NOISE)
    np.testing.assert_allclose(density, np.sum(expected, axis=1), rtol=1e-10)


def test_separated_sets_recover_sgpr_variance(rng):
    """S4: with K_uf C_fv = 0 the mean-field variance is SGPR-on-the-union's."""
    X = np.vstack([rng.uniform(0, 2, (30, 1)), rng.uniform(20, 22, (30, 1))])
    Y = np.sin(3 * X) + 0.1 * rng.standard_normal(X.shape)
    Z_u, Z_v = np.linspace(0, 2, 4)[:, None], np.linspace(20, 22, 4)[:, None]
    Xnew = np.vstack([np.linspace(-1, 3, 5)[:, None], np.linspace(19, 23, 5)[:, None]])
    union = gpflow.models.SGPR((X, Y), kernel(), np.vstack([Z_u, Z_v]), noise_variance=NOISE)
    model = collapsed(SOLVEGPR, X, Y, Z_u, Z_v)
    np.testing.assert_allclose(model.predict_f(Xnew)[1], union.predict_f(Xnew)[1], atol=1e-9)


def test_mean_function_and_heteroscedastic_shapes(rng):
    """S19: mean function and full_output_cov shapes."""
    X, Y, Z_u, Z_v = problem(rng, num_outputs=2)
    mean_function = gpflow.functions.Linear(A=np.array([[0.5, -0.2]]), b=np.array([1.0, 2.0]))
    model = collapsed(SOLVEGPR, X, Y + 1.0, Z_u, Z_v, mean_function=mean_function)
    shifted = collapsed(SOLVEGPR, X, Y - X @ np.array([[0.5, -0.2]]) - [0.0, 1.0], Z_u, Z_v)
    np.testing.assert_allclose(model.elbo().numpy(), shifted.elbo().numpy(), rtol=1e-10)
    Xnew = np.linspace(0, 1, 3)[:, None]
    mean, var = model.predict_f(Xnew, full_output_cov=True)
    assert mean.shape == (3, 2) and var.shape == (3, 2, 2)
    _, var = model.predict_f(Xnew, full_cov=True, full_output_cov=True)
    assert var.shape == (3, 2, 3, 2)


# ------------------------------------------------------------------ uncollapsed models


@pytest.mark.parametrize("num_outputs", [1, 2])
def test_uncollapsed_at_the_optimal_q_equals_collapsed(rng, num_outputs):
    """S17 and S16: compute_qu and compute_qv exported into SOLVEGP (whitened or not) give
    L_SOLVE and the same predictions; S10: T-SOLVEGP with beta = sigma^2 gives the collapsed
    T-bound."""
    X, Y, Z_u, Z_v = problem(rng, num_outputs=num_outputs)
    b = solve_blocks(X, Z_u, Z_v, VARIANCE, LENGTHSCALE)
    model = collapsed(SOLVEGPR, X, Y, Z_u, Z_v)
    q = (*model.compute_qu(), *model.compute_qv())
    for got, expected in zip(q, optimal_q(Y, b, NOISE)):
        np.testing.assert_allclose(got, expected, atol=1e-8)
    Xnew = np.linspace(-1, 7, 11)[:, None]
    plain = uncollapsed_at(SOLVEGP, q, Z_u, Z_v)
    for uncollapsed in (plain, whitened_copy(plain, Z_u, Z_v)):
        np.testing.assert_allclose(uncollapsed.elbo((X, Y)), model.elbo(), rtol=1e-9)
        for got, expected in zip(uncollapsed.predict_f(Xnew), model.predict_f(Xnew)):
            np.testing.assert_allclose(got, expected, atol=1e-8)
    tight = uncollapsed_at(TightSOLVEGP, q, Z_u, Z_v)
    np.testing.assert_allclose(tight.beta.numpy(), NOISE)
    expected = collapsed(TightSOLVEGPR, X, Y, Z_u, Z_v).elbo().numpy()
    np.testing.assert_allclose(tight.elbo((X, Y)).numpy(), expected, rtol=1e-9)


def test_uncollapsed_elbo_matches_dense_reference_for_any_q(rng):
    """Eqs. 5.17-5.24 and eq. 14 for a random q; S8: never above L_SOLVE; S18: tighter variance."""
    X, Y, Z_u, Z_v = problem(rng)
    b = solve_blocks(X, Z_u, Z_v, VARIANCE, LENGTHSCALE)
    L_u = np.tril(0.3 * rng.standard_normal((5, 5))) + np.diag(rng.uniform(0.2, 0.6, 5))
    L_v = np.tril(0.3 * rng.standard_normal((4, 4))) + np.diag(rng.uniform(0.1, 0.3, 4))
    q = (rng.standard_normal((5, 1)), L_u @ L_u.T, rng.standard_normal((4, 1)), L_v @ L_v.T)
    solve = collapsed(SOLVEGPR, X, Y, Z_u, Z_v).elbo().numpy()
    beta = 0.3
    for cls, relaxation in ((SOLVEGP, None), (TightSOLVEGP, lambda d: beta / (d + beta))):
        kwargs = {} if relaxation is None else {"beta": beta}
        model = uncollapsed_at(cls, q, Z_u, Z_v, **kwargs)
        expected = uncollapsed_elbo(Y, b, NOISE, *q, relaxation=relaxation)
        np.testing.assert_allclose(model.elbo((X, Y)).numpy(), expected, rtol=1e-9)
        assert expected < solve
    tight = uncollapsed_at(TightSOLVEGP, q, Z_u, Z_v, beta=beta)
    mean, q_var, residual = tight.latent_marginals_with_residual(X)
    _, var, m = tight.training_marginals(X)
    np.testing.assert_allclose(var, m * residual + q_var, rtol=1e-12)
    np.testing.assert_allclose(tight.predict_f(X)[1], q_var + residual, rtol=1e-10)  # S18


def test_gradient_vanishes_at_the_optimal_q(rng):
    """S7: eq. 5.26 is a stationary point of the uncollapsed ELBO (whitened parameters)."""
    X, Y, Z_u, Z_v = problem(rng)
    model = collapsed(SOLVEGPR, X, Y, Z_u, Z_v)
    uncollapsed = whitened_copy(
        uncollapsed_at(SOLVEGP, (*model.compute_qu(), *model.compute_qv()), Z_u, Z_v), Z_u, Z_v
    )
    variables = [
        uncollapsed.q_mu.unconstrained_variable,
        uncollapsed.q_mu_orthogonal.unconstrained_variable,
        uncollapsed.q_sqrt.unconstrained_variable,
        uncollapsed.q_sqrt_orthogonal.unconstrained_variable,
    ]
    with tf.GradientTape() as tape:
        elbo = uncollapsed.elbo((X, Y))
    for gradient in tape.gradient(elbo, variables):
        assert np.max(np.abs(gradient.numpy())) < 1e-6


def test_beta_equal_to_the_noise_is_optimal_and_large_beta_is_solvegp(rng):
    """S10: with q fixed, beta = sigma^2 maximises T-SOLVEGP; beta -> inf gives SOLVEGP."""
    X, Y, Z_u, Z_v = problem(rng)
    model = collapsed(SOLVEGPR, X, Y, Z_u, Z_v)
    q = (*model.compute_qu(), *model.compute_qv())
    values = {
        beta: uncollapsed_at(TightSOLVEGP, q, Z_u, Z_v, beta=beta).elbo((X, Y)).numpy()
        for beta in (NOISE / 3, NOISE, 3 * NOISE, 1e12)
    }
    assert values[NOISE] > max(values[NOISE / 3], values[3 * NOISE])
    plain = uncollapsed_at(SOLVEGP, q, Z_u, Z_v).elbo((X, Y)).numpy()
    np.testing.assert_allclose(values[1e12], plain, rtol=1e-9)


@pytest.mark.parametrize("likelihood", ["bernoulli", "student"])
def test_no_orthogonal_points_is_svgp_for_any_likelihood(rng, likelihood):
    """S2 for the uncollapsed models: SOLVEGP = SVGP, TightSOLVEGP = TightSVGP, any q."""
    X, Y, Z_u, _ = problem(rng)
    if likelihood == "bernoulli":
        Y, make = (Y > 0).astype(float), gpflow.likelihoods.Bernoulli
    else:
        make = gpflow.likelihoods.StudentT
    q_mu = rng.standard_normal((5, 1))
    q_sqrt = np.tril(0.2 * rng.standard_normal((1, 5, 5))) + 0.5 * np.eye(5)
    empty = np.zeros((0, 1))
    for whiten in (True, False):
        common = dict(q_mu=q_mu, q_sqrt=q_sqrt, whiten=whiten, num_data=len(X))
        pairs = (
            (SOLVEGP(kernel(), make(), Z_u, empty, **common), gpflow.models.SVGP),
            (TightSOLVEGP(kernel(), make(), Z_u, empty, beta=0.2, **common), TightSVGP),
        )
        for model, peer_class in pairs:
            extra = {"beta": 0.2} if peer_class is TightSVGP else {}
            peer = peer_class(kernel(), make(), Z_u, **common, **extra)
            np.testing.assert_allclose(
                model.elbo((X, Y)).numpy(), peer.elbo((X, Y)).numpy(), rtol=1e-10
            )
            for got, expected in zip(model.predict_f(X[:7]), peer.predict_f(X[:7])):
                np.testing.assert_allclose(got, expected, atol=1e-10)


def multi_output_kernels():
    """GPflow's multi-output kernels with independent latent GPs, L = 2 (P = 3 if mixed)."""
    W = np.array([[1.0, 0.3], [-0.5, 0.8], [0.2, 0.4]])
    return {
        "shared": (gpflow.kernels.SharedIndependent(kernel(), output_dim=2), 2),
        "separate": (gpflow.kernels.SeparateIndependent([kernel(), gpflow.kernels.Matern32()]), 2),
        "coregionalization": (
            gpflow.kernels.LinearCoregionalization([kernel(), gpflow.kernels.Matern52()], W),
            3,
        ),
    }


@pytest.mark.parametrize(
    "name, kind",
    [
        (name, kind)
        for name in ["shared", "separate", "coregionalization"]
        for kind in ["shared", "separate"]
    ]
    # GPflow's "fallback" sets are for mixed latent GPs (it has no Kuf for the others)
    + [("coregionalization", "fallback_shared"), ("coregionalization", "fallback_separate")],
)
def test_multi_output_without_orthogonal_points_is_svgp(rng, name, kind):
    """
    S2 for every SVGP multi-output setting with independent latent GPs, tight or not, with
    GPflow's shared or separate inducing sets and their "fallback" forms. TightSOLVEGP relaxes
    each latent GP whatever the container; TightSVGP does so too, except with the fallback
    containers, where it relaxes the outputs (docs/tight.md): there its peer holds the same sets
    in the plain container.
    """
    X = rng.uniform(0, 6, (30, 1))
    Z_u = np.linspace(0.3, 5.7, 5)[:, None]
    containers = {
        "shared": SharedIndependentInducingVariables,
        "separate": SeparateIndependentInducingVariables,
        "fallback_shared": gpflow.inducing_variables.FallbackSharedIndependentInducingVariables,
        "fallback_separate": gpflow.inducing_variables.FallbackSeparateIndependentInducingVariables,
    }

    def sets(Z, container_kind=kind):
        if container_kind.endswith("separate"):
            return containers[container_kind]([InducingPoints(Z), InducingPoints(Z + 0.1)])
        return containers[container_kind](InducingPoints(Z))

    q_mu = rng.standard_normal((5, 2))
    q_sqrt = np.tril(0.2 * rng.standard_normal((2, 5, 5))) + 0.6 * np.eye(5)
    for cls, peer_class in ((SOLVEGP, gpflow.models.SVGP), (TightSOLVEGP, TightSVGP)):
        extra = {"beta": np.array([0.1, 0.3])} if cls is TightSOLVEGP else {}
        made = []
        peer_kind = kind.removeprefix("fallback_") if cls is TightSOLVEGP else kind
        for model_class, args, regular in (
            (cls, (sets(np.zeros((0, 1))),), sets(Z_u)),
            (peer_class, (), sets(Z_u, peer_kind)),
        ):
            k, num_outputs = multi_output_kernels()[name]
            made.append(
                model_class(
                    k,
                    gpflow.likelihoods.Gaussian(NOISE),
                    regular,
                    *args,
                    q_mu=q_mu,
                    q_sqrt=q_sqrt,
                    num_latent_gps=2,
                    **extra,
                )
            )
        model, peer = made
        Y = rng.standard_normal((30, num_outputs))
        np.testing.assert_allclose(model.elbo((X, Y)), peer.elbo((X, Y)), rtol=1e-10)
        for full_cov in (False, True):
            for full_output_cov in (False, True):
                got = model.predict_f(X[:4], full_cov=full_cov, full_output_cov=full_output_cov)
                expected = peer.predict_f(X[:4], full_cov=full_cov, full_output_cov=full_output_cov)
                for g, e in zip(got, expected):
                    np.testing.assert_allclose(g, e, atol=1e-10)


def test_separate_latent_gps_are_independent_models(rng):
    """SeparateIndependent with separate sets and a Gaussian likelihood: the ELBO is the sum of
    two single-output SOLVEGPs, and each output's prediction is its own model's."""
    X, Y, Z_u, Z_v = problem(rng, num_outputs=2)
    kernels = [kernel(), gpflow.kernels.Matern32(lengthscales=0.8)]
    regular, orthogonal = [Z_u, Z_u + 0.2], [Z_v, Z_v - 0.15]
    q = [rng.standard_normal((5, 2)), rng.standard_normal((4, 2))]
    sqrt_u = np.tril(0.2 * rng.standard_normal((2, 5, 5))) + 0.6 * np.eye(5)
    sqrt_v = np.tril(0.2 * rng.standard_normal((2, 4, 4))) + 0.6 * np.eye(4)
    model = SOLVEGP(
        gpflow.kernels.SeparateIndependent(kernels),
        gpflow.likelihoods.Gaussian(NOISE),
        SeparateIndependentInducingVariables([InducingPoints(Z) for Z in regular]),
        SeparateIndependentInducingVariables([InducingPoints(Z) for Z in orthogonal]),
        q_mu=q[0],
        q_sqrt=sqrt_u,
        q_mu_orthogonal=q[1],
        q_sqrt_orthogonal=sqrt_v,
        whiten=False,
    )
    singles = [
        SOLVEGP(
            kernels[i],
            gpflow.likelihoods.Gaussian(NOISE),
            regular[i],
            orthogonal[i],
            q_mu=q[0][:, i : i + 1],
            q_sqrt=sqrt_u[i : i + 1],
            q_mu_orthogonal=q[1][:, i : i + 1],
            q_sqrt_orthogonal=sqrt_v[i : i + 1],
            whiten=False,
        )
        for i in range(2)
    ]
    expected = sum(m.elbo((X, Y[:, i : i + 1])).numpy() for i, m in enumerate(singles))
    np.testing.assert_allclose(model.elbo((X, Y)).numpy(), expected, rtol=1e-10)
    mean, var = model.predict_f(X[:6])
    for i, single in enumerate(singles):
        single_mean, single_var = single.predict_f(X[:6])
        np.testing.assert_allclose(mean[:, i], single_mean[:, 0], atol=1e-10)
        np.testing.assert_allclose(var[:, i], single_var[:, 0], atol=1e-10)


def test_minibatch_estimate_is_unbiased(rng):
    """The average of the scaled minibatch ELBOs over a partition is the full-batch ELBO."""
    X, Y, Z_u, Z_v = problem(rng, num_data=48)
    model = TightSOLVEGP(
        kernel(), gpflow.likelihoods.Gaussian(NOISE), Z_u, Z_v, num_data=48, beta=0.1
    )
    model.q_mu.assign(rng.standard_normal((5, 1)))
    model.q_mu_orthogonal.assign(rng.standard_normal((4, 1)))
    batches = np.array_split(rng.permutation(48), 4)
    estimates = [model.elbo((X[i], Y[i])).numpy() for i in batches]
    np.testing.assert_allclose(np.mean(estimates), model.elbo((X, Y)).numpy(), rtol=1e-10)


def test_trains_with_adam_under_tf_function_and_minibatches(rng):
    X, Y, Z_u, Z_v = problem(rng, num_data=64)
    model = TightSOLVEGP(kernel(), gpflow.likelihoods.Gaussian(0.3), Z_u, Z_v, num_data=64)
    dataset = tf.data.Dataset.from_tensor_slices((X, Y)).repeat().shuffle(64, seed=1).batch(16)
    loss = model.training_loss_closure(iter(dataset), compile=True)
    optimizer = gpflow.keras.tf_keras.optimizers.Adam(0.05)
    full = model.elbo((X, Y)).numpy()
    for _ in range(60):
        optimizer.minimize(loss, model.trainable_variables)
    assert model.elbo((X, Y)).numpy() > full + 10
    collapsed_model = collapsed(SOLVEGPR, X, Y, Z_u, Z_v)
    before = collapsed_model.elbo().numpy()
    gpflow.optimizers.Scipy().minimize(
        collapsed_model.training_loss, collapsed_model.trainable_variables, options={"maxiter": 20}
    )
    assert collapsed_model.elbo().numpy() > before


def test_thesis_training_follows_sgpr_on_the_union(rng):
    """S15: same objective, so the same gradients for kernel, noise and inducing inputs."""
    X, Y, Z_u, Z_v = problem(rng)
    model = collapsed(SOLVEGPR, X, Y, Z_u, Z_v, bound="thesis")
    union = gpflow.models.SGPR((X, Y), kernel(), np.vstack([Z_u, Z_v]), noise_variance=NOISE)

    def gradients(m, variables):
        with tf.GradientTape() as tape:
            loss = m.training_loss()
        return [g.numpy() for g in tape.gradient(loss, variables)]

    ours = gradients(
        model,
        [
            model.kernel.variance.unconstrained_variable,
            model.kernel.lengthscales.unconstrained_variable,
            model.likelihood.variance.unconstrained_variable,
            model.inducing_variable.Z.unconstrained_variable,
            model.orthogonal_inducing_variable.orthogonal.Z.unconstrained_variable,
        ],
    )
    theirs = gradients(
        union,
        [
            union.kernel.variance.unconstrained_variable,
            union.kernel.lengthscales.unconstrained_variable,
            union.likelihood.variance.unconstrained_variable,
            union.inducing_variable.Z.unconstrained_variable,
        ],
    )
    for got, expected in zip(ours[:3], theirs[:3]):
        np.testing.assert_allclose(got, expected, rtol=1e-7)
    np.testing.assert_allclose(np.vstack(ours[3:]), theirs[3], rtol=1e-6, atol=1e-9)


def test_float32(rng):
    """S19: a float32 smoke test (well-separated sets, larger jitter)."""
    X, Y, Z_u, Z_v = problem(rng)
    config = gpflow.config.Config(float=np.float32, jitter=1e-4)
    with gpflow.config.as_context(config):
        data = (X.astype(np.float32), Y.astype(np.float32))
        model = SOLVEGPR(data, kernel(), Z_u, Z_v, noise_variance=NOISE)
        uncollapsed = TightSOLVEGP(kernel(), gpflow.likelihoods.Gaussian(NOISE), Z_u, Z_v)
        for value in (model.elbo(), uncollapsed.elbo(data), model.predict_f(data[0])[1]):
            assert value.dtype == tf.float32 and np.all(np.isfinite(value.numpy()))


def test_checkpoint_restores_both_variational_distributions(rng, tmp_path):
    X, Y, Z_u, Z_v = problem(rng)
    model = TightSOLVEGP(kernel(), gpflow.likelihoods.Gaussian(NOISE), Z_u, Z_v, beta=0.3)
    model.q_mu_orthogonal.assign(rng.standard_normal((4, 1)))
    model.orthogonal_inducing_variable.orthogonal.Z.assign(Z_v + 0.1)
    path = tf.train.Checkpoint(model=model).save(str(tmp_path / "ckpt"))
    restored = TightSOLVEGP(kernel(), gpflow.likelihoods.Gaussian(NOISE), Z_u, Z_v)
    tf.train.Checkpoint(model=restored).restore(path).assert_consumed()
    np.testing.assert_allclose(restored.elbo((X, Y)).numpy(), model.elbo((X, Y)).numpy())


# ------------------------------------------------------------------ inducing sets


def test_orthogonal_inducing_variables_through_gpflow_dispatch(rng):
    """Kuu gives C_vv + jitter and Kuf gives C_vf (docs/solve.md); SVGP accepts the set alone."""
    X, Y, Z_u, Z_v = problem(rng)
    b = solve_blocks(X, Z_u, Z_v, VARIANCE, LENGTHSCALE)
    orthogonal = OrthogonalInducingVariables(Z_v, regular=Z_u)
    np.testing.assert_allclose(Kuu(orthogonal, kernel(), jitter=1e-6), b["C_vv"], atol=1e-12)
    np.testing.assert_allclose(Kuf(orthogonal, kernel(), X), b["C_vf"], atol=1e-12)
    svgp = gpflow.models.SVGP(kernel(), gpflow.likelihoods.Gaussian(NOISE), orthogonal)
    assert np.isfinite(svgp.elbo((X, Y)).numpy())


def test_mixed_inducing_sets_match_the_dense_union_bound(rng):
    """u and v of different kinds: the thesis bound is the Titsias bound of the joint set,
    whose covariances come straight from GPflow's Kuu/Kuf for each kind."""
    X, Y, Z_u, Z_v = problem(rng)
    k = kernel()
    multiscale = gpflow.inducing_variables.Multiscale(Z_u, np.full_like(Z_u, 0.3))
    points = gpflow.inducing_variables.InducingPoints(Z_v)
    windows = FrequencyInducingFeatures(Z_v + 0.2, np.full_like(Z_v, 0.4), np.full_like(Z_v, 2.0))
    point_rows = {id(points): Z_v}

    def cross(a, b):
        """Cov[a, b] from GPflow's Kuf when one side is points, else from Kuu of the union."""
        if id(b) in point_rows:
            return Kuf(a, k, point_rows[id(b)]).numpy()
        if id(a) in point_rows:
            return Kuf(b, k, point_rows[id(a)]).numpy().T
        return Kuv(a, b, k).numpy()

    pairs = ((multiscale, points), (points, multiscale), (windows, points), (points, windows))
    for regular, orthogonal in pairs + ((multiscale, windows),):
        K_rr = Kuu(regular, k, jitter=1e-6).numpy()
        K_oo = Kuu(orthogonal, k, jitter=1e-6).numpy()
        K_ro = cross(regular, orthogonal)
        K_joint = np.block([[K_rr, K_ro], [K_ro.T, K_oo]])
        K_jf = np.vstack([Kuf(regular, k, X).numpy(), Kuf(orthogonal, k, X).numpy()])
        Q = K_jf.T @ np.linalg.solve(K_joint, K_jf)
        expected = (
            log_gauss(Y, Q + NOISE * np.eye(len(X))) - 0.5 * np.sum(VARIANCE - np.diag(Q)) / NOISE
        )
        model = SOLVEGPR((X, Y), k, regular, orthogonal, bound="thesis", noise_variance=NOISE)
        np.testing.assert_allclose(model.elbo().numpy(), expected, rtol=1e-8)


# ------------------------------------------------------------------ bad input


def test_unwhitened_orthogonal_q_starts_at_the_prior(rng):
    """q(v⊥) = p(v⊥) = N(0, C_vv) when not given: its KL is 0 (N(0, I) would be far off)."""
    _, _, Z_u, Z_v = problem(rng)
    C_vv = solve_blocks(np.zeros((1, 1)), Z_u, Z_v, VARIANCE, LENGTHSCALE)["C_vv"]
    for q_diag in (False, True):
        model = SOLVEGP(
            kernel(), gpflow.likelihoods.Gaussian(), Z_u, Z_v, whiten=False, q_diag=q_diag
        )
        expected = np.sqrt(np.diag(C_vv))[:, None] if q_diag else np.linalg.cholesky(C_vv)[None]
        np.testing.assert_allclose(model.q_sqrt_orthogonal.numpy(), expected, rtol=1e-6)
        if not q_diag:
            K_uu = gpflow.covariances.Kuu(
                model.inducing_variable, kernel(), jitter=gpflow.config.default_jitter()
            )
            kl_u = gpflow.kullback_leiblers.gauss_kl(model.q_mu, model.q_sqrt, K_uu)
            np.testing.assert_allclose(model.prior_kl().numpy(), kl_u.numpy(), rtol=1e-10)


def test_multi_output_kernel_with_plain_inducing_points_is_refused(rng):
    """GPflow reads that as a fully correlated q(u) over all outputs, which SOLVE-GP is not."""
    with pytest.raises(TypeError, match="fully correlated"):
        SOLVEGP(
            gpflow.kernels.SharedIndependent(kernel(), output_dim=2),
            gpflow.likelihoods.Gaussian(),
            np.linspace(0, 1, 4)[:, None],
            np.zeros((0, 1)),
            q_mu=np.zeros((8, 1)),
            q_sqrt=np.eye(8)[None],
        )


def test_without_orthogonal_points_a_singular_kuu_fails_where_svgp_fails(rng):
    """As SVGP, construction succeeds; the posterior raises (TensorFlow's error type)."""
    Z = np.zeros((3, 1))  # coincident: K_uu is singular without jitter
    with gpflow.config.as_context(gpflow.config.Config(jitter=0.0)):
        model = SOLVEGP(kernel(), gpflow.likelihoods.Gaussian(), Z, np.zeros((0, 1)))
        with pytest.raises(tf.errors.InvalidArgumentError, match="jitter"):
            model.posterior()


def test_each_parameter_is_listed_once_for_gpflow_utilities(rng):
    """
    The orthogonal set's reference to the regular one is not a second path to Z_u: GPflow's
    upper-bound notebook copies ``parameter_dict`` without ``.inducing_variable.Z`` into a model
    with another number of inducing points.
    """
    X, Y, Z_u, Z_v = problem(rng)
    model = collapsed(SOLVEGPR, X, Y, Z_u, Z_v)
    paths = gpflow.utilities.parameter_dict(model)
    assert len(paths) == len({id(p) for p in paths.values()}) == len(model.trainable_variables)
    assert ".inducing_variable.Z" in paths and ".orthogonal_inducing_variable.orthogonal.Z" in paths
    del paths[".inducing_variable.Z"]
    other = collapsed(SOLVEGPR, X, Y, Z_u[:3], Z_v)
    gpflow.utilities.multiple_assign(other, paths)
    uncollapsed = SOLVEGP(kernel(), gpflow.likelihoods.Gaussian(), Z_u, Z_v)
    assert not any(".regular" in path for path in gpflow.utilities.parameter_dict(uncollapsed))


def test_bad_input(rng):
    X, Y, Z_u, Z_v = problem(rng)
    with gpflow.config.as_context(gpflow.config.Config(jitter=0.0)):
        # orthogonal points on top of regular ones: C_vv is singular without jitter
        with pytest.raises(CholeskyError, match="C_vv"):
            collapsed(SOLVEGPR, X, Y, Z_u, Z_u)
        with pytest.raises(CholeskyError, match="C_vv"):
            SOLVEGP(kernel(), gpflow.likelihoods.Gaussian(), Z_u, Z_u[1:3])
    with pytest.raises(ValueError, match="same input space"):
        collapsed(SOLVEGPR, X, Y, Z_u, np.zeros((3, 2)))
    with pytest.raises(ValueError, match="bound"):
        collapsed(SOLVEGPR, X, Y, Z_u, Z_v, bound="titsias")
    with pytest.raises(ValueError, match="orthogonal_inducing_variable"):
        SOLVEGPR((X, Y), kernel(), Z_u)
    with pytest.raises(ValueError, match="q_mu_orthogonal"):
        SOLVEGP(kernel(), gpflow.likelihoods.Gaussian(), Z_u, Z_v, q_mu_orthogonal=np.zeros(4))
    with pytest.raises(ValueError, match="q_sqrt_orthogonal"):
        SOLVEGP(kernel(), gpflow.likelihoods.Gaussian(), Z_u, Z_v, q_sqrt_orthogonal=np.eye(4))
    with pytest.raises(TypeError, match="single-output kernel"):
        SOLVEGPR((X, Y), gpflow.kernels.SharedIndependent(kernel(), output_dim=1), Z_u, Z_v)
    with pytest.raises(ValueError, match="2 separate sets but the model has 3"):
        SOLVEGP(
            gpflow.kernels.SeparateIndependent([kernel(), kernel(), kernel()]),
            gpflow.likelihoods.Gaussian(),
            gpflow.inducing_variables.SeparateIndependentInducingVariables(
                [gpflow.inducing_variables.InducingPoints(Z_u) for _ in range(2)]
            ),
            Z_v,
            num_latent_gps=3,
        )
    Y_nan = Y.copy()
    Y_nan[3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        collapsed(SOLVEGPR, X, Y_nan, Z_u, Z_v)
    for value in (np.nan, np.inf):  # checked before GPflow wraps it (a raw TensorFlow error)
        Z_bad = Z_v.copy()
        Z_bad[1] = value
        with pytest.raises(
            ValueError, match=r"`orthogonal_inducing_variable` contains .*rows \[1\]"
        ):
            collapsed(SOLVEGPR, X, Y, Z_u, Z_bad)
        with pytest.raises(ValueError, match=r"`orthogonal_inducing_variable` contains"):
            SOLVEGP(kernel(), gpflow.likelihoods.Gaussian(), Z_u, Z_bad)
        with pytest.raises(ValueError, match=r"`inducing_variable` contains"):
            SOLVEGP(kernel(), gpflow.likelihoods.Gaussian(), Z_bad, Z_u)


def test_two_point_sets_share_one_kernel_evaluation(rng):
    """
    With both sets plain inducing points, the covariances of u, v and f come from one kernel
    evaluation over the union (two kernel calls, not five) and equal GPflow's per-set dispatch.
    """
    from gpflow_tight import orthogonal

    kernel = gpflow.kernels.Matern32(lengthscales=[0.7, 1.3])
    points = OrthogonalInducingVariables(rng.normal(size=(4, 2)), rng.normal(size=(3, 2)))
    X = rng.normal(size=(9, 2))
    jitter = 1e-6
    calls = []
    evaluate = kernel.K
    kernel.K = lambda *args, **kwargs: calls.append(args) or evaluate(*args, **kwargs)
    joint = orthogonal._inducing_covariances(points, kernel, jitter)
    cross = orthogonal._inducing_cross_covariances(points, kernel, X)
    assert len(calls) == 2
    regular, orthogonal_set = points.regular, points.orthogonal
    per_set = (
        Kuu(regular, kernel, jitter=jitter),
        Kuv(regular, orthogonal_set, kernel),
        Kuu(orthogonal_set, kernel, jitter=jitter),
        Kuf(regular, kernel, X),
        Kuf(orthogonal_set, kernel, X),
    )
    for fused, separate in zip((*joint, *cross), per_set):
        np.testing.assert_allclose(fused, separate, rtol=1e-13, atol=1e-15)

    class ShiftedPoints(InducingPoints):
        """A subclass of inducing points may have its own covariances: no fusing for it."""

    shifted = OrthogonalInducingVariables(ShiftedPoints(points.orthogonal.Z), regular)
    assert not orthogonal._plain_points(shifted, kernel)
    assert orthogonal._plain_points(points, kernel)
