"""
``Kuu`` of this package's inducing variables, registered with GPflow's dispatcher:

- :class:`~gpflow_tight.inducing_variables.frequency.FrequencyInducingFeatures` with the
  squared-exponential kernel: the closed form
  :func:`~gpflow_tight.inducing_variables.frequency.window_covariance` of the features with
  themselves (Lázaro-Gredilla & Figueiras-Vidal 2009, FIFGP);
- :class:`~gpflow_tight.inducing_variables.orthogonal.OrthogonalInducingVariables` with any
  kernel: the residual covariance :math:`C_{vv} = K_{vv} - K_{vu} (K_{uu} + \\varepsilon I)^{-1}
  K_{uv}` with :math:`\\varepsilon` GPflow's default jitter (Fernlund 2022, eq. 5.5 and
  Algorithm 3, lines 2-4), plus ``jitter`` times I;
- :class:`~gpflow_tight.inducing_variables.latent.LatentInducingPoints` with the
  :class:`~gpflow_tight.kernels.ConvolvedKernel`: the latent processes' covariance
  :math:`\\delta_{q_m q_n} k_{q_m}(\\mathbf z_m, \\mathbf z_n)` (block-diagonal over latents).
"""

import tensorflow as tf
from check_shapes import check_shapes
from gpflow.config import default_jitter
from gpflow.covariances import Kuu
from gpflow.kernels import Kernel, SquaredExponential

from .. import orthogonal  # the module, not its names: it imports Kuv from here (a cycle)
from ..inducing_variables.frequency import (
    FrequencyInducingFeatures,
    fif_windows,
    window_covariance,
)
from ..inducing_variables.latent import LatentInducingPoints
from ..inducing_variables.orthogonal import OrthogonalInducingVariables
from ..kernels.convolved import ConvolvedKernel

__all__ = ["Kuu_sqexp_fif", "Kuu_convolved_latent"]


@Kuu.register(FrequencyInducingFeatures, SquaredExponential)
@check_shapes(
    "inducing_variable: [M, D, 1]",
    "return: [M, M]",
)
def Kuu_sqexp_fif(
    inducing_variable: FrequencyInducingFeatures,
    kernel: SquaredExponential,
    *,
    jitter: float = 0.0,
) -> tf.Tensor:
    """
    :func:`~gpflow_tight.inducing_variables.frequency.window_covariance` of the features with
    themselves, plus ``jitter`` times I.
    """
    windows = fif_windows(inducing_variable, kernel)
    Kzz = window_covariance(windows, windows, kernel)
    return Kzz + jitter * tf.eye(inducing_variable.num_inducing, dtype=Kzz.dtype)


@Kuu.register(OrthogonalInducingVariables, Kernel)
@check_shapes(
    "inducing_variable: [M_v, D, 1]",
    "return: [M_v, M_v]",
)
def _kuu_orthogonal(
    inducing_variable: OrthogonalInducingVariables, kernel: Kernel, *, jitter: float = 0.0
) -> tf.Tensor:
    _, D_v, _ = orthogonal._regular_factor(inducing_variable, kernel, default_jitter())
    K_vv = Kuu(inducing_variable.orthogonal, kernel, jitter=jitter)
    return K_vv - tf.linalg.matmul(D_v, D_v, transpose_a=True)


@Kuu.register(LatentInducingPoints, ConvolvedKernel)
@check_shapes(
    "inducing_variable: [M, D_aug, 1]",
    "return: [M, M]",
)
def Kuu_convolved_latent(
    inducing_variable: LatentInducingPoints, kernel: ConvolvedKernel, *, jitter: float = 0.0
) -> tf.Tensor:
    """
    :meth:`~gpflow_tight.kernels.ConvolvedKernel.K_latent` of the points, plus ``jitter`` times
    I; a ``ValueError`` if a latent index is not below the kernel's number of latents.
    """
    kernel.check_latent_index(inducing_variable._latent_index)
    Kzz = kernel.K_latent(tf.convert_to_tensor(inducing_variable.Z), inducing_variable.latent_index)
    return Kzz + jitter * tf.eye(inducing_variable.num_inducing, dtype=Kzz.dtype)
