"""
Cross-covariances between two inducing sets, dispatched on their types like GPflow's ``Kuu`` and
``Kuf``: the ``Kuv`` dispatcher and its registrations.

``Kuv(inducing_u, inducing_v, kernel)`` returns :math:`\\mathrm{Cov}[\\mathbf u, \\mathbf v]`,
an :math:`M_u \\times M_v` matrix, for two sets of inducing variables of the same GP. The
orthogonally decoupled models need it to form the residual covariances :math:`C_{vv}` and
:math:`C_{vf}` (see :mod:`gpflow_tight.orthogonal`). A point evaluation :math:`f(z)` is the
simplest inducing variable, so the covariance of any inducing set with inducing *points* is its
``Kuf`` at the points' locations; only pairs of inter-domain sets need their own formula.
"""

import tensorflow as tf
from check_shapes import check_shapes
from gpflow.covariances import Kuf
from gpflow.inducing_variables import InducingPoints, InducingVariables, Multiscale
from gpflow.kernels import Kernel, SquaredExponential
from gpflow.utilities import Dispatcher

from ..inducing_variables.frequency import (
    CosineWindows,
    FrequencyInducingFeatures,
    fif_windows,
    multiscale_windows,
    window_covariance,
)

__all__ = ["Kuv"]

Kuv = Dispatcher("Kuv")


@Kuv.register(InducingPoints, InducingPoints, Kernel)
@check_shapes(
    "inducing_u: [M_u, D, 1]",
    "inducing_v: [M_v, D, 1]",
    "return: [M_u, M_v]",
)
def _kuv_points_points(
    inducing_u: InducingPoints, inducing_v: InducingPoints, kernel: Kernel
) -> tf.Tensor:
    return kernel(inducing_u.Z, inducing_v.Z)


@Kuv.register(InducingVariables, InducingPoints, Kernel)
# Multiscale is an InducingPointsBase, not an InducingPoints, so register it explicitly too.
@Kuv.register(Multiscale, InducingPoints, Kernel)
@check_shapes(
    "inducing_v: [M_v, D, 1]",
    "return: [M_u, M_v]",
)
def _kuv_features_points(
    inducing_u: InducingVariables, inducing_v: InducingPoints, kernel: Kernel
) -> tf.Tensor:
    """Any inducing set against inducing points: its ``Kuf`` at the points' locations."""
    return Kuf(inducing_u, kernel, inducing_v.Z)


@Kuv.register(InducingPoints, InducingVariables, Kernel)
@Kuv.register(InducingPoints, Multiscale, Kernel)
@check_shapes(
    "inducing_u: [M_u, D, 1]",
    "return: [M_u, M_v]",
)
def _kuv_points_features(
    inducing_u: InducingPoints, inducing_v: InducingVariables, kernel: Kernel
) -> tf.Tensor:
    """The transpose case of :func:`_kuv_features_points`."""
    return tf.linalg.adjoint(Kuf(inducing_v, kernel, inducing_u.Z))


_WindowFeatures = Multiscale | FrequencyInducingFeatures


def _windows(inducing_variable: _WindowFeatures, kernel: SquaredExponential) -> CosineWindows:
    """
    The cosine windows of ``inducing_variable``:
    :func:`~gpflow_tight.inducing_variables.frequency.multiscale_windows` for GPflow's
    ``Multiscale`` features (zero frequencies and phases, window variances
    :math:`(\\ell + s)^2 - \\ell^2`),
    :func:`~gpflow_tight.inducing_variables.frequency.fif_windows` for frequency inducing features.
    """
    if isinstance(inducing_variable, Multiscale):
        return multiscale_windows(inducing_variable, kernel)
    return fif_windows(inducing_variable, kernel)


@Kuv.register(Multiscale, Multiscale, SquaredExponential)
@Kuv.register(Multiscale, FrequencyInducingFeatures, SquaredExponential)
@Kuv.register(FrequencyInducingFeatures, Multiscale, SquaredExponential)
@Kuv.register(FrequencyInducingFeatures, FrequencyInducingFeatures, SquaredExponential)
@check_shapes(
    "inducing_u: [M_u, D, 1]",
    "inducing_v: [M_v, D, 1]",
    "return: [M_u, M_v]",
)
def _kuv_windows_windows(
    inducing_u: _WindowFeatures, inducing_v: _WindowFeatures, kernel: SquaredExponential
) -> tf.Tensor:
    """
    Two sets of window features, each GPflow ``Multiscale`` or frequency inducing features
    (Lázaro-Gredilla & Figueiras-Vidal 2009, FIFGP; ``Multiscale`` features are zero-frequency
    cosine windows): :func:`~gpflow_tight.inducing_variables.frequency.window_covariance` of
    their windows, the function behind their ``Kuu``.
    """
    return window_covariance(_windows(inducing_u, kernel), _windows(inducing_v, kernel), kernel)
