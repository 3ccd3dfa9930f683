"""The conftest's AutoGraph check catches a function AutoGraph cannot transform."""

from pathlib import Path

import tensorflow as tf

from tests.autograph_check import AUTOGRAPH_FALLBACK, catch_autograph_fallbacks

DELIBERATE_FALLBACK = """
import tensorflow as tf


def test_two_lambdas_on_one_line():
    # AutoGraph finds two lambdas with the same signature on this line and gives up
    pair = (lambda x: x * 2.0, lambda x: x * 3.0)
    assert tf.function(pair[1])(tf.constant(1.0)).numpy() == 3.0


def test_convertible_function():
    @tf.function
    def f(x):
        return x * 2.0 if x > 0 else -x

    assert f(tf.constant(-1.0)).numpy() == 1.0
"""


def untransformable_call() -> float:
    pair = (lambda x: x * 2.0, lambda x: x * 3.0)  # AutoGraph cannot tell the two apart
    return float(tf.function(pair[1])(tf.constant(1.0)))


def test_detection_helper_catches_a_deliberate_fallback(fail_on_autograph_fallback):
    with catch_autograph_fallbacks() as messages:
        assert untransformable_call() == 3.0  # the function still ran, as plain Python
    assert len(messages) == 1 and messages[0].startswith(AUTOGRAPH_FALLBACK), messages
    assert "<lambda>" in messages[0]
    # the autouse fixture saw it too; clear it, as this fallback is the point of the test
    assert fail_on_autograph_fallback == messages
    fail_on_autograph_fallback.clear()


def test_detection_helper_ignores_a_convertible_function():
    @tf.function
    def f(x):
        return x * 2.0 if x > 0 else -x  # tensor-dependent control flow, converted

    with catch_autograph_fallbacks() as messages:
        assert f(tf.constant(-1.0)).numpy() == 1.0
    assert messages == []


def test_conftest_fails_the_test_that_falls_back(pytester, fail_on_autograph_fallback):
    pytester.makeconftest((Path(__file__).parent / "conftest.py").read_text())
    pytester.makepyfile(test_sandbox=DELIBERATE_FALLBACK)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    # the fallback test is reported as an error at its teardown, with TensorFlow's message
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_two_lambdas_on_one_line*",
            f"*{AUTOGRAPH_FALLBACK} <function test_two_lambdas_on_one_line.<locals>.<lambda>*",
        ]
    )
    fail_on_autograph_fallback.clear()  # the sandbox's fallback also reached this test's check
