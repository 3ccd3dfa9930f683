"""
One small instance of every model of the package, for the tests that must hold for all of them
(saving, training loops, ...). A new model joins by adding a factory here;
``test_every_exported_model_is_in_the_zoo`` fails until it does.

A factory takes a numpy ``Generator`` and returns ``(model, data)``: ``data`` is what the model's
``training_loss`` takes (``None`` for models that hold their data).
"""

from collections.abc import Callable
from typing import Any

import gpflow
import numpy as np

import gpflow_tight as gt


def _regression(rng: np.random.Generator, num_data: int = 40) -> tuple[np.ndarray, np.ndarray]:
    X = np.sort(rng.uniform(0, 6, (num_data, 1)), axis=0)
    return X, np.sin(2 * X) + 0.2 * rng.standard_normal(X.shape)


def _kernel() -> gpflow.kernels.Kernel:
    return gpflow.kernels.SquaredExponential(lengthscales=0.8)


Z_U = np.linspace(0.3, 5.7, 5)[:, None]
Z_V = np.array([[0.9], [2.6], [4.4]])


def _tight_sgpr(rng: np.random.Generator) -> tuple[Any, Any]:
    return gt.TightSGPR(_regression(rng), _kernel(), Z_U, noise_variance=0.1), None


def _tight_svgp(rng: np.random.Generator) -> tuple[Any, Any]:
    data = _regression(rng)
    return gt.TightSVGP(_kernel(), gpflow.likelihoods.Gaussian(0.1), Z_U, num_data=40), data


def _relaxed_sgpr(rng: np.random.Generator) -> tuple[Any, Any]:
    data = _regression(rng)
    return gt.RelaxedSGPR(data, _kernel(), Z_U, noise_variance=0.1, relaxation="beta"), None


def _relaxed_svgp(rng: np.random.Generator) -> tuple[Any, Any]:
    data = _regression(rng)
    likelihood = gpflow.likelihoods.Gaussian(0.1)
    # "free" needs the whole training set in every evaluation, which minibatching tests cannot
    # give; it is tested in tests/models/test_contracts.py and test_tight_svgp.py
    model = gt.RelaxedSVGP(_kernel(), likelihood, Z_U, num_data=40, relaxation="optimal")
    return model, data


def _power_ep(rng: np.random.Generator) -> tuple[Any, Any]:
    return gt.PowerEPSGP(_regression(rng), _kernel(), Z_U, alpha=0.5, noise_variance=0.1), None


def _pitc(rng: np.random.Generator) -> tuple[Any, Any]:
    return gt.PITC(_regression(rng), _kernel(), Z_U, block_size=10, noise_variance=0.1), None


def _power_ep_sites(rng: np.random.Generator) -> tuple[Any, Any]:
    X, Y = _regression(rng)
    model = gt.PowerEPSGP(
        (X, (Y > 0).astype(float)),
        _kernel(),
        Z_U,
        alpha=0.5,
        likelihood=gpflow.likelihoods.Bernoulli(),
    )
    for _ in range(3):
        model.sweep()
    return model, None


def _vnngp(rng: np.random.Generator) -> tuple[Any, Any]:
    X, Y = _regression(rng)
    # a lengthscale well below the spacing of the points keeps the neighbour conditionals'
    # variances away from 0, so that the KL to the Vecchia prior is well conditioned
    kernel = gpflow.kernels.SquaredExponential(lengthscales=0.03)
    model = gt.VNNGP(kernel, gpflow.likelihoods.Gaussian(0.1), X, 4, num_data=40)
    return model, model.training_data(X, Y)


def _latent(rng: np.random.Generator) -> dict[str, Any]:
    Y = rng.standard_normal((30, 3))
    return dict(
        X_data_mean=rng.standard_normal((30, 2)),
        X_data_var=np.full((30, 2), 0.2),
        kernel=gpflow.kernels.SquaredExponential(lengthscales=[1.0, 1.5]),
        inducing_variable=rng.standard_normal((6, 2)),
        Y=Y,
    )


def _tight_gplvm(rng: np.random.Generator) -> tuple[Any, Any]:
    latent = _latent(rng)
    Y = latent.pop("Y")
    return gt.TightBayesianGPLVM(Y, **latent), None


def _minibatch_gplvm(rng: np.random.Generator) -> tuple[Any, Any]:
    latent = _latent(rng)
    Y = latent.pop("Y")
    model = gt.MinibatchBayesianGPLVM(30, 3, noise_variance=0.5, **latent)
    return model, model.training_data(Y)


def _solve_gpr(rng: np.random.Generator) -> tuple[Any, Any]:
    return gt.SOLVEGPR(_regression(rng), _kernel(), Z_U, Z_V, noise_variance=0.1), None


def _tight_solve_gpr(rng: np.random.Generator) -> tuple[Any, Any]:
    return gt.TightSOLVEGPR(_regression(rng), _kernel(), Z_U, Z_V, noise_variance=0.1), None


def _solve_gp(rng: np.random.Generator) -> tuple[Any, Any]:
    data = _regression(rng)
    likelihood = gpflow.likelihoods.Gaussian(0.1)
    return gt.SOLVEGP(_kernel(), likelihood, Z_U, Z_V, num_data=40), data


def _tight_solve_gp(rng: np.random.Generator) -> tuple[Any, Any]:
    data = _regression(rng)
    likelihood = gpflow.likelihoods.Gaussian(0.1)
    return gt.TightSOLVEGP(_kernel(), likelihood, Z_U, Z_V, num_data=40), data


def _odgpr(rng: np.random.Generator) -> tuple[Any, Any]:
    return gt.ODGPR(_regression(rng), _kernel(), Z_U, Z_V, noise_variance=0.1), None


def _odvgp(rng: np.random.Generator) -> tuple[Any, Any]:
    data = _regression(rng)
    likelihood = gpflow.likelihoods.Gaussian(0.1)
    return gt.ODVGP(_kernel(), likelihood, Z_U, Z_V, num_data=40), data


MODEL_FACTORIES: dict[str, Callable[[np.random.Generator], tuple[Any, Any]]] = {
    "TightSGPR": _tight_sgpr,
    "TightSVGP": _tight_svgp,
    "RelaxedSGPR": _relaxed_sgpr,
    "RelaxedSVGP": _relaxed_svgp,
    "PowerEPSGP": _power_ep,
    "PITC": _pitc,
    "PowerEPSGP-sites": _power_ep_sites,
    "VNNGP": _vnngp,
    "TightBayesianGPLVM": _tight_gplvm,
    "MinibatchBayesianGPLVM": _minibatch_gplvm,
    "SOLVEGPR": _solve_gpr,
    "TightSOLVEGPR": _tight_solve_gpr,
    "SOLVEGP": _solve_gp,
    "TightSOLVEGP": _tight_solve_gp,
    "ODGPR": _odgpr,
    "ODVGP": _odvgp,
}

# presets and aliases that are the same class (or a thin subclass) as a model in the zoo
# (SoR and Nystrom train DTC's graph; their predictions, the only code of their own, have the
# contracts' prediction checks in tests/models/test_classic.py)
COVERED_BY = {
    "FITC": "PowerEPSGP",
    "VFE": "PowerEPSGP",
    "DTC": "PowerEPSGP",
    "SoR": "PowerEPSGP",
    "Nystrom": "PowerEPSGP",
    # SoD is a thin subclass of gpflow.models.GPR and the BCM a sum of exact GPRs: with the
    # noise on the diagonal no factorisation fails, so the failed-factorisation contracts do
    # not apply; their checkpoints, compiled functions and bad inputs are tested in
    # tests/models/test_subset_and_committee.py
    "SoD": None,
    "BCM": None,
    "TVBGPLVM": None,
}


def prediction_inputs(name: str, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Seven test inputs and targets in the form zoo model ``name`` predicts at."""
    latent = name in ("TightBayesianGPLVM", "MinibatchBayesianGPLVM")  # Q = 2 inputs, D = 3
    Xnew = rng.uniform(0, 6, (7, 2 if latent else 1))
    Ynew = rng.standard_normal((7, 3 if latent else 1))
    if name == "PowerEPSGP-sites":  # a Bernoulli likelihood
        Ynew = (Ynew > 0).astype(float)
    return Xnew, Ynew


# zoo models whose class differs from another zoo model's only by its default relaxation (the
# subclass sets nothing else: tests/test_every_model.py checks), so that tests of the training
# plumbing (Keras fit, tf.distribute) take one of each pair; the relaxations themselves are
# tested in tests/test_relaxation.py and each model's tests
CLASS_TWINS = {
    "RelaxedSGPR": "TightSGPR",
    "RelaxedSVGP": "TightSVGP",
    "SOLVEGPR": "TightSOLVEGPR",
    "SOLVEGP": "TightSOLVEGP",
}
