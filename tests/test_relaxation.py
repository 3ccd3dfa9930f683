"""The relaxation objects against their formulas (Bui, Ashman & Turner 2025, eq. 8-9)."""

import gpflow
import numpy as np
import pytest
import tensorflow as tf
from scipy import optimize, stats

from gpflow_tight import ExactProbit, TightSVGP
from gpflow_tight.relaxation import (
    BetaRelaxation,
    FreeRelaxation,
    NoRelaxation,
    OptimalRelaxation,
    SampledOptimalRelaxation,
    as_relaxation,
    conditional_relaxation_term,
    initial_beta,
    relaxation_from_beta,
)


def generic_term(m, d, noise):
    """-½Σ m d/σ² + ½Σ(1 + log m - m), written from eq. 8 with a Gaussian likelihood."""
    return -0.5 * np.sum(m * d / noise) + 0.5 * np.sum(1 + np.log(m) - m)


def test_relaxation_from_beta(rng):
    d = rng.uniform(0, 2, (7, 3))
    beta = rng.uniform(0.1, 1, 3)
    np.testing.assert_allclose(relaxation_from_beta(d, beta), beta / (d + beta), rtol=1e-15)


def test_conditional_relaxation_term(rng):
    m = rng.uniform(0.01, 3, (9, 2))
    expected = 0.5 * np.sum(1 + np.log(m) - m)
    np.testing.assert_allclose(conditional_relaxation_term(m), expected, rtol=1e-14)
    assert conditional_relaxation_term(np.ones(4)).numpy() == 0.0
    assert conditional_relaxation_term(m).numpy() < 0.0  # 1 + log m - m <= 0


def test_residual_terms_against_the_generic_formula(rng):
    d = rng.uniform(0, 3, (11, 1))
    noise = rng.uniform(0.05, 0.5, (11, 1))
    beta = BetaRelaxation(0.3)
    free = FreeRelaxation(11)
    free.m.assign(rng.uniform(0.1, 2, (11, 1)))
    cases = {
        "none": (NoRelaxation(), np.ones_like(d)),
        "optimal": (OptimalRelaxation(), noise / (d + noise)),
        "beta": (beta, 0.3 / (d + 0.3)),
        "free": (free, free.m.numpy()),
    }
    for name, (relaxation, m) in cases.items():
        value = relaxation.gaussian_residual_term(d, noise).numpy()
        np.testing.assert_allclose(value, generic_term(m, d, noise), rtol=1e-13, err_msg=name)
        np.testing.assert_allclose(relaxation.weights(d, noise), m, rtol=1e-15, err_msg=name)
    # the optimum: -½Σ log(1 + d/σ²), and no other m does better
    optimal = cases["optimal"][0].gaussian_residual_term(d, noise).numpy()
    np.testing.assert_allclose(optimal, -0.5 * np.sum(np.log1p(d / noise)), rtol=1e-14)
    for name in ("none", "beta", "free"):
        assert cases[name][0].gaussian_residual_term(d, noise).numpy() <= optimal


def test_sampled_relaxation_averages_over_samples(rng):
    d = rng.uniform(0, 3, (4 * 6, 1))
    relaxation = SampledOptimalRelaxation(num_samples=4)
    expected = -0.5 * np.sum(np.log1p(d / 0.2)) / 4
    value = relaxation.gaussian_residual_term(d, np.full_like(d, 0.2)).numpy()
    np.testing.assert_allclose(value, expected, rtol=1e-14)


def test_round_off_residual_gives_a_zero_term():
    d = np.zeros((3, 1))
    assert OptimalRelaxation().gaussian_residual_term(d, np.ones_like(d)).numpy() == 0.0


def test_free_relaxation_refuses_a_batch_of_the_wrong_size():
    free = FreeRelaxation(5)
    with pytest.raises(ValueError, match="whole training set.*relaxation='beta'.*got 3 rows"):
        free.weights(tf.zeros([3, 1], tf.float64))
    # a batch size unknown when tracing: a graph assertion that runs before the broadcast
    weights = tf.function(free.weights, input_signature=[tf.TensorSpec([None, 1], tf.float64)])
    with pytest.raises(tf.errors.InvalidArgumentError, match="whole training set"):
        weights(tf.zeros([3, 1], tf.float64))
    np.testing.assert_allclose(weights(tf.zeros([5, 1], tf.float64)), free.m.numpy(), rtol=0)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(relaxation="bogus"), "must be one of 'none', 'beta'"),
        (dict(relaxation="optimal", beta=0.1), "only used with relaxation='beta'"),
        (dict(relaxation="beta", num_samples=3), "only used with relaxation='sampled'"),
        (dict(relaxation=SampledOptimalRelaxation()), "cannot use a SampledOptimalRelaxation"),
        (dict(relaxation=BetaRelaxation(0.1), beta=0.2), "to the relaxation object"),
        (dict(relaxation=BetaRelaxation([0.1, 0.2], 2)), "2 values of beta"),
        (dict(relaxation="free"), "pass `num_data`"),
    ],
)
def test_as_relaxation_refuses_what_a_model_cannot_honour(kwargs, match):
    with pytest.raises(ValueError, match=match):
        as_relaxation(
            allowed=("none", "beta", "free", "optimal"), model="M", num_latent=3, **kwargs
        )


def test_relaxations_are_modules_with_their_parameters():
    beta = as_relaxation("beta", allowed=("beta",), model="M", num_latent=2, beta=[0.1, 0.2])
    assert isinstance(beta, gpflow.base.Module)
    assert [v.name for v in beta.trainable_variables] == ["beta:0"] or len(
        beta.trainable_variables
    ) == 1
    np.testing.assert_allclose(beta.beta.numpy(), [0.1, 0.2])


def observed_information_at_zero(likelihood, y, latent=0, num_latent=1, h=1e-4):
    """-d²/df² log p(y | f) at f = 0 for each y, by central differences of GPflow's log_prob."""
    y = np.asarray(y, dtype=float).reshape(-1, 1)
    if isinstance(likelihood, gpflow.likelihoods.Softmax):
        y = y.astype(np.int64)

    def log_prob(shift):
        F = np.zeros((len(y), num_latent))
        F[:, latent] = shift
        return likelihood.log_prob(np.zeros((len(y), 1)), F, y).numpy()

    return -(log_prob(h) - 2 * log_prob(0.0) + log_prob(-h)) / h**2


def student_t_quantiles(num, df, scale):
    return stats.t.ppf((np.arange(num) + 0.5) / num, df, scale=scale)


def fisher_information_at_zero(likelihood):
    """E_y[-d²/df² log p(y | f)] at f = 0 (latent 0), the expectation under p(y | f = 0)."""
    if isinstance(likelihood, gpflow.likelihoods.Bernoulli):
        p1 = likelihood.invlink(tf.zeros([], tf.float64)).numpy()
        info = observed_information_at_zero(likelihood, [0.0, 1.0])
        return (1 - p1) * info[0] + p1 * info[1]
    if isinstance(likelihood, gpflow.likelihoods.Poisson):
        counts = np.arange(60)
        rate = likelihood.binsize * likelihood.invlink(tf.zeros([], tf.float64)).numpy()
        pmf = stats.poisson.pmf(counts, rate)
        return np.sum(pmf * observed_information_at_zero(likelihood, counts))
    if isinstance(likelihood, gpflow.likelihoods.Softmax):
        C = likelihood.num_classes
        return np.mean(observed_information_at_zero(likelihood, np.arange(C), 0, C))
    if isinstance(likelihood, gpflow.likelihoods.StudentT):
        scale = likelihood.scale.numpy()
        y = student_t_quantiles(20_000, likelihood.df, scale)
        return np.mean(observed_information_at_zero(likelihood, y, h=1e-3))
    assert isinstance(likelihood, gpflow.likelihoods.Gaussian)
    return np.mean(observed_information_at_zero(likelihood, [-1.0, 0.0, 2.0]))


LIKELIHOODS = {
    "gaussian": lambda: gpflow.likelihoods.Gaussian(0.3),
    "probit": gpflow.likelihoods.Bernoulli,
    "exact probit": ExactProbit,
    "logistic": lambda: gpflow.likelihoods.Bernoulli(invlink=tf.sigmoid),
    "poisson": gpflow.likelihoods.Poisson,
    "poisson binned": lambda: gpflow.likelihoods.Poisson(binsize=2.5),
    "softmax": lambda: gpflow.likelihoods.Softmax(4),
    "student-t": lambda: gpflow.likelihoods.StudentT(scale=0.7, df=4.0),
}


@pytest.mark.parametrize("name", LIKELIHOODS)
def test_initial_beta_is_the_inverse_fisher_information_at_zero(name):
    likelihood = LIKELIHOODS[name]()
    expected = 1.0 / fisher_information_at_zero(likelihood)
    np.testing.assert_allclose(initial_beta(likelihood), expected, rtol=1e-5)


def test_initial_beta_falls_back_to_one():
    assert initial_beta(gpflow.likelihoods.MultiClass(3)) == 1.0  # robust max: no curvature at 0
    assert initial_beta(gpflow.likelihoods.Beta()) == 1.0  # no rule registered
    heteroscedastic = gpflow.likelihoods.Gaussian(variance=gpflow.functions.Linear())
    assert initial_beta(heteroscedastic) == 1.0


@pytest.mark.parametrize("name", ["probit", "exact probit", "logistic", "poisson", "student-t"])
def test_initial_beta_maximises_the_tight_bound_at_the_prior(name, rng):
    """
    With q(f_n) at the prior mean 0 and a small conditional variance d (the inducing point far
    away), the bound's best shared beta is 1 / (mean observed information at 0) up to O(d).
    """
    likelihood, num, d = LIKELIHOODS[name](), 400, 1e-3
    if name == "student-t":  # y at quantiles of p(y | f = 0): the mean is the Fisher information
        Y = student_t_quantiles(num, likelihood.df, likelihood.scale.numpy())[:, None]
    elif name == "poisson":
        Y = rng.poisson(1.0, (num, 1)).astype(float)
    else:
        Y = rng.integers(0, 2, (num, 1)).astype(float)
    X = rng.uniform(-1, 1, (num, 1))
    kernel = gpflow.kernels.SquaredExponential(variance=d, lengthscales=0.1)
    model = TightSVGP(kernel, likelihood, np.array([[100.0]]))  # d_n = k(x, x) = d

    def negative_bound(log_beta):
        model.beta.assign([np.exp(log_beta)])
        return -model.elbo((X, Y)).numpy()

    default = float(initial_beta(likelihood))
    np.testing.assert_allclose(model.beta.numpy(), [default])
    best = optimize.minimize_scalar(
        negative_bound,
        bounds=(np.log(default) - 3, np.log(default) + 3),
        method="bounded",
        options=dict(xatol=1e-6),
    )
    np.testing.assert_allclose(np.exp(best.x), default, rtol=3e-3)  # O(d) = 1e-3 apart


def test_models_start_at_initial_beta_and_users_can_register_a_rule():
    Z = np.zeros((3, 1))
    kernel = gpflow.kernels.SquaredExponential()
    softmax = TightSVGP(kernel, gpflow.likelihoods.Softmax(10), Z, num_latent_gps=10)
    np.testing.assert_allclose(softmax.beta.numpy(), np.full(10, 100 / 9))
    logistic = TightSVGP(kernel, gpflow.likelihoods.Bernoulli(invlink=tf.sigmoid), Z)
    np.testing.assert_allclose(logistic.beta.numpy(), [4.0])
    explicit = TightSVGP(kernel, gpflow.likelihoods.Bernoulli(invlink=tf.sigmoid), Z, beta=0.5)
    np.testing.assert_allclose(explicit.beta.numpy(), [0.5])

    class Exotic(gpflow.likelihoods.Exponential):
        pass

    initial_beta.register(Exotic)(lambda likelihood: 7.0)
    np.testing.assert_allclose(TightSVGP(kernel, Exotic(), Z).beta.numpy(), [7.0])
    np.testing.assert_allclose(TightSVGP(kernel, gpflow.likelihoods.Exponential(), Z).beta, [1.0])
