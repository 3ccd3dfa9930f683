"""The models of gpflow-tight, one module per family."""

from .tight_sgpr import TightSGPR
from .tight_svgp import TightSVGP

__all__ = ["TightSGPR", "TightSVGP"]
