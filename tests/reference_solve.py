"""
Dense numpy references for the SOLVE-GP family, written from Fernlund 2022 (ch. 5), Bui, Ashman
& Turner 2025 (eq. 14) and docs/solve.md (Derivations) with full N x N matrices and explicit
inverses, independent of the package's blocked computations.
"""

import numpy as np

from tests.reference import gauss_kl, log_gauss, se_kernel


def solve_blocks(X, Z_u, Z_v, variance, lengthscale, jitter=1e-6):
    """The kernel blocks of Fernlund 2022, eq. 5.5, with the jitter convention of docs/solve.md."""

    def k(A, B):
        return se_kernel(A, B, variance, lengthscale)

    K_uu = k(Z_u, Z_u) + jitter * np.eye(len(Z_u))
    K_uv, K_uf = k(Z_u, Z_v), k(Z_u, X)
    C_vv = k(Z_v, Z_v) + jitter * np.eye(len(Z_v)) - K_uv.T @ np.linalg.solve(K_uu, K_uv)
    C_vf = k(Z_v, X) - K_uv.T @ np.linalg.solve(K_uu, K_uf)
    Q_u = K_uf.T @ np.linalg.solve(K_uu, K_uf)
    Q_v = C_vf.T @ np.linalg.solve(C_vv, C_vf)
    return dict(K_uu=K_uu, K_uf=K_uf, C_vv=C_vv, C_vf=C_vf, K_ff=k(X, X), Q_u=Q_u, Q_v=Q_v, k=k)


def thesis_bound(Y, b, noise, tight=False):
    """Fernlund 2022, eq. 5.33, or its tighter version (docs/solve.md, Derivations)."""
    d = np.diag(b["K_ff"] - b["Q_u"] - b["Q_v"])
    penalty = np.sum(np.log1p(d / noise)) if tight else np.sum(d) / noise
    N, P = Y.shape
    return log_gauss(Y, b["Q_u"] + b["Q_v"] + noise * np.eye(N)) - 0.5 * P * penalty


def optimal_q(Y, b, noise):
    """Fernlund 2022, eq. 5.26, with the means in closed form (docs/solve.md, Derivations)."""
    N = len(Y)
    Sigma = b["Q_u"] + b["Q_v"] + noise * np.eye(N)
    m_u = b["K_uf"] @ np.linalg.solve(Sigma, Y)
    m_v = b["C_vf"] @ np.linalg.solve(Sigma, Y)
    K_uu, C_vv = b["K_uu"], b["C_vv"]
    S_u = K_uu @ np.linalg.solve(K_uu + b["K_uf"] @ b["K_uf"].T / noise, K_uu)
    S_v = C_vv @ np.linalg.solve(C_vv + b["C_vf"] @ b["C_vf"].T / noise, C_vv)
    return m_u, S_u, m_v, S_v


def marginals(b, m_u, S_u, m_v, S_v):
    """Mean, variance carried by q (s_n) and residual d_n at X (Fernlund 2022, eqs. 5.14-5.15)."""
    Wu = np.linalg.solve(b["K_uu"], b["K_uf"])  # K_uu⁻¹ K_uf
    Wv = np.linalg.solve(b["C_vv"], b["C_vf"])  # C_vv⁻¹ C_vf
    mean = Wu.T @ m_u + Wv.T @ m_v
    s = np.einsum("mn,mk,kn->n", Wu, S_u, Wu) + np.einsum("mn,mk,kn->n", Wv, S_v, Wv)
    d = np.diag(b["K_ff"] - b["Q_u"] - b["Q_v"])
    return mean, s, d


def uncollapsed_elbo(Y, b, noise, m_u, S_u, m_v, S_v, relaxation=None):
    """
    The uncollapsed SOLVE-GP ELBO (Fernlund 2022, eqs. 5.17-5.24) with a Gaussian likelihood, or
    T-SOLVEGP (Bui, Ashman & Turner 2025, eq. 14) when `relaxation` maps d_n to m_n.
    """
    mean, s, d = marginals(b, m_u, S_u, m_v, S_v)
    m = np.ones_like(d) if relaxation is None else relaxation(d)
    variance = m * d + s
    N, P = Y.shape
    expected_log_lik = np.sum(
        -0.5 * np.log(2 * np.pi * noise) - 0.5 * (Y - mean) ** 2 / noise
    ) - P * np.sum(variance) / (2 * noise)
    kl = sum(
        gauss_kl(m_u[:, p], S_u, b["K_uu"]) + gauss_kl(m_v[:, p], S_v, b["C_vv"]) for p in range(P)
    )
    return expected_log_lik + 0.5 * P * np.sum(1 + np.log(m) - m) - kl


def predictive(Xnew, Z_u, Z_v, b, m_u, S_u, m_v, S_v):
    """Fernlund 2022, eqs. 5.14-5.15: full mean [N*, P] and covariance [N*, N*]."""
    k = b["k"]
    K_us = k(Z_u, Xnew)
    C_vs = k(Z_v, Xnew) - k(Z_u, Z_v).T @ np.linalg.solve(b["K_uu"], K_us)
    Wu = np.linalg.solve(b["K_uu"], K_us)
    Wv = np.linalg.solve(b["C_vv"], C_vs)
    mean = Wu.T @ m_u + Wv.T @ m_v
    cov = k(Xnew, Xnew) - Wu.T @ (b["K_uu"] - S_u) @ Wu - Wv.T @ (b["C_vv"] - S_v) @ Wv
    return mean, cov


def algorithm3(X, y, Z_u, Z_v, Xnew, variance, lengthscale, noise, printed_line_20=False):
    """
    A line-by-line port of Fernlund 2022, Algorithm 3 (§5.4.3), with the N x N matrices of lines
    22-25 and the line-20 erratum (docs/solve.md, errata) corrected unless `printed_line_20`.
    Jitter 1e-6 on K_uu and C_vv (the convention of docs/solve.md). Returns (bound, mean,
    variance) for one output column y [N].
    """

    def k(A, B):
        return se_kernel(A, B, variance, lengthscale)

    sigma = np.sqrt(noise)
    K_uu, K_vv = k(Z_u, Z_u) + 1e-6 * np.eye(len(Z_u)), k(Z_v, Z_v) + 1e-6 * np.eye(len(Z_v))
    L_u = np.linalg.cholesky(K_uu)  # line 2
    delta_f = np.linalg.solve(L_u, k(Z_u, X))  # line 3
    delta_v = np.linalg.solve(L_u, k(Z_u, Z_v))
    C_vf = k(Z_v, X) - delta_v.T @ delta_f  # line 4
    C_vv = K_vv - delta_v.T @ delta_v
    L_v = np.linalg.cholesky(C_vv)  # line 5
    A_u, A_v = delta_f / sigma, np.linalg.solve(L_v, C_vf) / sigma  # line 6
    A = np.vstack([A_u, A_v])  # line 7
    AAT = A @ A.T  # lines 8-9
    M_u = len(Z_u)
    B_u, B_v = np.eye(M_u) + AAT[:M_u, :M_u], np.eye(len(Z_v)) + AAT[M_u:, M_u:]  # line 10
    L_Bu = np.linalg.cholesky(B_u)  # line 11
    gamma = np.linalg.solve(L_Bu, AAT[:M_u, M_u:])  # line 12
    L_Q = np.linalg.cholesky(B_v - gamma.T @ gamma)  # lines 13-14
    L_B = np.block([[L_Bu, np.zeros_like(gamma)], [gamma.T, L_Q]])  # line 15
    c = np.linalg.solve(L_B, A @ y) / sigma  # line 16
    N = len(X)
    bound = (  # line 17
        -0.5 * N * np.log(2 * np.pi * noise)
        - np.sum(np.log(np.diag(L_B)))
        - 0.5 * y @ y / noise
        + 0.5 * c @ c
        - 0.5 * np.trace(k(X, X)) / noise
        + 0.5 * np.trace(AAT)
    )
    delta_s = np.linalg.solve(L_u, k(Z_u, Xnew))  # line 19
    C_vs = delta_v.T @ delta_s if printed_line_20 else k(Z_v, Xnew) - delta_v.T @ delta_s
    L_Bv = np.linalg.cholesky(B_v)  # line 21
    C_u, C_v = np.linalg.solve(L_Bu, A_u), np.linalg.solve(L_Bv, A_v)  # line 22
    C = np.linalg.solve(L_B, A)
    D, D_u, D_v = np.eye(N) - C.T @ C, np.eye(N) - C_u.T @ C_u, np.eye(N) - C_v.T @ C_v  # 23
    E_u, E_v = np.eye(M_u) - A_u @ D @ A_u.T, np.eye(len(Z_v)) - A_v @ D @ A_v.T  # line 24
    F_uv, F_vu = E_u @ A_u @ D_v / sigma, E_v @ A_v @ D_u / sigma  # line 25
    alpha_u, alpha_v = delta_s, np.linalg.solve(L_v, C_vs)  # line 26
    beta_u, beta_v = np.linalg.solve(L_Bu, alpha_u), np.linalg.solve(L_Bv, alpha_v)  # line 27
    mean = alpha_u.T @ F_uv @ y + alpha_v.T @ F_vu @ y  # line 28
    var = (  # line 30
        variance
        - np.sum(alpha_u**2, 0)
        + np.sum(beta_u**2, 0)
        - np.sum(alpha_v**2, 0)
        + np.sum(beta_v**2, 0)
    )
    return bound, mean, var
