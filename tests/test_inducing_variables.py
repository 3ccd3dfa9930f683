"""
Frequency inducing features (Lázaro-Gredilla & Figueiras-Vidal 2009, FIFGP) against independent
references: GPflow's ``Multiscale`` features (the zero-frequency case), numerical integration of
the kernel against the windows (adaptive quadrature in 1-D, Gauss–Hermite rules in 2-D), and
GPflow's models.
"""

import gpflow
import numpy as np
import pytest
import tensorflow as tf
from gpflow.covariances import Kuf, Kuu
from gpflow.inducing_variables import InducingPoints, Multiscale
from gpflow.keras import tf_keras
from scipy import integrate

from gpflow_tight import PowerEPSGP, TightSGPR, TightSVGP
from gpflow_tight.covariances import Kuv
from gpflow_tight.inducing_variables import FrequencyInducingFeatures


def se_kernel(variance, lengthscales, **kwargs):
    return gpflow.kernels.SquaredExponential(variance=variance, lengthscales=lengthscales, **kwargs)


def se(A, B, variance, lengthscales):
    """Dense SE kernel in numpy: the reference integrand."""
    scaled = (A[:, None, :] - B[None, :, :]) / np.asarray(lengthscales)
    return variance * np.exp(-0.5 * np.sum(scaled**2, axis=-1))


def multiscale_widths(lengthscales, scales):
    """Window standard deviations of the FIF equal to GPflow's Multiscale(Z, scales)."""
    return np.sqrt((lengthscales + scales) ** 2 - lengthscales**2)


def random_features(rng, num_inducing, input_dim, frequency=2.5, width=(0.25, 0.6)):
    return FrequencyInducingFeatures(
        rng.uniform(-1.0, 1.0, (num_inducing, input_dim)),
        rng.uniform(*width, (num_inducing, input_dim)),
        rng.uniform(-frequency, frequency, (num_inducing, input_dim)),
        rng.uniform(-np.pi, np.pi, num_inducing),
    )


def window_values(features):
    return (
        features.Z.numpy(),
        features.widths.numpy(),
        features.frequencies.numpy(),
        features.phases.numpy(),
    )


# --- 1. The zero-frequency case is GPflow's Multiscale -------------------------------------------


def test_zero_frequency_equals_gpflow_multiscale(rng):
    lengthscales = np.array([0.7, 1.4, 0.9])
    kernel = se_kernel(1.3, lengthscales)
    Z = rng.normal(size=(6, 3))
    scales = rng.uniform(0.05, 1.2, (6, 3))
    X = rng.normal(size=(9, 3))
    multiscale = Multiscale(Z, scales)
    features = FrequencyInducingFeatures(Z, multiscale_widths(lengthscales, scales))

    np.testing.assert_allclose(
        Kuu(features, kernel).numpy(), Kuu(multiscale, kernel).numpy(), rtol=1e-12, atol=1e-15
    )
    np.testing.assert_allclose(
        Kuf(features, kernel, X).numpy(),
        Kuf(multiscale, kernel, X).numpy(),
        rtol=1e-12,
        atol=1e-15,
    )


def test_active_dims_are_honoured_like_multiscale(rng):
    """The kernel sees columns 0 and 2: the windows' other columns must not matter."""
    lengthscales = np.array([0.8, 1.1])
    kernel = se_kernel(0.9, lengthscales, active_dims=[0, 2])
    Z = rng.normal(size=(5, 3))
    scales = rng.uniform(0.1, 0.8, (5, 3))
    widths = rng.uniform(0.1, 2.0, (5, 3))
    widths[:, [0, 2]] = multiscale_widths(lengthscales, scales[:, [0, 2]])
    frequencies = np.zeros((5, 3))
    frequencies[:, 1] = rng.normal(size=5)  # ignored: column 1 is inactive
    features = FrequencyInducingFeatures(Z, widths, frequencies)
    multiscale = Multiscale(Z, scales)
    X = rng.normal(size=(7, 3))

    np.testing.assert_allclose(
        Kuu(features, kernel).numpy(), Kuu(multiscale, kernel).numpy(), rtol=1e-12
    )
    np.testing.assert_allclose(
        Kuf(features, kernel, X).numpy(), Kuf(multiscale, kernel, X).numpy(), rtol=1e-12
    )


# --- 2. Nonzero frequencies and phases against numerical integration ----------------------------


def test_1d_against_adaptive_quadrature():
    variance, lengthscale = 0.8, 1.1
    Z = np.array([[0.3], [-0.5]])
    widths = np.array([[0.4], [0.7]])
    frequencies = np.array([[1.7], [-2.2]])
    phases = np.array([0.4, -1.1])
    features = FrequencyInducingFeatures(Z, widths, frequencies, phases)
    kernel = se_kernel(variance, lengthscale)
    X = np.array([[0.1], [1.5], [-2.0]])

    def window(m, x):
        z, c = Z[m, 0], widths[m, 0] ** 2
        density = np.exp(-0.5 * (x - z) ** 2 / c) / np.sqrt(2 * np.pi * c)
        return density * np.cos(phases[m] + frequencies[m, 0] * x)

    def k(x1, x2):
        return variance * np.exp(-0.5 * (x1 - x2) ** 2 / lengthscale**2)

    def limits(m):
        return Z[m, 0] - 12 * widths[m, 0], Z[m, 0] + 12 * widths[m, 0]

    expected_kuf = np.array(
        [
            [
                integrate.quad(
                    lambda t, m=m, x=x: window(m, t) * k(t, x), *limits(m), epsabs=1e-14
                )[0]
                for x in X[:, 0]
            ]
            for m in range(2)
        ]
    )
    np.testing.assert_allclose(Kuf(features, kernel, X).numpy(), expected_kuf, rtol=1e-9)

    # The off-diagonal entry by adaptive cubature, every entry by a dense Gauss–Hermite rule.
    expected_off_diagonal = integrate.dblquad(
        lambda x2, x1: window(0, x1) * k(x1, x2) * window(1, x2),
        *limits(0),
        *limits(1),
        epsabs=1e-13,
        epsrel=1e-11,
    )[0]
    nodes, weights = np.polynomial.hermite.hermgauss(80)
    expected_kuu = np.empty((2, 2))
    for m in range(2):
        for n in range(2):
            x1 = Z[m, 0] + np.sqrt(2) * widths[m, 0] * nodes
            x2 = Z[n, 0] + np.sqrt(2) * widths[n, 0] * nodes
            w1 = weights / np.sqrt(np.pi) * np.cos(phases[m] + frequencies[m, 0] * x1)
            w2 = weights / np.sqrt(np.pi) * np.cos(phases[n] + frequencies[n, 0] * x2)
            expected_kuu[m, n] = w1 @ k(x1[:, None], x2[None, :]) @ w2
    K = Kuu(features, kernel).numpy()
    np.testing.assert_allclose(K[0, 1], expected_off_diagonal, rtol=1e-8)
    np.testing.assert_allclose(K, expected_kuu, rtol=1e-10, atol=1e-13)


def gauss_hermite_windows(Z, widths, frequencies, phases, order):
    """
    Nodes [M, Q, D] and weights [M, Q] of a tensor-product Gauss–Hermite rule for each window, the
    cosine folded into the weights: sum_q w_mq h(x_mq) = ∫ g_m(x) h(x) dx for smooth h.
    """
    t, w = np.polynomial.hermite.hermgauss(order)
    input_dim = Z.shape[1]
    grid = np.stack(np.meshgrid(*([t] * input_dim), indexing="ij"), axis=-1).reshape(-1, input_dim)
    grid_weights = np.prod(np.stack(np.meshgrid(*([w] * input_dim), indexing="ij")), axis=0)
    grid_weights = grid_weights.ravel() / np.pi ** (input_dim / 2)
    nodes = Z[:, None, :] + np.sqrt(2) * widths[:, None, :] * grid[None]
    weights = grid_weights[None] * np.cos(
        phases[:, None] + np.sum(frequencies[:, None] * nodes, -1)
    )
    return nodes, weights


def test_2d_against_gauss_hermite(rng):
    variance, lengthscales = 1.2, np.array([0.8, 1.3])
    features = random_features(rng, 3, 2)
    Z, widths, frequencies, phases = window_values(features)
    kernel = se_kernel(variance, lengthscales)
    X = rng.uniform(-2.0, 2.0, (5, 2))

    nodes, weights = gauss_hermite_windows(Z, widths, frequencies, phases, order=60)
    expected_kuf = np.stack(
        [weights[m] @ se(nodes[m], X, variance, lengthscales) for m in range(3)]
    )
    np.testing.assert_allclose(
        Kuf(features, kernel, X).numpy(), expected_kuf, rtol=1e-8, atol=1e-12
    )

    # A four-dimensional integral per pair: 30 nodes per dimension resolve these windows.
    nodes, weights = gauss_hermite_windows(Z, widths, frequencies, phases, order=30)
    expected_kuu = np.array(
        [
            [
                weights[m] @ se(nodes[m], nodes[n], variance, lengthscales) @ weights[n]
                for n in range(3)
            ]
            for m in range(3)
        ]
    )
    np.testing.assert_allclose(Kuu(features, kernel).numpy(), expected_kuu, rtol=1e-8, atol=1e-12)


def test_narrow_windows_become_modulated_point_evaluations(rng):
    """As the widths go to zero, u_m -> cos(φ_m + ω_mᵀ z_m) f(z_m)."""
    variance, lengthscales = 0.7, np.array([0.9, 1.6])
    Z = rng.normal(size=(4, 2))
    frequencies = rng.normal(size=(4, 2))
    phases = rng.normal(size=4)
    features = FrequencyInducingFeatures(Z, np.full((4, 2), 1e-7), frequencies, phases)
    kernel = se_kernel(variance, lengthscales)
    X = rng.normal(size=(6, 2))
    modulation = np.cos(phases + np.sum(frequencies * Z, axis=-1))

    np.testing.assert_allclose(
        Kuf(features, kernel, X).numpy(),
        modulation[:, None] * se(Z, X, variance, lengthscales),
        rtol=1e-6,
        atol=1e-12,
    )
    np.testing.assert_allclose(
        Kuu(features, kernel).numpy(),
        np.outer(modulation, modulation) * se(Z, Z, variance, lengthscales),
        rtol=1e-6,
        atol=1e-12,
    )


def test_kuf_accepts_batched_inputs(rng):
    features = random_features(rng, 4, 2)
    kernel = se_kernel(1.0, [0.7, 1.2])
    X = rng.normal(size=(3, 5, 2))
    batched = Kuf(features, kernel, X).numpy()
    assert batched.shape == (4, 3, 5)
    for b in range(3):
        np.testing.assert_allclose(
            batched[:, b], Kuf(features, kernel, X[b]).numpy(), rtol=1e-12, atol=1e-15
        )


# --- 3. Positive definiteness and the Kuv cross-covariances ------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_kuu_is_symmetric_positive_definite(seed):
    rng = np.random.default_rng(seed)
    features = random_features(rng, 12, 2, frequency=4.0, width=(0.05, 1.5))
    kernel = se_kernel(rng.uniform(0.5, 2.0), rng.uniform(0.3, 2.0, 2))
    K = Kuu(features, kernel, jitter=1e-6).numpy()
    np.testing.assert_allclose(K, K.T, rtol=0, atol=1e-14)
    np.linalg.cholesky(K)
    tf.linalg.cholesky(K)  # the factorisation the models use
    assert np.all(np.linalg.eigvalsh(K) > 0)
    np.testing.assert_allclose(
        Kuv(features, features, kernel).numpy(), Kuu(features, kernel).numpy(), rtol=1e-15
    )


def test_kuv_between_frequency_feature_sets(rng):
    kernel = se_kernel(1.1, [0.6, 1.3])
    features_a = random_features(rng, 4, 2)
    features_b = random_features(rng, 6, 2)
    K_ab = Kuv(features_a, features_b, kernel).numpy()
    assert K_ab.shape == (4, 6)
    # Equal up to rounding (TensorFlow's vectorised exp and cos round differently by shape).
    np.testing.assert_allclose(
        K_ab, Kuv(features_b, features_a, kernel).numpy().T, rtol=1e-12, atol=1e-15
    )

    # The same numbers as the joint Kuu of the union of the two sets.
    union = FrequencyInducingFeatures(
        *[
            np.concatenate(pair)
            for pair in zip(window_values(features_a), window_values(features_b))
        ]
    )
    np.testing.assert_allclose(K_ab, Kuu(union, kernel).numpy()[:4, 4:], rtol=1e-12, atol=1e-15)


def test_kuv_with_multiscale(rng):
    lengthscales = np.array([0.6, 1.3])
    kernel = se_kernel(1.1, lengthscales)
    features = random_features(rng, 5, 2)
    Z = rng.normal(size=(3, 2))
    scales = rng.uniform(0.1, 0.9, (3, 2))
    multiscale = Multiscale(Z, scales)
    converted = FrequencyInducingFeatures(Z, multiscale_widths(lengthscales, scales))

    expected = Kuv(converted, features, kernel).numpy()
    np.testing.assert_allclose(Kuv(multiscale, features, kernel).numpy(), expected, rtol=1e-12)
    np.testing.assert_allclose(Kuv(features, multiscale, kernel).numpy(), expected.T, rtol=1e-12)
    # Multiscale with itself is GPflow's own Kuu (an independent reference), and with another
    # Multiscale set it agrees with the zero-frequency FIF.
    np.testing.assert_allclose(
        Kuv(multiscale, multiscale, kernel).numpy(),
        Kuu(multiscale, kernel).numpy(),
        rtol=1e-12,
    )
    other = Multiscale(rng.normal(size=(4, 2)), rng.uniform(0.1, 0.9, (4, 2)))
    np.testing.assert_allclose(
        Kuv(converted, other, kernel).numpy(),
        Kuv(multiscale, other, kernel).numpy(),
        rtol=1e-12,
    )


def test_kuv_with_inducing_points_uses_kuf(rng):
    kernel = se_kernel(1.1, [0.6, 1.3])
    features = random_features(rng, 5, 2)
    points = InducingPoints(rng.normal(size=(7, 2)))
    expected = Kuf(features, kernel, points.Z).numpy()
    np.testing.assert_allclose(Kuv(features, points, kernel).numpy(), expected, rtol=1e-15)
    np.testing.assert_allclose(Kuv(points, features, kernel).numpy(), expected.T, rtol=1e-15)


# --- 4. Inside GPflow's models and this package's ---------------------------------------------


def toy_data(rng, num_data=40):
    X = np.sort(rng.uniform(-3.0, 3.0, (num_data, 1)), axis=0)
    Y = np.sin(2.0 * X) + 0.2 * rng.standard_normal((num_data, 1))
    return X, Y


def toy_features(rng, num_inducing=6):
    return FrequencyInducingFeatures(
        np.linspace(-2.5, 2.5, num_inducing)[:, None],
        np.full((num_inducing, 1), 0.4),
        rng.normal(0.0, 1.5, (num_inducing, 1)),
        rng.uniform(-np.pi, np.pi, num_inducing),
    )


def test_sgpr_trains_with_frequency_features(rng):
    X, Y = toy_data(rng)
    features = toy_features(rng)
    model = gpflow.models.SGPR((X, Y), se_kernel(1.0, 1.0), features, noise_variance=0.1)
    before = model.elbo().numpy()
    frequencies_before = features.frequencies.numpy().copy()
    gpflow.optimizers.Scipy().minimize(
        model.training_loss, model.trainable_variables, options={"maxiter": 15}, compile=False
    )
    after = model.elbo().numpy()
    assert np.isfinite(after) and after > before
    assert not np.allclose(features.frequencies.numpy(), frequencies_before)
    mean, var = model.predict_f(X)
    assert np.all(np.isfinite(mean)) and np.all(var.numpy() > 0)


@pytest.mark.parametrize("whiten", [True, False])
def test_svgp_trains_with_frequency_features(rng, whiten):
    X, Y = toy_data(rng)
    model = gpflow.models.SVGP(
        se_kernel(1.0, 1.0),
        gpflow.likelihoods.Gaussian(0.1),
        toy_features(rng),
        whiten=whiten,
        num_data=len(X),
    )
    loss = model.training_loss_closure((X, Y), compile=False)
    before = -loss().numpy()
    optimizer = tf_keras.optimizers.Adam(0.05)
    for _ in range(10):
        optimizer.minimize(loss, model.trainable_variables)
    after = model.elbo((X, Y)).numpy()
    assert np.isfinite(after) and after > before


def test_sgpr_zero_frequency_equals_sgpr_multiscale(rng):
    X, Y = toy_data(rng)
    lengthscale = 0.9
    Z = np.linspace(-2.5, 2.5, 6)[:, None]
    scales = rng.uniform(0.1, 0.6, (6, 1))
    features = FrequencyInducingFeatures(Z, multiscale_widths(lengthscale, scales))
    fif_model = gpflow.models.SGPR(
        (X, Y), se_kernel(1.2, lengthscale), features, noise_variance=0.1
    )
    ms_model = gpflow.models.SGPR(
        (X, Y), se_kernel(1.2, lengthscale), Multiscale(Z, scales), noise_variance=0.1
    )
    np.testing.assert_allclose(fif_model.elbo().numpy(), ms_model.elbo().numpy(), rtol=1e-11)
    Xnew = np.linspace(-4.0, 4.0, 9)[:, None]
    for fif, ms in zip(fif_model.predict_f(Xnew), ms_model.predict_f(Xnew)):
        np.testing.assert_allclose(fif.numpy(), ms.numpy(), rtol=1e-9, atol=1e-12)


def test_tight_models_accept_frequency_features(rng):
    X, Y = toy_data(rng)
    features = toy_features(rng)
    tight = TightSGPR((X, Y), se_kernel(1.0, 0.8), features, noise_variance=0.1)
    standard = gpflow.models.SGPR((X, Y), se_kernel(1.0, 0.8), features, noise_variance=0.1)
    tight_bound = tight.elbo().numpy()
    assert np.isfinite(tight_bound) and tight_bound >= standard.elbo().numpy()

    # With SGPR's optimal q(u), and beta = σ² (TightSVGP's default for a Gaussian likelihood).
    q_mu, q_cov = standard.compute_qu()
    q_sqrt = np.linalg.cholesky(q_cov.numpy())[None]
    common = {"q_mu": q_mu.numpy(), "q_sqrt": q_sqrt, "whiten": False}
    tight_svgp = TightSVGP(
        se_kernel(1.0, 0.8), gpflow.likelihoods.Gaussian(0.1), features, **common
    )
    svgp = gpflow.models.SVGP(
        se_kernel(1.0, 0.8), gpflow.likelihoods.Gaussian(0.1), features, **common
    )
    tight_svgp_bound = tight_svgp.elbo((X, Y)).numpy()
    assert np.isfinite(tight_svgp_bound) and tight_svgp_bound >= svgp.elbo((X, Y)).numpy()
    np.testing.assert_allclose(tight_svgp_bound, tight_bound, rtol=1e-6)

    with tf.GradientTape() as tape:
        bound = tight.elbo()
    gradients = tape.gradient(
        bound, [features.widths.unconstrained_variable, features.phases.unconstrained_variable]
    )
    assert all(np.all(np.isfinite(g.numpy())) for g in gradients)


def test_power_ep_accepts_frequency_features(rng):
    """PowerEPSGP at alpha = 0 is SGPR and at alpha = 1 GPRFITC, with FIF as with points."""
    X, Y = toy_data(rng)
    features = toy_features(rng)
    for alpha, peer_class in ((0.0, gpflow.models.SGPR), (1.0, gpflow.models.GPRFITC)):
        model = PowerEPSGP((X, Y), se_kernel(1.0, 0.8), features, alpha=alpha, noise_variance=0.1)
        peer = peer_class((X, Y), se_kernel(1.0, 0.8), features, noise_variance=0.1)
        np.testing.assert_allclose(
            model.log_marginal_likelihood().numpy(),
            peer.maximum_log_likelihood_objective().numpy(),
            rtol=1e-9,
        )


# --- 5. Bad input --------------------------------------------------------------------------------

Z_GOOD = np.zeros((3, 2))
W_GOOD = np.ones((3, 2))


@pytest.mark.parametrize(
    "kwargs, error, names",
    [
        ({"Z": np.zeros(3)}, ValueError, "`Z`"),
        ({"Z": np.zeros((0, 2)), "widths": np.ones((0, 2))}, ValueError, "`Z`"),
        ({"Z": np.array([[0.0, np.nan], [0, 0], [0, 0]])}, ValueError, "`Z`"),
        ({"Z": [["a", "b"]] * 3}, TypeError, "`Z`"),
        ({"widths": np.ones((3, 1))}, ValueError, "`widths`"),
        ({"widths": np.ones(3)}, ValueError, "`widths`"),
        ({"widths": np.array([[1.0, 1.0], [0.0, 1.0], [1.0, 1.0]])}, ValueError, "positive"),
        ({"widths": -np.ones((3, 2))}, ValueError, "`widths`"),
        ({"widths": np.full((3, 2), np.nan)}, ValueError, "`widths`"),
        ({"frequencies": np.zeros((2, 2))}, ValueError, "`frequencies`"),
        ({"frequencies": np.full((3, 2), np.inf)}, ValueError, "`frequencies`"),
        ({"phases": np.zeros((3, 1))}, ValueError, "`phases`"),
        ({"phases": np.zeros(4)}, ValueError, "`phases`"),
        ({"phases": np.array([0.0, np.nan, 0.0])}, ValueError, "`phases`"),
    ],
)
def test_bad_input_is_rejected_with_a_named_argument(kwargs, error, names):
    arguments = {"Z": Z_GOOD, "widths": W_GOOD, **kwargs}
    with pytest.raises(error, match=names):
        FrequencyInducingFeatures(**arguments)


def test_defaults_and_shape(rng):
    features = FrequencyInducingFeatures(rng.normal(size=(4, 3)), np.ones((4, 3)))
    assert features.shape == (4, 3, 1)
    assert int(features.num_inducing) == 4
    np.testing.assert_array_equal(features.frequencies.numpy(), np.zeros((4, 3)))
    np.testing.assert_array_equal(features.phases.numpy(), np.zeros(4))
    assert len(features.trainable_variables) == 4


# --- 6. float32 --------------------------------------------------------------------------------


def test_float32_smoke(rng):
    with gpflow.config.as_context(gpflow.config.Config(float=np.float32, jitter=1e-4)):
        features = random_features(rng, 4, 2)
        kernel = se_kernel(1.0, [0.7, 1.2])
        X = rng.normal(size=(5, 2)).astype(np.float32)
        K = Kuu(features, kernel, jitter=1e-4)
        Kx = Kuf(features, kernel, X)
    assert K.dtype == tf.float32 and Kx.dtype == tf.float32
    assert features.widths.dtype == tf.float32
    assert np.all(np.isfinite(K.numpy())) and np.all(np.isfinite(Kx.numpy()))
    tf.linalg.cholesky(K)
