"""The shared projection (L, A = L⁻¹K_uf, d_n) against dense numpy formulas."""

import gpflow
import numpy as np
import pytest
import tensorflow as tf

from gpflow_tight.projection import (
    collapsed_common_terms,
    marginals_with_residual,
    project,
    residual_variance,
    squared_column_norms,
)


def dense(kernel, Z, X, jitter=1e-6):
    Kuu = kernel(Z).numpy() + jitter * np.eye(len(Z))
    Kuf = kernel(Z, X).numpy()
    L = np.linalg.cholesky(Kuu)
    A = np.linalg.solve(L, Kuf)
    d = kernel(X, full_cov=False).numpy() - np.einsum("mn,mn->n", Kuf, np.linalg.solve(Kuu, Kuf))
    return L, A, d


def test_projection_against_dense(rng):
    X, Z = rng.uniform(0, 5, (30, 2)), rng.uniform(0, 5, (6, 2))
    kernel = gpflow.kernels.Matern52(lengthscales=[1.0, 2.0])
    L, A, d = dense(kernel, Z, X)
    projection = project(gpflow.inducing_variables.InducingPoints(Z), kernel, X)
    np.testing.assert_allclose(projection.L, L, rtol=1e-12)
    np.testing.assert_allclose(projection.A, A, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(projection.residual, np.maximum(d, 0), rtol=1e-9, atol=1e-13)


@pytest.mark.parametrize("shared", [True, False])
def test_projection_of_independent_latent_gps(rng, shared):
    X = rng.uniform(0, 5, (20, 1))
    Zs = [rng.uniform(0, 5, (4, 1)), rng.uniform(0, 5, (4, 1))]
    kernels = [gpflow.kernels.SquaredExponential(), gpflow.kernels.Matern32(lengthscales=0.5)]
    kernel = gpflow.kernels.SeparateIndependent(kernels)
    if shared:
        iv = gpflow.inducing_variables.SharedIndependentInducingVariables(
            gpflow.inducing_variables.InducingPoints(Zs[0])
        )
        Zs = [Zs[0], Zs[0]]
    else:
        iv = gpflow.inducing_variables.SeparateIndependentInducingVariables(
            [gpflow.inducing_variables.InducingPoints(Z) for Z in Zs]
        )
    projection = project(iv, kernel, X)
    for latent, (k, Z) in enumerate(zip(kernels, Zs)):
        L, A, d = dense(k, Z, X)
        np.testing.assert_allclose(projection.A[latent], A, rtol=1e-10, atol=1e-13)
        np.testing.assert_allclose(projection.residual[latent], d, rtol=1e-9, atol=1e-13)


def test_residual_is_clipped_at_zero():
    A = np.array([[1.0, 2.0], [0.0, 1e-8]])
    np.testing.assert_array_equal(residual_variance(np.array([1.0 - 1e-15, 5.0]), A), [0.0, 1.0])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", [(7, 40), (3, 7, 40)])
def test_squared_column_norms_and_their_gradient(rng, dtype, shape):
    """The fused norms and their one-pass gradient against numpy and 2 a_n w_n."""
    A = rng.standard_normal(shape).astype(dtype)
    weights = rng.standard_normal(shape[:-2] + shape[-1:]).astype(dtype)
    A_tf = tf.constant(A)
    with tf.GradientTape() as tape:
        tape.watch(A_tf)
        norms = squared_column_norms(A_tf)
        weighted = tf.reduce_sum(weights * tf.math.log1p(norms))
    gradient = tape.gradient(weighted, A_tf)
    exact = np.sum(A.astype(np.float64) ** 2, axis=-2)
    rtol = 1e-14 if dtype == np.float64 else 1e-6
    np.testing.assert_allclose(norms, exact, rtol=rtol)
    expected = 2 * A * (weights / (1 + exact))[..., None, :]
    np.testing.assert_allclose(gradient, expected, rtol=10 * rtol)
    assert norms.dtype == gradient.dtype == dtype


@pytest.mark.parametrize("whiten", [True, False])
@pytest.mark.parametrize("diagonal", [True, False])
def test_marginals_with_residual_against_dense(rng, whiten, diagonal):
    X, Z = rng.uniform(0, 5, (15, 1)), rng.uniform(0, 5, (5, 1))
    kernel = gpflow.kernels.SquaredExponential()
    L, A, d = dense(kernel, Z, X)
    q_mu = rng.standard_normal((5, 2))
    if diagonal:
        q_sqrt = rng.uniform(0.2, 1, (5, 2))
        R = np.stack([np.diag(q_sqrt[:, i]) for i in range(2)])
    else:
        q_sqrt = np.tril(rng.standard_normal((2, 5, 5))) + 2 * np.eye(5)
        R = q_sqrt
    projection = project(gpflow.inducing_variables.InducingPoints(Z), kernel, X)
    mean, s, residual = marginals_with_residual(projection, q_mu, q_sqrt, whiten)
    # dense: u = L ũ when whitened; mean k_nu K⁻¹ m, variance k_nu K⁻¹ S K⁻¹ k_un
    Kuu = L @ L.T
    Kuf = L @ A
    for i in range(2):
        S = R[i] @ R[i].T
        m = q_mu[:, i]
        if whiten:
            m, S = L @ m, L @ S @ L.T
        W = np.linalg.solve(Kuu, Kuf)
        np.testing.assert_allclose(mean[:, i], W.T @ m, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(s[:, i], np.einsum("mn,mk,kn->n", W, S, W), rtol=1e-9)
        np.testing.assert_allclose(residual[:, i], d, rtol=1e-9, atol=1e-13)


def test_collapsed_terms_against_dense(rng):
    X, Z = rng.uniform(0, 5, (25, 1)), rng.uniform(0, 5, (5, 1))
    kernel = gpflow.kernels.SquaredExponential()
    L, A, d = dense(kernel, Z, X)
    noise = rng.uniform(0.05, 0.3, 25)
    terms = collapsed_common_terms(
        project(gpflow.inducing_variables.InducingPoints(Z), kernel, X), noise
    )
    As = A / np.sqrt(noise)
    B = np.eye(5) + As @ As.T
    np.testing.assert_allclose(terms.A, As, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(terms.B, B, rtol=1e-10)
    np.testing.assert_allclose(terms.LB, np.linalg.cholesky(B), rtol=1e-10)
    np.testing.assert_allclose(terms.residual, d, rtol=1e-9, atol=1e-13)
