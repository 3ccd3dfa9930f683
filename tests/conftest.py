"""Test habits copied from GPflow: shape checks forced on, fixed seeds."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import gpflow  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from check_shapes import ShapeCheckingState, get_enable_check_shapes, set_enable_check_shapes  # noqa: E402


@pytest.fixture(autouse=True)
def enable_shape_checks():
    old = get_enable_check_shapes()
    set_enable_check_shapes(ShapeCheckingState.ENABLED)
    yield
    set_enable_check_shapes(old)


@pytest.fixture(autouse=True)
def float64_and_default_jitter():
    gpflow.config.set_default_float(np.float64)
    gpflow.config.set_default_jitter(1e-6)
    yield
    gpflow.config.set_default_float(np.float64)
    gpflow.config.set_default_jitter(1e-6)


@pytest.fixture
def rng():
    return np.random.default_rng(20251121)
