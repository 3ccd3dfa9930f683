"""
The models of gpflow-tight, one module per family. (Their posteriors are in
:mod:`gpflow_tight.posteriors`; ``PowerEPPosterior`` and ``OrthogonalPosterior`` stay importable
from here for code written before they moved.)
"""

from ..posteriors import OrthogonalPosterior as OrthogonalPosterior
from ..posteriors import PowerEPPosterior as PowerEPPosterior
from .classic import Nystrom, SoR
from .committee import BCM
from .gplvm import TVBGPLVM, MinibatchBayesianGPLVM, TightBayesianGPLVM
from .power_ep import DTC, FITC, PITC, VFE, PowerEPSGP
from .solve import ODGPR, ODVGP, SOLVEGP, SOLVEGPR, TightSOLVEGP, TightSOLVEGPR
from .subset_of_data import SoD
from .tight_sgpr import RelaxedSGPR, TightSGPR
from .tight_svgp import RelaxedSVGP, TightSVGP
from .vnngp import VNNGP

__all__ = [
    "RelaxedSGPR",
    "RelaxedSVGP",
    "TightSGPR",
    "TightSVGP",
    "PowerEPSGP",
    "FITC",
    "PITC",
    "VFE",
    "DTC",
    "SoR",
    "Nystrom",
    "SoD",
    "BCM",
    "VNNGP",
    "TightBayesianGPLVM",
    "TVBGPLVM",
    "MinibatchBayesianGPLVM",
    "SOLVEGPR",
    "TightSOLVEGPR",
    "SOLVEGP",
    "TightSOLVEGP",
    "ODGPR",
    "ODVGP",
]
