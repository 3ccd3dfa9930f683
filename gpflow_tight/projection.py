"""
The projection of the training (or test) inputs onto the inducing variables, the one place where
every model of the package computes it.

For inducing variables :math:`\\mathbf u` with covariance :math:`K_{uu}` and cross-covariance
:math:`K_{uf}`:

* :math:`L` with :math:`L L^\\top = K_{uu} + \\varepsilon I` (``gpflow.config.default_jitter()``),
* :math:`A = L^{-1} K_{uf}`, whose column :math:`\\mathbf a_n` gives the Nyström variance
  :math:`q_{nn} = \\|\\mathbf a_n\\|^2`,
* the residual variances of the prior conditional :math:`p(f_n \\mid \\mathbf u)`,
  :math:`d_n = k_{nn} - \\|\\mathbf a_n\\|^2` (Titsias 2009; Bui, Ashman & Turner 2025, §3).

**Round-off policy.** :math:`d_n \\ge 0` exactly, but the subtraction can return a tiny
negative number when :math:`\\mathbf x_n` (nearly) coincides with an inducing input.
:func:`residual_variance` clips at zero, where the exact value lies; every model reads
:math:`d_n` from it, so the tighter bounds' :math:`\\log(1 + d_n/\\sigma^2)`, Power EP's :math:`\\alpha d_n + \\sigma^2` and
the marginal variances all see the same non-negative number.

The Bayesian GPLVM replaces :math:`k_{nn}`, :math:`K_{uf}` and :math:`K_{uf}K_{fu}` by their
expectations under :math:`q(\\mathbf x_n)` (the psi statistics); :func:`expected_projection`
is the same projection in that form, by triangular solves as GPflow's ``BayesianGPLVM`` does.
"""

from typing import NamedTuple

import tensorflow as tf
from check_shapes import check_shape as cs
from check_shapes import check_shapes
from gpflow import kernels
from gpflow.base import TensorType
from gpflow.config import default_jitter
from gpflow.covariances import Kuf, Kuu
from gpflow.inducing_variables import InducingVariables

from .validation import KUU, checked_cholesky

__all__ = [
    "Projection",
    "residual_variance",
    "latent_kernel_diag",
    "inducing_cholesky",
    "project",
    "projection_from_factor",
    "marginals_with_residual",
    "CollapsedTerms",
    "collapsed_common_terms",
]

INNER = "B = I + A Aᵀ (the whitened precision of the optimal q(u))"


class Projection(NamedTuple):
    """
    ``L`` [..., M, M] with :math:`LL^\\top = K_{uu} + \\varepsilon I`, ``A`` [..., M, N]
    :math:`= L^{-1}K_{uf}` and ``residual`` [..., N], :math:`d_n` (clipped at zero). The
    leading axis, when present, indexes independent latent GPs.
    """

    L: tf.Tensor
    A: tf.Tensor
    residual: tf.Tensor


@check_shapes(
    "prior_variance: [batch..., N]",
    "A: [batch..., M, N]",
    "return: [batch..., N]",
)
def residual_variance(prior_variance: tf.Tensor, A: tf.Tensor) -> tf.Tensor:
    """:math:`d_n = \\max(k_{nn} - \\|\\mathbf a_n\\|^2, 0)`: the package's one round-off policy."""
    return tf.maximum(prior_variance - tf.reduce_sum(tf.square(A), axis=-2), 0.0)


@check_shapes(
    "X: [N, D]",
    "return: [L_or_1, N]",
)
def latent_kernel_diag(kernel: kernels.Kernel, X: TensorType) -> tf.Tensor:
    """Prior variances :math:`k_{nn}` of each latent GP, stacked along the first axis."""
    if isinstance(kernel, kernels.SeparateIndependent | kernels.IndependentLatent):
        return tf.stack([k(X, full_cov=False) for k in kernel.kernels], axis=0)
    if isinstance(kernel, kernels.SharedIndependent):
        return kernel.kernel(X, full_cov=False)[None, :]
    return kernel(X, full_cov=False)[None, :]


def inducing_cholesky(
    inducing_variable: InducingVariables, kernel: kernels.Kernel, what: str = KUU
) -> tf.Tensor:
    """
    :math:`L = \\mathrm{chol}(K_{uu} + \\varepsilon I)` ([M, M], or [L, M, M] for separate
    latent GPs), failing with a :class:`~gpflow_tight.CholeskyError` naming ``what``.
    """
    return checked_cholesky(Kuu(inducing_variable, kernel, jitter=default_jitter()), what)


def project(
    inducing_variable: InducingVariables,
    kernel: kernels.Kernel,
    X: TensorType,
    L: tf.Tensor | None = None,
) -> Projection:
    """
    :math:`(L, A, \\mathbf d)` for inputs ``X`` [N, D], at :math:`O(NM^2)`. Single-output kernels
    give ``L`` [M, M], ``A`` [M, N], ``residual`` [N]; GPflow's independent multi-output
    kernels and inducing variables give a leading latent axis (of length 1 when shared).

    :param L: the Cholesky factor of :math:`K_{uu} + \\varepsilon I`, when already known.
    """
    if L is None:
        L = inducing_cholesky(inducing_variable, kernel)
    Kmn = Kuf(inducing_variable, kernel, X)
    if L.shape.ndims == 2 and Kmn.shape.ndims == 3:
        L = tf.broadcast_to(L, tf.concat([tf.shape(Kmn)[:1], tf.shape(L)], 0))
    A = tf.linalg.triangular_solve(L, Kmn, lower=True)
    prior_variance = latent_kernel_diag(kernel, X)  # [L or 1, N]
    if A.shape.ndims == 2:  # one latent GP, or latent GPs that share kernel and inducing set
        prior_variance = prior_variance[0]
    else:  # a shared kernel with separate inducing sets has one row of prior variances
        prior_variance = tf.broadcast_to(prior_variance, tf.shape(A)[::2])
    return Projection(L, A, residual_variance(prior_variance, A))


@check_shapes(
    "L: [M, M]",
    "Kmn: [M, N]",
    "prior_variance: [N]",
    "return.L: [M, M]",
    "return.A: [M, N]",
    "return.residual: [N]",
)
def projection_from_factor(L: tf.Tensor, Kmn: tf.Tensor, prior_variance: tf.Tensor) -> Projection:
    """The projection for a known factor ``L`` and cross-covariance :math:`K_{uf}`."""
    A = tf.linalg.triangular_solve(L, Kmn, lower=True)
    return Projection(L, A, residual_variance(prior_variance, A))


@check_shapes(
    "q_mu: [M, L]",
    "return[0]: [N, L]",
    "return[1]: [N, L]",
    "return[2]: [N, L]",
)
def marginals_with_residual(
    projection: Projection, q_mu: tf.Tensor, q_sqrt: tf.Tensor, whiten: bool
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """
    The marginals of :math:`q(f_n) = \\int p(f_n \\mid \\mathbf u) q(\\mathbf u) d\\mathbf u` of
    independent latent GPs, split into their two variance terms (SVGP; Hensman et al. 2013):

    * the mean :math:`\\mathbf k_{nu} K_{uu}^{-1}\\mathbf m` (without the mean function),
    * the variance carried by :math:`q(\\mathbf u)`, :math:`s_n = \\mathbf k_{nu} K_{uu}^{-1} S
      K_{uu}^{-1}\\mathbf k_{un}` (whitened: :math:`\\mathbf a_n^\\top R R^\\top\\mathbf a_n`),
    * the residual variance :math:`d_n` of the prior conditional.

    SVGP's marginal variance is :math:`s_n + d_n`; the tighter conditional of Bui, Ashman &
    Turner (2025, eq. 8) makes it :math:`s_n + m_n d_n`.

    :param q_sqrt: [M, L] (diagonal) or [L, M, M] (lower triangular).
    :return: mean, :math:`s_n`, :math:`d_n`; each [N, L].
    """
    q_mu, q_sqrt = tf.convert_to_tensor(q_mu), tf.convert_to_tensor(q_sqrt)
    cs(q_sqrt, "[M, L]" if q_sqrt.shape.ndims == 2 else "[L, M, M]")
    L, A, residual = projection
    if A.shape.ndims == 2:
        L, A, residual = L[None], A[None], residual[None]
    if not whiten:
        A = tf.linalg.triangular_solve(tf.linalg.adjoint(L), A, lower=False)
    mean = tf.linalg.matmul(A, tf.transpose(q_mu)[:, :, None], transpose_a=True)[..., 0]
    if q_sqrt.shape.ndims == 2:
        RtA = A * tf.transpose(q_sqrt)[:, :, None]  # [L, M, N]
    else:
        RtA = tf.linalg.matmul(tf.linalg.band_part(q_sqrt, -1, 0), A, transpose_a=True)
    q_variance = tf.reduce_sum(tf.square(RtA), axis=-2)  # [L, N]
    residual = tf.broadcast_to(residual, tf.shape(q_variance))
    return tf.transpose(mean), tf.transpose(q_variance), tf.transpose(residual)


class CollapsedTerms(NamedTuple):
    """
    The fields of GPflow's ``SGPR.CommonTensors`` (so SGPR's ``logdet_term`` and ``quad_term``
    read them), plus the residual variances :math:`d_n` the tighter bounds need.
    """

    sigma_sq: tf.Tensor
    sigma: tf.Tensor
    A: tf.Tensor
    B: tf.Tensor
    LB: tf.Tensor
    AAT: tf.Tensor
    L: tf.Tensor
    residual: tf.Tensor


@check_shapes(
    "projection.L: [M, M]",
    "projection.A: [M, N]",
    "sigma_sq: [N]",
    "return.sigma_sq: [N]",
    "return.sigma: [N]",
    "return.A: [M, N]",
    "return.B: [M, M]",
    "return.LB: [M, M]",
    "return.AAT: [M, M]",
    "return.L: [M, M]",
    "return.residual: [N]",
)
def collapsed_common_terms(projection: Projection, sigma_sq: tf.Tensor) -> CollapsedTerms:
    """
    The tensors of the collapsed bound (Titsias 2009) from a projection: the noise variances,
    :math:`A = L^{-1}K_{uf}/\\sigma`, :math:`AA^\\top`, :math:`B = I + AA^\\top` and its Cholesky
    factor (checked), the projection's factor ``L`` and residuals :math:`d_n`.
    """
    sigma = tf.sqrt(sigma_sq)
    A = projection.A / sigma
    AAT = tf.linalg.matmul(A, A, transpose_b=True)
    B = AAT + tf.eye(tf.shape(A)[0], dtype=A.dtype)
    LB = checked_cholesky(B, INNER)
    return CollapsedTerms(sigma_sq, sigma, A, B, LB, AAT, projection.L, projection.residual)
