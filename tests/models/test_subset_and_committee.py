"""
SoD and the BCM family against independent references: GPR on the chosen rows, a brute-force
numpy greedy selection (every posterior recomputed from scratch, O(N M^3)), PITC with the
pseudo-inputs at the query points (spec/powerep.md property 22), and the combination rules of
Tresp (2000) and Deisenroth & Ng (2015) written densely in numpy.
"""

import gpflow
import numpy as np
import pytest
import tensorflow as tf

from gpflow_tight import BCM, PITC, SoD
from gpflow_tight.models.subset_of_data import greedy_active_set
from tests.reference import log_gauss, se_kernel

VARIANCE, LENGTHSCALE, NOISE = 1.3, 0.7, 0.05
COMBINATIONS = ["bcm", "rbcm", "poe", "gpoe"]


def make_problem(rng, num_data=40, num_outputs=1):
    X = rng.uniform(-3, 3, (num_data, 2))
    Y = np.sin(X[:, :1]) * np.cos(X[:, 1:]) + 0.2 * rng.standard_normal((num_data, num_outputs))
    return X, Y


def kernel():
    return gpflow.kernels.SquaredExponential(variance=VARIANCE, lengthscales=LENGTHSCALE)


def gpr(X, Y, **kwargs):
    return gpflow.models.GPR((X, Y), kernel(), noise_variance=NOISE, **kwargs)


PARTS = [np.arange(0, 12), np.arange(12, 20), np.arange(20, 40)]  # unequal sizes


# ------------------------------------------------------------------------------------------------
# numpy references


def expert_predictions(X, Y, Xnew, parts, mean=0.0):
    """Each expert's exact GP posterior of f - mean at Xnew: (mean [N*, P], cov [N*, N*])."""
    Kss = se_kernel(Xnew, Xnew, VARIANCE, LENGTHSCALE)
    out = []
    for rows in parts:
        Kbb = se_kernel(X[rows], X[rows], VARIANCE, LENGTHSCALE) + NOISE * np.eye(len(rows))
        Ksb = se_kernel(Xnew, X[rows], VARIANCE, LENGTHSCALE)
        out.append(
            (Ksb @ np.linalg.solve(Kbb, Y[rows] - mean), Kss - Ksb @ np.linalg.solve(Kbb, Ksb.T))
        )
    return out


def marginal_rule(combination, experts, prior_var):
    """Deisenroth & Ng (2015): PoE eqs. 11-12, gPoE eqs. 13-14 (β = 1/p), BCM eqs. 17-18,
    rBCM eqs. 20-21 (β_k = ½(log σ**² - log σ_k²)), each query point alone."""
    p = len(experts)
    means = np.stack([m for m, _ in experts])  # [p, N*, P]
    variances = np.stack([np.diag(c) for _, c in experts])  # [p, N*]
    if combination == "poe":
        beta, prior_weight = np.ones_like(variances), 0.0
    elif combination == "gpoe":
        beta, prior_weight = np.full_like(variances, 1.0 / p), 0.0
    elif combination == "bcm":
        beta, prior_weight = np.ones_like(variances), 1.0 - p
    else:
        beta = 0.5 * (np.log(prior_var)[None] - np.log(variances))
        prior_weight = 1.0 - beta.sum(0)
    precision = np.sum(beta / variances, axis=0) + prior_weight / prior_var
    var = 1.0 / precision
    mean = var[:, None] * np.sum((beta / variances)[..., None] * means, axis=0)
    return mean, var


def joint_bcm(experts, Kss):
    """Tresp (2000), eqs. 4-5 (lecture notes §4.4)."""
    precision = -(len(experts) - 1) * np.linalg.inv(Kss)
    shift = 0.0
    for mean, cov in experts:
        precision = precision + np.linalg.inv(cov)
        shift = shift + np.linalg.solve(cov, mean)
    cov = np.linalg.inv(precision)
    return cov @ shift, cov


def brute_force_greedy(X, Y, size, criterion, noise, working_set_size=None, seed=0, mean=0.0):
    """Algorithm 8.1 with every posterior recomputed from scratch (O(N M^3) per step)."""
    K = se_kernel(X, X, VARIANCE, LENGTHSCALE)
    R = Y - mean
    rng = np.random.default_rng(seed)

    def posterior(active, j):  # mean [P] and variance of f_j - m given the observed rows
        if not active:
            return np.zeros(R.shape[1]), K[j, j]
        A = K[np.ix_(active, active)] + noise * np.eye(len(active))
        k = K[active, j]
        return k @ np.linalg.solve(A, R[active]), K[j, j] - k @ np.linalg.solve(A, k)

    chosen = []
    for _ in range(size):
        remaining = np.array([j for j in range(len(X)) if j not in chosen])
        J = remaining
        if working_set_size is not None and working_set_size < len(remaining):
            J = np.sort(rng.choice(remaining, working_set_size, replace=False))
        scores = []
        for j in J:
            m, s = posterior(chosen, j)
            m_new, s_new = posterior(chosen + [j], j)
            if criterion == "entropy":  # H = ½ log(2πe s)
                scores.append(
                    0.5 * np.log(2 * np.pi * np.e * s) - 0.5 * np.log(2 * np.pi * np.e * s_new)
                )
            else:  # KL(N(m_new, s_new) || N(m, s)) per output column, summed
                kl = 0.5 * (s_new / s + (m_new - m) ** 2 / s - 1 - np.log(s_new / s))
                scores.append(np.sum(kl))
        chosen.append(int(J[int(np.argmax(scores))]))
    return np.array(chosen)


# ------------------------------------------------------------------------------------------------
# BCM


@pytest.mark.parametrize("combination", ["bcm", "poe", "gpoe"])
def test_one_expert_is_gpr(rng, combination):
    """With p = 1 the BCM's prior correction vanishes and the PoE weights are 1 (the rBCM's
    β = ½ log(σ**²/σ_1²) is not, so it is not GPR: tested against its formula below)."""
    X, Y = make_problem(rng, num_outputs=2)
    Xnew = rng.uniform(-3, 3, (5, 2))
    mean_function = gpflow.mean_functions.Constant(0.3)
    model = BCM(
        (X, Y),
        kernel(),
        1,
        noise_variance=NOISE,
        mean_function=mean_function,
        combination=combination,
    )
    reference = gpr(X, Y, mean_function=gpflow.mean_functions.Constant(0.3))
    np.testing.assert_allclose(
        model.training_loss().numpy(), reference.training_loss().numpy(), rtol=1e-12
    )
    for ours, theirs in zip(model.predict_f(Xnew), reference.predict_f(Xnew)):
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-9, atol=1e-12)
    for ours, theirs in zip(model.predict_y(Xnew), reference.predict_y(Xnew)):
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-9, atol=1e-12)
    if combination == "bcm":
        for ours, theirs in zip(
            model.predict_f(Xnew, full_cov=True), reference.predict_f(Xnew, full_cov=True)
        ):
            np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-9, atol=1e-12)


def test_bcm_is_pitc_with_pseudo_inputs_at_the_query_points(rng):
    """Property 22 on the class: joint BCM = PITC with Z = X*; each query point alone = PITC
    with Z = {x*}; both = the dense formulas of Tresp (2000)."""
    X, Y = make_problem(rng, num_data=30)
    Xnew = rng.uniform(-3, 3, (4, 2))
    parts = [np.arange(0, 10), np.arange(10, 20), np.arange(20, 30)]
    with gpflow.config.as_context(gpflow.config.Config(jitter=1e-10)):
        model = BCM((X, Y), kernel(), parts, noise_variance=NOISE)
        mean, cov = model.predict_f(Xnew, full_cov=True)
        pitc = PITC((X, Y), kernel(), Xnew, noise_variance=NOISE, blocks=parts)
        pitc_mean, pitc_cov = pitc.predict_f(Xnew, full_cov=True)
        marginal_mean, marginal_var = model.predict_f(Xnew)
        single = [
            PITC((X, Y), kernel(), Xnew[i : i + 1], noise_variance=NOISE, blocks=parts).predict_f(
                Xnew[i : i + 1]
            )
            for i in range(len(Xnew))
        ]
    np.testing.assert_allclose(mean.numpy(), pitc_mean.numpy(), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(cov.numpy(), pitc_cov.numpy(), rtol=1e-8, atol=1e-10)
    dense_mean, dense_cov = joint_bcm(
        expert_predictions(X, Y, Xnew, parts), se_kernel(Xnew, Xnew, VARIANCE, LENGTHSCALE)
    )
    np.testing.assert_allclose(mean.numpy(), dense_mean, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(cov.numpy()[0], dense_cov, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(
        marginal_mean.numpy(), np.concatenate([m.numpy() for m, _ in single]), rtol=1e-6
    )
    np.testing.assert_allclose(
        marginal_var.numpy(), np.concatenate([v.numpy() for _, v in single]), rtol=1e-6
    )


@pytest.mark.parametrize("combination", COMBINATIONS)
def test_marginal_rules_equal_the_papers_formulas(rng, combination):
    X, Y = make_problem(rng, num_outputs=2)
    Xnew = np.concatenate([rng.uniform(-3, 3, (5, 2)), [[9.0, 9.0]]])  # one far from the data
    model = BCM(
        (X, Y),
        kernel(),
        PARTS,
        noise_variance=NOISE,
        mean_function=gpflow.mean_functions.Constant(0.4),
        combination=combination,
    )
    mean, var = model.predict_f(Xnew)
    experts = expert_predictions(X, Y, Xnew, PARTS, mean=0.4)
    ref_mean, ref_var = marginal_rule(combination, experts, np.full(len(Xnew), VARIANCE))
    np.testing.assert_allclose(mean.numpy(), ref_mean + 0.4, rtol=1e-9)
    np.testing.assert_allclose(var.numpy(), np.tile(ref_var[:, None], [1, 2]), rtol=1e-9)
    y_mean, y_var = model.predict_y(Xnew)
    np.testing.assert_allclose(y_var.numpy(), var.numpy() + NOISE, rtol=1e-12)
    Ynew = rng.standard_normal((len(Xnew), 2))
    log_density = -0.5 * np.log(2 * np.pi * y_var) - 0.5 * (Ynew - y_mean) ** 2 / y_var
    np.testing.assert_allclose(
        model.predict_log_density((Xnew, Ynew)).numpy(), log_density.numpy().sum(-1), rtol=1e-10
    )
    if combination != "bcm":
        with pytest.raises(ValueError, match="full_cov"):
            model.predict_f(Xnew, full_cov=True)


def test_objective_is_the_sum_of_the_experts_log_marginal_likelihoods(rng):
    X, Y = make_problem(rng, num_outputs=2)
    model = BCM((X, Y), kernel(), PARTS, noise_variance=NOISE)
    dense = sum(
        log_gauss(
            Y[rows], se_kernel(X[rows], X[rows], VARIANCE, LENGTHSCALE) + NOISE * np.eye(len(rows))
        )
        for rows in PARTS
    )
    np.testing.assert_allclose(model.log_marginal_likelihood().numpy(), dense, rtol=1e-12)
    np.testing.assert_allclose(model.training_loss().numpy(), -dense, rtol=1e-12)
    per_expert = sum(gpr(X[r], Y[r]).log_marginal_likelihood().numpy() for r in PARTS)
    np.testing.assert_allclose(
        model.maximum_log_likelihood_objective().numpy(), per_expert, rtol=1e-12
    )


@pytest.mark.parametrize("split", ["kmeans", "random"])
@pytest.mark.parametrize("num_experts", [1, 3, 7, 40])
def test_int_partition_splits_and_covers_every_row_once(rng, split, num_experts):
    X, Y = make_problem(rng)
    model = BCM((X, Y), kernel(), num_experts, noise_variance=NOISE, split=split, seed=3)
    parts = model.partition
    assert model.num_experts == len(parts) == num_experts
    np.testing.assert_array_equal(np.sort(np.concatenate(parts)), np.arange(len(X)))
    sizes = [len(part) for part in parts]
    assert min(sizes) >= 1 and max(sizes) <= -(-len(X) // num_experts)
    if split == "random":
        assert max(sizes) - min(sizes) <= 1
    again = BCM((X, Y), kernel(), num_experts, noise_variance=NOISE, split=split, seed=3)
    for a, b in zip(parts, again.partition):
        np.testing.assert_array_equal(a, b)


def test_bcm_checkpoint_round_trip_and_compiled_functions(rng, tmp_path):
    X, Y = make_problem(rng)
    Xnew = rng.uniform(-3, 3, (5, 2))
    model = BCM((X, Y), kernel(), 3, noise_variance=0.2)
    before = model.training_loss().numpy()
    gpflow.optimizers.Scipy().minimize(
        model.training_loss, model.trainable_variables, options=dict(maxiter=3), compile=False
    )
    assert model.training_loss().numpy() < before
    path = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    restored = BCM((X, Y), kernel(), 3, noise_variance=1.0)
    tf.train.Checkpoint(model=restored).read(path).assert_consumed()
    for ours, theirs in zip(restored.predict_f(Xnew), model.predict_f(Xnew)):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())

    def everything(X):
        return model.training_loss(), model.predict_f(X), model.predict_f(X, full_cov=True)

    # graph mode without AutoGraph: the model has no tensor-dependent Python control flow, and
    # AutoGraph's conversion of check_shapes' wrappers costs tens of seconds on a loaded
    # 2-core machine (as it does for GPR's predict_f)
    compiled = tf.function(everything, autograph=False)(Xnew)
    eager = everything(Xnew)
    np.testing.assert_allclose(compiled[0].numpy(), eager[0].numpy(), rtol=1e-12)
    for ours, theirs in zip(compiled[1] + compiled[2], eager[1] + eager[2]):
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-10, atol=1e-13)


def test_bcm_float32(rng):
    X, Y = make_problem(rng)
    Xnew = rng.uniform(-3, 3, (5, 2))
    expected = BCM((X, Y), kernel(), PARTS, noise_variance=NOISE).predict_f(Xnew, full_cov=True)
    with gpflow.config.as_context(gpflow.config.Config(float=np.float32, jitter=1e-5)):
        model = BCM(
            (X.astype(np.float32), Y.astype(np.float32)), kernel(), PARTS, noise_variance=NOISE
        )
        mean, cov = model.predict_f(Xnew.astype(np.float32), full_cov=True)
        loss = model.training_loss()
    assert mean.dtype == cov.dtype == loss.dtype == tf.float32
    np.testing.assert_allclose(mean.numpy(), expected[0].numpy(), atol=2e-3)
    np.testing.assert_allclose(cov.numpy(), expected[1].numpy(), atol=2e-3)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(partition=[np.arange(0, 20), np.arange(15, 40)]), ValueError, "`partition`.*several"),
        (dict(partition=[np.arange(0, 20), np.arange(21, 40)]), ValueError, "`partition`.*none"),
        (dict(partition=[np.arange(0, 41)]), ValueError, "`partition` holds indices"),
        (dict(partition=[np.arange(20) + 0.5, np.arange(20, 40)]), TypeError, "integer row"),
        (dict(partition=[np.arange(40) < 20, np.arange(40) >= 20]), TypeError, "integer row"),
        (dict(partition=41), ValueError, "`partition`.*between 1 and N"),
        (dict(partition=0), ValueError, "`partition`.*between 1 and N"),
        (dict(partition=True), TypeError, "`partition`"),
        (dict(partition="two"), TypeError, "`partition`"),
        (dict(partition=2, combination="median"), ValueError, "`combination` must be one of"),
        (dict(partition=2, split="spectral"), ValueError, "`split` must be one of"),
        (dict(partition=2, noise_variance=-1.0), ValueError, "noise_variance"),
        (dict(partition=2, likelihood=gpflow.likelihoods.StudentT()), TypeError, "Gaussian"),
    ],
)
def test_bcm_bad_inputs(rng, kwargs, error, match):
    X, Y = make_problem(rng)
    with pytest.raises(error, match=match):
        BCM((X, Y), kernel(), **kwargs)


def test_bcm_bad_prediction_inputs(rng):
    X, Y = make_problem(rng)
    model = BCM((X, Y), kernel(), 2, noise_variance=NOISE)
    with pytest.raises(ValueError, match="Xnew"):
        model.predict_f(np.zeros((3, 3)))
    with pytest.raises(ValueError, match="Xnew"):
        model.predict_f(np.full((3, 2), np.nan))
    with pytest.raises(AttributeError, match="combination"):
        model.combination = "poe"


# ------------------------------------------------------------------------------------------------
# SoD


def test_random_sod_is_gpr_on_its_rows(rng):
    X, Y = make_problem(rng, num_outputs=2)
    Xnew = rng.uniform(-3, 3, (5, 2))
    model = SoD((X, Y), kernel(), noise_variance=NOISE, active_set_size=12, seed=4)
    rows = model.active_set
    assert rows.dtype == np.int64 and len(np.unique(rows)) == len(rows) == 12
    np.testing.assert_array_equal(
        rows, np.sort(np.random.default_rng(4).choice(40, 12, replace=False))
    )
    reference = gpr(X[rows], Y[rows])
    np.testing.assert_allclose(
        model.training_loss().numpy(), reference.training_loss().numpy(), rtol=1e-12
    )
    np.testing.assert_allclose(
        model.log_marginal_likelihood().numpy(),
        log_gauss(Y[rows], se_kernel(X[rows], X[rows], VARIANCE, LENGTHSCALE) + NOISE * np.eye(12)),
        rtol=1e-12,
    )
    for full_cov in (False, True):
        for ours, theirs in zip(
            model.predict_f(Xnew, full_cov=full_cov), reference.predict_f(Xnew, full_cov=full_cov)
        ):
            np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-12)
    for ours, theirs in zip(model.posterior().predict_f(Xnew), reference.predict_f(Xnew)):
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-10)
    Ynew = rng.standard_normal((5, 2))
    np.testing.assert_allclose(
        model.predict_log_density((Xnew, Ynew)).numpy(),
        reference.predict_log_density((Xnew, Ynew)).numpy(),
        rtol=1e-12,
    )


@pytest.mark.parametrize("selection", ["entropy", "information_gain"])
def test_sod_with_every_row_is_gpr(rng, selection):
    X, Y = make_problem(rng, num_data=20)
    model = SoD((X, Y), kernel(), noise_variance=NOISE, active_set_size=20, selection=selection)
    np.testing.assert_array_equal(np.sort(model.active_set), np.arange(20))
    np.testing.assert_allclose(
        model.training_loss().numpy(), gpr(X, Y).training_loss().numpy(), rtol=1e-10
    )


@pytest.mark.parametrize("selection", ["entropy", "information_gain"])
@pytest.mark.parametrize("working_set_size", [None, 7])
def test_greedy_selection_equals_brute_force(rng, selection, working_set_size):
    X, Y = make_problem(rng, num_outputs=2)
    mean_function = gpflow.mean_functions.Constant(0.2)
    model = SoD(
        (X, Y),
        kernel(),
        mean_function=mean_function,
        noise_variance=NOISE,
        active_set_size=10,
        selection=selection,
        working_set_size=working_set_size,
        seed=5,
    )
    expected = brute_force_greedy(X, Y, 10, selection, NOISE, working_set_size, seed=5, mean=0.2)
    np.testing.assert_array_equal(model.active_set, expected)
    assert len(np.unique(model.active_set)) == 10
    reference = gpflow.models.GPR(
        (X[expected], Y[expected]),
        kernel(),
        mean_function=gpflow.mean_functions.Constant(0.2),
        noise_variance=NOISE,
    )
    np.testing.assert_allclose(
        model.training_loss().numpy(), reference.training_loss().numpy(), rtol=1e-12
    )


def test_greedy_pass_factorises_no_matrix(rng):
    """The O(N M^2) update: one kernel column per selected point and nothing recomputed."""
    X, _ = make_problem(rng)
    K = se_kernel(X, X, VARIANCE, LENGTHSCALE)
    calls = []

    def column(i):
        calls.append(i)
        return K[:, i]

    noise = np.full(len(X), NOISE)
    chosen = greedy_active_set(column, np.diag(K), np.zeros((40, 1)), noise, 15, "entropy")
    assert calls == chosen.tolist()


def test_reselect_follows_the_hyperparameters_and_compiled_functions_follow_it(rng, tmp_path):
    X, Y = make_problem(rng)
    Xnew = rng.uniform(-3, 3, (5, 2))
    model = SoD((X, Y), kernel(), noise_variance=NOISE, active_set_size=8, selection="entropy")
    compiled = tf.function(model.predict_f, autograph=False)  # see the BCM test above
    compiled(Xnew)
    model.kernel.lengthscales.assign(2.5)
    first = model.active_set
    chosen = model.reselect()
    fresh = SoD(
        (X, Y),
        gpflow.kernels.SquaredExponential(variance=VARIANCE, lengthscales=2.5),
        noise_variance=NOISE,
        active_set_size=8,
        selection="entropy",
    )
    np.testing.assert_array_equal(chosen, fresh.active_set)
    assert not np.array_equal(first, chosen)
    for ours, theirs in zip(compiled(Xnew), fresh.predict_f(Xnew)):
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-12)

    path = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    restored = SoD((X, Y), kernel(), noise_variance=1.0, active_set_size=8, seed=9)
    tf.train.Checkpoint(model=restored).read(path).assert_consumed()
    np.testing.assert_array_equal(restored.active_set, chosen)
    for ours, theirs in zip(restored.predict_f(Xnew), model.predict_f(Xnew)):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_sod_trains_with_scipy_and_float32(rng):
    X, Y = make_problem(rng)
    model = SoD((X, Y), kernel(), noise_variance=0.3, active_set_size=10, selection="entropy")
    before = model.training_loss().numpy()
    gpflow.optimizers.Scipy().minimize(
        model.training_loss, model.trainable_variables, options=dict(maxiter=3), compile=False
    )
    assert model.training_loss().numpy() < before
    expected = SoD((X, Y), kernel(), noise_variance=NOISE, active_set_size=10, selection="entropy")
    with gpflow.config.as_context(gpflow.config.Config(float=np.float32, jitter=1e-5)):
        model = SoD(
            (X.astype(np.float32), Y.astype(np.float32)),
            kernel(),
            noise_variance=NOISE,
            active_set_size=10,
            selection="entropy",
        )
        mean, var = model.predict_f(X[:5].astype(np.float32))
    np.testing.assert_array_equal(model.active_set, expected.active_set)
    assert mean.dtype == var.dtype == tf.float32
    np.testing.assert_allclose(mean.numpy(), expected.predict_f(X[:5])[0].numpy(), atol=1e-3)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(active_set_size=41), ValueError, r"`active_set_size` must be at least 1 and at most"),
        (dict(active_set_size=0), ValueError, r"`active_set_size` must be at least 1 and at most"),
        (dict(active_set_size=2.5), TypeError, "`active_set_size` must be an int"),
        (dict(active_set_size=5, selection="variance"), ValueError, "`selection` must be one of"),
        (dict(active_set_size=5, working_set_size=41), ValueError, "`working_set_size`"),
        (dict(active_set_size=5, noise_variance=0.0), ValueError, "noise_variance"),
        (
            dict(active_set_size=5, noise_variance=0.1, likelihood=gpflow.likelihoods.Gaussian()),
            ValueError,
            "either `likelihood` or `noise_variance`",
        ),
    ],
)
def test_sod_bad_inputs(rng, kwargs, error, match):
    X, Y = make_problem(rng)
    with pytest.raises(error, match=match):
        SoD((X, Y), kernel(), **kwargs)
