"""
The process-convolution kernel (``gpflow_tight.kernels.ConvolvedKernel``) and its latent
inducing points (``gpflow_tight.inducing_variables.LatentInducingPoints``) against independent
references: numerical integration of the convolution integrals on a fine grid (1-D), dense
numpy formulas written from Álvarez & Lawrence (2011) and the lecture notes (D = 2 closed form,
DTC / FITC / PITC marginal likelihoods), GPflow's SE kernel (the G -> delta limit) and
``gpflow.models.GPR`` (exact multi-output inference on stacked inputs).
"""

import gpflow
import numpy as np
import pytest
import tensorflow as tf
from gpflow.covariances import Kuf, Kuu

from gpflow_tight import DTC, FITC, PITC, PowerEPSGP, TightSGPR, TightSVGP
from gpflow_tight.inducing_variables import LatentInducingPoints
from gpflow_tight.kernels import ConvolvedKernel

JITTER = 1e-6  # tests/conftest.py sets GPflow's default jitter to this

# two outputs, two latent processes, 1-D inputs
S_1D = np.array([[1.2, -0.4], [0.6, 0.9]])
W_1D = np.array([[0.3], [0.5]])
L_1D = np.array([[0.7], [1.6]])


def normal_pdf(t, var):
    return np.exp(-0.5 * t**2 / var) / np.sqrt(2 * np.pi * var)


def stacked(x, d):
    return np.c_[x, np.asarray(d, dtype=float)]


# ------------------------------------------------------------------------------------------------
# Dense numpy references written from the equations


def mvn_density(diff, cov):
    """N(diff; 0, cov) for rows of diff [..., D] and a full covariance [D, D]."""
    D = cov.shape[0]
    quad = np.einsum("...i,ij,...j->...", diff, np.linalg.inv(cov), diff)
    return np.exp(-0.5 * quad) / np.sqrt((2 * np.pi) ** D * np.linalg.det(cov))


def dense_kff(X1, d1, X2, d2, S, W, L):
    """
    Álvarez & Lawrence (2011), eq. for K_{f_d f_d'} with Gaussian smoothing kernels: with the
    latent k_q = c_q N(z - z'; 0, Lambda_q^-1), c_q = (2 pi)^{D/2} |Lambda_q^-1|^{1/2} (a unit
    variance SE), K = sum_q S_dq S_d'q c_q N(x - x'; 0, P_d^-1 + P_d'^-1 + Lambda_q^-1).
    """
    K = np.zeros((len(X1), len(X2)))
    for q in range(S.shape[1]):
        Lam_inv = np.diag(L[q] ** 2)
        c = (2 * np.pi) ** (L.shape[1] / 2) * np.sqrt(np.linalg.det(Lam_inv))
        for i in range(len(X1)):
            for j in range(len(X2)):
                cov = np.diag(W[d1[i]] ** 2) + np.diag(W[d2[j]] ** 2) + Lam_inv
                K[i, j] += S[d1[i], q] * S[d2[j], q] * c * mvn_density(X1[i] - X2[j], cov)
    return K


def dense_kuf(Z, q_index, X, d, S, W, L):
    """Cov[u_q(z), f_d(x)] = S_dq c_q N(x - z; 0, P_d^-1 + Lambda_q^-1)."""
    K = np.zeros((len(Z), len(X)))
    for m in range(len(Z)):
        q = q_index[m]
        Lam_inv = np.diag(L[q] ** 2)
        c = (2 * np.pi) ** (L.shape[1] / 2) * np.sqrt(np.linalg.det(Lam_inv))
        for n in range(len(X)):
            cov = np.diag(W[d[n]] ** 2) + Lam_inv
            K[m, n] = S[d[n], q] * c * mvn_density(X[n] - Z[m], cov)
    return K


def dense_kuu(Z, q_index, L):
    K = np.zeros((len(Z), len(Z)))
    for m in range(len(Z)):
        for n in range(len(Z)):
            if q_index[m] == q_index[n]:
                K[m, n] = np.exp(-0.5 * np.sum((Z[m] - Z[n]) ** 2 / L[q_index[m]] ** 2))
    return K


def log_normal(y, cov):
    sign, logdet = np.linalg.slogdet(cov)
    assert sign > 0
    return -0.5 * (len(y) * np.log(2 * np.pi) + logdet + y @ np.linalg.solve(cov, y))


# ------------------------------------------------------------------------------------------------
# Numerical integration of the convolution integrals (1-D)

GRID = np.linspace(-10.0, 10.0, 2001)  # step 0.01; every Gaussian here has sd >= 0.3
STEP = GRID[1] - GRID[0]


def quadrature_kff(x1, d1, x2, d2, S, W, L):
    """sum_q S_dq S_d'q ∫∫ N(x - z; 0, w_d²) k_q(z, z') N(x' - z'; 0, w_d'²) dz dz'."""
    K = np.zeros((len(x1), len(x2)))
    for q in range(S.shape[1]):
        k_q = np.exp(-0.5 * (GRID[:, None] - GRID[None, :]) ** 2 / L[q, 0] ** 2)
        G1 = S[d1, q][:, None] * normal_pdf(x1[:, None] - GRID, W[d1, 0][:, None] ** 2) * STEP
        G2 = S[d2, q][:, None] * normal_pdf(x2[:, None] - GRID, W[d2, 0][:, None] ** 2) * STEP
        K += G1 @ k_q @ G2.T
    return K


def quadrature_kuf(z, q_index, x, d, S, W, L):
    """S_dq ∫ k_q(z, z') N(x - z'; 0, w_d²) dz'."""
    k = np.exp(-0.5 * (z[:, None] - GRID) ** 2 / L[q_index, 0][:, None] ** 2)  # [M, G]
    G = S[d][:, q_index].T[:, :, None] * normal_pdf(x[:, None] - GRID, W[d, 0][:, None] ** 2)
    return np.einsum("mg,mng->mn", k, G) * STEP


def kernel_1d():
    return ConvolvedKernel(S_1D, W_1D, L_1D)


def test_kff_against_quadrature_1d(rng):
    x = rng.uniform(-2, 2, 8)
    d = np.array([0, 0, 0, 1, 1, 1, 1, 0])
    K = kernel_1d()(stacked(x, d)).numpy()
    reference = quadrature_kff(x, d, x, d, S_1D, W_1D, L_1D)
    # both d = d' and d != d' entries are in K; check them separately
    same = d[:, None] == d[None, :]
    assert same.any() and (~same).any()
    np.testing.assert_allclose(K[same], reference[same], rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(K[~same], reference[~same], rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(
        kernel_1d()(stacked(x, d), full_cov=False).numpy(), np.diag(reference), rtol=1e-9
    )


def test_closed_form_2d_against_dense_formula(rng):
    S = rng.normal(size=(3, 2))
    W = rng.uniform(0.2, 0.8, (3, 2))
    L = rng.uniform(0.5, 1.5, (2, 2))
    kernel = ConvolvedKernel(S, W, L)
    x1, d1 = rng.uniform(-1, 1, (7, 2)), rng.integers(0, 3, 7)
    x2, d2 = rng.uniform(-1, 1, (5, 2)), rng.integers(0, 3, 5)
    K = kernel(stacked(x1, d1), stacked(x2, d2)).numpy()
    np.testing.assert_allclose(K, dense_kff(x1, d1, x2, d2, S, W, L), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(
        kernel(stacked(x1, d1), full_cov=False).numpy(),
        np.diag(dense_kff(x1, d1, x1, d1, S, W, L)),
        rtol=1e-12,
    )
    # GPflow's batch semantics: [batch..., N, D] with itself gives [batch..., N, N]
    batch = np.stack([stacked(x1[:3], d1[:3]), stacked(x1[3:6], d1[3:6])])
    K_batch = kernel(batch).numpy()
    assert K_batch.shape == (2, 3, 3)
    np.testing.assert_allclose(K_batch[1], kernel(batch[1]).numpy(), rtol=1e-14)


def test_kuf_kuu_against_quadrature_1d(rng):
    z = np.array([-1.0, 0.2, 1.5, -0.3, 0.9])
    q_index = np.array([0, 0, 0, 1, 1])
    x, d = rng.uniform(-2, 2, 6), np.array([0, 1, 0, 1, 1, 0])
    inducing = LatentInducingPoints(z[:, None], q_index)
    kernel = kernel_1d()
    K_uf = Kuf(inducing, kernel, stacked(x, d)).numpy()
    np.testing.assert_allclose(
        K_uf, quadrature_kuf(z, q_index, x, d, S_1D, W_1D, L_1D), rtol=1e-9, atol=1e-12
    )
    K_uu = Kuu(inducing, kernel).numpy()
    np.testing.assert_allclose(K_uu, dense_kuu(z[:, None], q_index, L_1D), rtol=1e-14)
    assert np.all(K_uu[:3, 3:] == 0.0)  # independent latents: block-diagonal
    np.testing.assert_allclose(
        Kuu(inducing, kernel, jitter=0.1).numpy() - K_uu, 0.1 * np.eye(5), atol=1e-15
    )


def test_delta_smoothing_limit_is_squared_exponential(rng):
    X = rng.uniform(-2, 2, (12, 2))
    kernel = ConvolvedKernel([[1.3]], [[1e-7, 1e-7]], [[0.7, 1.9]])
    se = gpflow.kernels.SquaredExponential(variance=1.3**2, lengthscales=[0.7, 1.9])
    X_aug = stacked(X, np.zeros(12))
    # relative deviation O(w² / l²) = O(1e-14)
    np.testing.assert_allclose(kernel(X_aug).numpy(), se(X).numpy(), rtol=1e-12, atol=1e-13)


def test_positive_semi_definite(rng):
    kernel = ConvolvedKernel(
        rng.normal(size=(3, 2)), rng.uniform(0.05, 1.0, (3, 2)), rng.uniform(0.3, 2.0, (2, 2))
    )
    X = stacked(rng.uniform(-2, 2, (40, 2)), rng.integers(0, 3, 40))
    eigenvalues = np.linalg.eigvalsh(kernel(X).numpy())
    assert eigenvalues.min() >= -1e-10 * eigenvalues.max()


# ------------------------------------------------------------------------------------------------
# Models: exact GPR on stacked inputs, SGPR, SVGP and the classic approximations


def heterotopic_data(rng, n0=14, n1=12):
    """Two outputs observed at different inputs; output 1 has a gap in [0, 1]."""
    x0 = np.sort(rng.uniform(-2, 2, n0))
    x1 = np.sort(np.r_[rng.uniform(-2, 0, n1 // 2), rng.uniform(1, 2, n1 - n1 // 2)])
    x, d = np.r_[x0, x1], np.r_[np.zeros(n0, int), np.ones(n1, int)]
    X = stacked(x, d)
    K = dense_kff(x[:, None], d, x[:, None], d, S_1D, W_1D, L_1D)
    f = np.linalg.cholesky(K + 1e-9 * np.eye(len(x))) @ rng.normal(size=len(x))
    Y = (f + 0.1 * rng.normal(size=len(x)))[:, None]
    return X, Y, d


def test_gpr_is_exact_multi_output_gp(rng):
    X, Y, d = heterotopic_data(rng)
    gpr = gpflow.models.GPR((X, Y), kernel_1d(), noise_variance=0.01)
    K = dense_kff(X[:, :1], d, X[:, :1], d, S_1D, W_1D, L_1D)
    np.testing.assert_allclose(
        gpr.log_marginal_likelihood().numpy(),
        log_normal(Y[:, 0], K + 0.01 * np.eye(len(Y))),
        rtol=1e-10,
    )


def test_sgpr_bound_and_dense_limit(rng):
    X, Y, _ = heterotopic_data(rng)
    kernel = ConvolvedKernel([[1.0], [0.7]], W_1D, [[1.0]])  # one latent, lengthscale 1
    gpr = gpflow.models.GPR((X, Y), kernel, noise_variance=0.01)
    exact = gpr.log_marginal_likelihood().numpy()
    X_new = stacked(np.tile(np.linspace(-2, 2, 9), 2), np.repeat([0, 1], 9))
    mean_exact, var_exact = gpr.predict_f(X_new)
    gaps, mean_errors, var_errors = [], [], []
    for num_inducing in (4, 7, 10):  # on [-2.5, 2.5]: spacings 1.67, 0.83, 0.56 lengthscales
        Z = np.linspace(-2.5, 2.5, num_inducing)[:, None]
        sgpr = gpflow.models.SGPR((X, Y), kernel, LatentInducingPoints(Z), noise_variance=0.01)
        bound = sgpr.elbo().numpy()
        assert bound <= exact + 1e-10
        tight = TightSGPR((X, Y), kernel, sgpr.inducing_variable, noise_variance=0.01)
        assert bound - 1e-9 <= tight.elbo().numpy() <= exact + 1e-9
        mean, var = sgpr.predict_f(X_new)
        gaps.append(exact - bound)
        mean_errors.append(np.abs(mean - mean_exact).max())
        var_errors.append(np.abs(var - var_exact).max())
    # Measured: gaps 112, 16, 0.12 nats; mean errors 0.41, 0.088, 2.0e-3; variance errors 0.13,
    # 8e-4, 7e-6 (outputs of scale 1, noise 0.01). Latent points 0.56 lengthscales apart leave an
    # SE Nyström residual of order 1e-4, which the noise 0.01 amplifies in the mean: the errors
    # must fall at every step, and at M = 10 be below 1e-2 (mean), 1e-4 (variance) and 0.5 nats.
    assert np.all(np.diff(gaps) < 0)
    assert np.all(np.diff(mean_errors) < 0) and np.all(np.diff(var_errors) < 0)
    assert mean_errors[-1] < 1e-2 and var_errors[-1] < 1e-4 and gaps[-1] < 0.5


@pytest.mark.parametrize("method", ["DTC", "FITC", "PITC", "PowerEPSGP"])
def test_classic_objectives_against_dense(rng, method):
    X, Y, d = heterotopic_data(rng)
    noise = 0.05
    Z = np.array([-1.8, -0.6, 0.6, 1.8, -1.0, 0.0, 1.0])
    q_index = np.array([0, 0, 0, 0, 1, 1, 1])
    inducing = LatentInducingPoints(Z[:, None], q_index)
    kernel = kernel_1d()
    x = X[:, :1]
    K = dense_kff(x, d, x, d, S_1D, W_1D, L_1D)
    K_uf = dense_kuf(Z[:, None], q_index, x, d, S_1D, W_1D, L_1D)
    K_uu = dense_kuu(Z[:, None], q_index, L_1D) + JITTER * np.eye(len(Z))
    Q = K_uf.T @ np.linalg.solve(K_uu, K_uf)
    blocks = [np.nonzero(d == output)[0] for output in (0, 1)]
    if method == "DTC":
        model = DTC((X, Y), kernel, inducing, noise_variance=noise)
        Lambda = noise * np.eye(len(Y))
    elif method in ("FITC", "PowerEPSGP"):
        if method == "FITC":
            model = FITC((X, Y), kernel, inducing, noise_variance=noise)
        else:
            model = PowerEPSGP((X, Y), kernel, inducing, alpha=1.0, noise_variance=noise)
        Lambda = np.diag(np.diag(K - Q)) + noise * np.eye(len(Y))
    else:
        model = PITC((X, Y), kernel, inducing, noise_variance=noise, blocks=blocks)
        block_mask = d[:, None] == d[None, :]  # one block per output
        Lambda = np.where(block_mask, K - Q, 0.0) + noise * np.eye(len(Y))
    np.testing.assert_allclose(
        model.maximum_log_likelihood_objective().numpy(),
        log_normal(Y[:, 0], Q + Lambda),
        rtol=1e-9,
    )


def test_pitc_with_every_point_an_inducing_input_is_the_exact_multi_output_gp(rng):
    """
    The notes' reduction: with the (stacked) training inputs as inducing inputs, Q_ff = K_ff up
    to the jitter, so PITC with one block per output is the exact multi-output
    GP, gpflow.models.GPR with the same kernel: evidence and predictions.
    """
    X, Y, d = heterotopic_data(rng)
    kernel = kernel_1d()
    blocks = [np.nonzero(d == output)[0] for output in (0, 1)]
    exact = gpflow.models.GPR((X, Y), kernel, noise_variance=0.05)
    X_new = stacked(np.tile(np.linspace(-2, 2, 5), 2), np.repeat([0, 1], 5))
    with gpflow.config.as_context(gpflow.config.Config(jitter=1e-12)):
        pitc = PITC((X, Y), kernel, X.copy(), noise_variance=0.05, blocks=blocks)
        objective = pitc.maximum_log_likelihood_objective().numpy()
        mean, var = pitc.predict_f(X_new)
    # Measured differences grow linearly with the jitter: at 1e-12 the objective's relative
    # difference is 2e-14, the means' 5e-10 and the variances' 2e-12 (7e-10, 6e-7 and 2e-8 at
    # jitter 1e-8)
    np.testing.assert_allclose(objective, exact.log_marginal_likelihood().numpy(), rtol=1e-12)
    mean_exact, var_exact = exact.predict_f(X_new)
    np.testing.assert_allclose(mean, mean_exact, rtol=0, atol=1e-8)
    np.testing.assert_allclose(var, var_exact, rtol=0, atol=1e-10)


def test_svgp_at_the_optimal_q_equals_sgpr(rng):
    X, Y, _ = heterotopic_data(rng)
    kernel = kernel_1d()
    inducing = LatentInducingPoints.for_each_latent(np.linspace(-2, 2, 4)[:, None], 2)
    sgpr = gpflow.models.SGPR((X, Y), kernel, inducing, noise_variance=0.05)
    mu, cov = sgpr.compute_qu()
    svgp = gpflow.models.SVGP(
        kernel,
        gpflow.likelihoods.Gaussian(0.05),
        inducing,
        whiten=False,
        q_mu=mu.numpy(),
        q_sqrt=np.linalg.cholesky(cov.numpy())[None],
    )
    np.testing.assert_allclose(svgp.elbo((X, Y)).numpy(), sgpr.elbo().numpy(), rtol=1e-8)
    # TightSVGP with the same q(u): its bound lies between SVGP's and the exact evidence
    tight = TightSVGP(
        kernel,
        gpflow.likelihoods.Gaussian(0.05),
        inducing,
        whiten=False,
        q_mu=mu.numpy(),
        q_sqrt=np.linalg.cholesky(cov.numpy())[None],
    )
    exact = gpflow.models.GPR((X, Y), kernel, noise_variance=0.05).log_marginal_likelihood()
    assert svgp.elbo((X, Y)).numpy() - 1e-9 <= tight.elbo((X, Y)).numpy() <= exact.numpy()
    X_new = stacked(np.linspace(-2, 2, 5), [0, 1, 1, 0, 1])
    for a, b in zip(svgp.predict_f(X_new), sgpr.predict_f(X_new)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-7, atol=1e-9)


# ------------------------------------------------------------------------------------------------
# Bad input, checkpoints, compiled training


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="smoothing_widths"):
        ConvolvedKernel(S_1D, [[0.3], [0.0]], L_1D)
    with pytest.raises(ValueError, match="smoothing_widths"):
        ConvolvedKernel(S_1D, [[0.3], [-1.0]], L_1D)
    with pytest.raises(ValueError, match="latent_lengthscales"):
        ConvolvedKernel(S_1D, W_1D, [[0.7]])  # Q = 2 columns of sensitivities
    with pytest.raises(ValueError, match="smoothing_widths"):
        ConvolvedKernel(S_1D, [0.3, 0.5], L_1D)  # not 2-D
    kernel = kernel_1d()
    with pytest.raises(ValueError, match="output-index column .* `X`"):
        kernel(stacked([0.0, 1.0], [0, 2]))  # out of range (2 outputs)
    with pytest.raises(ValueError, match="output-index column .* `X2`"):
        kernel(stacked([0.0], [0]), stacked([0.0], [-1]))
    with pytest.raises(ValueError, match="output-index column .* `X`"):
        kernel(stacked([0.0, 1.0], [0, 0.5]), full_cov=False)  # not an integer
    with pytest.raises(ValueError, match="`X` must have D \\+ 1 = 2 columns"):
        kernel(np.zeros((3, 1)))
    with pytest.raises(ValueError, match="output-index column .* `Xnew`"):
        Kuf(LatentInducingPoints([[0.0]]), kernel, stacked([0.0], [3]))
    with pytest.raises(ValueError, match="latent_index"):
        Kuu(LatentInducingPoints([[0.0], [1.0]], [0, 2]), kernel)  # Q = 2
    with pytest.raises(ValueError, match="latent_index"):
        LatentInducingPoints([[0.0], [1.0]], [0, 0.5])
    with pytest.raises(ValueError, match="latent_index"):
        LatentInducingPoints([[0.0], [1.0]], [0])

    @tf.function
    def compiled(X):
        return kernel(X)

    with pytest.raises(tf.errors.InvalidArgumentError, match="output-index column"):
        compiled(tf.constant(stacked([0.0], [5])))


def test_checkpoint_round_trip(tmp_path):
    kernel = kernel_1d()
    path = tf.train.Checkpoint(kernel=kernel).write(str(tmp_path / "ckpt"))
    other = ConvolvedKernel(np.ones((2, 2)), [[1.0], [1.0]], [[2.0], [2.0]])
    tf.train.Checkpoint(kernel=other).read(path).assert_consumed()
    for name in ("sensitivities", "smoothing_widths", "latent_lengthscales"):
        np.testing.assert_allclose(
            getattr(other, name).numpy(), getattr(kernel, name).numpy(), rtol=1e-15
        )


def test_compiled_sgpr_training(rng):
    X, Y, _ = heterotopic_data(rng)
    inducing = LatentInducingPoints.for_each_latent(np.linspace(-2, 2, 4)[:, None], 2)
    model = gpflow.models.SGPR((X, Y), kernel_1d(), inducing, noise_variance=0.1)
    eager_loss = model.training_loss().numpy()
    optimizer = gpflow.keras.tf_keras.optimizers.Adam(0.05)

    @tf.function  # one trace: the loss, its gradient and the update
    def step():
        with tf.GradientTape() as tape:
            loss = model.training_loss()
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return loss

    losses = [step().numpy() for _ in range(10)]
    np.testing.assert_allclose(losses[0], eager_loss, rtol=1e-12)
    assert losses[-1] < losses[0]
    assert np.all(np.isfinite(model.kernel.smoothing_widths.numpy()))
    assert np.all(model.kernel.smoothing_widths.numpy() > 0)
