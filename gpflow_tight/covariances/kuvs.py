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
@check_shapes(
    "inducing_v: [M_v, D, 1]",
    "return: [M_u, M_v]",
)
def _kuv_features_points(
    inducing_u: InducingVariables, inducing_v: InducingPoints, kernel: Kernel
) -> tf.Tensor:
    return Kuf(inducing_u, kernel, inducing_v.Z)


@Kuv.register(InducingPoints, InducingVariables, Kernel)
@check_shapes(
    "inducing_u: [M_u, D, 1]",
    "return: [M_u, M_v]",
)
def _kuv_points_features(
    inducing_u: InducingPoints, inducing_v: InducingVariables, kernel: Kernel
) -> tf.Tensor:
    return tf.linalg.adjoint(Kuf(inducing_v, kernel, inducing_u.Z))


@Kuv.register(Multiscale, InducingPoints, Kernel)
@check_shapes(
    "inducing_v: [M_v, D, 1]",
    "return: [M_u, M_v]",
)
def _kuv_multiscale_points(
    inducing_u: Multiscale, inducing_v: InducingPoints, kernel: Kernel
) -> tf.Tensor:
    # Needed because Multiscale is an InducingPointsBase, which the generic rules do not cover.
    return Kuf(inducing_u, kernel, inducing_v.Z)


@Kuv.register(InducingPoints, Multiscale, Kernel)
@check_shapes(
    "inducing_u: [M_u, D, 1]",
    "return: [M_u, M_v]",
)
def _kuv_points_multiscale(
    inducing_u: InducingPoints, inducing_v: Multiscale, kernel: Kernel
) -> tf.Tensor:
    return tf.linalg.adjoint(Kuf(inducing_v, kernel, inducing_u.Z))


@Kuv.register(Multiscale, Multiscale, SquaredExponential)
@check_shapes(
    "inducing_u: [M_u, D, 1]",
    "inducing_v: [M_v, D, 1]",
    "return: [M_u, M_v]",
)
def _kuv_multiscale_multiscale(
    inducing_u: Multiscale, inducing_v: Multiscale, kernel: SquaredExponential
) -> tf.Tensor:
    """GPflow's ``Multiscale`` features are Gaussian windows: zero-frequency cosine windows."""
    return window_covariance(
        multiscale_windows(inducing_u, kernel), multiscale_windows(inducing_v, kernel), kernel
    )


@Kuv.register(FrequencyInducingFeatures, FrequencyInducingFeatures, SquaredExponential)
@check_shapes(
    "inducing_u: [M_u, D, 1]",
    "inducing_v: [M_v, D, 1]",
    "return: [M_u, M_v]",
)
def _kuv_fif_fif(
    inducing_u: FrequencyInducingFeatures,
    inducing_v: FrequencyInducingFeatures,
    kernel: SquaredExponential,
) -> tf.Tensor:
    """
    Two sets of frequency inducing features (Lázaro-Gredilla & Figueiras-Vidal 2009, FIFGP):
    :func:`~gpflow_tight.inducing_variables.frequency.window_covariance`, the function behind
    their ``Kuu``.
    """
    return window_covariance(
        fif_windows(inducing_u, kernel), fif_windows(inducing_v, kernel), kernel
    )


@Kuv.register(Multiscale, FrequencyInducingFeatures, SquaredExponential)
@check_shapes(
    "inducing_u: [M_u, D, 1]",
    "inducing_v: [M_v, D, 1]",
    "return: [M_u, M_v]",
)
def _kuv_multiscale_fif(
    inducing_u: Multiscale, inducing_v: FrequencyInducingFeatures, kernel: SquaredExponential
) -> tf.Tensor:
    """
    GPflow's ``Multiscale`` features are frequency inducing features with zero frequencies and
    phases and window variances :math:`(\\ell + s)^2 - \\ell^2`
    (:func:`~gpflow_tight.inducing_variables.frequency.multiscale_windows`).
    """
    return window_covariance(
        multiscale_windows(inducing_u, kernel), fif_windows(inducing_v, kernel), kernel
    )


@Kuv.register(FrequencyInducingFeatures, Multiscale, SquaredExponential)
@check_shapes(
    "inducing_u: [M_u, D, 1]",
    "inducing_v: [M_v, D, 1]",
    "return: [M_u, M_v]",
)
def _kuv_fif_multiscale(
    inducing_u: FrequencyInducingFeatures, inducing_v: Multiscale, kernel: SquaredExponential
) -> tf.Tensor:
    """The transpose case of :func:`_kuv_multiscale_fif`, computed directly."""
    return window_covariance(
        fif_windows(inducing_u, kernel), multiscale_windows(inducing_v, kernel), kernel
    )
