"""The models of gpflow-tight, one module per family."""

from .gplvm import TVBGPLVM, MinibatchBayesianGPLVM, TightBayesianGPLVM
from .power_ep import DTC, FITC, PITC, VFE, PowerEPPosterior, PowerEPSGP
from .solve import SOLVEGP, SOLVEGPR, OrthogonalPosterior, TightSOLVEGP, TightSOLVEGPR
from .tight_sgpr import RelaxedSGPR, TightSGPR
from .tight_svgp import RelaxedSVGP, TightSVGP
from .vnngp import VNNGP

__all__ = [
    "RelaxedSGPR",
    "RelaxedSVGP",
    "TightSGPR",
    "TightSVGP",
    "PowerEPSGP",
    "PowerEPPosterior",
    "FITC",
    "PITC",
    "VFE",
    "DTC",
    "VNNGP",
    "TightBayesianGPLVM",
    "TVBGPLVM",
    "MinibatchBayesianGPLVM",
    "SOLVEGPR",
    "TightSOLVEGPR",
    "SOLVEGP",
    "TightSOLVEGP",
    "OrthogonalPosterior",
]
