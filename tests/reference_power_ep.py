"""
Dense numpy references for Power EP, written from Bui, Yan & Turner 2017 and docs/power_ep.md
and independent of the package: explicit N x N matrices, per-point loops over cavities, scipy
quadrature and textbook EP for GP classification (Rasmussen & Williams 2006, Algorithm 3.5).
"""

import numpy as np
from scipy import integrate
from scipy.stats import norm

from tests.reference import log_gauss


def power_term(alpha, matrix):
    """(1 - α)/(2α) log|I + α A| for a PSD matrix A, and its limit tr(A)/2 at α = 0."""
    if alpha == 0:
        return 0.5 * np.trace(matrix)
    return (1 - alpha) / (2 * alpha) * np.linalg.slogdet(np.eye(len(matrix)) + alpha * matrix)[1]


def pep_kbar(Qff, Dff, noise, alphas, blocks):
    """K̄ = Q_ff + blkdiag(α_b D_bb) + diag(σ²) (Bui, Yan & Turner 2017, §3.7)."""
    Kbar = Qff + np.diag(noise)
    for alpha, block in zip(alphas, blocks):
        Kbar[np.ix_(block, block)] += alpha * Dff[np.ix_(block, block)]
    return Kbar


def pep_objective(Qff, Dff, Y, noise, alphas, blocks, power_correction=True):
    """
    The structured objective of Bui, Yan & Turner 2017, §3.7, with the sign and log-determinant
    corrected (docs/power_ep.md, "Erratum (paper §3.7)"); singleton blocks give eq. 128.
    """
    noise = np.broadcast_to(noise, (len(Y),)).astype(float)
    value = log_gauss(Y, pep_kbar(Qff, Dff, noise, alphas, blocks))
    if power_correction:
        for alpha, block in zip(alphas, blocks):
            scale = 1 / np.sqrt(noise[block])
            scaled = scale[:, None] * Dff[np.ix_(block, block)] * scale[None, :]
            value -= Y.shape[1] * power_term(alpha, scaled)
    return value


def pep_posterior(Kuu, Kuf, Kbar, Y):
    """q(u) = N(K_uf K̄⁻¹ y, K_uu - K_uf K̄⁻¹ K_fu) (Bui, Yan & Turner 2017, §3.6-3.7)."""
    solve = np.linalg.solve(Kbar, np.column_stack([Y, Kuf.T]))
    return Kuf @ solve[:, : Y.shape[1]], Kuu - Kuf @ solve[:, Y.shape[1] :]


def predict_from_qu(Kss, Ksu, Kuu, m_u, S_u):
    """Mean and full covariance of f* = K_*u K_uu⁻¹ u under q(u) with the exact test conditional."""
    W = np.linalg.solve(Kuu, Ksu.T)
    return W.T @ m_u, Kss - Ksu @ W + W.T @ S_u @ W


def site_posterior(Kuu, Kuf, precision, shift):
    """q(u) from sites: V⁻¹ = K_uu⁻¹ + Σ τ_n w_n w_nᵀ, V⁻¹ m = Σ ν_n w_n (eqs. 119-120)."""
    W = np.linalg.solve(Kuu, Kuf)
    V = np.linalg.inv(np.linalg.inv(Kuu) + (W * precision) @ W.T)
    return V @ (W @ shift), V


def gaussian_log_normaliser(y, mean, var, alpha, noise):
    """log ∫ N(f; m, v) N(y; f, σ²)^α df by completing the square."""
    return (
        -0.5 * alpha * np.log(2 * np.pi * noise)
        + 0.5 * np.log(noise)
        - 0.5 * np.log(alpha * var + noise)
        - 0.5 * (y - mean) ** 2 / (var + noise / alpha)
    )


def quadrature_log_normaliser(log_lik, mean, var, alpha):
    """log ∫ N(f; m, v) p(y | f)^α df by adaptive quadrature (scipy.integrate.quad)."""
    sd = np.sqrt(var)

    def integrand(f):
        return np.exp(norm.logpdf(f, mean, sd) + alpha * log_lik(f))

    value, _ = integrate.quad(integrand, mean - 12 * sd, mean + 12 * sd, epsabs=0, epsrel=1e-13)
    return np.log(value)


def energy_by_definition(Kuu, Kuf, kdiag, precision, shift, alpha, log_normaliser):
    """
    The Power-EP energy of eq. 110 evaluated point by point from its definition,
    F = G(q) - G(p) + (1/α) Σ_n [log Z̃_n + G(q_\\n) - G(q)], with G the log-normaliser of a
    Gaussian in natural parameters and an explicit cavity per point.
    ``log_normaliser(n, mean, var)`` gives log Z̃_n for the cavity marginal of f_n.
    """
    M = len(Kuu)

    def G(precision_matrix, linear):
        cov = np.linalg.inv(precision_matrix)
        return (
            0.5 * M * np.log(2 * np.pi)
            + 0.5 * np.linalg.slogdet(cov)[1]
            + 0.5 * linear @ cov @ linear
        )

    W = np.linalg.solve(Kuu, Kuf)
    post_precision = np.linalg.inv(Kuu) + (W * precision) @ W.T
    post_linear = W @ shift
    G_q = G(post_precision, post_linear)
    G_p = 0.5 * M * np.log(2 * np.pi) + 0.5 * np.linalg.slogdet(Kuu)[1]
    total = G_q - G_p
    d = kdiag - np.sum(Kuf * W, axis=0)
    for n in range(Kuf.shape[1]):
        w = W[:, n]
        cav_precision = post_precision - alpha * precision[n] * np.outer(w, w)
        cav_linear = post_linear - alpha * shift[n] * w
        cav_cov = np.linalg.inv(cav_precision)
        mean, var = w @ cav_cov @ cav_linear, d[n] + w @ cav_cov @ w
        log_z = log_normaliser(n, mean, var)
        total += (log_z + G(cav_precision, cav_linear) - G_q) / alpha
    return total


def probit_tilted(y_sign, mean, var, jitter):
    """Moments of Φ_ε(y f) N(f; m, v), Φ_ε = ε + (1 - 2ε)Φ: log Z, tilted mean and variance."""
    z = y_sign * mean / np.sqrt(1 + var)
    Z = jitter + (1 - 2 * jitter) * norm.cdf(z)
    ratio = (1 - 2 * jitter) * norm.pdf(z) / Z
    tilted_mean = mean + var * y_sign * ratio / np.sqrt(1 + var)
    tilted_var = var - var**2 * ratio * (z + ratio) / (1 + var)
    return np.log(Z), tilted_mean, tilted_var


def textbook_ep_classification(K, y_sign, jitter, sweeps=200, tol=1e-12):
    """
    Sequential EP for GP classification with the (jittered) probit likelihood, Rasmussen &
    Williams (2006) Algorithm 3.5, recomputing the posterior after every site.
    Returns the site precisions, site shifts and the posterior mean of f.
    """
    N = len(K)
    tau, nu = np.zeros(N), np.zeros(N)
    Sigma, mu = K.copy(), np.zeros(N)
    for _ in range(sweeps):
        old = tau.copy()
        for i in range(N):
            cav_var = 1 / (1 / Sigma[i, i] - tau[i])
            cav_mean = cav_var * (mu[i] / Sigma[i, i] - nu[i])
            _, tilted_mean, tilted_var = probit_tilted(y_sign[i], cav_mean, cav_var, jitter)
            tau[i] = 1 / tilted_var - 1 / cav_var
            nu[i] = tilted_mean / tilted_var - cav_mean / cav_var
            # Σ = K - K S^½ B⁻¹ S^½ K with B = I + S^½ K S^½ (R&W eq. 3.68): no K⁻¹ needed
            root = np.sqrt(tau)
            B = np.eye(N) + root[:, None] * K * root[None, :]
            Sigma = K - (K * root[None, :]) @ np.linalg.solve(B, root[:, None] * K)
            mu = Sigma @ nu
        if np.max(np.abs(tau - old)) < tol:
            break
    return tau, nu, mu
