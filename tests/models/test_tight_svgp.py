import gpflow
import numpy as np
import pytest
import tensorflow as tf
from gpflow.keras import tf_keras

import gpflow_tight
from gpflow_tight import TightSGPR, TightSVGP
from tests.reference import se_kernel, tight_svgp_gaussian_elbo

VARIANCE, LENGTHSCALE, NOISE = 1.1, 0.8, 0.1


def regression_data(rng, num_data=40, num_outputs=1):
    X = rng.uniform(-3, 3, (num_data, 1))
    Y = np.sin(2 * X) + 0.3 * rng.standard_normal((num_data, num_outputs))
    return X, Y


def kernel():
    return gpflow.kernels.SquaredExponential(variance=VARIANCE, lengthscales=LENGTHSCALE)


def random_q(rng, num_inducing, num_latent=1):
    q_mu = rng.standard_normal((num_inducing, num_latent))
    q_sqrt = np.tril(0.3 * rng.standard_normal((num_latent, num_inducing, num_inducing)))
    q_sqrt[:, np.arange(num_inducing), np.arange(num_inducing)] = rng.uniform(
        0.2, 1.0, (num_latent, num_inducing)
    )
    return q_mu, q_sqrt


def test_elbo_equals_dense_reference(rng):
    X, Y = regression_data(rng)
    Z = rng.uniform(-3, 3, (6, 1))
    q_mu, q_sqrt = random_q(rng, 6)
    beta = 0.37
    model = TightSVGP(
        kernel(),
        gpflow.likelihoods.Gaussian(NOISE),
        Z,
        whiten=False,
        q_mu=q_mu,
        q_sqrt=q_sqrt,
        beta=beta,
    )
    expected = tight_svgp_gaussian_elbo(
        X, Y[:, 0], Z, VARIANCE, LENGTHSCALE, NOISE, q_mu[:, 0], q_sqrt[0] @ q_sqrt[0].T, beta
    )
    np.testing.assert_allclose(model.elbo((X, Y)).numpy(), expected, rtol=1e-10)


def test_whitened_elbo_equals_dense_reference(rng):
    """Whitened q(v), u = L v: the same bound with q(u) = N(L m, L S Lᵀ)."""
    X, Y = regression_data(rng)
    Z = rng.uniform(-3, 3, (5, 1))
    q_mu, q_sqrt = random_q(rng, 5)
    model = TightSVGP(
        kernel(), gpflow.likelihoods.Gaussian(NOISE), Z, q_mu=q_mu, q_sqrt=q_sqrt, beta=0.2
    )
    L = np.linalg.cholesky(se_kernel(Z, Z, VARIANCE, LENGTHSCALE) + 1e-6 * np.eye(5))
    S = L @ q_sqrt[0] @ q_sqrt[0].T @ L.T
    expected = tight_svgp_gaussian_elbo(
        X, Y[:, 0], Z, VARIANCE, LENGTHSCALE, NOISE, L @ q_mu[:, 0], S, 0.2
    )
    np.testing.assert_allclose(model.elbo((X, Y)).numpy(), expected, rtol=1e-9)


@pytest.mark.parametrize("num_outputs", [1, 2])
def test_optimal_qu_and_beta_equal_tight_sgpr(rng, num_outputs):
    """
    With q(u) = SGPR's compute_qu() and beta = sigma^2, T-SVGP (eq. 8) equals F4 (eq. 9), as in
    Bui, Ashman & Turner 2025, §3 ("Collapsed bound and optimal M").
    """
    X, Y = regression_data(rng, num_outputs=num_outputs)
    Z = rng.uniform(-3, 3, (7, 1))
    collapsed = TightSGPR((X, Y), kernel(), Z, noise_variance=NOISE)
    q_mu, q_cov = collapsed.compute_qu()
    q_sqrt = np.tile(np.linalg.cholesky(q_cov.numpy())[None], [num_outputs, 1, 1])
    model = TightSVGP(
        kernel(),
        gpflow.likelihoods.Gaussian(NOISE),
        Z,
        whiten=False,
        q_mu=q_mu.numpy(),
        q_sqrt=q_sqrt,
        num_latent_gps=num_outputs,
    )
    np.testing.assert_allclose(model.beta.numpy(), NOISE)  # default beta is the noise variance
    np.testing.assert_allclose(model.elbo((X, Y)).numpy(), collapsed.elbo().numpy(), rtol=1e-9)


def _multioutput_settings(rng, num_inducing=5, num_outputs=3, num_latent=2):
    """(name, kernel, inducing variable, number of latent q columns, q_mu rows) per setting."""
    mo = gpflow.kernels
    ivs = gpflow.inducing_variables
    Z = rng.uniform(-3, 3, (num_inducing, 1))
    W = rng.standard_normal((num_outputs, num_latent))

    def base():
        return [kernel() for _ in range(num_latent)]

    shared_iv = ivs.SharedIndependentInducingVariables(ivs.InducingPoints(Z))
    separate_iv = ivs.SeparateIndependentInducingVariables(
        [ivs.InducingPoints(Z + 0.1 * i) for i in range(num_outputs)]
    )
    separate_latent_iv = ivs.SeparateIndependentInducingVariables(
        [ivs.InducingPoints(Z + 0.1 * i) for i in range(num_latent)]
    )
    return [
        ("single", kernel(), Z, 1, num_inducing),
        (
            "shared/shared",
            mo.SharedIndependent(kernel(), num_outputs),
            shared_iv,
            num_outputs,
            num_inducing,
        ),
        (
            "separate/separate",
            mo.SeparateIndependent([kernel() for _ in range(num_outputs)]),
            separate_iv,
            num_outputs,
            num_inducing,
        ),
        (
            "shared-kernel/separate-iv",
            mo.SharedIndependent(kernel(), num_outputs),
            separate_iv,
            num_outputs,
            num_inducing,
        ),
        ("lmc/shared", mo.LinearCoregionalization(base(), W), shared_iv, num_latent, num_inducing),
        (
            "lmc/separate",
            mo.LinearCoregionalization(base(), W),
            separate_latent_iv,
            num_latent,
            num_inducing,
        ),
        (
            "lmc/fallback",
            mo.LinearCoregionalization(base(), W),
            ivs.FallbackSeparateIndependentInducingVariables(
                [ivs.InducingPoints(Z + 0.1 * i) for i in range(num_latent)]
            ),
            num_latent,
            num_inducing,
        ),
        (
            "fully-correlated",
            mo.SharedIndependent(kernel(), num_outputs),
            ivs.InducingPoints(Z),
            1,
            num_inducing * num_outputs,
        ),
    ]


# GPflow's own SVGP has no unwhitened prior KL for the fully-correlated setting (number 7).
SETTINGS = [(s, w) for s in range(8) for w in (True, False) if (s, w) != (7, False)]


@pytest.mark.parametrize("q_diag", [False, True])
@pytest.mark.parametrize("setting, whiten", SETTINGS)
def test_unit_relaxation_equals_svgp(rng, setting, whiten, q_diag):
    """With m_n = 1 the bound is SVGP's, in every multi-output setting GPflow supports."""
    name, k, iv, num_latent, num_q = _multioutput_settings(rng)[setting]
    num_outputs = 1 if name == "single" else 3
    X = rng.uniform(-3, 3, (20, 1))
    Y = rng.standard_normal((20, num_outputs))
    q_mu, q_sqrt = random_q(rng, num_q, num_latent)
    if q_diag:
        q_sqrt = np.stack([np.diag(s) for s in q_sqrt], axis=1)
    common = dict(q_mu=q_mu, q_sqrt=q_sqrt, q_diag=q_diag, whiten=whiten, num_latent_gps=num_latent)
    likelihood = gpflow.likelihoods.Gaussian(NOISE)
    svgp = gpflow.models.SVGP(k, likelihood, iv, **common)
    free = TightSVGP(k, likelihood, iv, relaxation="free", num_data=20, **common)
    huge_beta = TightSVGP(k, likelihood, iv, beta=1e12, **common)
    expected = svgp.elbo((X, Y)).numpy()
    np.testing.assert_allclose(free.elbo((X, Y)).numpy(), expected, rtol=1e-10)
    np.testing.assert_allclose(huge_beta.elbo((X, Y)).numpy(), expected, rtol=1e-8)
    # the tighter marginals shrink SVGP's variance by (1 - m) d; with beta = sigma^2 the bound
    # can only be lower than SVGP's for a poor q(u), so just check it is finite here
    tight = TightSVGP(k, likelihood, iv, **common)
    assert np.isfinite(tight.elbo((X, Y)).numpy())


@pytest.mark.parametrize(
    "likelihood, Y_maker, num_latent",
    [
        (gpflow.likelihoods.Bernoulli(), lambda r, n: r.integers(0, 2, (n, 1)).astype(float), 1),
        (gpflow.likelihoods.Poisson(), lambda r, n: r.poisson(2.0, (n, 1)).astype(float), 1),
        (
            gpflow.likelihoods.MultiClass(3),
            lambda r, n: r.integers(0, 3, (n, 1)).astype(float),
            3,
        ),
        (
            gpflow.likelihoods.Softmax(3),
            lambda r, n: r.integers(0, 3, (n, 1)),
            3,
        ),
    ],
    ids=["bernoulli", "poisson", "robustmax", "softmax"],
)
def test_non_gaussian_likelihoods(rng, likelihood, Y_maker, num_latent):
    """Any likelihood: m_n = 1 gives SVGP; the bound is the SVGP expectation at v_n - (1-m)d."""
    X = rng.uniform(-3, 3, (25, 1))
    Y = Y_maker(rng, 25)
    Z = rng.uniform(-3, 3, (6, 1))
    q_mu, q_sqrt = random_q(rng, 6, num_latent)
    common = dict(q_mu=q_mu, q_sqrt=q_sqrt, num_latent_gps=num_latent)
    svgp = gpflow.models.SVGP(kernel(), likelihood, Z, **common)
    free = TightSVGP(kernel(), likelihood, Z, relaxation="free", num_data=25, **common)
    # Softmax's expectations are Monte Carlo: the same seed gives both models the same samples
    tf.random.set_seed(1)
    expected_svgp = svgp.elbo((X, Y)).numpy()
    tf.random.set_seed(1)
    np.testing.assert_allclose(free.elbo((X, Y)).numpy(), expected_svgp, rtol=1e-10)

    beta = 0.3
    model = TightSVGP(kernel(), likelihood, Z, beta=beta, **common)
    mean, svgp_var = svgp.predict_f(X)
    d = (
        VARIANCE
        - np.sum(
            np.square(
                np.linalg.solve(
                    np.linalg.cholesky(se_kernel(Z, Z, VARIANCE, LENGTHSCALE) + 1e-6 * np.eye(6)),
                    se_kernel(Z, X, VARIANCE, LENGTHSCALE),
                )
            ),
            axis=0,
        )[:, None]
    )
    m = beta / (d + beta)
    tf.random.set_seed(2)
    expected = (
        np.sum(likelihood.variational_expectations(X, mean, svgp_var - (1 - m) * d, Y))
        + 0.5 * num_latent * np.sum(1 + np.log(m) - m)
        - svgp.prior_kl().numpy()
    )
    tf.random.set_seed(2)
    np.testing.assert_allclose(model.elbo((X, Y)).numpy(), expected, rtol=1e-10)
    assert np.isfinite(model.training_loss_closure((X, Y), compile=True)().numpy())


def test_minibatch_estimates_average_to_full_batch(rng):
    X, Y = regression_data(rng, num_data=60)
    Z = rng.uniform(-3, 3, (5, 1))
    q_mu, q_sqrt = random_q(rng, 5)
    model = TightSVGP(
        kernel(),
        gpflow.likelihoods.Gaussian(NOISE),
        Z,
        q_mu=q_mu,
        q_sqrt=q_sqrt,
        num_data=60,
        beta=0.5,
    )
    order = rng.permutation(60)
    estimates = [model.elbo((X[b], Y[b])).numpy() for b in np.split(order, 4)]
    np.testing.assert_allclose(np.mean(estimates), model.elbo((X, Y)).numpy(), rtol=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_gaussian_bound_below_evidence_and_optimal_beta_above_svgp(seed):
    """
    For a Gaussian likelihood, F2 <= F3(m) <= F4 <= log p(y) for any q(u) and beta; with
    beta = sigma^2 (the optimum of F3 over m) T-SVGP >= SVGP for the same q(u).
    """
    rng = np.random.default_rng(seed)
    X, Y = regression_data(rng, num_data=30)
    Z = rng.uniform(-3, 3, (4, 1))
    q_mu, q_sqrt = random_q(rng, 4)
    common = dict(q_mu=q_mu, q_sqrt=q_sqrt)
    likelihood = gpflow.likelihoods.Gaussian(NOISE)
    gpr = gpflow.models.GPR((X, Y), kernel(), noise_variance=NOISE)
    evidence = gpr.log_marginal_likelihood().numpy()
    svgp = gpflow.models.SVGP(kernel(), likelihood, Z, **common).elbo((X, Y)).numpy()
    for beta in 10 ** rng.uniform(-3, 2, 5):
        tight = TightSVGP(kernel(), likelihood, Z, beta=beta, **common).elbo((X, Y)).numpy()
        assert tight <= evidence
    tight_opt = TightSVGP(kernel(), likelihood, Z, beta=NOISE, **common).elbo((X, Y)).numpy()
    assert svgp <= tight_opt <= evidence


def test_predictions_equal_svgp(rng):
    X, Y = regression_data(rng)
    Z = rng.uniform(-3, 3, (6, 1))
    q_mu, q_sqrt = random_q(rng, 6)
    likelihood = gpflow.likelihoods.Gaussian(NOISE)
    svgp = gpflow.models.SVGP(kernel(), likelihood, Z, q_mu=q_mu, q_sqrt=q_sqrt)
    tight = TightSVGP(kernel(), likelihood, Z, q_mu=q_mu, q_sqrt=q_sqrt)
    Xnew = rng.uniform(-3, 3, (8, 1))
    for full_cov in (False, True):
        for a, b in zip(svgp.predict_f(Xnew, full_cov), tight.predict_f(Xnew, full_cov)):
            np.testing.assert_allclose(a, b, rtol=1e-12)
    for a, b in zip(svgp.posterior().predict_f(Xnew), tight.posterior().predict_f(Xnew)):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    np.testing.assert_allclose(
        svgp.predict_log_density((X, Y)), tight.predict_log_density((X, Y)), rtol=1e-12
    )


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_minibatch_adam_training_under_tf_function(rng, dtype):
    gpflow.config.set_default_float(dtype)
    X, Y = regression_data(rng, num_data=200)
    X, Y = X.astype(dtype), Y.astype(dtype)
    Z = np.linspace(-3, 3, 8)[:, None].astype(dtype)
    model = TightSVGP(kernel(), gpflow.likelihoods.Gaussian(0.5), Z, num_data=200)
    dataset = tf.data.Dataset.from_tensor_slices((X, Y)).repeat().shuffle(200, seed=1).batch(50)
    loss = model.training_loss_closure(iter(dataset))
    optimizer = tf_keras.optimizers.Adam(0.05)

    @tf.function
    def step():
        optimizer.minimize(loss, model.trainable_variables)

    before = model.elbo((X, Y)).numpy()
    with tf.GradientTape() as tape:
        value = model.training_loss((X, Y))
    gradients = tape.gradient(value, model.trainable_variables)
    assert value.dtype == dtype
    assert all(np.all(np.isfinite(g.numpy())) for g in gradients)
    assert len(gradients) == len(model.trainable_variables)  # beta gets a gradient too
    for _ in range(100):
        step()
    assert model.elbo((X, Y)).numpy() > before


def test_fit_helpers_train_collapsed_and_uncollapsed(rng):
    X, Y = regression_data(rng, num_data=100)
    Z = np.linspace(-3, 3, 6)[:, None]
    svgp = TightSVGP(kernel(), gpflow.likelihoods.Gaussian(0.5), Z, num_data=100)
    history = gpflow_tight.training.fit_adam(
        svgp, (X, Y), iterations=60, batch_size=32, learning_rate=0.05, progress=False
    )
    assert len(history) == 60 and np.mean(history[-10:]) < np.mean(history[:10])
    full = gpflow_tight.training.fit_scipy(svgp, (X, Y), maxiter=20, progress=False)
    np.testing.assert_allclose(full.history[-1], -svgp.elbo((X, Y)).numpy(), rtol=1e-8)
    sgpr = TightSGPR((X, Y), kernel(), Z, noise_variance=0.5)
    history = gpflow_tight.training.fit_adam(sgpr, iterations=30, progress=False)
    assert history[-1] < history[0]
    with pytest.raises(ValueError, match="pass `data`"):
        gpflow_tight.training.fit_adam(svgp, iterations=1, progress=False)


def test_free_relaxation_learns_and_needs_full_data(rng):
    X, Y = regression_data(rng, num_data=30)
    Z = rng.uniform(-3, 3, (4, 1))
    model = TightSVGP(
        kernel(), gpflow.likelihoods.Gaussian(NOISE), Z, relaxation="free", num_data=30
    )
    assert model.m.shape == (30, 1)
    before = model.elbo((X, Y)).numpy()
    gpflow_tight.training.fit_scipy(model, (X, Y), maxiter=30, progress=False)
    assert model.elbo((X, Y)).numpy() > before
    with pytest.raises(ValueError, match="whole training set.*relaxation='beta'"):
        model.elbo((X[:10], Y[:10]))


def test_checkpoint_round_trip(rng, tmp_path):
    X, Y = regression_data(rng)
    Z = rng.uniform(-3, 3, (5, 1))

    def build():
        return TightSVGP(kernel(), gpflow.likelihoods.Gaussian(NOISE), Z, num_data=40)

    model = build()
    gpflow_tight.training.fit_adam(model, (X, Y), iterations=20, progress=False)
    path = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    restored = build()
    tf.train.Checkpoint(model=restored).read(path).assert_consumed()
    np.testing.assert_allclose(restored.beta.numpy(), model.beta.numpy())
    np.testing.assert_allclose(restored.elbo((X, Y)).numpy(), model.elbo((X, Y)).numpy())


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(beta=0.0), "strictly positive"),
        (dict(beta=-1.0), "strictly positive"),
        (dict(beta=np.nan), "strictly positive"),
        (dict(beta=[0.1, 0.2]), "one value per latent GP"),
        (dict(relaxation="bogus"), "must be one of 'none', 'beta', 'free'"),
        (dict(relaxation="free"), "pass `num_data`"),
        (dict(relaxation="free", num_data=5, beta=0.1), "only used with relaxation='beta'"),
    ],
)
def test_bad_settings_raise_clear_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TightSVGP(kernel(), gpflow.likelihoods.Gaussian(), np.zeros((2, 1)), **kwargs)


def test_bad_batches_raise_clear_errors(rng):
    model = TightSVGP(kernel(), gpflow.likelihoods.Gaussian(), rng.uniform(size=(3, 1)))
    with pytest.raises(ValueError, match="5 rows but Y has 4"):
        model.elbo((np.zeros((5, 1)), np.zeros((4, 1))))
    with pytest.raises(ValueError, match="NaN or infinite"):
        model.elbo((np.array([[np.nan]]), np.zeros((1, 1))))
    loss = model.training_loss_closure((np.array([[np.inf]]), np.zeros((1, 1))), compile=True)
    with pytest.raises(tf.errors.InvalidArgumentError, match="NaN or infinite"):
        loss()


def test_cholesky_failure_says_what_to_do(rng):
    X, Y = regression_data(rng)
    Z = np.repeat(X[:1], 3, axis=0)
    with gpflow.config.as_context(gpflow.config.Config(jitter=0.0)):
        model = TightSVGP(kernel(), gpflow.likelihoods.Gaussian(), Z)
        with pytest.raises(gpflow_tight.CholeskyError, match="jitter"):
            model.elbo((X, Y))
        # a training loss is NaN there, as SVGP's (line searches back off); the helpers explain
        assert not np.isfinite(model.training_loss_closure((X, Y), compile=True)().numpy())
        with pytest.raises(gpflow_tight.TrainingError, match="step 1: .*inducing points") as info:
            gpflow_tight.training.fit_adam(model, (X, Y), iterations=1, progress=False)
        assert isinstance(info.value.__cause__, gpflow_tight.CholeskyError)
