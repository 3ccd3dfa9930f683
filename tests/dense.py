"""
Dense numpy references written from the papers (Bui, Ashman & Turner 2025; Fernlund 2022) and
the derivations in docs/tight.md and docs/solve.md, independent of the package and of GPflow:
every kernel matrix is built here with numpy, every inverse is a dense ``np.linalg.solve``, and
multi-output processes are written as explicit stacked matrices (outputs or latent GPs stacked
block by block).
"""

import numpy as np
from scipy.stats import multivariate_normal

JITTER = 1e-6  # GPflow's default jitter, added to every K_uu (as in docs/solve.md)


def scaled_sq_dist(A, B, lengthscales):
    A, B = A / lengthscales, B / lengthscales
    return np.sum((A[:, None, :] - B[None, :, :]) ** 2, axis=-1)


def squared_exponential(A, B, variance, lengthscales):
    return variance * np.exp(-0.5 * scaled_sq_dist(A, B, lengthscales))


def matern32(A, B, variance, lengthscales):
    r = np.sqrt(3.0 * scaled_sq_dist(A, B, lengthscales))
    return variance * (1.0 + r) * np.exp(-r)


def gauss_kl(mean, cov, prior_cov):
    """KL[N(mean, cov) || N(0, prior_cov)]."""
    size = len(mean)
    return 0.5 * (
        np.trace(np.linalg.solve(prior_cov, cov))
        + mean @ np.linalg.solve(prior_cov, mean)
        - size
        + np.linalg.slogdet(prior_cov)[1]
        - np.linalg.slogdet(cov)[1]
    )


def prior_conditional(Kuu, Kuf, kff, q_mean, q_cov):
    """
    The SVGP marginals at the columns of ``Kuf`` [M, N] for q(u) = N(q_mean, q_cov): the mean
    μ = K_fu K_uu⁻¹ m, the variance carried by q(u), s = diag(K_fu K_uu⁻¹ S K_uu⁻¹ K_uf), and the
    prior-conditional residual d = k_ff − diag(K_fu K_uu⁻¹ K_uf) (Bui, Ashman & Turner 2025, §3).
    """
    P = np.linalg.solve(Kuu, Kuf).T  # K_fu K_uu⁻¹ [N, M]
    mean = P @ q_mean
    s = np.einsum("nm,mk,nk->n", P, q_cov, P)
    d = kff - np.sum(P * Kuf.T, axis=1)
    return mean, s, d


def expected_log_gaussian(y, mean, variance, noise):
    """E_{N(f; mean, variance)} log N(y | f, noise), elementwise."""
    return -0.5 * np.log(2 * np.pi * noise) - 0.5 * ((y - mean) ** 2 + variance) / noise


def relaxation_term(m):
    """½ Σ (1 + log m − m) (Bui, Ashman & Turner 2025, eq. 8)."""
    return 0.5 * np.sum(1.0 + np.log(m) - m)


def unwhiten(q_mu, q_sqrt, Kuu):
    """q(u) = N(L m̃, L R Rᵀ Lᵀ) for a whitened q(v) = N(m̃, R Rᵀ), u = L v, L Lᵀ = K_uu."""
    L = np.linalg.cholesky(Kuu)
    return L @ q_mu, L @ q_sqrt @ q_sqrt.T @ L.T


def log_gauss(y, cov):
    """Σ_p log N(y[:, p] | 0, cov)."""
    zeros = np.zeros(len(y))
    return sum(multivariate_normal(zeros, cov).logpdf(y[:, p]) for p in range(y.shape[1]))


def nystrom(kern, X, Z):
    """K_ff, Q_ff = K_fu (K_uu + εI)⁻¹ K_uf and K_uu + εI, K_uf for one kernel ``kern(A, B)``."""
    Kuu = kern(Z, Z) + JITTER * np.eye(len(Z))
    Kuf = kern(Z, X)
    return kern(X, X), Kuf.T @ np.linalg.solve(Kuu, Kuf), Kuu, Kuf


def tight_sgpr_bound(Y, Kff, Qff, noise):
    """
    Bui, Ashman & Turner 2025, eq. 9, with per-point noise variances σ_n² [N] (docs/tight.md):
    log N(y | 0, Q_ff + diag σ²) − ½ Σ_n log(1 + d_n / σ_n²), summed over the output columns.
    """
    d = np.diag(Kff - Qff)
    return log_gauss(Y, Qff + np.diag(noise)) - 0.5 * Y.shape[1] * np.sum(np.log1p(d / noise))


def titsias_bound(Y, Kff, Qff, noise):
    """Titsias's SGPR bound with per-point noise: log N(y | 0, Q_ff + Λ) − ½ Σ_n d_n / σ_n²."""
    d = np.diag(Kff - Qff)
    return log_gauss(Y, Qff + np.diag(noise)) - 0.5 * Y.shape[1] * np.sum(d / noise)
