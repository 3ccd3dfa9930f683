"""
Marginals of the sparse variational posterior at the training inputs, together with the residual
variances :math:`d_n` that the tighter bounds need, from one factorisation.

GPflow's conditionals compute :math:`A = L_{uu}^{-1} K_{uf}` and
:math:`d_n = k_{nn} - \\|A_{:n}\\|^2` internally but do not return :math:`d_n`; recomputing
it would repeat the :math:`O(NM^2)` triangular solve, so this module computes the marginals and
:math:`d_n` together.
"""

import tensorflow as tf
from check_shapes import check_shape as cs
from check_shapes import check_shapes
from gpflow import kernels
from gpflow.config import default_jitter
from gpflow.covariances import Kuf, Kuu
from gpflow.inducing_variables import InducingVariables

from .validation import KUU, checked_cholesky

__all__ = ["latent_kernel_diag", "independent_marginals_with_residual"]


@check_shapes(
    "X: [N, D]",
    "return: [L_or_1, N]",
)
def latent_kernel_diag(kernel: kernels.Kernel, X: tf.Tensor) -> tf.Tensor:
    """Prior variances :math:`k_{nn}` of each latent GP, stacked along the first axis."""
    if isinstance(kernel, kernels.SeparateIndependent | kernels.IndependentLatent):
        return tf.stack([k(X, full_cov=False) for k in kernel.kernels], axis=0)
    if isinstance(kernel, kernels.SharedIndependent):
        return kernel.kernel(X, full_cov=False)[None, :]
    return kernel(X, full_cov=False)[None, :]


@check_shapes(
    "X: [N, D]",
    "q_mu: [M, L]",
    "return[0]: [N, L]",
    "return[1]: [N, L]",
    "return[2]: [N, L]",
)
def independent_marginals_with_residual(
    kernel: kernels.Kernel,
    inducing_variable: InducingVariables,
    q_mu: tf.Tensor,
    q_sqrt: tf.Tensor,
    whiten: bool,
    X: tf.Tensor,
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """
    For independent latent GPs (single-output kernels, ``SharedIndependent``,
    ``SeparateIndependent`` and the latent GPs of ``LinearCoregionalization``, with shared or
    separate inducing variables), the marginals of :math:`q(f_n) = \\int p(f_n \\mid u) q(u) du`
    split into their two variance terms:

    * the mean :math:`k_{nu} K_{uu}^{-1} m` (without the mean function),
    * the variance carried by :math:`q(u)`, :math:`k_{nu} K_{uu}^{-1} S K_{uu}^{-1} k_{un}`
      (whitened: :math:`a_n^\\top L_S L_S^\\top a_n` with :math:`a_n = L_{uu}^{-1} k_{un}`),
    * the residual variance :math:`d_n = k_{nn} - k_{nu} K_{uu}^{-1} k_{un}`.

    SVGP's marginal variance is the sum of the last two; this matches GPflow's
    ``base_conditional`` term by term.

    :return: mean, variance from q(u), residual variance; each [N, L].
    """
    cs(q_sqrt, "[M, L]" if q_sqrt.shape.ndims == 2 else "[L, M, M]")
    Kmm = Kuu(inducing_variable, kernel, jitter=default_jitter())  # [M, M] or [L, M, M]
    Kmn = Kuf(inducing_variable, kernel, X)  # [M, N] or [L, M, N]
    if Kmm.shape.ndims == 2:
        Kmm, Kmn = Kmm[None], Kmn[None]
    Lm = checked_cholesky(Kmm, KUU)
    A = tf.linalg.triangular_solve(Lm, Kmn, lower=True)  # [L or 1, M, N]
    residual = latent_kernel_diag(kernel, X) - tf.reduce_sum(tf.square(A), axis=-2)
    if not whiten:
        A = tf.linalg.triangular_solve(tf.linalg.adjoint(Lm), A, lower=False)

    mean = tf.linalg.matmul(A, tf.transpose(q_mu)[:, :, None], transpose_a=True)[..., 0]
    if q_sqrt.shape.ndims == 2:
        LTA = A * tf.transpose(q_sqrt)[:, :, None]  # [L, M, N]
    else:
        LTA = tf.linalg.matmul(tf.linalg.band_part(q_sqrt, -1, 0), A, transpose_a=True)
    q_variance = tf.reduce_sum(tf.square(LTA), axis=-2)  # [L, N]
    residual = tf.broadcast_to(residual, tf.shape(q_variance))
    return tf.transpose(mean), tf.transpose(q_variance), tf.transpose(residual)
