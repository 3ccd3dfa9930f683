"""The relaxation objects against their formulas (Bui, Ashman & Turner 2025, eq. 8-9)."""

import gpflow
import numpy as np
import pytest
import tensorflow as tf

from gpflow_tight.relaxation import (
    BetaRelaxation,
    FreeRelaxation,
    NoRelaxation,
    OptimalRelaxation,
    SampledOptimalRelaxation,
    as_relaxation,
    conditional_relaxation_term,
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
