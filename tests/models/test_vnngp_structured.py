"""
VNNGP with the nearest-neighbour q(u) (``q="nearest_neighbor"``; Wu, Pleiss & Cunningham 2022,
Appendix B, with the errata of the spec's §1.8) against dense numpy references written from the
spec: q(u) = N(m, S) with S = L̃ L̃ᵀ built densely from the sparse factor, the KL against the
nearest-neighbour prior through its dense precision (I - B)ᵀ F⁻¹ (I - B), and the expected
log-likelihood from eq. 25 with brute-force neighbours and a full S. Also: at K = M - 1 the model
is gpflow.models.SVGP with a full-rank, unwhitened q; with zero off-diagonal entries it is the
mean-field model; the doubly minibatched ELBO is unbiased; float32, tf.function, tf.data
training, checkpoints, caches and the constructor-only setting.
"""

import copy

import gpflow
import numpy as np
import pytest
import tensorflow as tf
from gpflow.posteriors import PrecomputeCacheType

import gpflow_tight
from gpflow_tight import VNNGP
from tests.models.test_vnngp import (
    JITTER,
    LENGTHSCALE,
    NOISE,
    VARIANCE,
    assert_equals_svgp,
    brute_force_prior_neighbors,
    dense_nn_precision,
    gaussian_expectation,
    kernel,
    make_problem,
)
from tests.reference import se_kernel

MEAN = 0.3  # a constant mean function, so that μ(Z) enters the KL and the data term


def dense_kl(m, S, precision):
    """KL[N(m, S) || N(0, P⁻¹)] with the prior's precision P, densely."""
    return 0.5 * (
        np.trace(precision @ S)
        + m @ precision @ m
        - len(m)
        - np.linalg.slogdet(precision)[1]
        - np.linalg.slogdet(S)[1]
    )


def random_factor(rng, neighbor_sets, num_latent, scale=0.4):
    """Dense factors L̃ [L, M, M]: positive diagonal, random entries on the columns n(j)."""
    M = len(neighbor_sets)
    factor = np.zeros((num_latent, M, M))
    for j, n in enumerate(neighbor_sets):
        factor[:, j, j] = rng.uniform(0.3, 1.0, num_latent)
        factor[:, j, n] = scale * rng.standard_normal((num_latent, len(n)))
    return factor


def model_parameters(factor, table):
    """The model's q_sqrt [M, L] and q_sqrt_offdiag [M, K, L] holding the dense factor."""
    q_sqrt = np.stack([np.diag(f) for f in factor], axis=-1)
    rows = np.arange(len(table))[:, None]
    off = factor[:, rows, np.maximum(table, 0)]  # [L, M, K]
    off = np.where(table[None] >= 0, off, 0.0)
    return q_sqrt, np.moveaxis(off, 0, -1)


def dense_factor_of(model):
    """The factor L̃ [L, M, M] a model holds, read from its parameters and prior_neighbors."""
    table = model.prior_neighbors
    diagonal = model.q_sqrt.numpy()
    off = model.q_sqrt_offdiag.numpy()
    M, K, L = off.shape
    factor = np.zeros((L, M, M))
    for j in range(M):
        factor[:, j, j] = diagonal[j]
        for k in range(K):
            if table[j, k] >= 0:
                factor[:, j, table[j, k]] = off[j, k]
    return factor


def dense_marginals(X, Z, q_mu, S, k, mean=0.0, jitter=JITTER):
    """
    q(f_i) from eq. 25 with brute-force neighbours and a full S (the corrected eq. 32); a row
    of X that is an inducing input z_j reads q(u_j) = N(m_j, S_jj). Means and variances [N, L].
    """
    means, variances, A, c = [], [], np.zeros((len(X), len(Z))), np.zeros(len(X))
    for i, x in enumerate(X):
        same = np.flatnonzero(np.all(Z == x, axis=1))
        if len(same):
            j = same[0]
            means.append(q_mu[j])
            variances.append(S[:, j, j])
            continue
        n = np.argsort(np.sum((Z - x) ** 2, axis=1))[:k]
        K_nn = se_kernel(Z[n], Z[n], VARIANCE, LENGTHSCALE) + jitter * np.eye(len(n))
        k_nx = se_kernel(Z[n], x[None], VARIANCE, LENGTHSCALE)[:, 0]
        a = np.linalg.solve(K_nn, k_nx)
        A[i, n], c[i] = a, VARIANCE - k_nx @ a
        means.append(mean + a @ (q_mu[n] - mean))
        variances.append(c[i] + np.einsum("k,lkj,j->l", a, S[:, n][:, :, n], a))
    return np.array(means), np.array(variances), A, c


def structured_problem(rng, k=3, size=30, num_inducing=12, num_latent=2, **kwargs):
    """A structured-q model with random off-diagonal entries, and its dense q(u)."""
    X, Y, Z, q_mu, _ = make_problem(rng, size, num_inducing, num_latent)
    probe = VNNGP(kernel(), gpflow.likelihoods.Gaussian(NOISE), Z, k, **kwargs)
    sets = brute_force_prior_neighbors(Z, probe.ordering, k)
    for row, n in zip(probe.prior_neighbors, sets):  # the model's table is the spec's n(j)
        assert set(row[row >= 0]) == set(n)
    factor = random_factor(rng, sets, num_latent)
    q_sqrt, q_sqrt_offdiag = model_parameters(factor, probe.prior_neighbors)
    model = VNNGP(
        kernel(),
        gpflow.likelihoods.Gaussian(NOISE),
        Z,
        k,
        num_latent_gps=num_latent,
        q_mu=q_mu,
        q_sqrt=q_sqrt,
        q="nearest_neighbor",
        q_sqrt_offdiag=q_sqrt_offdiag,
        **kwargs,
    )
    S = factor @ np.swapaxes(factor, 1, 2)
    return X, Y, Z, q_mu, S, sets, model


# --- (a) the ELBO against the dense formula ---------------------------------------------------


@pytest.mark.parametrize("jitter", [None, 1e-2])  # GPflow's default ε, or one given to the model
def test_elbo_kl_and_predictions_equal_dense_formula(rng, jitter):
    k = 3
    X, Y, Z, q_mu, S, sets, model = structured_problem(
        rng, k, size=26, mean_function=gpflow.mean_functions.Constant(MEAN), num_data=30,
        jitter=jitter,
    )  # fmt: skip
    epsilon = JITTER if jitter is None else jitter
    X = np.vstack([X, Z[:4]])  # four data points are inducing inputs: q(f_i) = q(u_j)
    Y = np.vstack([Y, rng.standard_normal((4, 2))])
    precision = dense_nn_precision(Z, sets, epsilon)
    kl = sum(dense_kl(q_mu[:, l] - MEAN, S[l], precision) for l in range(2))
    mean, var, _, _ = dense_marginals(X, Z, q_mu, S, k, mean=MEAN, jitter=epsilon)
    reference = gaussian_expectation(Y, mean, var) - kl

    np.testing.assert_allclose(model.prior_kl().numpy(), kl, rtol=1e-10)
    np.testing.assert_allclose(model.elbo((X, Y)).numpy(), reference, rtol=1e-10)
    np.testing.assert_allclose(model.elbo(model.training_data(X, Y)).numpy(), reference, rtol=1e-10)

    Xnew = rng.uniform(-3, 3, (7, 2))
    mean, var, A, c = dense_marginals(Xnew, Z, q_mu, S, k, mean=MEAN, jitter=epsilon)
    f_mean, f_var = model.predict_f(Xnew)
    np.testing.assert_allclose(f_mean.numpy(), mean, rtol=1e-10)
    np.testing.assert_allclose(f_var.numpy(), var, rtol=1e-10)
    joint_mean, joint = model.predict_f(Xnew, full_cov=True)
    np.testing.assert_allclose(joint_mean.numpy(), mean, rtol=1e-10)
    for l in range(2):
        np.testing.assert_allclose(joint[l].numpy(), A @ S[l] @ A.T + np.diag(c), atol=1e-12)


def test_kl_has_the_cross_terms_the_paper_drops(rng):
    """Eqs. 37-40 expand ‖L L̃‖² without cross terms; the model's KL does not (spec §1.8)."""
    _, _, Z, q_mu, S, sets, model = structured_problem(rng, k=4, num_latent=1)
    precision = dense_nn_precision(Z, sets)
    L = np.linalg.cholesky(precision[::-1, ::-1])[::-1, ::-1]  # any factor P = LᵀL will do
    factor = np.linalg.cholesky(S[0])
    paper_trace = np.sum(np.square(L) @ np.square(factor))  # Σ_ijk L_ik² L̃_kj²
    assert abs(paper_trace - np.trace(precision @ S[0])) > 1e-3
    np.testing.assert_allclose(
        model.prior_kl().numpy(), dense_kl(q_mu[:, 0], S[0], precision), rtol=1e-10
    )


# --- (b) K = M - 1: SVGP with a full-rank, unwhitened q ---------------------------------------


@pytest.mark.parametrize("ordering", ["given", "random"])
def test_full_conditioning_equals_full_rank_unwhitened_svgp(rng, ordering):
    """
    At K = M - 1 the prior is exact (K_ZZ + εI) and the factor's pattern is the whole lower
    triangle in the ordering, so any full S is reachable: S = L̃L̃ᵀ, and SVGP's q_sqrt is its
    Cholesky factor in Z's row order (L̃ itself for the given ordering). With all M inducing
    points for the data term and predictions, ELBO, KL and predictions are SVGP's.
    """
    X, Y, Z, q_mu, _ = make_problem(rng, num_data=15, num_inducing=8, num_latent=2)
    M = len(Z)
    probe = VNNGP(kernel(), gpflow.likelihoods.Gaussian(NOISE), Z, M - 1, ordering=ordering)
    position = np.empty(M, int)
    position[probe.ordering] = np.arange(M)
    earlier = position[None, :] < position[:, None]  # [j, c]: c is before j in the ordering
    factor = np.where(earlier, 0.4 * rng.standard_normal((2, M, M)), 0.0)
    factor += np.stack([np.diag(rng.uniform(0.3, 1.0, M)) for _ in range(2)])
    q_sqrt, q_sqrt_offdiag = model_parameters(factor, probe.prior_neighbors)
    S = factor @ np.swapaxes(factor, 1, 2)
    svgp_sqrt = np.linalg.cholesky(S)
    if ordering == "given":
        np.testing.assert_allclose(svgp_sqrt, factor, atol=1e-12)
    Xnew = rng.uniform(-3, 3, (6, 2))
    for likelihood in (gpflow.likelihoods.Gaussian(NOISE), gpflow.likelihoods.Bernoulli()):
        labels = Y if isinstance(likelihood, gpflow.likelihoods.Gaussian) else (Y > 0) * 1.0
        svgp = gpflow.models.SVGP(
            kernel(),
            likelihood,
            Z,
            num_latent_gps=2,
            q_diag=False,
            whiten=False,
            q_mu=q_mu,
            q_sqrt=svgp_sqrt,
        )
        model = VNNGP(
            kernel(),
            likelihood,
            Z,
            M - 1,
            num_latent_gps=2,
            num_neighbors_predict=M,
            ordering=ordering,
            q_mu=q_mu,
            q_sqrt=q_sqrt,
            q="nearest_neighbor",
            q_sqrt_offdiag=q_sqrt_offdiag,
        )
        assert_equals_svgp(model, svgp, (X, labels), Xnew)


# --- (c) zero off-diagonal entries: the mean-field model --------------------------------------


def test_zero_off_diagonal_is_the_mean_field_model(rng):
    X, Y, Z, q_mu, q_sqrt = make_problem(rng, num_latent=2)
    settings = dict(
        num_latent_gps=2,
        q_mu=q_mu,
        q_sqrt=q_sqrt,
        num_data=len(X),
        mean_function=gpflow.mean_functions.Constant(MEAN),
    )
    likelihood = gpflow.likelihoods.Gaussian(NOISE)
    mean_field = VNNGP(kernel(), likelihood, Z, 3, **settings)
    structured = VNNGP(kernel(), likelihood, Z, 3, q="nearest_neighbor", **settings)
    np.testing.assert_array_equal(structured.q_sqrt_offdiag.numpy(), 0.0)  # the default start
    data = mean_field.training_data(X, Y)
    inducing = tf.constant([1, 5, 5, 11], tf.int64)
    Xnew = np.vstack([rng.uniform(-3, 3, (5, 2)), Z[:2]])
    computations = [
        lambda m: m.prior_kl(),
        lambda m: m.elbo((X, Y)),
        lambda m: m.elbo(data, inducing_indices=inducing),
        lambda m: m.elbo((Z, Y[:12])),  # every row reads q(u_j)
        lambda m: m.predict_f(Xnew),
        lambda m: m.predict_f(Xnew, full_cov=True),
    ]
    for compute in computations:
        ours, theirs = compute(structured), compute(mean_field)
        for a, b in zip(tf.nest.flatten(ours), tf.nest.flatten(theirs)):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-14)


# --- (d) the doubly minibatched estimate is unbiased ------------------------------------------


def test_doubly_minibatched_estimate_is_unbiased(rng):
    """
    Averaged over a deterministic enumeration of batches (every data block of one partition
    with every inducing block of another, all blocks of equal size), the scaled estimates of
    eq. 19 equal the full ELBO.
    """
    X, Y, _, _, _, _, model = structured_problem(rng, size=24, num_inducing=12, num_data=24)
    data = model.training_data(X, Y)
    data_blocks = rng.permutation(24).reshape(4, 6)
    inducing_blocks = rng.permutation(12).reshape(3, 4)
    estimates = [
        model.elbo(tuple(part[rows] for part in data), tf.constant(inducing)).numpy()
        for rows in data_blocks
        for inducing in inducing_blocks
    ]
    np.testing.assert_allclose(np.mean(estimates), model.elbo(data).numpy(), rtol=1e-12)
    kl_blocks = [model.prior_kl_terms(tf.constant(b)).numpy() for b in inducing_blocks]
    np.testing.assert_allclose(np.sum(kl_blocks), model.prior_kl().numpy(), rtol=1e-12)


# --- (e) float32, tf.function, training -------------------------------------------------------


def test_float32(rng):
    X, Y, Z, _, _, _, model = structured_problem(rng, num_data=30)
    reference = model.elbo((X, Y)).numpy()
    q_mu, q_sqrt, off = (model.q_mu.numpy(), model.q_sqrt.numpy(), model.q_sqrt_offdiag.numpy())
    gpflow.config.set_default_float(np.float32)
    single = VNNGP(
        kernel(),
        gpflow.likelihoods.Gaussian(NOISE),
        Z.astype(np.float32),
        3,
        num_latent_gps=2,
        q_mu=q_mu,
        q_sqrt=q_sqrt,
        q="nearest_neighbor",
        q_sqrt_offdiag=off,
        num_data=30,
    )
    value = single.elbo((X.astype(np.float32), Y.astype(np.float32)))
    assert value.dtype == single.q_sqrt_offdiag.dtype == tf.float32
    np.testing.assert_allclose(value.numpy(), reference, rtol=1e-4)
    mean, var = single.predict_f(X[:5].astype(np.float32))
    assert mean.dtype == var.dtype == tf.float32


def test_compiled_training_with_tf_data_minibatches_lowers_the_loss(rng):
    """
    A compiled step on tf.data batches (data rows with their neighbours, and inducing batches
    drawn in the pipeline) gives the eager loss, lowers the full loss in a few Adam steps, and
    its gradient for the factor is a gather of the rows the batches use.
    """
    X, Y, _, _, _ = make_problem(rng, num_data=120)
    model = VNNGP(
        kernel(),
        gpflow.likelihoods.Gaussian(0.5),
        X,
        num_neighbors=6,
        num_data=120,
        q="nearest_neighbor",
    )
    data = model.training_data(X, Y)
    inducing = tf.data.Dataset.from_tensor_slices(rng.integers(0, 120, (40, 16)))
    batches = tf.data.Dataset.from_tensor_slices(data).shuffle(120, seed=0).repeat().batch(16)
    optimizer = gpflow.keras.tf_keras.optimizers.Adam(0.05)
    variables = model.trainable_variables
    optimizer.build(variables)  # its slots, outside the trace (one trace, not two)

    @tf.function
    def step(batch, inducing_indices):
        with tf.GradientTape() as tape:
            loss = -model.elbo(batch, inducing_indices)
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    before = -model.elbo(data).numpy()
    for i, (batch, indices) in enumerate(tf.data.Dataset.zip((batches, inducing))):
        eager = -model.elbo(batch, indices).numpy() if i == 0 else None
        loss = step(batch, indices).numpy()
        if i == 0:
            np.testing.assert_allclose(loss, eager, rtol=1e-12)
    assert -model.elbo(data).numpy() < before
    assert np.any(model.q_sqrt_offdiag.numpy() != 0.0)

    rows, indices = np.array([3, 40]), tf.constant([7, 90], tf.int64)
    with tf.GradientTape() as tape:
        loss = -model.elbo(tuple(part[rows] for part in data), indices)
    factor = [model.q_sqrt_offdiag.unconstrained_variable, model.q_sqrt.unconstrained_variable]
    used = set(data[2][rows].ravel()) | {7, 90}
    used |= set(model.prior_neighbors[[7, 90]].ravel()) - {-1}
    for gradient in tape.gradient(loss, factor):
        assert isinstance(gradient, tf.IndexedSlices)
        assert set(gradient.indices.numpy()) <= used


# --- the posterior, checkpoints, settings -----------------------------------------------------


def test_posterior_caches(rng):
    X, _, _, _, _, _, model = structured_problem(rng, prediction_batch_size=4)
    fused = model.predict_f(X)
    for cache in (PrecomputeCacheType.TENSOR, PrecomputeCacheType.VARIABLE):
        posterior = model.posterior(cache)
        assert posterior.structured
        for a, b in zip(posterior.predict_f(X), fused):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-13)
    model.q_sqrt_offdiag.assign(model.q_sqrt_offdiag.numpy() * 2.0)
    moved = model.predict_f(X)[1].numpy()
    assert not np.allclose(moved, fused[1].numpy())
    np.testing.assert_allclose(posterior.predict_f(X)[1].numpy(), fused[1].numpy(), rtol=1e-13)
    posterior.update_cache()
    np.testing.assert_allclose(posterior.predict_f(X)[1].numpy(), moved, rtol=1e-13)
    with pytest.raises(ValueError, match="pass both or neither"):
        gpflow_tight.posteriors.VNNGPPosterior(
            model.kernel,
            model.inducing_variable,
            model.q_mu,
            model.q_sqrt,
            num_neighbors=3,
            precompute_cache=None,
            q_sqrt_offdiag=model.q_sqrt_offdiag,
        )


def test_checkpoint_round_trip_and_freeze(rng, tmp_path):
    X, Y, Z, _, _, _, model = structured_problem(rng)
    model.q_sqrt_offdiag.assign(rng.standard_normal(model.q_sqrt_offdiag.shape))
    model.q_sqrt.assign(rng.uniform(0.1, 0.2, model.q_sqrt.shape))
    path = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    restored = VNNGP(
        kernel(), gpflow.likelihoods.Gaussian(NOISE), Z, 3, num_latent_gps=2, q="nearest_neighbor"
    )
    tf.train.Checkpoint(model=restored).read(path).assert_consumed()
    np.testing.assert_array_equal(restored.q_sqrt_offdiag.numpy(), model.q_sqrt_offdiag.numpy())
    np.testing.assert_allclose(restored.elbo((X, Y)).numpy(), model.elbo((X, Y)).numpy())
    frozen = gpflow.utilities.freeze(model)
    assert frozen.trainable_variables == ()
    np.testing.assert_allclose(frozen.elbo((X, Y)).numpy(), model.elbo((X, Y)).numpy())
    np.testing.assert_allclose(frozen.predict_f(X)[1].numpy(), model.predict_f(X)[1].numpy())


def test_update_neighbors_keeps_entries_whose_column_stays(rng):
    _, _, Z, _, _, _, model = structured_problem(rng, k=3)
    before = dense_factor_of(model)
    old_sets = [set(row[row >= 0]) for row in model.prior_neighbors]
    moved = Z.copy()
    moved[:3] += rng.uniform(-2, 2, (3, 2))
    model.inducing_variable.Z.assign(moved)
    model.update_neighbors()
    after = dense_factor_of(model)
    for j, row in enumerate(model.prior_neighbors):
        for c in range(len(Z)):
            if c == j:
                np.testing.assert_array_equal(after[:, j, j], before[:, j, j])
            elif c in row and c in old_sets[j]:
                np.testing.assert_array_equal(after[:, j, c], before[:, j, c])
            else:
                np.testing.assert_array_equal(after[:, j, c], 0.0)
    assert any(set(row[row >= 0]) != s for row, s in zip(model.prior_neighbors, old_sets))


def test_q_is_fixed_at_construction_and_checked(rng):
    _, _, Z, _, _, _, model = structured_problem(rng)
    for target in (model, copy.deepcopy(model)):
        with pytest.raises(AttributeError, match="`q` of VNNGP is fixed.*build a new model"):
            target.q = "mean_field"
        assert target.q == "nearest_neighbor"
    likelihood = gpflow.likelihoods.Gaussian()
    with pytest.raises(ValueError, match="`q` must be one of 'mean_field', 'nearest_neighbor'"):
        VNNGP(kernel(), likelihood, Z, 3, q="full")
    with pytest.raises(ValueError, match="`q` must be one of"):
        VNNGP(kernel(), likelihood, Z, 3, q=None)
    with pytest.raises(ValueError, match="needs `q='nearest_neighbor'`"):
        VNNGP(kernel(), likelihood, Z, 3, q_sqrt_offdiag=np.zeros((12, 3, 1)))
    with pytest.raises(ValueError, match=r"\[M, K, L\] = \[12, 3, 1\]"):
        VNNGP(kernel(), likelihood, Z, 3, q="nearest_neighbor", q_sqrt_offdiag=np.zeros((12, 2, 1)))
    with pytest.raises(ValueError, match="finite"):
        VNNGP(
            kernel(),
            likelihood,
            Z,
            3,
            q="nearest_neighbor",
            q_sqrt_offdiag=np.full((12, 3, 1), np.nan),
        )
