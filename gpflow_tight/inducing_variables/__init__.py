"""
The inducing variables of this package, one module per kind, as in GPflow's
``gpflow.inducing_variables``: :mod:`~gpflow_tight.inducing_variables.frequency` (frequency
inducing features and their Gaussian-cosine windows),
:mod:`~gpflow_tight.inducing_variables.orthogonal` (orthogonally decoupled inducing variables) and
:mod:`~gpflow_tight.inducing_variables.latent` (points on the latent processes of a process
convolution, :class:`~gpflow_tight.kernels.ConvolvedKernel`).
Their ``Kuu``, ``Kuf`` and ``Kuv`` registrations are in :mod:`gpflow_tight.covariances`.
"""

from .frequency import (
    CosineWindows,
    FrequencyInducingFeatures,
    fif_windows,
    multiscale_windows,
    window_covariance,
)
from .latent import LatentInducingPoints
from .orthogonal import OrthogonalInducingVariables

__all__ = [
    "FrequencyInducingFeatures",
    "OrthogonalInducingVariables",
    "LatentInducingPoints",
    "CosineWindows",
    "fif_windows",
    "multiscale_windows",
    "window_covariance",
]
