"""
Kernels of this package: :mod:`~gpflow_tight.kernels.convolved`, the process-convolution kernel
of multi-output GPs on GPflow's stacked-output convention (the output index as the last input
column), whose latent processes carry the inter-domain inducing set
:class:`~gpflow_tight.inducing_variables.LatentInducingPoints`.
"""

from .convolved import ConvolvedKernel

__all__ = ["ConvolvedKernel"]
