"""
A pytest plugin that runs GPflow's own test files with gpflow-tight's drop-ins in place of
GPflow's classes (``tests/integration/test_gpflow_suite.py`` loads it in a subprocess).

``GPFLOW_TIGHT_SWAP`` names one entry of :data:`SWAPS`; the plugin replaces the classes in
``gpflow.models`` and in the modules GPflow's tests import them from, before any test module is
collected, so that ``from gpflow.models import SGPR`` in a test file gives the drop-in.
"""

import inspect
import json
import os
from collections.abc import Callable
from typing import Any

import gpflow
import numpy as np
import pytest

# Where GPflow's test files import the classes from: gpflow.models and these modules.
_HOMES = {
    "SGPR": ["gpflow.models.sgpr"],
    "SGPR_with_posterior": ["gpflow.models.sgpr"],
    "GPRFITC": ["gpflow.models.sgpr"],
    "SVGP": ["gpflow.models.svgp"],
    "SVGP_with_posterior": ["gpflow.models.svgp"],
    "BayesianGPLVM": ["gpflow.models.gplvm"],
}


_STASH = pytest.StashKey[str]()


def _empty_orthogonal_set(inducing_variable: Any) -> Any:
    """An orthogonal set with no points, [0, D], in the input space of ``inducing_variable``."""
    regular = inducing_variable
    if isinstance(regular, gpflow.inducing_variables.MultioutputInducingVariables):
        regular = (
            regular.inducing_variable_list[0]
            if hasattr(regular, "inducing_variable_list")
            else regular.inducing_variable
        )
    Z = regular.Z if hasattr(regular, "Z") else np.asarray(regular)
    return np.zeros((0, Z.shape[-1]))


def _without_orthogonal_points(base: type) -> type:
    """
    ``base``, a SOLVE model, built the way GPflow's peer is (SGPR's or SVGP's arguments), with no
    orthogonal points.
    """

    class WithoutOrthogonalPoints(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any):
            given = inspect.signature(base.__init__).bind_partial(self, *args, **kwargs)
            orthogonal = _empty_orthogonal_set(given.arguments["inducing_variable"])
            super().__init__(*args, orthogonal_inducing_variable=orthogonal, **kwargs)

    WithoutOrthogonalPoints.__name__ = f"{base.__name__}WithoutOrthogonalPoints"
    return WithoutOrthogonalPoints


def _sgpr_and_svgp(sgpr: type, svgp: type) -> dict[str, type]:
    return {"SGPR": sgpr, "SGPR_with_posterior": sgpr, "SVGP": svgp, "SVGP_with_posterior": svgp}


# The drop-ins, by swap name. gpflow-tight is imported only when a swap is made: merely importing
# it adds posterior classes, which GPflow's posterior tests notice (see test_gpflow_suite.py).
SWAPS: dict[str, Callable[[Any], dict[str, type]]] = {
    # the relaxation "none": must be GPflow's SGPR/SVGP exactly
    "relaxed": lambda gt: _sgpr_and_svgp(gt.RelaxedSGPR, gt.RelaxedSVGP),
    "tight": lambda gt: {
        **_sgpr_and_svgp(gt.TightSGPR, gt.TightSVGP),
        "BayesianGPLVM": gt.TightBayesianGPLVM,
    },
    "power_ep": lambda gt: {"SGPR": gt.VFE, "SGPR_with_posterior": gt.VFE, "GPRFITC": gt.FITC},
    "solve": lambda gt: _sgpr_and_svgp(
        _without_orthogonal_points(gt.SOLVEGPR), _without_orthogonal_points(gt.SOLVEGP)
    ),
    "tight_solve": lambda gt: _sgpr_and_svgp(
        _without_orthogonal_points(gt.TightSOLVEGPR), _without_orthogonal_points(gt.TightSOLVEGP)
    ),
}


def swap(name: str) -> dict[str, type]:
    """Put the drop-ins of ``SWAPS[name]`` in place of GPflow's classes; returns them."""
    import importlib

    import gpflow_tight

    replacements = SWAPS[name](gpflow_tight)
    for class_name, replacement in replacements.items():
        for module_name in ["gpflow.models", *_HOMES[class_name]]:
            module = importlib.import_module(module_name)
            if hasattr(module, class_name):
                setattr(module, class_name, replacement)
    return replacements


_OUTCOMES: dict[str, dict[str, str]] = {}


def pytest_runtest_logreport(report: Any) -> None:
    """
    Record each test's outcome (failed if any phase failed, else its call's outcome) and, for a
    failure, the phase and the last line of the error.
    """
    if report.failed:
        lines = [line for line in report.longreprtext.splitlines() if line.startswith("E ")]
        message = lines[-1][1:].strip() if lines else report.longreprtext[-300:]
        _OUTCOMES[report.nodeid] = {"outcome": "failed", "when": report.when, "error": message}
    elif report.when == "call" or report.skipped:
        _OUTCOMES.setdefault(report.nodeid, {"outcome": report.outcome})


def pytest_sessionfinish(session: Any) -> None:
    path = os.environ.get("GPFLOW_TIGHT_OUTCOMES")
    if path and not hasattr(session.config, "workerinput"):  # the controller, under xdist
        with open(path, "w") as file:
            json.dump(_OUTCOMES, file, indent=0, sort_keys=True)


def pytest_configure(config: Any) -> None:
    name = os.environ.get("GPFLOW_TIGHT_SWAP", "")
    if name:
        swapped = swap(name)
        config.stash[_STASH] = ", ".join(f"{k} -> {v.__name__}" for k, v in swapped.items())


def pytest_report_header(config: Any) -> str:
    return f"gpflow-tight swap: {config.stash.get(_STASH, 'none (GPflow classes)')}"
