import numpy as np
import pytest

from gpflow_tight.tighter import (
    conditional_relaxation_term,
    log_residual_term,
    relaxation_from_beta,
)


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


def test_log_residual_term_is_tighter_than_trace(rng):
    x = rng.uniform(0, 50, 11)
    value = log_residual_term(x).numpy()
    np.testing.assert_allclose(value, -0.5 * np.sum(np.log1p(x)), rtol=1e-14)
    assert value >= -0.5 * np.sum(x)


@pytest.mark.parametrize("tiny", [-1e-15, 0.0, 1e-300])
def test_log_residual_term_at_round_off(tiny):
    assert log_residual_term(np.array([tiny])).numpy() == pytest.approx(0.0, abs=1e-14)
