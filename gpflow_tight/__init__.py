"""
gpflow-tight: tighter and more general sparse Gaussian-process approximations as drop-in
GPflow 2 models.
"""

from . import (
    covariances,
    datasets,
    inducing_variables,
    keras,
    kernels,
    likelihoods,
    neighbors,
    orthogonal,
    posteriors,
    projection,
    relaxation,
    serving,
    tilted,
    training,
)
from .inducing_variables import FrequencyInducingFeatures, LatentInducingPoints
from .kernels import ConvolvedKernel
from .likelihoods import ExactProbit
from .models import *  # noqa: F403  (every model class, listed in models.__all__)
from .models import __all__ as _models
from .orthogonal import OrthogonalInducingVariables
from .posteriors import NegativeVarianceWarning
from .tilted import exact_probit
from .training import TrainingError
from .validation import CholeskyError, DtypeCastWarning

__version__ = "0.1.0"

__all__ = [
    *_models,
    "OrthogonalInducingVariables",
    "FrequencyInducingFeatures",
    "LatentInducingPoints",
    "ConvolvedKernel",
    "ExactProbit",
    "exact_probit",
    "CholeskyError",
    "DtypeCastWarning",
    "NegativeVarianceWarning",
    "TrainingError",
    "covariances",
    "inducing_variables",
    "keras",
    "kernels",
    "likelihoods",
    "orthogonal",
    "posteriors",
    "projection",
    "relaxation",
    "serving",
    "datasets",
    "neighbors",
    "tilted",
    "training",
]
