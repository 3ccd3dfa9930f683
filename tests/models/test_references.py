"""
Independent references for the tighter models (issue 13): every number is asserted against a dense
numpy formula written from the papers and docs/tight.md, docs/solve.md (tests/dense.py, never
the package), a GPflow model the method must reduce to, or GPflow's own accuracy on the same
problem.

* TightSVGP, T-SVGP (Bui, Ashman & Turner 2025, eq. 8): at a training input q(f_n) has variance
  v_n = s_n + m_n d_n, with d_n = k_nn − k_nu K_uu⁻¹ k_un, s_n the variance carried by q(u) and
  m_n = β / (d_n + β). For a Gaussian likelihood the bound is then the closed form
  Σ_n E_{N(f; μ_n, v_n)} log N(y_n | f, σ_n²) + ½ Σ_n (1 + log m_n − m_n) − KL, which is written
  here with dense matrices for every multi-output structure GPflow routes differently.
* Heteroscedastic Gaussian likelihoods (σ_n² = σ²(x_n)) for TightSVGP, SOLVEGPR and TightSOLVEGPR.
* float32 accuracy of the Bayesian GPLVMs against GPflow's BayesianGPLVM on the same problems.

Tolerances: rtol 1e-10 wherever the maths is exact in float64 (the package and the dense formula
differ only by round-off, measured at ≤ 7e-15 relative); predictions that must be identical to
GPflow's use rtol 1e-10 with atol 1e-12 (means cross zero).
"""

import gpflow
import numpy as np
import pytest
import tensorflow as tf
from gpflow.inducing_variables import (
    FallbackSeparateIndependentInducingVariables,
    FallbackSharedIndependentInducingVariables,
    InducingPoints,
    SeparateIndependentInducingVariables,
    SharedIndependentInducingVariables,
)

from gpflow_tight import (
    SOLVEGPR,
    MinibatchBayesianGPLVM,
    TightBayesianGPLVM,
    TightSOLVEGPR,
    TightSVGP,
)
from tests.dense import (
    JITTER,
    expected_log_gaussian,
    gauss_kl,
    matern32,
    nystrom,
    prior_conditional,
    relaxation_term,
    squared_exponential,
    tight_sgpr_bound,
    titsias_bound,
    unwhiten,
)

EXACT = dict(rtol=1e-10)  # float64, exact maths: only round-off separates the two numbers
SAME_PREDICTION = dict(rtol=1e-10, atol=1e-12)
NOISE = 0.1
NUM_DATA, INPUT_DIM, NUM_INDUCING = 25, 2, 6

# two latent GPs with different kernels: (GPflow kernel, the same kernel in numpy)
LATENT_KERNELS = [
    (
        lambda: gpflow.kernels.SquaredExponential(variance=1.1, lengthscales=[0.8, 1.4]),
        lambda A, B: squared_exponential(A, B, 1.1, np.array([0.8, 1.4])),
    ),
    (
        lambda: gpflow.kernels.Matern32(variance=0.7, lengthscales=[1.3, 0.9]),
        lambda A, B: matern32(A, B, 0.7, np.array([1.3, 0.9])),
    ),
]


def gp_kernels():
    return [make() for make, _ in LATENT_KERNELS]


def np_kernels():
    return [kern for _, kern in LATENT_KERNELS]


def inputs(rng, num_data=NUM_DATA):
    return rng.uniform(-2, 2, (num_data, INPUT_DIM))


def random_q(rng, num_inducing, num_latent):
    """A random q(u) (or whitened q(v)): q_mu [M, L] and lower-triangular q_sqrt [L, M, M]."""
    q_mu = rng.standard_normal((num_inducing, num_latent))
    q_sqrt = np.tril(0.3 * rng.standard_normal((num_latent, num_inducing, num_inducing)))
    diagonal = np.arange(num_inducing)
    q_sqrt[:, diagonal, diagonal] = rng.uniform(0.3, 1.0, (num_latent, num_inducing))
    return q_mu, q_sqrt


def dense_q(kern, Z, q_mu, q_sqrt, whiten):
    """K_uu + εI and q(u) = N(m, S) in unwhitened coordinates, for one latent GP."""
    Kuu = kern(Z, Z) + JITTER * np.eye(len(Z))
    if whiten:
        mean, cov = unwhiten(q_mu, q_sqrt, Kuu)
    else:
        mean, cov = q_mu, q_sqrt @ q_sqrt.T
    return Kuu, mean, cov


def latent_marginals(kern, Z, X, q_mu, q_sqrt, whiten):
    """(μ, s, d, KL) of one latent GP with q(u) given by q_mu [M], q_sqrt [M, M]."""
    Kuu, mean, cov = dense_q(kern, Z, q_mu, q_sqrt, whiten)
    kff = np.diag(kern(X, X))
    mu, s, d = prior_conditional(Kuu, kern(Z, X), kff, mean, cov)
    return mu, s, d, gauss_kl(mean, cov, Kuu)


def block_diag(blocks):
    size = sum(len(b) for b in blocks)
    out = np.zeros((size, size))
    start = 0
    for b in blocks:
        out[start : start + len(b), start : start + len(b)] = b
        start += len(b)
    return out


def tight_svgp(kernel, inducing_variable, q_mu, q_sqrt, whiten, beta, **kwargs):
    return TightSVGP(
        kernel,
        kwargs.pop("likelihood", None) or gpflow.likelihoods.Gaussian(NOISE),
        inducing_variable,
        q_mu=q_mu,
        q_sqrt=q_sqrt,
        whiten=whiten,
        beta=beta,
        num_latent_gps=q_mu.shape[1],
        **kwargs,
    )


def assert_predictions_equal_svgp(model, X, full_covs=(False,)):
    """
    The relaxation acts on the training data only: predict_f is SVGP's with the same q(u).
    (GPflow's separate-independent conditional runs a ``map_fn`` that costs ~1 s per eager call,
    so full_cov=True is checked where it is cheap.)
    """
    svgp = gpflow.models.SVGP(
        model.kernel,
        model.likelihood,
        model.inducing_variable,
        mean_function=model.mean_function,
        q_mu=model.q_mu.numpy(),
        q_sqrt=model.q_sqrt.numpy(),
        whiten=model.whiten,
        num_latent_gps=model.num_latent_gps,
    )
    Xnew = X + 0.37  # new inputs
    for full_cov in full_covs:
        for ours, theirs in zip(model.predict_f(Xnew, full_cov), svgp.predict_f(Xnew, full_cov)):
            np.testing.assert_allclose(ours.numpy(), theirs.numpy(), **SAME_PREDICTION)


# ------------------------------------------------------------------ T-SVGP, multi-output


@pytest.mark.parametrize("whiten", [True, False])
@pytest.mark.parametrize("shared_inducing", [True, False], ids=["shared-Z", "separate-Z"])
def test_separate_independent_per_latent_beta(rng, whiten, shared_inducing):
    """
    SeparateIndependent (2 latent GPs = 2 outputs, SE and Matérn-3/2): each output p has its own
    β_p ≠ σ², v_np = s_np + m_np d_np with m_np = β_p / (d_np + β_p).
    """
    X = inputs(rng)
    Y = rng.standard_normal((NUM_DATA, 2))
    Zs = [rng.uniform(-2, 2, (NUM_INDUCING, INPUT_DIM)) for _ in range(2)]
    if shared_inducing:
        Zs = [Zs[0], Zs[0]]
        iv = SharedIndependentInducingVariables(InducingPoints(Zs[0]))
    else:
        iv = SeparateIndependentInducingVariables([InducingPoints(Z) for Z in Zs])
    q_mu, q_sqrt = random_q(rng, NUM_INDUCING, 2)
    beta = np.array([0.37, 2.5])
    model = tight_svgp(
        gpflow.kernels.SeparateIndependent(gp_kernels()), iv, q_mu, q_sqrt, whiten, beta
    )

    expected = 0.0
    for p, kern in enumerate(np_kernels()):
        mu, s, d, kl = latent_marginals(kern, Zs[p], X, q_mu[:, p], q_sqrt[p], whiten)
        m = beta[p] / (d + beta[p])
        expected += np.sum(expected_log_gaussian(Y[:, p], mu, m * d + s, NOISE))
        expected += relaxation_term(m) - kl
    np.testing.assert_allclose(model.elbo((X, Y)).numpy(), expected, **EXACT)
    assert_predictions_equal_svgp(model, X)


def lmc_weights():
    return np.array([[1.0, -0.4], [0.3, 0.8], [-0.7, 0.5]])  # W [P=3, L=2]


def lmc_problem(rng, shared_inducing, shared_class, separate_class):
    """Data [N, P=3], mixing W, two latent GPs' inducing inputs and their inducing variables
    (one shared set or one per latent GP, of the given GPflow classes), and a random q(u)."""
    X = inputs(rng)
    Y = rng.standard_normal((NUM_DATA, 3))
    Zs = [rng.uniform(-2, 2, (NUM_INDUCING, INPUT_DIM)) for _ in range(2)]
    if shared_inducing:
        Zs = [Zs[0], Zs[0]]
        iv = shared_class(InducingPoints(Zs[0]))
    else:
        iv = separate_class([InducingPoints(Z) for Z in Zs])
    return (X, Y, lmc_weights(), Zs, iv, *random_q(rng, NUM_INDUCING, 2))


@pytest.mark.parametrize("whiten", [True, False])
@pytest.mark.parametrize("shared_inducing", [True, False], ids=["shared-Z", "separate-Z"])
def test_linear_coregionalization_relaxes_latent_gps_before_mixing(rng, whiten, shared_inducing):
    """
    LinearCoregionalization with (Shared|Separate)IndependentInducingVariables (GPflow's
    LinearCoregionalizationPosterior): the docstring puts one β per latent GP, acting before the
    mixing. Latent l: μ_l, v_l = s_l + m_l d_l, m_l = β_l / (d_l + β_l); output p:
    μ_p = Σ_l W_pl μ_l, v_p = Σ_l W_pl² v_l; relaxation term ½ Σ_{n,l} (1 + log m − m).
    """
    X, Y, W, Zs, iv, q_mu, q_sqrt = lmc_problem(
        rng,
        shared_inducing,
        SharedIndependentInducingVariables,
        SeparateIndependentInducingVariables,
    )
    beta = np.array([0.37, 2.5])
    kernel = gpflow.kernels.LinearCoregionalization(gp_kernels(), W)
    model = tight_svgp(kernel, iv, q_mu, q_sqrt, whiten, beta)

    means, variances, penalty = [], [], 0.0
    for l, kern in enumerate(np_kernels()):
        mu, s, d, kl = latent_marginals(kern, Zs[l], X, q_mu[:, l], q_sqrt[l], whiten)
        m = beta[l] / (d + beta[l])
        means.append(mu)
        variances.append(m * d + s)
        penalty += relaxation_term(m) - kl
    mean = np.stack(means, 1) @ W.T  # [N, P]
    variance = np.stack(variances, 1) @ (W**2).T
    expected = np.sum(expected_log_gaussian(Y, mean, variance, NOISE)) + penalty
    np.testing.assert_allclose(model.elbo((X, Y)).numpy(), expected, **EXACT)
    assert_predictions_equal_svgp(model, X)


@pytest.mark.parametrize("whiten", [True, False])
@pytest.mark.parametrize("shared_inducing", [True, False], ids=["shared-Z", "separate-Z"])
def test_fallback_linear_coregionalization_relaxes_the_output_process(rng, whiten, shared_inducing):
    """
    LinearCoregionalization with Fallback(Shared|Separate)IndependentInducingVariables (GPflow's
    FallbackIndependentLatentPosterior): one shared β acts on the residual of each OUTPUT.
    Written as one stacked u = [u_1; u_2] (block-diagonal K_uu), with output p's cross-covariance
    cov(f_p(x), u_l) = W_pl k_l(x, Z_l) and prior variance Σ_l W_pl² k_l(x, x); then
    v_np = s_np + m_np d_np, m_np = β / (d_np + β), and ½ Σ_{n,p} (1 + log m − m).
    """
    X, Y, W, Zs, iv, q_mu, q_sqrt = lmc_problem(
        rng,
        shared_inducing,
        FallbackSharedIndependentInducingVariables,
        FallbackSeparateIndependentInducingVariables,
    )
    beta = 0.6
    kernel = gpflow.kernels.LinearCoregionalization(gp_kernels(), W)
    model = tight_svgp(kernel, iv, q_mu, q_sqrt, whiten, beta)
    assert model.beta.shape == (1,)

    parts = [
        dense_q(kern, Z, q_mu[:, l], q_sqrt[l], whiten)
        for l, (kern, Z) in enumerate(zip(np_kernels(), Zs))
    ]
    Kuu = block_diag([Kuu_l for Kuu_l, _, _ in parts])
    q_mean = np.concatenate([mean for _, mean, _ in parts])
    q_cov = block_diag([cov for _, _, cov in parts])
    kl = sum(gauss_kl(mean, cov, Kuu_l) for Kuu_l, mean, cov in parts)
    expected = -kl
    for p in range(3):
        Kuf = np.vstack([W[p, l] * kern(Z, X) for l, (kern, Z) in enumerate(zip(np_kernels(), Zs))])
        kff = sum(W[p, l] ** 2 * np.diag(kern(X, X)) for l, kern in enumerate(np_kernels()))
        mu, s, d = prior_conditional(Kuu, Kuf, kff, q_mean, q_cov)
        m = beta / (d + beta)
        expected += np.sum(expected_log_gaussian(Y[:, p], mu, m * d + s, NOISE))
        expected += relaxation_term(m)
    np.testing.assert_allclose(model.elbo((X, Y)).numpy(), expected, **EXACT)
    assert_predictions_equal_svgp(model, X, full_covs=(False, True))


def test_fully_correlated_relaxes_the_output_process(rng):
    """
    LinearCoregionalization (P = L = 2, W invertible) with plain InducingPoints: GPflow's
    FullyCorrelatedPosterior, u_(m,p) = f_p(z_m) correlated across outputs, K_uu [MP, MP] with
    K[(m,p),(m',p')] = Σ_l W_pl W_p'l k_l(z_m, z_m') + ε. One β on each output's residual d_np.
    Whitened only: GPflow's SVGP has no unwhitened prior KL for this posterior.
    """
    X = inputs(rng)
    Y = rng.standard_normal((NUM_DATA, 2))
    W = np.array([[1.0, -0.4], [0.3, 0.8]])
    Z = rng.uniform(-2, 2, (NUM_INDUCING, INPUT_DIM))
    num_u = 2 * NUM_INDUCING
    q_mu, q_sqrt = random_q(rng, num_u, 1)
    beta = 0.6
    kernel = gpflow.kernels.LinearCoregionalization(gp_kernels(), W)
    model = tight_svgp(kernel, InducingPoints(Z), q_mu, q_sqrt, True, beta)

    latent_zz = np.stack([kern(Z, Z) for kern in np_kernels()])  # [L, M, M]
    latent_zx = np.stack([kern(Z, X) for kern in np_kernels()])  # [L, M, N]
    Kuu = np.einsum("pl,ql,lmk->mpkq", W, W, latent_zz).reshape(num_u, num_u)
    Kuu += JITTER * np.eye(num_u)
    q_mean, q_cov = unwhiten(q_mu[:, 0], q_sqrt[0], Kuu)
    expected = -gauss_kl(q_mean, q_cov, Kuu)
    for p in range(2):
        Kuf = np.einsum("ql,l,lmn->mqn", W, W[p], latent_zx).reshape(num_u, NUM_DATA)
        kff = sum(W[p, l] ** 2 * np.diag(kern(X, X)) for l, kern in enumerate(np_kernels()))
        mu, s, d = prior_conditional(Kuu, Kuf, kff, q_mean, q_cov)
        m = beta / (d + beta)
        expected += np.sum(expected_log_gaussian(Y[:, p], mu, m * d + s, NOISE))
        expected += relaxation_term(m)
    np.testing.assert_allclose(model.elbo((X, Y)).numpy(), expected, **EXACT)
    assert_predictions_equal_svgp(model, X, full_covs=(False, True))


@pytest.mark.parametrize("whiten", [True, False])
def test_linear_mean_function(rng, whiten):
    """A Linear mean function shifts μ_n by x_nᵀA + b; d_n, s_n, m_n and the KL are unchanged."""
    X = inputs(rng)
    Y = rng.standard_normal((NUM_DATA, 1)) + 2.0
    Z = rng.uniform(-2, 2, (NUM_INDUCING, INPUT_DIM))
    q_mu, q_sqrt = random_q(rng, NUM_INDUCING, 1)
    A, b = np.array([[0.5], [-0.3]]), np.array([0.7])
    make_kernel, kern = LATENT_KERNELS[0]
    beta = 0.37
    model = tight_svgp(
        make_kernel(),
        InducingPoints(Z),
        q_mu,
        q_sqrt,
        whiten,
        beta,
        mean_function=gpflow.mean_functions.Linear(A=A, b=b),
    )
    mu, s, d, kl = latent_marginals(kern, Z, X, q_mu[:, 0], q_sqrt[0], whiten)
    mu = mu + X @ A[:, 0] + b[0]
    m = beta / (d + beta)
    expected = np.sum(expected_log_gaussian(Y[:, 0], mu, m * d + s, NOISE))
    expected += relaxation_term(m) - kl
    np.testing.assert_allclose(model.elbo((X, Y)).numpy(), expected, **EXACT)
    assert_predictions_equal_svgp(model, X, full_covs=(False, True))


# ------------------------------------------------------------------ heteroscedastic likelihoods


class LogLinearVariance(gpflow.functions.Function):
    """A custom noise variance σ²(x) = exp(a + xᵀw) [N, 1]."""

    def __init__(self, a, w):
        super().__init__()
        self.a = gpflow.Parameter(np.asarray(a, dtype=np.float64))
        self.w = gpflow.Parameter(np.asarray(w, dtype=np.float64))

    def __call__(self, X):
        return tf.exp(self.a + tf.linalg.matmul(X, self.w))

    def numpy(self, X):
        return np.exp(self.a.numpy() + X @ self.w.numpy())[:, 0]


def polynomial_variance():
    """GPflow's own Polynomial function, 0.05 + 0.03 x + 0.02 x² > 0 for all x (1-D inputs)."""
    return gpflow.functions.Polynomial(degree=2, w=np.array([0.05, 0.03, 0.02]))


def polynomial_variance_numpy(X):
    return 0.05 + 0.03 * X[:, 0] + 0.02 * X[:, 0] ** 2


@pytest.mark.parametrize("whiten", [True, False])
def test_tight_svgp_heteroscedastic(rng, whiten):
    """T-SVGP with σ_n² = exp(a + x_nᵀw): the dense bound with per-point noise variances."""
    X = inputs(rng)
    variance = LogLinearVariance(np.log(0.08), np.array([[0.4], [-0.3]]))
    noise = variance.numpy(X)
    assert noise.min() < 0.5 * noise.max()  # really heteroscedastic
    Y = np.sin(2 * X[:, :1]) + np.sqrt(noise)[:, None] * rng.standard_normal((NUM_DATA, 1))
    Z = rng.uniform(-2, 2, (NUM_INDUCING, INPUT_DIM))
    q_mu, q_sqrt = random_q(rng, NUM_INDUCING, 1)
    make_kernel, kern = LATENT_KERNELS[0]
    beta = 0.37
    likelihood = gpflow.likelihoods.Gaussian(variance=variance)
    model = tight_svgp(
        make_kernel(), InducingPoints(Z), q_mu, q_sqrt, whiten, beta, likelihood=likelihood
    )
    mu, s, d, kl = latent_marginals(kern, Z, X, q_mu[:, 0], q_sqrt[0], whiten)
    m = beta / (d + beta)
    expected = np.sum(expected_log_gaussian(Y[:, 0], mu, m * d + s, noise))
    expected += relaxation_term(m) - kl
    np.testing.assert_allclose(model.elbo((X, Y)).numpy(), expected, **EXACT)


# SOLVE-GP: 1-D inputs, SE kernel, two output columns sharing the per-point noise variance
SOLVE_VARIANCE, SOLVE_LENGTHSCALE = 1.2, 0.6


def solve_kernel():
    return gpflow.kernels.SquaredExponential(
        variance=SOLVE_VARIANCE, lengthscales=SOLVE_LENGTHSCALE
    )


def solve_kern(A, B):
    return squared_exponential(A, B, SOLVE_VARIANCE, SOLVE_LENGTHSCALE)


def solve_problem(rng, num_data=50):
    X = np.sort(rng.uniform(0, 6, (num_data, 1)), axis=0)
    noise = polynomial_variance_numpy(X)
    Y = np.sin(2 * X) + np.sqrt(noise)[:, None] * rng.standard_normal((num_data, 2))
    Z_u = np.linspace(0.3, 5.7, 5)[:, None]
    Z_v = np.array([[0.8], [2.1], [3.9], [5.2]])  # interleaved with Z_u: K_uf C_fv ≠ 0
    return X, Y, Z_u, Z_v, noise


def heteroscedastic(cls, X, Y, *inducing, **kwargs):
    likelihood = gpflow.likelihoods.Gaussian(variance=polynomial_variance())
    return cls((X, Y), solve_kernel(), *inducing, likelihood=likelihood, **kwargs)


def test_heteroscedastic_solvegpr_without_orthogonal_points_is_sgpr(rng):
    """
    An empty orthogonal set [0, D]: SOLVEGPR (both bounds) equals gpflow.models.SGPR with the same
    heteroscedastic likelihood, and both equal the dense Titsias bound with σ_n²; TightSOLVEGPR
    equals the dense T-SGPR bound log N(y | 0, Q_ff + Λ) − ½ Σ log(1 + d_n/σ_n²).
    """
    X, Y, Z_u, _, noise = solve_problem(rng)
    empty = np.zeros((0, 1))
    sgpr = heteroscedastic(gpflow.models.SGPR, X, Y, Z_u)
    Kff, Qff, _, _ = nystrom(solve_kern, X, Z_u)
    np.testing.assert_allclose(sgpr.elbo().numpy(), titsias_bound(Y, Kff, Qff, noise), **EXACT)
    Xnew = np.linspace(-0.5, 6.5, 9)[:, None]
    for bound in ("solve", "thesis"):
        model = heteroscedastic(SOLVEGPR, X, Y, Z_u, empty, bound=bound)
        np.testing.assert_allclose(model.elbo().numpy(), sgpr.elbo().numpy(), **EXACT)
        for ours, theirs in zip(model.predict_f(Xnew), sgpr.predict_f(Xnew)):
            np.testing.assert_allclose(ours.numpy(), theirs.numpy(), **SAME_PREDICTION)
        tight = heteroscedastic(TightSOLVEGPR, X, Y, Z_u, empty, bound=bound)
        np.testing.assert_allclose(
            tight.elbo().numpy(), tight_sgpr_bound(Y, Kff, Qff, noise), **EXACT
        )


def test_heteroscedastic_thesis_bound_is_sgpr_and_tsgpr_on_the_union(rng):
    """
    bound="thesis" with Z_u and Z_v: SOLVEGPR equals gpflow SGPR on Z_u ∪ Z_v with the same
    heteroscedastic likelihood (and the dense Titsias bound on the union); TightSOLVEGPR equals
    the dense T-SGPR bound on the union, d_n the residual given Z_u ∪ Z_v.
    """
    X, Y, Z_u, Z_v, noise = solve_problem(rng)
    union = np.vstack([Z_u, Z_v])
    Kff, Qff, _, _ = nystrom(solve_kern, X, union)
    sgpr = heteroscedastic(gpflow.models.SGPR, X, Y, union)
    thesis = heteroscedastic(SOLVEGPR, X, Y, Z_u, Z_v, bound="thesis")
    np.testing.assert_allclose(thesis.elbo().numpy(), sgpr.elbo().numpy(), **EXACT)
    np.testing.assert_allclose(thesis.elbo().numpy(), titsias_bound(Y, Kff, Qff, noise), **EXACT)
    tight = heteroscedastic(TightSOLVEGPR, X, Y, Z_u, Z_v, bound="thesis")
    np.testing.assert_allclose(tight.elbo().numpy(), tight_sgpr_bound(Y, Kff, Qff, noise), **EXACT)
    assert tight.elbo().numpy() > thesis.elbo().numpy()


def test_heteroscedastic_solve_bound_is_the_uncollapsed_elbo_at_its_optimum(rng):
    """
    bound="solve" is the uncollapsed SOLVE-GP ELBO (Fernlund 2022, eqs. 5.17-5.24) at its optimal
    mean-field q(u) q(v⊥), here with Λ = diag σ_n² in place of σ²I in Fernlund's eq. 5.26, with
    the means in closed form (docs/solve.md, Derivations): m_u = K_uf Σ⁻¹y,
    m_v = C_vf Σ⁻¹y with Σ = Q_u + Q_v + Λ, S_u = K_uu (K_uu + K_uf Λ⁻¹ K_fu)⁻¹ K_uu and
    S_v = C_vv (C_vv + C_vf Λ⁻¹ C_fv)⁻¹ C_vv. The tighter variant replaces m_n = 1 by
    m_n = σ_n²/(d_n + σ_n²), which leaves the optimal q unchanged. Dense, explicit inverses.
    """
    X, Y, Z_u, Z_v, noise = solve_problem(rng)
    K_uu = solve_kern(Z_u, Z_u) + JITTER * np.eye(len(Z_u))
    K_uv, K_uf = solve_kern(Z_u, Z_v), solve_kern(Z_u, X)
    C_vv = solve_kern(Z_v, Z_v) + JITTER * np.eye(len(Z_v)) - K_uv.T @ np.linalg.solve(K_uu, K_uv)
    C_vf = solve_kern(Z_v, X) - K_uv.T @ np.linalg.solve(K_uu, K_uf)
    Q_u = K_uf.T @ np.linalg.solve(K_uu, K_uf)
    Q_v = C_vf.T @ np.linalg.solve(C_vv, C_vf)
    Lambda_inv = np.diag(1.0 / noise)
    m_u = K_uf @ np.linalg.solve(Q_u + Q_v + np.diag(noise), Y)
    m_v = C_vf @ np.linalg.solve(Q_u + Q_v + np.diag(noise), Y)
    S_u = K_uu @ np.linalg.solve(K_uu + K_uf @ Lambda_inv @ K_uf.T, K_uu)
    S_v = C_vv @ np.linalg.solve(C_vv + C_vf @ Lambda_inv @ C_vf.T, C_vv)
    A_u, A_v = np.linalg.solve(K_uu, K_uf), np.linalg.solve(C_vv, C_vf)
    mean = A_u.T @ m_u + A_v.T @ m_v
    s = np.einsum("mn,mk,kn->n", A_u, S_u, A_u) + np.einsum("mn,mk,kn->n", A_v, S_v, A_v)
    d = np.diag(solve_kern(X, X) - Q_u - Q_v)
    kl = sum(gauss_kl(m_u[:, p], S_u, K_uu) + gauss_kl(m_v[:, p], S_v, C_vv) for p in range(2))
    for cls, m in ((SOLVEGPR, np.ones_like(d)), (TightSOLVEGPR, noise / (d + noise))):
        fit = expected_log_gaussian(Y, mean, (m * d + s)[:, None], noise[:, None])
        expected = np.sum(fit) + 2 * relaxation_term(m) - kl
        model = heteroscedastic(cls, X, Y, Z_u, Z_v)
        np.testing.assert_allclose(model.elbo().numpy(), expected, **EXACT)


# ------------------------------------------------------------------ float32 Bayesian GPLVMs
#
# Problem of issue 13: N = 100, P = 5, Q = 2, M = 10, SE kernel with unit variance and
# lengthscales, noise variance 0.1, q(x_n) = N(x_n, 0.1 I) centred on the latent points that
# generated Y, Z = 10 of those points. Every input is rounded to float32 once, so float32 and
# float64 evaluate the same numbers and their difference is the float32 error alone.
#
# A single problem is not a fair judge: the float32 error of a bound of ~1500 nats scatters over
# three decades from one draw to the next (GPflow's own error ranges from 1e-7 to 0.4 nats over
# the seeds below). The statistic is the mean absolute error over GPLVM_SEEDS, and ours must be
# at most 1.5 x GPflow's plus 1e-3 nats (~8 float32 ulps of the bound).
#
# Measured (mean |float32 − float64| over the 24 problems, max in brackets), before the fix of the
# explicit K_uu⁻¹ (issue 13), on a 2-core x86-64 CPU:
#   gpflow.models.BayesianGPLVM                          0.0260 nats (0.40, seed 0)
#   TightBayesianGPLVM(relaxation="none")                0.0658 nats (0.61, seed 21)  2.5x
#   TightBayesianGPLVM(relaxation="analytic")            0.0594 nats (0.49)           2.3x
#   MinibatchBayesianGPLVM(tight=False), optimal q(u)    0.0667 nats (1.13)           2.6x
#   MinibatchBayesianGPLVM(tight=True),  optimal q(u)    0.0560 nats (0.98)           2.2x
# Ours matches GPflow on well-conditioned K_uu and loses where cond(K_uu) ≳ 1e4 (seeds 14, 19,
# 21: 0.10, 0.14, 0.61 nats against GPflow's 0.033, 0.018, 0.026). Fewer problems hide this:
# over seeds 0-15 alone GPflow's seed-0 error (0.40, shared by ours) dominates both means.

GPLVM_SEEDS = range(24)
GPLVM_NOISE = 0.1
RELATIVE_SLACK, ABSOLUTE_FLOOR = 1.5, 1e-3


def gplvm_problem(seed, num_data=100, num_outputs=5, latent_dim=2, num_inducing=10):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((num_data, latent_dim))
    K = squared_exponential(X, X, 1.0, np.ones(latent_dim)) + 1e-8 * np.eye(num_data)
    F = np.linalg.cholesky(K) @ rng.standard_normal((num_data, num_outputs))
    Y = F + np.sqrt(GPLVM_NOISE) * rng.standard_normal((num_data, num_outputs))
    Z = X[rng.choice(num_data, num_inducing, replace=False)]
    X_var = np.full((num_data, latent_dim), 0.1)
    return tuple(a.astype(np.float32) for a in (Y, X, X_var, Z))


def gplvm_kernel():
    return gpflow.kernels.SquaredExponential(variance=1.0, lengthscales=[1.0, 1.0])


def in_precision(dtype, build):
    """``build()`` evaluated with default float ``dtype`` (jitter 1e-6 in both precisions)."""
    with gpflow.config.as_context():
        gpflow.config.set_default_float(dtype)
        gpflow.config.set_default_jitter(1e-6)
        return float(build().numpy())


def collapsed_elbo(cls, dtype, problem, **kwargs):
    def build():
        Y, X_mean, X_var, Z = (a.astype(dtype) for a in problem)
        model = cls(Y, X_mean, X_var, gplvm_kernel(), inducing_variable=Z, **kwargs)
        model.likelihood.variance.assign(GPLVM_NOISE)
        return model.elbo()

    return in_precision(dtype, build)


def optimal_whitened_q_u(problem):
    """Titsias's optimal q(u) for the collapsed bound, whitened, in float64 then rounded to float32
    (an input of the test: the bound is then the collapsed one, but any fixed q(u) would do)."""
    Y, X_mean, X_var, Z = (a.astype(np.float64) for a in problem)
    kernel = gplvm_kernel()
    q_x = gpflow.probability_distributions.DiagonalGaussian(X_mean, X_var)
    iv = InducingPoints(Z)
    psi1 = gpflow.expectations.expectation(q_x, (kernel, iv)).numpy()
    psi2 = gpflow.expectations.expectation(q_x, (kernel, iv), (kernel, iv)).numpy().sum(0)
    Kuu = squared_exponential(Z, Z, 1.0, np.ones(Z.shape[1])) + 1e-6 * np.eye(len(Z))
    L = np.linalg.cholesky(Kuu)
    # whitened: m̃ = L⁻¹ Kuu Σ Ψ1ᵀ Y / σ², S̃ = L⁻¹ Kuu Σ Kuu L⁻ᵀ with Σ = (Kuu + Ψ2/σ²)⁻¹
    Sigma = np.linalg.inv(Kuu + psi2 / GPLVM_NOISE)
    mean = L.T @ Sigma @ psi1.T @ Y / GPLVM_NOISE
    cov = L.T @ Sigma @ L
    q_sqrt = np.tile(np.linalg.cholesky(cov)[None], [Y.shape[1], 1, 1])
    return mean.astype(np.float32), q_sqrt.astype(np.float32)


def minibatch_elbo(dtype, problem, q, tight):
    def build():
        Y, X_mean, X_var, Z = (a.astype(dtype) for a in problem)
        model = MinibatchBayesianGPLVM(
            len(Y),
            Y.shape[1],
            X_mean,
            X_var,
            gplvm_kernel(),
            Z,
            noise_variance=GPLVM_NOISE,
            tight=tight,
            whiten=True,
            q_mu=q[0].astype(dtype),
            q_sqrt=q[1].astype(dtype),
        )
        return model.elbo(model.training_data(Y))

    return in_precision(dtype, build)


@pytest.fixture(scope="module")
def gplvm_problems():
    return [gplvm_problem(seed) for seed in GPLVM_SEEDS]


@pytest.fixture(scope="module")
def gpflow_gplvm(gplvm_problems):
    """GPflow's BayesianGPLVM on every problem: its float64 values and float32 errors."""
    values64 = [collapsed_elbo(gpflow.models.BayesianGPLVM, np.float64, p) for p in gplvm_problems]
    values32 = [collapsed_elbo(gpflow.models.BayesianGPLVM, np.float32, p) for p in gplvm_problems]
    return np.array(values64), np.subtract(values32, values64)


def assert_no_worse_than_gpflow(errors, gpflow_errors):
    ours, theirs = np.mean(np.abs(errors)), np.mean(np.abs(gpflow_errors))
    assert ours <= RELATIVE_SLACK * theirs + ABSOLUTE_FLOOR, (
        f"mean float32 error {ours:.4g} nats (max {np.max(np.abs(errors)):.3g}), "
        f"GPflow's BayesianGPLVM {theirs:.4g} (max {np.max(np.abs(gpflow_errors)):.3g}) "
        "on the same problems"
    )


def test_tight_gplvm_without_relaxation_float32_error_no_worse_than_gpflow(
    gplvm_problems, gpflow_gplvm
):
    """relaxation="none" is BayesianGPLVM's bound: GPflow's float64 value is the reference."""
    gpflow64, gpflow_errors = gpflow_gplvm
    errors = [
        collapsed_elbo(TightBayesianGPLVM, np.float32, problem, relaxation="none") - reference
        for problem, reference in zip(gplvm_problems, gpflow64)
    ]
    assert_no_worse_than_gpflow(errors, gpflow_errors)


def test_tight_gplvm_analytic_float32_error_no_worse_than_gpflow(gplvm_problems, gpflow_gplvm):
    """relaxation="analytic" in float32 against its own float64 value (never below GPflow's)."""
    gpflow64, gpflow_errors = gpflow_gplvm
    errors = []
    for problem, standard in zip(gplvm_problems, gpflow64):
        value64 = collapsed_elbo(TightBayesianGPLVM, np.float64, problem)
        assert value64 > standard
        errors.append(collapsed_elbo(TightBayesianGPLVM, np.float32, problem) - value64)
    assert_no_worse_than_gpflow(errors, gpflow_errors)


@pytest.mark.parametrize("tight", [False, True], ids=["standard", "tight"])
def test_minibatch_gplvm_float32_error_no_worse_than_gpflow(gplvm_problems, gpflow_gplvm, tight):
    """
    Full batch at the optimal q(u). tight=False is then BayesianGPLVM's bound, so GPflow's float64
    value is the reference (rounding q(u) to float32 moves the bound by ≤ 2e-9 nats: second order
    at the optimum); tight=True is held against its own float64 value.
    """
    gpflow64, gpflow_errors = gpflow_gplvm
    errors = []
    for problem, standard in zip(gplvm_problems, gpflow64):
        q = optimal_whitened_q_u(problem)
        reference = minibatch_elbo(np.float64, problem, q, tight=True) if tight else standard
        errors.append(minibatch_elbo(np.float32, problem, q, tight=tight) - reference)
    assert_no_worse_than_gpflow(errors, gpflow_errors)
