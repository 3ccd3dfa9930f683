"""
ODVGP and ODGPR (the orthogonally decoupled family with S_v ≡ C_vv: Salimbeni et al. 2018;
Fernlund 2022, eqs. 5.7-5.9, 5.26, 5.33, 5.56) against dense numpy formulas written here from
/work/shared/spec/solve.md §1.4-2.4 and the thesis, and against GPflow's SGPR, SVGP and GPR.
Nothing here reads the package's own reference modules (tests/reference_solve.py).

D1  ODVGP's ELBO (Gaussian likelihood) equals the dense uncollapsed ELBO of eq. 5.20 with
    S_v = C_vv, for any q(u) and m_v, whitened or not.
D2  ODGPR's default bound L_OD equals that dense ELBO at the optimal q (eq. 5.26's m_u, m_v, S_u,
    and S_v = C_vv), and compute_qu/compute_qv return that q.
D3  L_OD <= L_SOLVE <= L_thesis <= log p(y); bound="thesis" is SGPR on Z_u ∪ Z_v.
D4  no orthogonal points: ODVGP is SVGP, ODGPR is SGPR on Z_u (both bounds).
D5  predictions: ODGPR's mean is SGPR's on the union (eq. 5.55), its variance eq. 5.56;
    ODVGP's variance is eq. 5.9 (the orthogonal set moves the mean only).
D6  float32, tf.function, tf.data minibatches, checkpoints, the posterior's caches, bad input.
"""

import gpflow
import numpy as np
import pytest
import tensorflow as tf
from gpflow.posteriors import PrecomputeCacheType

from gpflow_tight import ODGPR, ODVGP, SOLVEGP, SOLVEGPR

VARIANCE, LENGTHSCALE, NOISE, JITTER = 1.3, 0.7, 0.08, 1e-6


def kernel():
    return gpflow.kernels.SquaredExponential(variance=VARIANCE, lengthscales=LENGTHSCALE)


def problem(rng, num_data=30):
    X = np.sort(rng.uniform(0, 6, (num_data, 1)), axis=0)
    Y = np.sin(2 * X) + 0.2 * rng.standard_normal((num_data, 1))
    Z_u = np.array([[0.4], [1.9], [3.4], [4.9]])
    Z_v = np.array([[1.1], [2.7], [5.5]])  # interleaved with Z_u: the bounds differ
    return X, Y, Z_u, Z_v


# ------------------------------------------------------------------ dense references (numpy)


def se(A, B):
    return VARIANCE * np.exp(-0.5 * (A - B.T) ** 2 / LENGTHSCALE**2)


def blocks(X, Z_u, Z_v):
    """
    K_uu + εI, C_vv = K_vv + εI - K_vu (K_uu + εI)⁻¹ K_uv (jitter on K_uu and on C_vv, spec §1.7),
    the cross-covariances with X, C_vX, and the diagonal of K_XX.
    """
    K_uu = se(Z_u, Z_u) + JITTER * np.eye(len(Z_u))
    K_uv, K_uX, K_vX = se(Z_u, Z_v), se(Z_u, X), se(Z_v, X)
    C_vv = se(Z_v, Z_v) + JITTER * np.eye(len(Z_v)) - K_uv.T @ np.linalg.solve(K_uu, K_uv)
    C_vX = K_vX - K_uv.T @ np.linalg.solve(K_uu, K_uX)
    return K_uu, C_vv, K_uX, C_vX, np.full(len(X), VARIANCE)


def log_normal(y, mean, variance):
    return -0.5 * (np.log(2 * np.pi * variance) + (y - mean) ** 2 / variance)


def gauss_kl(m, S, K):
    """KL[N(m, S) || N(0, K)]."""
    return (
        0.5
        * (
            np.trace(np.linalg.solve(K, S))
            + m.T @ np.linalg.solve(K, m)
            - len(m)
            + np.linalg.slogdet(K)[1]
            - np.linalg.slogdet(S)[1]
        ).item()
    )


def dense_decoupled_marginals(X, Z_u, Z_v, m_u, S_u, m_v, S_v):
    """Mean and variance of q(f(x)) for SOLVE-GP's q (eqs. 5.14-5.15); S_v = C_vv is ODVGP."""
    K_uu, C_vv, K_uX, C_vX, k_xx = blocks(X, Z_u, Z_v)
    P_u, P_v = np.linalg.solve(K_uu, K_uX), np.linalg.solve(C_vv, C_vX)  # K_uu⁻¹K_uX, C_vv⁻¹C_vX
    mean = P_u.T @ m_u + P_v.T @ m_v
    variance = (
        k_xx
        - np.sum(K_uX * P_u, 0)
        - np.sum(C_vX * P_v, 0)
        + np.sum(P_u * (S_u @ P_u), 0)
        + np.sum(P_v * (S_v @ P_v), 0)
    )
    return mean[:, 0], variance


def dense_odvgp_elbo(X, Y, Z_u, Z_v, m_u, S_u, m_v, noise=NOISE):
    """
    Eq. 5.20 with a Gaussian likelihood (eq. 4.16): Σ log N(y_n; μ_n, σ²) - Σ(s_n + d_n)/2σ²
    - KL_u - KL_v, where ODVGP's S_v = C_vv makes KL_v = ½ m_vᵀC_vv⁻¹m_v (eq. 5.24).
    """
    K_uu, C_vv, *_ = blocks(X, Z_u, Z_v)
    mean, variance = dense_decoupled_marginals(X, Z_u, Z_v, m_u, S_u, m_v, C_vv)
    data_fit = np.sum(log_normal(Y[:, 0], mean, noise)) - np.sum(variance) / (2 * noise)
    kl_v = 0.5 * (m_v.T @ np.linalg.solve(C_vv, m_v)).item()
    return data_fit - gauss_kl(m_u, S_u, K_uu) - kl_v


def dense_optimal_q(X, Y, Z_u, Z_v, noise=NOISE):
    """Eq. 5.26 (spec §2.1): m_u = K_uf(Q∪ + σ²I)⁻¹y, m_v = C_vf(Q∪ + σ²I)⁻¹y, S_u, S_v."""
    K_uu, C_vv, K_uX, C_vX, _ = blocks(X, Z_u, Z_v)
    Q = K_uX.T @ np.linalg.solve(K_uu, K_uX) + C_vX.T @ np.linalg.solve(C_vv, C_vX)
    alpha = np.linalg.solve(Q + noise * np.eye(len(X)), Y)
    S_u = K_uu @ np.linalg.solve(K_uu + K_uX @ K_uX.T / noise, K_uu)
    S_v = C_vv @ np.linalg.solve(C_vv + C_vX @ C_vX.T / noise, C_vv)
    return K_uX @ alpha, S_u, C_vX @ alpha, S_v


def dense_solve_elbo(X, Y, Z_u, Z_v, m_u, S_u, m_v, S_v, noise=NOISE):
    """The SOLVE-GP ELBO (eq. 5.20, 5.24) for any S_v."""
    K_uu, C_vv, *_ = blocks(X, Z_u, Z_v)
    mean, variance = dense_decoupled_marginals(X, Z_u, Z_v, m_u, S_u, m_v, S_v)
    data_fit = np.sum(log_normal(Y[:, 0], mean, noise)) - np.sum(variance) / (2 * noise)
    return data_fit - gauss_kl(m_u, S_u, K_uu) - gauss_kl(m_v, S_v, C_vv)


def random_q(rng, M_u, M_v):
    m_u, m_v = rng.standard_normal((M_u, 1)), 0.3 * rng.standard_normal((M_v, 1))
    R = np.tril(0.3 * rng.standard_normal((M_u, M_u)), -1) + np.diag(rng.uniform(0.4, 1, M_u))
    return m_u, R @ R.T, m_v


def odvgp(Z_u, Z_v, q=None, whiten=False, **kwargs):
    """An ODVGP holding q = (m_u, S_u, m_v), non-whitened, or its whitened copy."""
    kwargs = {"whiten": whiten, **kwargs}
    if q is not None:
        m_u, S_u, m_v = q
        R_u = np.linalg.cholesky(S_u)
        if whiten:  # m̃ = L⁻¹m, R̃ = L⁻¹R with the jittered factors of K_uu and C_vv
            K_uu, C_vv, *_ = blocks(np.zeros((1, 1)), Z_u, Z_v)
            L_u, L_v = np.linalg.cholesky(K_uu), np.linalg.cholesky(C_vv)
            m_u, R_u, m_v = (
                np.linalg.solve(L_u, m_u),
                np.linalg.solve(L_u, R_u),
                np.linalg.solve(L_v, m_v),
            )
        kwargs.update(q_mu=m_u, q_sqrt=R_u[None], q_mu_orthogonal=m_v)
    return ODVGP(kernel(), gpflow.likelihoods.Gaussian(NOISE), Z_u, Z_v, **kwargs)


def collapsed(cls, X, Y, Z_u, Z_v, **kwargs):
    return cls((X, Y), kernel(), Z_u, Z_v, noise_variance=NOISE, **kwargs)


# ------------------------------------------------------------------ bounds


@pytest.mark.parametrize("whiten", [False, True])
def test_odvgp_elbo_is_the_dense_uncollapsed_elbo(rng, whiten):
    """D1, for a random q(u) and m_v."""
    X, Y, Z_u, Z_v = problem(rng)
    q = random_q(rng, len(Z_u), len(Z_v))
    model = odvgp(Z_u, Z_v, q, whiten=whiten)
    np.testing.assert_allclose(
        model.elbo((X, Y)).numpy(), dense_odvgp_elbo(X, Y, Z_u, Z_v, *q), rtol=1e-8
    )
    assert model.q_sqrt_orthogonal is None
    assert not any("orthogonal" in v.name and "sqrt" in v.name for v in model.trainable_variables)


def test_odgpr_bound_is_the_dense_odvgp_elbo_at_its_optimum(rng):
    """D2: L_OD = L_thesis - ½(tr(A_vA_vᵀ) - log|Q|) (spec §2.3) is the ELBO at eq. 5.26."""
    X, Y, Z_u, Z_v = problem(rng)
    m_u, S_u, m_v, _ = dense_optimal_q(X, Y, Z_u, Z_v)
    model = collapsed(ODGPR, X, Y, Z_u, Z_v)
    np.testing.assert_allclose(
        model.elbo().numpy(), dense_odvgp_elbo(X, Y, Z_u, Z_v, m_u, S_u, m_v), rtol=1e-8
    )
    _, C_vv, *_ = blocks(X, Z_u, Z_v)
    for got, expected in zip((*model.compute_qu(), *model.compute_qv()), (m_u, S_u, m_v, C_vv)):
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-6, atol=1e-8)
    # the optimum: any other m_v or S_u gives a lower uncollapsed ELBO
    for q in ((m_u, S_u, 1.1 * m_v), (m_u, 0.9 * S_u, m_v)):
        assert dense_odvgp_elbo(X, Y, Z_u, Z_v, *q) < model.elbo().numpy()
    # and the same q held by ODVGP gives the same value
    held = odvgp(Z_u, Z_v, (m_u, S_u, m_v))
    np.testing.assert_allclose(held.elbo((X, Y)).numpy(), model.elbo().numpy(), rtol=1e-8)


def test_bound_ordering_and_the_thesis_bound(rng):
    """D3: L_OD <= L_SOLVE <= L_thesis <= log p(y); "thesis" is SGPR on the union for both."""
    X, Y, Z_u, Z_v = problem(rng)
    od = collapsed(ODGPR, X, Y, Z_u, Z_v).elbo().numpy()
    solve = collapsed(SOLVEGPR, X, Y, Z_u, Z_v).elbo().numpy()
    thesis = collapsed(ODGPR, X, Y, Z_u, Z_v, bound="thesis").elbo().numpy()
    evidence = (
        gpflow.models.GPR((X, Y), kernel(), noise_variance=NOISE).log_marginal_likelihood().numpy()
    )
    union = gpflow.models.SGPR((X, Y), kernel(), np.vstack([Z_u, Z_v]), noise_variance=NOISE)
    np.testing.assert_allclose(thesis, union.elbo().numpy(), rtol=1e-10)
    np.testing.assert_allclose(
        solve, dense_solve_elbo(X, Y, Z_u, Z_v, *dense_optimal_q(X, Y, Z_u, Z_v)), rtol=1e-8
    )
    assert od < solve - 1e-3 and solve < thesis - 1e-3 and thesis <= evidence
    np.testing.assert_allclose(
        collapsed(ODGPR, X, Y, Z_u, Z_v).decoupling_kl().numpy(), thesis - od, rtol=1e-8
    )


def test_without_orthogonal_points_odvgp_is_svgp_and_odgpr_is_sgpr(rng):
    """D4: an empty orthogonal set [0, D]."""
    X, Y, Z_u, _ = problem(rng)
    empty = np.zeros((0, 1))
    m_u, S_u, _ = random_q(rng, len(Z_u), 0)
    model = odvgp(Z_u, empty, (m_u, S_u, np.zeros((0, 1))))
    svgp = gpflow.models.SVGP(
        kernel(),
        gpflow.likelihoods.Gaussian(NOISE),
        Z_u,
        whiten=False,
        q_mu=m_u,
        q_sqrt=np.linalg.cholesky(S_u)[None],
    )
    np.testing.assert_allclose(model.elbo((X, Y)).numpy(), svgp.elbo((X, Y)).numpy(), rtol=1e-10)
    for got, expected in zip(model.predict_f(X[:7]), svgp.predict_f(X[:7])):
        np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-9, atol=1e-12)
    sgpr = gpflow.models.SGPR((X, Y), kernel(), Z_u, noise_variance=NOISE)
    for bound in ("od", "thesis"):
        model = collapsed(ODGPR, X, Y, Z_u, empty, bound=bound)
        np.testing.assert_allclose(model.elbo().numpy(), sgpr.elbo().numpy(), rtol=1e-10)
    for got, expected in zip(model.predict_f(X[:7]), sgpr.predict_f(X[:7])):
        np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-8, atol=1e-12)


# ------------------------------------------------------------------ predictions


def test_odgpr_predictions_are_the_union_mean_and_eq_5_56(rng):
    """D5 and the posterior's caches: the variance has no v-terms."""
    X, Y, Z_u, Z_v = problem(rng)
    Xnew = np.linspace(-0.5, 6.5, 9)[:, None]
    model = collapsed(ODGPR, X, Y, Z_u, Z_v)
    K_uu, *_ = blocks(X, Z_u, Z_v)
    K_uX = se(Z_u, X)
    K_us = se(Z_u, Xnew)
    # eq. 5.56: K** - K*u (K_uu⁻¹ - (K_uu + σ⁻²K_uf K_fu)⁻¹) K_u*
    middle = np.linalg.inv(K_uu) - np.linalg.inv(K_uu + K_uX @ K_uX.T / NOISE)
    covariance = se(Xnew, Xnew) - K_us.T @ middle @ K_us
    union = gpflow.models.SGPR((X, Y), kernel(), np.vstack([Z_u, Z_v]), noise_variance=NOISE)
    expected_mean = union.predict_f(Xnew)[0].numpy()
    mean, variance = model.predict_f(Xnew)
    np.testing.assert_allclose(mean.numpy(), expected_mean, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(variance.numpy()[:, 0], np.diag(covariance), rtol=1e-7, atol=1e-9)
    _, full = model.predict_f(Xnew, full_cov=True)
    np.testing.assert_allclose(full.numpy()[0], covariance, rtol=1e-6, atol=1e-9)
    # the same values from the optimal q through the dense decoupled marginals, S_v = C_vv
    m_u, S_u, m_v, _ = dense_optimal_q(X, Y, Z_u, Z_v)
    _, C_vv, *_ = blocks(X, Z_u, Z_v)
    dense = dense_decoupled_marginals(Xnew, Z_u, Z_v, m_u, S_u, m_v, C_vv)
    np.testing.assert_allclose(mean.numpy()[:, 0], dense[0], rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(variance.numpy()[:, 0], dense[1], rtol=1e-6, atol=1e-9)
    # predict_y adds the noise; every cache type of GPflow's contract predicts the same
    np.testing.assert_allclose(model.predict_y(Xnew)[1].numpy(), variance.numpy() + NOISE)
    for cache in PrecomputeCacheType:
        posterior = model.posterior(cache)
        predict = posterior.fused_predict_f if cache is PrecomputeCacheType.NOCACHE else None
        got = (predict or posterior.predict_f)(Xnew)[1].numpy()
        np.testing.assert_allclose(got, variance.numpy(), rtol=1e-12)
    frozen = model.posterior(PrecomputeCacheType.VARIABLE)
    model.kernel.lengthscales.assign(1.1)
    stale = frozen.predict_f(Xnew)[0].numpy()
    frozen.update_cache()
    np.testing.assert_allclose(frozen.predict_f(Xnew)[0].numpy(), model.predict_f(Xnew)[0].numpy())
    assert not np.allclose(stale, model.predict_f(Xnew)[0].numpy())


def test_odvgp_orthogonal_set_moves_the_mean_only(rng):
    """D5: eq. 5.9 (the variance of SVGP on Z_u) and the decoupled mean; SOLVEGP at S_v = C_vv."""
    X, Y, Z_u, Z_v = problem(rng)
    Xnew = np.linspace(-0.5, 6.5, 9)[:, None]
    q = random_q(rng, len(Z_u), len(Z_v))
    model = odvgp(Z_u, Z_v, q)
    _, C_vv, *_ = blocks(X, Z_u, Z_v)
    mean, variance = dense_decoupled_marginals(Xnew, Z_u, Z_v, *q, C_vv)
    got_mean, got_variance = model.predict_f(Xnew)
    np.testing.assert_allclose(got_mean.numpy()[:, 0], mean, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(got_variance.numpy()[:, 0], variance, rtol=1e-8, atol=1e-10)
    svgp = gpflow.models.SVGP(
        kernel(), gpflow.likelihoods.Gaussian(NOISE), Z_u, whiten=False, q_mu=q[0],
        q_sqrt=np.linalg.cholesky(q[1])[None],
    )  # fmt: skip
    np.testing.assert_allclose(got_variance.numpy(), svgp.predict_f(Xnew)[1].numpy(), rtol=1e-7)
    solve = SOLVEGP(
        kernel(), gpflow.likelihoods.Gaussian(NOISE), Z_u, Z_v, whiten=False, q_mu=q[0],
        q_sqrt=np.linalg.cholesky(q[1])[None], q_mu_orthogonal=q[2],
        q_sqrt_orthogonal=np.linalg.cholesky(C_vv)[None],
    )  # fmt: skip
    np.testing.assert_allclose(solve.elbo((X, Y)).numpy(), model.elbo((X, Y)).numpy(), rtol=1e-8)
    _, full = model.predict_f(Xnew, full_cov=True)
    np.testing.assert_allclose(np.diag(full.numpy()[0]), variance, rtol=1e-7, atol=1e-10)


# ------------------------------------------------------------------ engineering


def test_float32(rng):
    X, Y, Z_u, Z_v = problem(rng)
    reference = collapsed(ODGPR, X, Y, Z_u, Z_v).elbo().numpy()
    reference_uncollapsed = odvgp(Z_u, Z_v, whiten=True).elbo((X, Y)).numpy()
    with gpflow.config.as_context(gpflow.config.Config(float=np.float32, jitter=1e-5)):
        data = (X.astype(np.float32), Y.astype(np.float32))
        model = ODGPR(data, kernel(), Z_u, Z_v, noise_variance=NOISE)
        uncollapsed = ODVGP(kernel(), gpflow.likelihoods.Gaussian(NOISE), Z_u, Z_v)
        values = (model.elbo(), uncollapsed.elbo(data), *model.predict_f(data[0]))
        values += tuple(uncollapsed.predict_f(data[0]))
        for value in values:
            assert value.dtype == tf.float32 and np.all(np.isfinite(value.numpy()))
        np.testing.assert_allclose(values[0].numpy(), reference, rtol=2e-3)
        np.testing.assert_allclose(values[1].numpy(), reference_uncollapsed, rtol=2e-3)


def test_compiled_collapsed_loss_equals_the_eager_one(rng):
    X, Y, Z_u, Z_v = problem(rng)
    regression = collapsed(ODGPR, X, Y, Z_u, Z_v)
    np.testing.assert_allclose(
        tf.function(regression.training_loss)().numpy(),
        regression.training_loss().numpy(),
        rtol=1e-10,
    )


def test_minibatches_are_unbiased_and_train_under_tf_function(rng):
    X, Y, Z_u, Z_v = problem(rng, num_data=32)
    model = odvgp(Z_u, Z_v, random_q(rng, len(Z_u), len(Z_v)), whiten=True, num_data=32)
    batches = np.array_split(rng.permutation(32), 4)
    estimates = [model.elbo((X[i], Y[i])).numpy() for i in batches]
    np.testing.assert_allclose(np.mean(estimates), model.elbo((X, Y)).numpy(), rtol=1e-10)

    dataset = tf.data.Dataset.from_tensor_slices((X, Y)).repeat().shuffle(32, seed=2).batch(8)
    batches = iter(dataset)
    compiled = tf.function(model.training_loss)  # traced once: every batch has the same shape
    batch = next(batches)
    np.testing.assert_allclose(compiled(batch).numpy(), model.training_loss(batch), rtol=1e-10)
    optimizer = gpflow.keras.tf_keras.optimizers.Adam(0.05)
    before = model.elbo((X, Y)).numpy()
    for _ in range(30):
        optimizer.minimize(lambda: compiled(next(batches)), model.trainable_variables)
    assert model.elbo((X, Y)).numpy() > before + 5

    regression = collapsed(ODGPR, X, Y, Z_u, Z_v)
    before = regression.elbo().numpy()
    gpflow.optimizers.Scipy().minimize(
        regression.training_loss,
        regression.trainable_variables,
        options={"maxiter": 10},
        compile=False,  # the compiled loss is tested above
    )
    assert regression.elbo().numpy() > before


def test_checkpoint_round_trip(rng, tmp_path):
    X, Y, Z_u, Z_v = problem(rng)
    model = odvgp(Z_u, Z_v, random_q(rng, len(Z_u), len(Z_v)), whiten=True)
    model.orthogonal_inducing_variable.orthogonal.Z.assign(Z_v + 0.1)
    regression = collapsed(ODGPR, X, Y, Z_u, Z_v)
    regression.kernel.lengthscales.assign(0.9)
    path = tf.train.Checkpoint(a=model, b=regression).save(str(tmp_path / "ckpt"))
    restored, restored_regression = odvgp(Z_u, Z_v, whiten=True), collapsed(ODGPR, X, Y, Z_u, Z_v)
    tf.train.Checkpoint(a=restored, b=restored_regression).restore(path).assert_consumed()
    np.testing.assert_allclose(restored.elbo((X, Y)).numpy(), model.elbo((X, Y)).numpy())
    np.testing.assert_allclose(restored_regression.elbo().numpy(), regression.elbo().numpy())


def test_bad_input(rng):
    X, Y, Z_u, Z_v = problem(rng)
    likelihood = gpflow.likelihoods.Gaussian(NOISE)
    with pytest.raises(TypeError, match="q_sqrt_orthogonal"):
        ODVGP(kernel(), likelihood, Z_u, Z_v, q_sqrt_orthogonal=np.eye(3)[None])
    with pytest.raises(ValueError, match="q_mu_orthogonal"):
        ODVGP(kernel(), likelihood, Z_u, Z_v, q_mu_orthogonal=np.zeros((2, 1)))
    with pytest.raises(ValueError, match="orthogonal_inducing_variable"):
        ODVGP(kernel(), likelihood, Z_u)
    with pytest.raises(ValueError, match="'od' or 'thesis'"):
        collapsed(ODGPR, X, Y, Z_u, Z_v, bound="solve")
    with pytest.raises(ValueError, match="'solve' or 'thesis'"):
        collapsed(SOLVEGPR, X, Y, Z_u, Z_v, bound="od")
    with pytest.raises(ValueError, match="orthogonal_inducing_variable"):
        ODGPR((X, Y), kernel(), Z_u, noise_variance=NOISE)
    model = collapsed(ODGPR, X, Y, Z_u, Z_v)
    with pytest.raises(Exception, match="bound"):
        model.bound = "thesis"  # fixed at construction: a compiled loss would keep the old one
