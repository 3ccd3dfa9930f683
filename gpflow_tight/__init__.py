"""
gpflow-tight: tighter and more general sparse Gaussian-process approximations as drop-in
GPflow 2 models.
"""

from . import datasets, neighbors, tighter, tilted, training
from .models import (
    DTC,
    FITC,
    PITC,
    TVBGPLVM,
    VFE,
    VNNGP,
    MinibatchBayesianGPLVM,
    PowerEPSGP,
    TightBayesianGPLVM,
    TightSGPR,
    TightSVGP,
)
from .tilted import exact_probit
from .validation import CholeskyError

__version__ = "0.1.0"

__all__ = [
    "TightSGPR",
    "TightSVGP",
    "PowerEPSGP",
    "FITC",
    "PITC",
    "VFE",
    "DTC",
    "VNNGP",
    "TightBayesianGPLVM",
    "TVBGPLVM",
    "MinibatchBayesianGPLVM",
    "exact_probit",
    "CholeskyError",
    "datasets",
    "neighbors",
    "tighter",
    "tilted",
    "training",
]
