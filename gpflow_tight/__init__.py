"""
gpflow-tight: tighter and more general sparse Gaussian-process approximations as drop-in
GPflow 2 models.
"""

from . import datasets, tighter, training
from .models import TightSGPR, TightSVGP
from .validation import CholeskyError

__version__ = "0.1.0"

__all__ = ["TightSGPR", "TightSVGP", "CholeskyError", "datasets", "tighter", "training"]
