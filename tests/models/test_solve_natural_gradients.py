"""
Natural gradients with SOLVEGP and TightSOLVEGP (docs/solve.md, "Training T-SOLVEGP with natural
gradients"), against a dense numpy reference written here from docs/solve.md: whitened
projections :math:`A_u = L_u^{-1}K_{uf}`, :math:`A_v = L_v^{-1}C_{vf}`, the residual
:math:`d_n = k_{nn} - \\|a_{u,n}\\|^2 - \\|a_{v,n}\\|^2`, and the optimal factors
:math:`q(\\tilde{\\mathbf u})`, :math:`q(\\tilde{\\mathbf v})` for a Gaussian likelihood.

Property ids used in this file's docstrings:
N1  For a Gaussian likelihood, TightSOLVEGP's bound minus SOLVEGP's at equal kernel, inducing
    points and q is sum_n [(1 - m_n) d_n / (2 sigma^2) + (1 + log m_n - m_n) / 2] with
    m_n = beta / (d_n + beta): it does not depend on q, it is >= 0 at beta = sigma^2, and
    beta = sigma^2 maximises it.
N2  Hence both bounds have the same natural gradients in q: one GPflow NaturalGradient step with
    gamma = 1 on both factors at once sets each factor to its optimum given the other's old
    value (a block-Jacobi step), identically for both models and any beta.
N3  gamma = 1 steps on one factor at a time (u, then v) are block Gauss-Seidel sweeps, identical
    for both models, and converge to the joint optimum of Fernlund's eq. 5.26.
"""

import gpflow
import numpy as np
import pytest
from scipy.linalg import cho_solve, cholesky, solve_triangular

from gpflow_tight import SOLVEGP, TightSOLVEGP

VARIANCE, LENGTHSCALE, NOISE = 1.2, 0.6, 0.05


def problem(rng, num_data=40, equal_sizes=False):
    """Z_v interleaved with Z_u, so that the two factors couple; ``equal_sizes`` gives M_v = M_u
    (GPflow's ``NaturalGradient.minimize`` requires one size for every pair of one call)."""
    X = np.sort(rng.uniform(0, 6, (num_data, 1)), axis=0)
    Y = np.sin(2 * X) + 0.2 * rng.standard_normal((num_data, 1))
    Z_u = np.linspace(0.3, 5.7, 5)[:, None]
    Z_v = np.array([[0.8], [2.1], [3.9], [5.2]] + ([[2.6]] if equal_sizes else []))
    return X, Y, Z_u, Z_v


def squared_exponential(A, B):
    return VARIANCE * np.exp(-0.5 * (A - B.T) ** 2 / LENGTHSCALE**2)


def dense_projection(X, Z_u, Z_v):
    """A_u [M_u, N], A_v [M_v, N] and d [N] with docs/solve.md's jitter convention."""
    jitter = gpflow.config.default_jitter()
    L_u = cholesky(squared_exponential(Z_u, Z_u) + jitter * np.eye(len(Z_u)), lower=True)
    A_u = solve_triangular(L_u, squared_exponential(Z_u, X), lower=True)
    P_uv = solve_triangular(L_u, squared_exponential(Z_u, Z_v), lower=True)
    C_vv = squared_exponential(Z_v, Z_v) - P_uv.T @ P_uv + jitter * np.eye(len(Z_v))
    C_vf = squared_exponential(Z_v, X) - P_uv.T @ A_u
    A_v = solve_triangular(cholesky(C_vv, lower=True), C_vf, lower=True)
    d = VARIANCE - np.sum(A_u**2, 0) - np.sum(A_v**2, 0)
    return A_u, A_v, d


def block_optimum(A, A_other, y, m_other):
    """q of one whitened factor given the other's mean: precision B = I + A A^T / sigma^2 and
    mean B^{-1} A (y - A_other^T m_other) / sigma^2."""
    B = np.eye(len(A)) + A @ A.T / NOISE
    L_B = cholesky(B, lower=True)
    return cho_solve((L_B, True), A @ (y - A_other.T @ m_other) / NOISE), np.linalg.inv(B)


def models(X, Z_u, Z_v, beta):
    kw = dict(num_data=len(X))
    plain = SOLVEGP(
        gpflow.kernels.SquaredExponential(VARIANCE, LENGTHSCALE),
        gpflow.likelihoods.Gaussian(NOISE),
        Z_u,
        Z_v,
        **kw,
    )
    tight = TightSOLVEGP(
        gpflow.kernels.SquaredExponential(VARIANCE, LENGTHSCALE),
        gpflow.likelihoods.Gaussian(NOISE),
        Z_u,
        Z_v,
        beta=beta,
        **kw,
    )
    return plain, tight


def random_q(rng, size):
    sqrt = np.tril(0.3 * rng.standard_normal((size, size)), -1)
    sqrt += np.diag(rng.uniform(0.2, 1.0, size))
    return rng.standard_normal((size, 1)), sqrt[None]


def assign_q(model, q_u, q_v):
    model.q_mu.assign(q_u[0])
    model.q_sqrt.assign(q_u[1])
    model.q_mu_orthogonal.assign(q_v[0])
    model.q_sqrt_orthogonal.assign(q_v[1])


def factor_pairs(model):
    return [(model.q_mu, model.q_sqrt), (model.q_mu_orthogonal, model.q_sqrt_orthogonal)]


def covariance(q_sqrt):
    sqrt = q_sqrt.numpy()[0]
    return sqrt @ sqrt.T


@pytest.mark.parametrize("beta_over_noise", [0.3, 1.0, 4.0])
def test_tight_minus_plain_bound_is_the_dense_relaxation_term_for_any_q(rng, beta_over_noise):
    """N1: the difference is q-independent and equals the dense term; >= 0 at beta = sigma^2."""
    X, Y, Z_u, Z_v = problem(rng)
    _, _, d = dense_projection(X, Z_u, Z_v)
    beta = beta_over_noise * NOISE
    m = beta / (d + beta)
    expected = np.sum((1 - m) * d / (2 * NOISE) + 0.5 * (1 + np.log(m) - m))
    plain, tight = models(X, Z_u, Z_v, beta)
    for _ in range(3):
        q_u, q_v = random_q(rng, len(Z_u)), random_q(rng, len(Z_v))
        assign_q(plain, q_u, q_v)
        assign_q(tight, q_u, q_v)
        difference = tight.elbo((X, Y)).numpy() - plain.elbo((X, Y)).numpy()
        np.testing.assert_allclose(difference, expected, rtol=1e-9)
    if beta_over_noise == 1.0:
        assert expected > 0.0


def test_beta_equal_to_the_noise_variance_maximises_the_tight_bound(rng):
    """N1: over a grid of beta around sigma^2 the bound (at a random q) peaks at sigma^2."""
    X, Y, Z_u, Z_v = problem(rng)
    _, tight = models(X, Z_u, Z_v, NOISE)
    assign_q(tight, random_q(rng, len(Z_u)), random_q(rng, len(Z_v)))
    grid = NOISE * np.exp(np.linspace(-2.0, 2.0, 21))  # grid[10] == NOISE
    bounds = []
    for beta in grid:
        tight.relaxation.beta.assign([beta])
        bounds.append(tight.elbo((X, Y)).numpy())
    assert int(np.argmax(bounds)) == 10
    assert np.all(np.diff(bounds[:11]) > 0) and np.all(np.diff(bounds[10:]) < 0)


def test_one_natural_gradient_step_with_gamma_one_is_the_block_jacobi_step(rng):
    """N2: both factors at once, from a random q: each factor's optimum given the other's old q."""
    X, Y, Z_u, Z_v = problem(rng, equal_sizes=True)
    A_u, A_v, _ = dense_projection(X, Z_u, Z_v)
    q_u, q_v = random_q(rng, len(Z_u)), random_q(rng, len(Z_v))
    m_u, S_u = block_optimum(A_u, A_v, Y, q_v[0])
    m_v, S_v = block_optimum(A_v, A_u, Y, q_u[0])
    for model in models(X, Z_u, Z_v, beta=0.3 * NOISE):
        assign_q(model, q_u, q_v)
        loss = model.training_loss_closure((X, Y), compile=False)
        gpflow.optimizers.NaturalGradient(gamma=1.0).minimize(loss, factor_pairs(model))
        np.testing.assert_allclose(model.q_mu.numpy(), m_u, rtol=1e-7, atol=1e-9)
        np.testing.assert_allclose(model.q_mu_orthogonal.numpy(), m_v, rtol=1e-7, atol=1e-9)
        np.testing.assert_allclose(covariance(model.q_sqrt), S_u, rtol=1e-7, atol=1e-9)
        np.testing.assert_allclose(covariance(model.q_sqrt_orthogonal), S_v, rtol=1e-7, atol=1e-9)


def gauss_seidel(A_u, A_v, y, m_v, sweeps):
    """Dense block Gauss-Seidel on the factors' means: u given v, then v given the new u."""
    for _ in range(sweeps):
        m_u, S_u = block_optimum(A_u, A_v, y, m_v)
        m_v, S_v = block_optimum(A_v, A_u, y, m_u)
    return m_u, S_u, m_v, S_v


def test_alternating_natural_gradient_steps_are_gauss_seidel_sweeps_to_the_optimum(rng):
    """N3: gamma = 1 on u, then on v: the dense Gauss-Seidel iterates, converging to eq. 5.26."""
    X, Y, Z_u, Z_v = problem(rng)
    A_u, A_v, _ = dense_projection(X, Z_u, Z_v)
    A = np.vstack([A_u, A_v])
    optimum = np.linalg.solve(np.eye(len(A)) + A @ A.T / NOISE, A @ Y / NOISE)
    q_u, q_v = random_q(rng, len(Z_u)), random_q(rng, len(Z_v))
    for model in models(X, Z_u, Z_v, beta=0.3 * NOISE):
        assign_q(model, q_u, q_v)
        loss = model.training_loss_closure((X, Y), compile=False)
        natural_gradient = gpflow.optimizers.NaturalGradient(gamma=1.0)
        u_pair, v_pair = factor_pairs(model)
        done = 0
        for sweeps in (1, 3, 10):
            for _ in range(sweeps - done):
                natural_gradient.minimize(loss, [u_pair])
                natural_gradient.minimize(loss, [v_pair])
            done = sweeps
            m_u, S_u, m_v, S_v = gauss_seidel(A_u, A_v, Y, q_v[0], sweeps)
            np.testing.assert_allclose(model.q_mu.numpy(), m_u, rtol=1e-7, atol=1e-9)
            np.testing.assert_allclose(model.q_mu_orthogonal.numpy(), m_v, rtol=1e-7, atol=1e-9)
            np.testing.assert_allclose(covariance(model.q_sqrt), S_u, rtol=1e-7, atol=1e-9)
            np.testing.assert_allclose(
                covariance(model.q_sqrt_orthogonal), S_v, rtol=1e-7, atol=1e-9
            )
    # the iterates contract by rho^2 = 0.62 per sweep here (rho: the largest canonical
    # correlation of the u and v blocks of B), so 60 sweeps reach eq. 5.26 to round-off
    m_u, _, m_v, _ = gauss_seidel(A_u, A_v, Y, q_v[0], 60)
    np.testing.assert_allclose(np.vstack([m_u, m_v]), optimum, rtol=1e-8, atol=1e-10)
