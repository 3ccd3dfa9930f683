"""
Deep GPs in GPflux with the tighter conditional (``make test-compat``: GPflux's pinned stack):
:class:`gpflow_tight.deep.TightGPLayer` against the models it must reduce to (T-SVGP for one
layer, GPflux's ``GPLayer`` for ``relaxation="none"`` and as β → ∞, the shallow T-SVGP when the
first layer is an identity of tiny variance), against a dense numpy reference of the two-layer
bound by Gauss-Hermite quadrature over the hidden layer (the ELBO estimate is unbiased over
samples and minibatches), the per-draw inequality the theory guarantees, Keras training and
checkpoints.
"""

import gpflow
import numpy as np
import pytest
import tensorflow as tf
from gpflow.keras import tf_keras
from gpflow.mean_functions import Identity, Zero
from gpflux.helpers import construct_basic_inducing_variables, construct_basic_kernel
from gpflux.layers import GPLayer, LikelihoodLayer
from gpflux.models import DeepGP

import gpflow_tight as gt
from gpflow_tight.deep import TightGPLayer, tighten


def layer_parts(Z, output_dim=1, lengthscales=1.0, variance=1.0, separate=False):
    """GPflux's helpers: a (shared or separate) SE kernel and inducing points per output."""
    if separate:
        kernels = [
            gpflow.kernels.SquaredExponential(variance=variance, lengthscales=lengthscales)
            for _ in range(output_dim)
        ]
        kernel = construct_basic_kernel(kernels, output_dim=output_dim, share_hyperparams=False)
    else:
        base = gpflow.kernels.SquaredExponential(variance=variance, lengthscales=lengthscales)
        kernel = construct_basic_kernel(base, output_dim=output_dim, share_hyperparams=True)
    inducing = construct_basic_inducing_variables(
        len(Z), Z.shape[1], output_dim, share_variables=True, z_init=Z
    )
    return kernel, inducing


def randomise_q(layer, rng, scale=0.3, mean_scale=1.0):
    M, L = layer.q_mu.shape
    layer.q_mu.assign(mean_scale * rng.normal(size=(M, L)))
    noise = np.tril(rng.normal(size=(L, M, M)), -1) * scale
    layer.q_sqrt.assign(noise + np.eye(M) * rng.uniform(0.3, 1.0, size=(L, 1, M)))


def data(rng, N=30, D=2, P=1):
    X = rng.normal(size=(N, D))
    Y = np.sin(X @ rng.normal(size=(D, P))) + 0.1 * rng.normal(size=(N, P))
    return X, Y


@pytest.mark.parametrize("output_dim, separate", [(1, False), (2, False), (2, True)])
@pytest.mark.parametrize("batch", [None, 11])
def test_one_tight_layer_is_tight_svgp(rng, output_dim, separate, batch):
    X, Y = data(rng, P=output_dim)
    N = len(X)
    Z = rng.normal(size=(6, 2))
    kernel, inducing = layer_parts(Z, output_dim, lengthscales=[0.8, 1.3], separate=separate)
    beta = rng.uniform(0.05, 0.5, size=output_dim)
    layer = TightGPLayer(kernel, inducing, N, mean_function=Zero(output_dim), beta=beta)
    randomise_q(layer, rng)
    likelihood = gpflow.likelihoods.Gaussian(0.07)
    deep = DeepGP([layer], LikelihoodLayer(likelihood))
    shallow = gt.TightSVGP(
        kernel,
        likelihood,
        inducing,
        num_data=N,
        beta=beta,
        mean_function=Zero(output_dim),
        num_latent_gps=output_dim,
    )
    shallow.q_mu.assign(layer.q_mu)
    shallow.q_sqrt.assign(layer.q_sqrt)
    rows = slice(None) if batch is None else rng.choice(N, batch, replace=False)
    np.testing.assert_allclose(
        deep.elbo((X[rows], Y[rows])), shallow.elbo((X[rows], Y[rows])), rtol=1e-11
    )
    Xnew = rng.normal(size=(5, 2))
    for got, want in zip(deep.predict_f(Xnew), shallow.predict_f(Xnew)):
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-13)


def test_relaxation_none_is_gpflux_gp_layer(rng):
    X, Y = data(rng)
    Z = rng.normal(size=(5, 2))
    layers = []
    for cls, kwargs in [(GPLayer, {}), (TightGPLayer, {"relaxation": "none"})]:
        kernel, inducing = layer_parts(Z, lengthscales=[0.7, 1.1])
        layers.append(cls(kernel, inducing, len(X), mean_function=Zero(), **kwargs))
    randomise_q(layers[0], rng)
    layers[1].q_mu.assign(layers[0].q_mu)
    layers[1].q_sqrt.assign(layers[0].q_sqrt)
    for training in (True, False):
        values = []
        for layer in layers:
            tf.random.set_seed(3)
            samples = tf.convert_to_tensor(layer(X, training=training))
            values.append((samples.numpy(), [loss.numpy() for loss in layer.losses]))
        np.testing.assert_array_equal(values[0][0], values[1][0])
        assert values[0][1] == values[1][1] and len(values[1][1]) == 1


def two_layer_dgp(
    rng, X, tight=(True, True), beta=(0.5, 0.05), noise=0.05, lengthscales=(0.9, 1.2)
):
    """Input 1-D → hidden 1-D (identity mean) → output 1-D, Gaussian likelihood."""
    layers = []
    for depth, (mean_function, Z) in enumerate(
        [(Identity(), np.linspace(-2, 2, 4)[:, None]), (Zero(), np.linspace(-2.5, 2.5, 5)[:, None])]
    ):
        variance = 0.8 if depth == 0 else 1.2
        kernel, inducing = layer_parts(Z, lengthscales=lengthscales[depth], variance=variance)
        if tight[depth]:
            layer = TightGPLayer(kernel, inducing, len(X), mean_function, beta=beta[depth])
        else:
            layer = GPLayer(kernel, inducing, len(X), mean_function)
        layers.append(layer)
    return DeepGP(layers, LikelihoodLayer(gpflow.likelihoods.Gaussian(noise)))


def copy_parameters(source, target):
    for a, b in zip(source.f_layers, target.f_layers):
        b.q_mu.assign(a.q_mu)
        b.q_sqrt.assign(a.q_sqrt)


def layer_marginals(layer, X, beta):
    """Dense whitened marginals of one SE layer at inputs X [N, 1]: mean, s_n + m_n d_n, m_n."""
    base = layer.kernel.kernel
    variance, lengthscale = base.variance.numpy(), base.lengthscales.numpy()
    Z = layer.inducing_variable.inducing_variable.Z.numpy()

    def k(a, b):
        return variance * np.exp(-0.5 * (a[:, None, 0] - b[None, :, 0]) ** 2 / lengthscale**2)

    L = np.linalg.cholesky(k(Z, Z) + 1e-6 * np.eye(len(Z)))
    A = np.linalg.solve(L, k(Z, X))
    q_mu, q_sqrt = layer.q_mu.numpy()[:, 0], layer.q_sqrt.numpy()[0]
    mean = A.T @ q_mu
    s = np.sum((q_sqrt.T @ A) ** 2, axis=0)
    d = variance - np.sum(A**2, axis=0)
    m = np.ones_like(d) if beta is None else beta / (d + beta)
    return mean, s + m * d, m


def whitened_kl(layer):
    q_mu, q_sqrt = layer.q_mu.numpy()[:, 0], layer.q_sqrt.numpy()[0]
    S = q_sqrt @ q_sqrt.T
    return 0.5 * (np.trace(S) + q_mu @ q_mu - len(q_mu) - np.linalg.slogdet(S)[1])


def reference_elbo(dgp, X, Y, betas, nodes=120, price=1.0):
    """
    The two-layer bound by Gauss-Hermite quadrature over the hidden layer's marginals
    (``price=0`` drops the relaxation's terms ½[1 + log m − m]: a wrong bound).
    """
    first, second = dgp.f_layers
    noise = dgp.likelihood_layer.likelihood.variance.numpy()
    mean1, var1, m1 = layer_marginals(first, X, betas[0])
    mean1 = mean1 + X[:, 0]
    t, w = np.polynomial.hermite.hermgauss(nodes)
    total = price * 0.5 * np.sum(1 + np.log(m1) - m1)
    for n in range(len(X)):
        h = (mean1[n] + np.sqrt(2 * var1[n]) * t)[:, None]
        mean2, var2, m2 = layer_marginals(second, h, betas[1])
        per_node = (
            -0.5 * np.log(2 * np.pi * noise)
            - ((Y[n, 0] - mean2) ** 2 + var2) / (2 * noise)
            + price * 0.5 * (1 + np.log(m2) - m2)
        )
        total += w @ per_node / np.sqrt(np.pi)
    return total - whitened_kl(first) - whitened_kl(second)


@pytest.mark.parametrize("tight", [(True, True), (False, True), (False, False)])
def test_two_layer_elbo_is_unbiased_over_samples_and_minibatches(rng, tight):
    N, B, draws = 8, 4, 4000
    X = rng.uniform(-2, 2, size=(N, 1))
    Y = 0.3 * np.sin(2 * X) + 0.1 * rng.normal(size=(N, 1))
    dgp = two_layer_dgp(rng, X, tight=tight, noise=0.5, lengthscales=(0.5, 0.4))
    for layer in dgp.f_layers:
        randomise_q(layer, rng, mean_scale=0.3)
    betas = [0.5 if tight[0] else None, 0.05 if tight[1] else None]
    want = reference_elbo(dgp, X, Y, betas)
    elbo = tf.function(dgp.elbo)
    batches = np.array([rng.choice(N, B, replace=False) for _ in range(draws)])
    tf.random.set_seed(7)
    estimates = np.array([elbo((X[rows], Y[rows])).numpy() for rows in batches])
    standard_error = estimates.std() / np.sqrt(draws)
    assert abs(estimates.mean() - want) < 4 * standard_error
    if any(tight):  # the check can tell: it rejects the bound without the relaxation's price
        wrong = reference_elbo(dgp, X, Y, betas, price=0.0)
        assert 8 * standard_error < abs(want - wrong)


def test_beta_to_infinity_is_the_plain_dgp_and_a_tight_last_layer_gains_on_every_draw(rng):
    X = rng.uniform(-2, 2, size=(20, 1))
    Y = np.cos(2 * X) + 0.1 * rng.normal(size=(20, 1))
    plain = two_layer_dgp(rng, X, tight=(False, False))
    for layer in plain.f_layers:
        randomise_q(layer, rng)
    huge = two_layer_dgp(rng, X, tight=(True, True), beta=(1e15, 1e15))
    last = two_layer_dgp(rng, X, tight=(False, True), beta=(None, 0.05))  # β = σ²
    copy_parameters(plain, huge)
    copy_parameters(plain, last)
    for seed in range(5):
        values = []
        for model in (plain, huge, last):
            tf.random.set_seed(seed)  # the same standard normals: eager draws follow the seed
            values.append(model.elbo((X, Y)).numpy())
        np.testing.assert_allclose(values[1], values[0], rtol=1e-9)
        assert values[2] > values[0]


def test_identity_first_layer_of_tiny_variance_gives_the_shallow_tight_svgp(rng):
    X, Y = data(rng, N=25)
    Z = rng.normal(size=(6, 2))
    kernel1, inducing1 = layer_parts(rng.normal(size=(4, 2)), 2, variance=1e-18)
    first = TightGPLayer(kernel1, inducing1, len(X), Identity(), beta=0.5)  # q = prior: KL = 0
    kernel2, inducing2 = layer_parts(Z, lengthscales=[0.8, 1.4])
    second = TightGPLayer(kernel2, inducing2, len(X), Zero(), beta=0.1)
    randomise_q(second, rng)
    likelihood = gpflow.likelihoods.Gaussian(0.05)
    deep = DeepGP([first, second], LikelihoodLayer(likelihood))
    shallow = gt.TightSVGP(kernel2, likelihood, inducing2, num_data=len(X), beta=0.1)
    shallow.q_mu.assign(second.q_mu)
    shallow.q_sqrt.assign(second.q_sqrt)
    # the hidden layer's outputs are X + O(1e-9) noise: the bounds agree to that order
    np.testing.assert_allclose(deep.elbo((X, Y)), shallow.elbo((X, Y)), rtol=1e-9)
    for got, want in zip(deep.predict_f(X), shallow.predict_f(X)):
        np.testing.assert_allclose(got, want, rtol=1e-7)


def test_keras_fit_trains_beta_and_a_checkpoint_restores_everything(rng, tmp_path):
    X = rng.uniform(-2, 2, size=(64, 1))
    Y = np.sin(2 * X) + 0.1 * rng.normal(size=(64, 1))
    dgp = two_layer_dgp(rng, X)
    model = dgp.as_training_model()
    model.compile(tf_keras.optimizers.Adam(0.02))
    history = model.fit({"inputs": X, "targets": Y}, epochs=40, batch_size=16, verbose=0)
    losses = history.history["loss"]
    assert np.mean(losses[-5:]) < np.mean(losses[:5])
    betas = [layer.beta.numpy() for layer in dgp.f_layers]
    assert not np.allclose(betas[0], 0.5) and not np.allclose(betas[1], 0.05)

    path = tf.train.Checkpoint(model=dgp).save(str(tmp_path / "dgp"))
    restored = two_layer_dgp(rng, X, beta=(3.0, 3.0))
    for layer in restored.f_layers:
        randomise_q(layer, rng)
    tf.train.Checkpoint(model=restored).restore(path).assert_consumed()
    for a, b in zip(dgp.f_layers, restored.f_layers):
        np.testing.assert_array_equal(a.beta.numpy(), b.beta.numpy())
        np.testing.assert_array_equal(a.q_sqrt.numpy(), b.q_sqrt.numpy())
    values = []
    for model in (dgp, restored):
        tf.random.set_seed(1)
        values.append(model.elbo((X, Y)).numpy())
    assert values[0] == values[1]


def test_a_float32_layer_matches_tight_svgp(rng):
    X, Y = data(rng)
    with gpflow.config.as_context(gpflow.config.Config(float=np.float32, jitter=1e-4)):
        kernel, inducing = layer_parts(rng.normal(size=(5, 2)).astype(np.float32))
        layer = TightGPLayer(kernel, inducing, len(X), mean_function=Zero(), beta=0.2)
        likelihood = gpflow.likelihoods.Gaussian(0.1)
        deep = DeepGP([layer], LikelihoodLayer(likelihood))
        shallow = gt.TightSVGP(kernel, likelihood, inducing, num_data=len(X), beta=0.2)
        batch = (X.astype(np.float32), Y.astype(np.float32))
        got, want = deep.elbo(batch), shallow.elbo(batch)
    assert got.dtype == tf.float32
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_impossible_settings_are_refused(rng):
    Z = rng.normal(size=(4, 2))
    for relaxation in ("free", "optimal", "sampled"):
        with pytest.raises(ValueError, match="relaxation"):
            TightGPLayer(*layer_parts(Z), 10, Zero(), relaxation=relaxation)
    with pytest.raises(ValueError, match="beta"):
        TightGPLayer(*layer_parts(Z), 10, Zero(), beta=-1.0)
    with pytest.raises(TypeError, match="independent latent GPs"):  # GPflow's fully correlated
        kernel = gpflow.kernels.SharedIndependent(gpflow.kernels.SquaredExponential(), 2)
        points = gpflow.inducing_variables.InducingPoints(Z)
        TightGPLayer(kernel, points, 10, Zero(2), num_latent_gps=2, verbose=False)
    with pytest.raises(AttributeError, match="relaxation='beta'"):
        _ = TightGPLayer(*layer_parts(Z), 10, Zero(), relaxation="none").beta
    layer = TightGPLayer(*layer_parts(Z), 10, Zero())
    X = rng.normal(size=(7, 2))
    layer.full_cov = True
    assert tf.convert_to_tensor(layer(X, training=False)).shape == (7, 1)  # predictions may
    with pytest.raises(ValueError, match="full_cov"):
        layer(X, training=True)


def test_tighten_turns_a_gpflux_architecture_into_a_tight_deep_gp(rng):
    from gpflux.architectures import Config, build_constant_input_dim_deep_gp

    X, Y = data(rng, N=40, D=3)
    config = Config(num_inducing=6, inner_layer_qsqrt_factor=1e-3, likelihood_noise_variance=0.02)
    plain = build_constant_input_dim_deep_gp(X, num_layers=2, config=config)
    tight = tighten(plain)
    for a, b in zip(plain.f_layers, tight.f_layers):
        assert isinstance(b, TightGPLayer) and b.kernel is a.kernel
        assert b.inducing_variable is a.inducing_variable and b.mean_function is a.mean_function
        np.testing.assert_array_equal(a.q_sqrt.numpy(), b.q_sqrt.numpy())
    assert tight.likelihood_layer is plain.likelihood_layer
    np.testing.assert_allclose(tight.f_layers[-1].beta.numpy(), [0.02])
    np.testing.assert_allclose(tight.f_layers[0].beta.numpy(), np.ones(3))
    untightened = DeepGP(
        [TightGPLayer.from_gp_layer(layer, relaxation="none") for layer in plain.f_layers],
        plain.likelihood_layer,
    )
    values = []
    for model in (plain, untightened, tight):
        tf.random.set_seed(4)
        values.append(model.elbo((X, Y)).numpy())
    assert values[0] == values[1]
    assert values[2] > values[0]  # β = σ² in the last layer gains on the same draw
    # frozen parts stay frozen, and the Keras models keep their input and target shapes
    plain = DeepGP(plain.f_layers, plain.likelihood_layer, input_dim=3, target_dim=1)
    gpflow.set_trainable(plain.f_layers[-1].q_mu, False)
    plain.f_layers[0].trainable = False
    again = tighten(plain)
    assert not again.f_layers[-1].q_mu.trainable and again.f_layers[-1].q_sqrt.trainable
    assert not again.f_layers[0].trainable and again.f_layers[-1].trainable
    assert again.inputs.shape.as_list() == plain.inputs.shape.as_list() == [None, 3]
    assert again.targets.shape.as_list() == plain.targets.shape.as_list() == [None, 1]
    trainable = [len(m.as_training_model().trainable_variables) for m in (plain, again)]
    assert trainable[1] == trainable[0] + 1  # the last layer's beta (the hidden one is frozen)


def randomise_q_orthogonal(layer, rng, scale=0.3):
    M, L = layer.q_mu_orthogonal.shape
    layer.q_mu_orthogonal.assign(rng.normal(size=(M, L)))
    noise = np.tril(rng.normal(size=(L, M, M)), -1) * scale
    layer.q_sqrt_orthogonal.assign(noise + np.eye(M) * rng.uniform(0.3, 1.0, size=(L, 1, M)))


@pytest.mark.parametrize(
    "relaxation, shallow_class", [("beta", gt.TightSOLVEGP), ("none", gt.SOLVEGP)]
)
@pytest.mark.parametrize("output_dim, separate, whiten", [(1, False, True), (2, True, False)])
def test_one_layer_with_an_orthogonal_set_is_solve_gp(
    rng, relaxation, shallow_class, output_dim, separate, whiten
):
    X, Y = data(rng, P=output_dim)
    N = len(X)
    Z, Z_orthogonal = rng.normal(size=(5, 2)), rng.normal(size=(4, 2))
    kernel, inducing = layer_parts(Z, output_dim, lengthscales=[0.8, 1.3], separate=separate)
    orthogonal = construct_basic_inducing_variables(
        4, 2, output_dim, share_variables=True, z_init=Z_orthogonal
    )
    beta = rng.uniform(0.05, 0.5, size=output_dim)
    options = {"beta": beta} if relaxation == "beta" else {"relaxation": "none"}
    layer = TightGPLayer(
        kernel,
        inducing,
        N,
        mean_function=Zero(output_dim),
        orthogonal_inducing_variable=orthogonal,
        whiten=whiten,
        **options,
    )
    prior_q_sqrt = layer.q_sqrt_orthogonal.numpy()
    likelihood = gpflow.likelihoods.Gaussian(0.07)
    shallow = shallow_class(
        kernel,
        likelihood,
        inducing,
        orthogonal,
        num_data=N,
        mean_function=Zero(output_dim),
        num_latent_gps=output_dim,
        whiten=whiten,
        **options,
    )
    np.testing.assert_array_equal(prior_q_sqrt, shallow.q_sqrt_orthogonal.numpy())
    assert any(v is layer.q_mu_orthogonal.unconstrained_variable for v in layer.trainable_weights)
    randomise_q(layer, rng)
    randomise_q_orthogonal(layer, rng)
    for name in ("q_mu", "q_sqrt", "q_mu_orthogonal", "q_sqrt_orthogonal"):
        getattr(shallow, name).assign(getattr(layer, name))
    deep = DeepGP([layer], LikelihoodLayer(likelihood))
    np.testing.assert_allclose(layer.prior_kl(), shallow.prior_kl(), rtol=1e-12)
    np.testing.assert_allclose(deep.elbo((X, Y)), shallow.elbo((X, Y)), rtol=1e-11)
    Xnew = rng.normal(size=(5, 2))
    for got, want in zip(deep.predict_f(Xnew), shallow.predict_f(Xnew)):
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-13)
    for got, want in zip(
        layer.predict(Xnew, full_cov=True), shallow.predict_f(Xnew, full_cov=True)
    ):
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-13)


def test_orthogonal_sets_through_tighten_and_their_refusals(rng):
    X, Y = data(rng, N=20)
    Z = rng.normal(size=(4, 2))
    plain = DeepGP(
        [GPLayer(*layer_parts(Z), len(X), Zero())],
        LikelihoodLayer(gpflow.likelihoods.Gaussian(0.05)),
    )
    Z_orthogonal = rng.normal(size=(3, 2))
    tight = tighten(plain, orthogonal_inducing_variables=[Z_orthogonal])
    layer = tight.f_layers[0]
    regular = plain.f_layers[0].inducing_variable.inducing_variable
    assert layer.orthogonal_inducing_variable.regular is regular  # shared, so trained together
    np.testing.assert_array_equal(
        layer.orthogonal_inducing_variable.orthogonal.Z.numpy(), Z_orthogonal
    )
    # q(v⊥) starts at the prior, so the KL is the plain layer's
    np.testing.assert_allclose(layer.prior_kl(), plain.f_layers[0].prior_kl(), rtol=1e-12)
    stacked = layer.predict(np.stack([X, X[::-1]]))  # leading sample dimensions
    for got, want in zip(stacked, layer.predict(X[::-1])):
        np.testing.assert_allclose(got[1], want, rtol=1e-13)
    with pytest.raises(NotImplementedError, match="orthogonal set"):
        layer.sample()
    with pytest.raises(ValueError, match="one entry"):
        tighten(plain, orthogonal_inducing_variables=[Z_orthogonal, None])
    with pytest.raises(ValueError, match="need an `orthogonal_inducing_variable`"):
        TightGPLayer(*layer_parts(Z), 10, Zero(), q_mu_orthogonal=np.zeros((3, 1)))
    with pytest.raises(ValueError, match="q_mu_orthogonal"):
        TightGPLayer(
            *layer_parts(Z),
            10,
            Zero(),
            orthogonal_inducing_variable=Z_orthogonal,
            q_mu_orthogonal=np.zeros((2, 1)),
        )
    with pytest.raises(AttributeError, match="no `orthogonal_inducing_variable`"):
        TightGPLayer(*layer_parts(Z), 10, Zero()).orthogonal_posterior()
    # the orthogonal set holds the regular one: replacing either would leave the other behind
    kl = layer.prior_kl().numpy()
    for name in ("inducing_variable", "orthogonal_inducing_variable"):
        with pytest.raises(AttributeError, match=f"`{name}` of a TightGPLayer .*fixed"):
            setattr(layer, name, gpflow.inducing_variables.InducingPoints(Z_orthogonal))
    assert layer.prior_kl().numpy() == kl
    without = TightGPLayer(*layer_parts(Z), 10, Zero())
    without.inducing_variable = gpflow.inducing_variables.InducingPoints(Z + 1.0)  # as GPLayer
    np.testing.assert_array_equal(without.inducing_variable.Z.numpy(), Z + 1.0)


def test_keras_fit_trains_orthogonal_sets_and_a_checkpoint_restores_them(rng, tmp_path):
    X = rng.uniform(-2, 2, size=(48, 1))
    Y = np.sin(2 * X) + 0.1 * rng.normal(size=(48, 1))

    def build():
        plain = two_layer_dgp(rng, X, tight=(False, False))
        orthogonal = [np.linspace(-1.5, 1.5, 3)[:, None], np.linspace(-2, 2, 4)[:, None]]
        return tighten(plain, orthogonal_inducing_variables=orthogonal)

    dgp = build()
    model = dgp.as_training_model()
    model.compile(tf_keras.optimizers.Adam(0.02))
    history = model.fit({"inputs": X, "targets": Y}, epochs=30, batch_size=16, verbose=0)
    assert np.mean(history.history["loss"][-5:]) < np.mean(history.history["loss"][:5])
    for layer in dgp.f_layers:
        assert np.abs(layer.q_mu_orthogonal.numpy()).max() > 1e-3  # moved from zero

    path = tf.train.Checkpoint(model=dgp).save(str(tmp_path / "dgp"))
    restored = build()
    tf.train.Checkpoint(model=restored).restore(path).assert_consumed()
    for a, b in zip(dgp.f_layers, restored.f_layers):
        np.testing.assert_array_equal(a.q_mu_orthogonal.numpy(), b.q_mu_orthogonal.numpy())
        np.testing.assert_array_equal(a.q_sqrt_orthogonal.numpy(), b.q_sqrt_orthogonal.numpy())
    values = []
    for model in (dgp, restored):
        tf.random.set_seed(1)
        values.append(model.elbo((X, Y)).numpy())
    assert values[0] == values[1]
