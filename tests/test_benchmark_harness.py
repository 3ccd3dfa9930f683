"""The benchmark harness (``benchmarks/harness.py``): its self-test of the record, resume,
skip, render and two-process paths on a toy study in a temporary folder (no TensorFlow), and
that every committed report is what its committed records render to."""

import importlib
import shutil
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
import harness  # noqa: E402


def test_harness_selftest():
    harness.selftest()


@pytest.mark.parametrize("name", harness.STUDIES)
def test_committed_report_renders_from_committed_records(name, tmp_path):
    study = importlib.import_module(name)
    for path in harness.RESULTS.glob(f"{study.NAME}*"):  # records, notes, figures
        shutil.copy(path, tmp_path / path.name)
    presets = [None, *getattr(study, "RENDER_PRESETS", ())]
    for preset in presets:
        argv = ["--render", "--out", str(tmp_path)] + (["--preset", preset] if preset else [])
        written = harness.main(study, argv)
        committed = harness.RESULTS / written.name
        assert written.read_text() == committed.read_text(), (
            f"{committed.name} is not what its records render to: "
            f"run `python benchmarks/{name}.py --render"
            + (f" --preset {preset}`" if preset else "`")
        )
