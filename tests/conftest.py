"""
Test habits: fixed seeds, float64 and GPflow's default jitter; shape checks as users have them
(GPflow's default: eager code only), and traced into compiled functions too in the tests marked
``graph_shape_checks`` (every model's compiled training step, in ``tests/test_every_model.py``).
GPflow's own tests force them on everywhere; tracing every test with every check costs most of
the suite's CPU time again, for annotations the eager calls of the same functions check.
Also: a test fails when AutoGraph silently falls back to running a function as plain Python
(``tests/autograph_check.py``).
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import gpflow  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from check_shapes import ShapeCheckingState, get_enable_check_shapes, set_enable_check_shapes  # noqa: E402

from tests.autograph_check import catch_autograph_fallbacks, failure_message  # noqa: E402

pytest_plugins = ["pytester"]  # tests/test_conftest.py runs a deliberate failure in a sandbox


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "graph_shape_checks: trace the shape checks into compiled functions too"
    )


@pytest.fixture(autouse=True)
def shape_checks(request):
    old = get_enable_check_shapes()
    in_graphs = request.node.get_closest_marker("graph_shape_checks") is not None
    set_enable_check_shapes(
        ShapeCheckingState.ENABLED if in_graphs else ShapeCheckingState.EAGER_MODE_ONLY
    )
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


@pytest.fixture(autouse=True)
def fail_on_autograph_fallback():
    """
    Fail the test (at teardown, with TensorFlow's message) if AutoGraph logged "could not
    transform" during it. Yields the list of messages, so that a test that triggers the
    fallback on purpose can inspect and clear it.
    """
    with catch_autograph_fallbacks() as messages:
        yield messages
    if messages:
        pytest.fail(failure_message(messages), pytrace=False)
