"""
``Kuf`` of this package's inducing variables, registered with GPflow's dispatcher:

- :class:`~gpflow_tight.inducing_variables.frequency.FrequencyInducingFeatures` with the
  squared-exponential kernel: the closed form of :func:`Kuf_sqexp_fif`
  (Lázaro-Gredilla & Figueiras-Vidal 2009, FIFGP);
- :class:`~gpflow_tight.inducing_variables.orthogonal.OrthogonalInducingVariables` with any
  kernel: the residual cross-covariance :math:`C_{vX} = K_{vX} - K_{vu} (K_{uu} +
  \\varepsilon I)^{-1} K_{uX}`, :math:`\\varepsilon` GPflow's default jitter (Fernlund 2022,
  eq. 5.5 and Algorithm 3, lines 3-4 and 19-20, with the line-20 erratum corrected);
- :class:`~gpflow_tight.inducing_variables.latent.LatentInducingPoints` with the
  :class:`~gpflow_tight.kernels.ConvolvedKernel`: the cross-covariance
  :math:`\\mathrm{Cov}[u_{q_m}(\\mathbf z_m), f_{d_n}(\\mathbf x_n)]` of one Gaussian
  convolution (Álvarez & Lawrence 2011), the inputs stacked with their output index.
"""

import tensorflow as tf
from check_shapes import check_shapes
from gpflow.base import TensorLike, TensorType
from gpflow.config import default_jitter
from gpflow.covariances import Kuf
from gpflow.kernels import Kernel, SquaredExponential

from .. import orthogonal  # the module, not its names: it imports Kuv from here (a cycle)
from ..inducing_variables.frequency import FrequencyInducingFeatures, fif_windows
from ..inducing_variables.latent import LatentInducingPoints
from ..inducing_variables.orthogonal import OrthogonalInducingVariables
from ..kernels.convolved import ConvolvedKernel

__all__ = ["Kuf_sqexp_fif", "Kuf_convolved_latent"]


@Kuf.register(FrequencyInducingFeatures, SquaredExponential, TensorLike)
@check_shapes(
    "inducing_variable: [M, D, 1]",
    "Xnew: [batch..., N, D]",
    "return: [M, batch..., N]",
)
def Kuf_sqexp_fif(
    inducing_variable: FrequencyInducingFeatures, kernel: SquaredExponential, Xnew: TensorType
) -> tf.Tensor:
    """
    :math:`\\mathrm{Cov}[u_m, f(\\mathbf x)] = \\int g_m(\\mathbf x') k(\\mathbf x', \\mathbf x)
    \\,\\mathrm d\\mathbf x'` (Lázaro-Gredilla & Figueiras-Vidal 2009, FIFGP). The kernel times
    the Gaussian window is a Gaussian in :math:`\\mathbf x'` with mean
    :math:`\\mu_{md} = (c_{md} x_d + \\ell_d^2 z_{md}) / (\\ell_d^2 + c_{md})` and variance
    :math:`P_{md} = \\ell_d^2 c_{md} / (\\ell_d^2 + c_{md})`, so

    .. math::
        \\mathrm{Cov}[u_m, f(\\mathbf x)] = \\sigma^2 \\prod_d
            \\frac{\\ell_d}{\\sqrt{\\ell_d^2 + c_{md}}}
            \\exp\\Big(-\\frac12 \\sum_d \\frac{(x_d - z_{md})^2}{\\ell_d^2 + c_{md}}
            - \\frac12 \\sum_d \\omega_{md}^2 P_{md}\\Big)
            \\cos\\Big(\\varphi_m + \\sum_d \\omega_{md} \\mu_{md}\\Big).
    """
    windows = fif_windows(inducing_variable, kernel)
    X, _ = kernel.slice(Xnew, None)
    X = tf.convert_to_tensor(X)
    batch_shape = tf.shape(X)[:-1]
    X = tf.reshape(X, [-1, tf.shape(X)[-1]])  # [B, D]

    lengthscales_sq = tf.square(kernel.lengthscales)
    total = lengthscales_sq + windows.variances  # [M, D]
    log_scale = 0.5 * tf.reduce_sum(
        tf.math.log(lengthscales_sq / total)
        - tf.square(windows.frequencies) * lengthscales_sq * windows.variances / total,
        axis=-1,
    )  # [M]
    difference = X[None, :, :] - windows.centres[:, None, :]  # [M, B, D]
    total = total[:, None, :]
    mean = windows.centres[:, None, :] + windows.variances[:, None, :] * difference / total
    phase = windows.phases[:, None] + tf.reduce_sum(windows.frequencies[:, None, :] * mean, axis=-1)
    log_envelope = log_scale[:, None] - 0.5 * tf.reduce_sum(tf.square(difference) / total, -1)
    K = kernel.variance * tf.exp(log_envelope) * tf.cos(phase)  # [M, B]
    return tf.reshape(K, tf.concat([tf.shape(K)[:1], batch_shape], axis=0))


@Kuf.register(OrthogonalInducingVariables, Kernel, TensorLike)
@check_shapes(
    "inducing_variable: [M_v, D, 1]",
    "Xnew: [N, D]",
    "return: [M_v, N]",
)
def _kuf_orthogonal(
    inducing_variable: OrthogonalInducingVariables, kernel: Kernel, Xnew: TensorType
) -> tf.Tensor:
    L_u, D_v, _ = orthogonal._regular_factor(inducing_variable, kernel, default_jitter())
    return orthogonal._residual_cross_covariance(inducing_variable, kernel, L_u, D_v, Xnew)[1]


@Kuf.register(LatentInducingPoints, ConvolvedKernel, TensorLike)
@check_shapes(
    "inducing_variable: [M, D_aug, 1]",
    "Xnew: [N, D_aug]",
    "return: [M, N]",
)
def Kuf_convolved_latent(
    inducing_variable: LatentInducingPoints, kernel: ConvolvedKernel, Xnew: TensorType
) -> tf.Tensor:
    """
    :meth:`~gpflow_tight.kernels.ConvolvedKernel.K_latent_output`: the covariance of the latent
    values with the outputs at the stacked inputs ``Xnew`` [N, D + 1] (output index last).
    """
    kernel.check_latent_index(inducing_variable._latent_index)
    Z = tf.convert_to_tensor(inducing_variable.Z)
    return kernel.K_latent_output(Z, inducing_variable.latent_index, Xnew)
