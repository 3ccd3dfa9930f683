"""
Run GPflow's own test files, unchanged, with gpflow-tight's drop-ins swapped in.

The test files come from GPflow's source distribution on the package index, for the GPflow
version that is installed (``pip download``; never committed). :func:`run` runs a selection of
them under one swap of :data:`gpflow_tight_swap.SWAPS` (or none) in a subprocess and returns
each test's outcome; :func:`broken_by` compares a swapped run with the unswapped one.
``python -m tests.integration.gpflow_suite.runner OUT.json`` writes the full report.
"""

import json
import os
import subprocess
import sys
import tarfile
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import gpflow

HERE = Path(__file__).resolve().parent

# GPflow's test files that build SGPR, SVGP, GPRFITC or BayesianGPLVM: the models, their
# posteriors and their use by the optimisers, utilities and integration tests.
FILES = [
    "tests/gpflow/models/test_cglb.py",
    "tests/gpflow/models/test_gplvm.py",
    "tests/gpflow/models/test_methods.py",
    "tests/gpflow/models/test_model_predict.py",
    "tests/gpflow/models/test_sgpr.py",
    "tests/gpflow/models/test_sgpr_posterior.py",
    "tests/gpflow/models/test_svgp.py",
    "tests/gpflow/models/test_svgp_posterior.py",
    "tests/gpflow/models/test_variational.py",
    "tests/gpflow/posteriors/test_bo_integration.py",
    "tests/gpflow/posteriors/test_posteriors.py",
    "tests/gpflow/optimizers/test_natural_gradient.py",
    "tests/gpflow/utilities/test_traversal.py",
    "tests/gpflow/test_base_training.py",
    "tests/gpflow/test_functions.py",
    "tests/gpflow/test_inducing_variables.py",
    "tests/gpflow/conditionals/test_multioutput.py",
    "tests/gpflow/conditionals/test_uncertain_conditional.py",
    "tests/gpflow/likelihoods/test_switched_likelihood.py",
    "tests/integration/test_dynamic_shapes.py",
    "tests/integration/test_linear_noise.py",
    "tests/integration/test_method_equivalence.py",
]

# The files `make test` runs (about 5 minutes for the unswapped run and the three core swaps on
# two cores): the model, optimiser, training and utility tests. The other seven (GPflow's posterior
# and conditional tests, the BO and method-equivalence integration tests) take about 50 minutes
# more; `make test-gpflow-full` (GPFLOW_TIGHT_GPFLOW_SUITE=full) runs all of FILES.
SLOW = {
    "tests/gpflow/models/test_svgp_posterior.py",
    "tests/gpflow/posteriors/test_bo_integration.py",
    "tests/gpflow/posteriors/test_posteriors.py",
    "tests/gpflow/conditionals/test_multioutput.py",
    "tests/gpflow/conditionals/test_uncertain_conditional.py",
    "tests/integration/test_linear_noise.py",
    "tests/integration/test_method_equivalence.py",
}

# The swaps `make test` runs: one per family of drop-ins, its most derived classes (TightSGPR,
# TightSVGP and TightBayesianGPLVM on RelaxedSGPR/RelaxedSVGP; VFE and FITC; TightSOLVEGPR and
# TightSOLVEGP on SOLVEGPR/SOLVEGP). "relaxed" and "solve", the same classes with the relaxation
# off (which tests/models check equal GPflow's SGPR/SVGP to round-off), run in the full suite.
CORE_SWAPS = ("tight", "power_ep", "tight_solve")


def _suite() -> str:
    suite = os.environ.get("GPFLOW_TIGHT_GPFLOW_SUITE", "core")
    if suite not in ("core", "full"):
        raise ValueError(f"GPFLOW_TIGHT_GPFLOW_SUITE must be 'core' or 'full', got {suite!r}.")
    return suite


def selected_files() -> list[str]:
    """All of :data:`FILES` if ``GPFLOW_TIGHT_GPFLOW_SUITE=full``, else those not in SLOW."""
    return list(FILES) if _suite() == "full" else [f for f in FILES if f not in SLOW]


def selected_swaps() -> list[str]:
    """Every swap if ``GPFLOW_TIGHT_GPFLOW_SUITE=full``, else :data:`CORE_SWAPS`."""
    return sorted(_swaps()) if _suite() == "full" else sorted(CORE_SWAPS)


def fetch_gpflow_tests(directory: Path) -> Path:
    """
    GPflow's test tree for the installed version, from its source distribution, unpacked under
    ``directory`` (reused when it is already there). Returns the unpacked source root.
    """
    version = gpflow.__version__
    root = directory / f"gpflow-{version}"
    if (root / "pytest.ini").exists():
        return root
    directory.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps"]
    command += ["--no-binary", ":all:", f"gpflow=={version}", "-d", str(directory)]
    result = subprocess.run(command, capture_output=True, text=True)
    archive = directory / f"gpflow-{version}.tar.gz"
    if result.returncode != 0 or not archive.exists():
        raise RuntimeError(
            f"Could not download GPflow {version}'s source distribution (its tests) from the "
            f"package index:\n{result.stderr}"
        )
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(f"gpflow-{version}/tests/")]
        tar.extractall(directory, members=members, filter="data")
    # The tests import `tests.gpflow...` from the source root, and the installed gpflow (the
    # sdist's own copy of the package is not unpacked). An ini file stops pytest from reading
    # any configuration above the root.
    (root / "tests" / "__init__.py").touch()
    (root / "pytest.ini").write_text("[pytest]\nfilterwarnings = ignore::DeprecationWarning\n")
    return root


def files_for(swap: str | None, root: Path, files: list[str] = FILES) -> list[str]:
    """The ``files`` that use a class the swap replaces (all of them for no swap)."""
    if not swap:
        return list(files)
    import gpflow_tight

    names = _swaps()[swap](gpflow_tight)
    return [f for f in files if any(name in (root / f).read_text() for name in names)]


def _swaps() -> dict[str, Any]:
    sys.path.insert(0, str(HERE))
    try:
        from gpflow_tight_swap import SWAPS
    finally:
        sys.path.remove(str(HERE))
    return SWAPS


Outcomes = dict[str, dict[str, str]]


def run(root: Path, swap: str | None, tests: list[str], workers: int = 0) -> Outcomes:
    """
    Run ``tests`` (files or node ids, relative to ``root``) under ``swap`` (``None``: GPflow's
    own classes) in a subprocess. Returns, per node id, ``{"outcome": "passed" | "failed" |
    "skipped"}``, with the failing phase (``"when"``) and the last line of the error
    (``"error"``) for a failure.
    """
    with tempfile.TemporaryDirectory() as scratch:
        outcomes_file = Path(scratch) / "outcomes.json"
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
            "GPFLOW_TIGHT_SWAP": swap or "",
            "GPFLOW_TIGHT_OUTCOMES": str(outcomes_file),
            "TF_CPP_MIN_LOG_LEVEL": "3",
        }
        command = [sys.executable, "-m", "pytest", "-q", "-p", "gpflow_tight_swap"]
        command += ["-p", "no:cacheprovider", "-o", "addopts=", *tests]
        if workers:  # whole files per worker: GPflow's posterior tests check per file
            command += ["-n", str(workers), "--dist", "loadfile"]
        result = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True)
        if not outcomes_file.exists():
            raise RuntimeError(f"GPflow's tests did not run:\n{result.stdout}\n{result.stderr}")
        outcomes: Outcomes = json.loads(outcomes_file.read_text())
        return outcomes


def with_gpflow_names(outcomes: Outcomes, swap: str) -> Outcomes:
    """
    ``outcomes`` of a swapped run under the unswapped run's node ids: a test parametrised by
    model classes has the drop-in's name in its id (``test_x[TightSGPR]``), GPflow's here.
    """
    import gpflow_tight

    renames = sorted(
        ((cls.__name__, name) for name, cls in _swaps()[swap](gpflow_tight).items()),
        key=lambda pair: -len(pair[0]),
    )

    def rename(test: str) -> str:
        if "[" not in test:
            return test
        function, parameters = test.split("[", 1)
        for ours, theirs in renames:
            parameters = parameters.replace(ours, theirs)
        return f"{function}[{parameters}"

    return {rename(test): record for test, record in outcomes.items()}


def broken_by(swapped: Outcomes, unswapped: Outcomes) -> Outcomes:
    """The tests that fail with the swap and pass without it."""
    return {
        test: record
        for test, record in swapped.items()
        if record["outcome"] == "failed" and unswapped.get(test, {}).get("outcome") == "passed"
    }


def main() -> None:  # pragma: no cover - writes the report
    directory = Path(os.environ.get("GPFLOW_TIGHT_GPFLOW_TESTS", tempfile.gettempdir()))
    root = fetch_gpflow_tests(directory / "gpflow-tests")
    unswapped = run(root, None, FILES, workers=2)
    rows = {"GPflow's classes": unswapped}
    for swap in _swaps():
        rows[swap] = with_gpflow_names(run(root, swap, files_for(swap, root), workers=2), swap)
    report = {
        "gpflow": gpflow.__version__,
        "outcomes": rows,
        "broken": {swap: broken_by(rows[swap], unswapped) for swap in _swaps()},
    }
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("gpflow_suite.json")
    out.write_text(json.dumps(report, indent=1, sort_keys=True))
    for name, outcomes in rows.items():
        print(name, dict(Counter(r["outcome"] for r in outcomes.values())))
        for test, record in report["broken"].get(name, {}).items():
            print("   broken:", test, record["error"][:150])


if __name__ == "__main__":  # pragma: no cover
    main()
