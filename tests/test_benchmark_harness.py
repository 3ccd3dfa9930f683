"""The benchmark harness (``benchmarks/harness.py``): its self-test of the record, resume,
skip, render and two-process paths on a toy study in a temporary folder (no TensorFlow)."""

from pathlib import Path


def test_harness_selftest(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import harness

    harness.selftest()
