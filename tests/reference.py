"""
Dense numpy references written from Bui, Ashman & Turner 2025 (and docs/tight.md), independent
of the package: every quantity is built from full N x N matrices with numpy/scipy.
"""

import numpy as np
from scipy.stats import multivariate_normal


def se_kernel(A, B, variance, lengthscale):
    sq = np.sum((A[:, None, :] - B[None, :, :]) ** 2 / lengthscale**2, axis=-1)
    return variance * np.exp(-0.5 * sq)


def nystrom_parts(X, Z, variance, lengthscale, jitter=1e-6):
    """K_ff, Q_ff and D_ff = K_ff - Q_ff for the SE kernel."""
    Kff = se_kernel(X, X, variance, lengthscale)
    Kfu = se_kernel(X, Z, variance, lengthscale)
    Kuu = se_kernel(Z, Z, variance, lengthscale) + jitter * np.eye(len(Z))
    Qff = Kfu @ np.linalg.solve(Kuu, Kfu.T)
    return Kff, Qff, Kff - Qff


def log_gauss(y, cov):
    """Sum over output columns of log N(y[:, p] | 0, cov)."""
    return sum(
        multivariate_normal(np.zeros(len(y)), cov).logpdf(y[:, p]) for p in range(y.shape[1])
    )


def collapsed_bounds(X, Y, Z, variance, lengthscale, noise):
    """
    The collapsed bounds of Bui, Ashman & Turner 2025 with (per-point) noise variances `noise`
    [N]: F1 (Titsias, eq. 6), F5 (Artemev et al., eq. 13), F4 (T-SGPR, eq. 9), F8 (Appendix A)
    and log p(y).
    """
    noise = np.broadcast_to(noise, (len(X),))
    Kff, Qff, Dff = nystrom_parts(X, Z, variance, lengthscale)
    P = Y.shape[1]
    base = log_gauss(Y, Qff + np.diag(noise))
    d = np.diag(Dff)
    s = np.sqrt(noise)
    N = len(X)
    return dict(
        F1=base - 0.5 * P * np.sum(d / noise),
        F5=base - 0.5 * P * N * np.log1p(np.sum(d / noise) / N),
        F4=base - 0.5 * P * np.sum(np.log1p(d / noise)),
        F8=base - 0.5 * P * np.linalg.slogdet(np.eye(N) + Dff / s[:, None] / s[None, :])[1],
        logml=log_gauss(Y, Kff + np.diag(noise)),
    )


def gauss_kl(mu, S, K):
    """KL[N(mu, S) || N(0, K)] for one latent GP."""
    M = len(mu)
    Kinv_S = np.linalg.solve(K, S)
    return 0.5 * (
        np.trace(Kinv_S)
        + mu @ np.linalg.solve(K, mu)
        - M
        + np.linalg.slogdet(K)[1]
        - np.linalg.slogdet(S)[1]
    )


def tight_svgp_gaussian_elbo(X, y, Z, variance, lengthscale, noise, q_mu, q_cov, beta):
    """
    The T-SVGP bound (Bui, Ashman & Turner 2025, eq. 8) for one latent GP, unwhitened
    q(u) = N(q_mu, q_cov), a Gaussian likelihood and m_n = beta / (d_n + beta),
    written with dense matrices.
    """
    Kfu = se_kernel(X, Z, variance, lengthscale)
    Kuu = se_kernel(Z, Z, variance, lengthscale) + 1e-6 * np.eye(len(Z))
    P = np.linalg.solve(Kuu, Kfu.T).T  # K_fu K_uu^-1
    mean = P @ q_mu
    d = variance - np.sum(P * Kfu, axis=1)
    m = beta / (d + beta)
    v = m * d + np.sum((P @ q_cov) * P, axis=1)
    expected_loglik = -0.5 * np.log(2 * np.pi * noise) - 0.5 * ((y - mean) ** 2 + v) / noise
    return np.sum(expected_loglik) + 0.5 * np.sum(1 + np.log(m) - m) - gauss_kl(q_mu, q_cov, Kuu)


def exact_tight_predictive_variance(X, Z, Xnew, variance, lengthscale, noise, q_cov, jitter=1e-6):
    """
    Bui, Ashman & Turner 2025, eq. 12, with the symmetric S_f = M^1/2 D_ff M^1/2 in place of the
    printed M D_ff (docs/tight.md, Errata and findings), dense.
    """
    Kuu = se_kernel(Z, Z, variance, lengthscale) + jitter * np.eye(len(Z))
    Kuf = se_kernel(Z, X, variance, lengthscale)
    Kus = se_kernel(Z, Xnew, variance, lengthscale)
    Kss = se_kernel(Xnew, Xnew, variance, lengthscale)
    Ksf = se_kernel(Xnew, X, variance, lengthscale)
    Dff = se_kernel(X, X, variance, lengthscale) - Kuf.T @ np.linalg.solve(Kuu, Kuf)
    c = Ksf - Kus.T @ np.linalg.solve(Kuu, Kuf)
    m = noise / (np.diag(Dff) + noise)
    Sf = np.sqrt(m)[:, None] * Dff * np.sqrt(m)[None, :]
    Dinv = np.linalg.inv(Dff + jitter * np.eye(len(X)))
    Kuu_inv_Kus = np.linalg.solve(Kuu, Kus)
    svgp = Kss - Kus.T @ Kuu_inv_Kus + Kuu_inv_Kus.T @ q_cov @ Kuu_inv_Kus
    full = svgp - c @ Dinv @ c.T + c @ Dinv @ Sf @ Dinv @ c.T
    return np.diag(full)
