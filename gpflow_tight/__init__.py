"""
gpflow-tight: tighter and more general sparse Gaussian-process approximations as drop-in
GPflow 2 models.
"""

from . import datasets, tighter, tilted, training
from .models import DTC, FITC, PITC, VFE, PowerEPSGP, TightSGPR, TightSVGP
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
    "exact_probit",
    "CholeskyError",
    "datasets",
    "tighter",
    "tilted",
    "training",
]
