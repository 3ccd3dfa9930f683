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
:math:`d_n` from it, so the tighter bounds' :math:`\\log(1 + d_n/\\sigma^2)`, Power EP's
:math:`\\alpha d_n + \\sigma^2` and the marginal variances all see the same non-negative number.

The Bayesian GPLVM replaces :math:`k_{nn}`, :math:`K_{uf}` and :math:`K_{uf}K_{fu}` by their
expectations under :math:`q(\\mathbf x_n)` (the psi statistics); :func:`expected_projection`
is the same projection in that form, with each point's :math:`\\Psi_{2,n}` centred by
:math:`\\boldsymbol\\psi_{1,n}\\boldsymbol\\psi_{1,n}^\\top` before it meets :math:`K_{uu}^{-1}`.
"""

from typing import Any, NamedTuple

import tensorflow as tf
from check_shapes import check_shape as cs
from check_shapes import check_shapes
from gpflow import kernels
from gpflow.base import TensorType
from gpflow.config import default_jitter
from gpflow.covariances import Kuf, Kuu
from gpflow.inducing_variables import InducingVariables

from .validation import KUU, check_static_inputs, checked_cholesky, inducing_input_dim

__all__ = [
    "Projection",
    "residual_variance",
    "latent_kernel_diag",
    "inducing_cholesky",
    "project",
    "marginals_with_residual",
    "CollapsedTerms",
    "collapsed_common_terms",
    "collapsed_quad_term",
    "ExpectedProjection",
    "expected_projection",
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
    return tf.maximum(prior_variance - squared_column_norms(A), 0.0)


@tf.custom_gradient
def squared_column_norms(A: tf.Tensor) -> Any:
    """
    :math:`\\|\\mathbf a_n\\|^2` for the columns of ``A`` [..., M, N], with the gradient
    :math:`2\\mathbf a_n \\bar q_n` formed in one pass over ``A`` where TensorFlow's gradient of
    the square and the sum takes three: at small M these passes are a measurable share of a
    collapsed step. (TensorFlow's fused ``reduce_euclidean_norm`` would save a pass forward too,
    but XLA cannot compile it.)
    """

    def gradient(d_norms: tf.Tensor) -> tf.Tensor:
        return A * (2.0 * d_norms)[..., None, :]

    return tf.reduce_sum(tf.square(A), axis=-2), gradient


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
    *,
    name: str = "Xnew",
) -> Projection:
    """
    :math:`(L, A, \\mathbf d)` for inputs ``X`` [N, D], at :math:`O(NM^2)`. Single-output kernels
    give ``L`` [M, M], ``A`` [M, N], ``residual`` [N]; GPflow's independent multi-output
    kernels and inducing variables give a leading latent axis (of length 1 when shared).

    :param L: the Cholesky factor of :math:`K_{uu} + \\varepsilon I`, when already known.
    :param name: the user's name for ``X``, in the ``ValueError`` raised (before any
        computation) when ``X`` is not a matrix with one column per input dimension of the
        inducing variables.
    """
    check_static_inputs(X, inducing_input_dim(inducing_variable), name)
    if L is None:
        L = inducing_cholesky(inducing_variable, kernel)
    # a known rank for the branches below, also under an input signature of unknown shape
    X = tf.ensure_shape(X, [None, None])
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
    read them), plus the residual variances :math:`d_n` the tighter bounds need and
    ``A_unscaled`` :math:`= L^{-1}K_{uf}` before the division by :math:`\\sigma_n`.
    """

    sigma_sq: tf.Tensor
    sigma: tf.Tensor
    A: tf.Tensor
    B: tf.Tensor
    LB: tf.Tensor
    AAT: tf.Tensor
    L: tf.Tensor
    residual: tf.Tensor
    A_unscaled: tf.Tensor


@check_shapes(
    "projection.L: [M, M]",
    "projection.A: [M, N]",
    "sigma_sq: [N]",
    "noise_variance: []",
    "return.sigma_sq: [N]",
    "return.sigma: [N]",
    "return.A: [M, N]",
    "return.B: [M, M]",
    "return.LB: [M, M]",
    "return.AAT: [M, M]",
    "return.L: [M, M]",
    "return.residual: [N]",
    "return.A_unscaled: [M, N]",
)
def collapsed_common_terms(
    projection: Projection, sigma_sq: tf.Tensor, noise_variance: tf.Tensor | None = None
) -> CollapsedTerms:
    """
    The tensors of the collapsed bound (Titsias 2009) from a projection: the noise variances,
    :math:`A = L^{-1}K_{uf}/\\sigma`, :math:`AA^\\top`, :math:`B = I + AA^\\top` and its Cholesky
    factor (checked), the projection's factor ``L`` and residuals :math:`d_n`.

    :param noise_variance: the noise variance when it is one number for every point (then
        ``sigma_sq`` holds it N times): :math:`AA^\\top` is then formed as
        :math:`L^{-1}K_{uf}K_{fu}L^{-\\top}/\\sigma^2`, and a bound that reads ``A_unscaled``
        instead of ``A`` (:func:`collapsed_quad_term`) never divides an :math:`M \\times N` matrix
        by :math:`\\sigma`, which saves several passes over it forward and backward.
    """
    sigma = tf.sqrt(sigma_sq)
    A = projection.A / sigma
    if noise_variance is None:
        AAT = tf.linalg.matmul(A, A, transpose_b=True)
    else:
        AAT = tf.linalg.matmul(projection.A, projection.A, transpose_b=True) / noise_variance
    B = AAT + tf.eye(tf.shape(A)[0], dtype=A.dtype)
    LB = checked_cholesky(B, INNER)
    return CollapsedTerms(
        sigma_sq, sigma, A, B, LB, AAT, projection.L, projection.residual, projection.A
    )


@check_shapes(
    "common.sigma_sq: [N]",
    "common.LB: [M, M]",
    "common.A_unscaled: [M, N]",
    "residual: [N, P]",
    "return: []",
)
def collapsed_quad_term(common: CollapsedTerms, residual: tf.Tensor) -> tf.Tensor:
    """
    The data-fit term of the collapsed bound, :math:`-\\tfrac12 \\mathbf r^\\top(Q_{ff} +
    \\Sigma)^{-1}\\mathbf r` for the residuals :math:`\\mathbf r = \\mathbf y - \\mathbf m(X)`, by
    the matrix inversion lemma: :math:`\\mathbf r^\\top\\Sigma^{-1}\\mathbf r - \\|\\mathbf
    c\\|^2`, :math:`\\mathbf c = L_B^{-1}L^{-1}K_{uf}\\Sigma^{-1}\\mathbf r` (GPflow's
    ``SGPR.quad_term``, with :math:`\\Sigma^{-1}` applied to the N residuals rather than
    :math:`\\Sigma^{-1/2}` to the :math:`M \\times N` matrix and the residuals).
    """
    weighted = residual / common.sigma_sq[:, None]
    c = tf.linalg.triangular_solve(
        common.LB, tf.linalg.matmul(common.A_unscaled, weighted), lower=True
    )
    return -0.5 * (tf.reduce_sum(residual * weighted) - tf.reduce_sum(tf.square(c)))


# ------------------------------------------------------------------------------------------------
# The projection in psi-statistic form (the Bayesian GPLVM)


class ExpectedProjection(NamedTuple):
    """
    The projection averaged over Gaussian inputs :math:`q(\\mathbf x_n)` (Titsias & Lawrence
    2010), from the psi statistics :math:`\\psi_{0,n} = \\langle k_{nn}\\rangle`,
    :math:`\\boldsymbol\\psi_{1,n} = \\langle\\mathbf k_{un}\\rangle` (the rows of
    :math:`\\Psi_1` [N, M]) and :math:`\\Psi_{2,n} = \\langle\\mathbf k_{un}\\mathbf
    k_{nu}\\rangle`, written with the covariance :math:`C_n = \\Psi_{2,n} -
    \\boldsymbol\\psi_{1,n}\\boldsymbol\\psi_{1,n}^\\top` of :math:`\\mathbf k_{un}` under
    :math:`q(\\mathbf x_n)`:

    * ``L`` [M, M], :math:`LL^\\top = K_{uu} + \\varepsilon I`;
    * ``A`` [M, N] :math:`= L^{-1}\\Psi_1^\\top`, with columns :math:`\\mathbf a_n`;
    * ``V`` [M, M] :math:`= L^{-1}\\big(\\sum_n C_n\\big)L^{-\\top}`, so that
      :math:`L^{-1}\\big(\\sum_n\\Psi_{2,n}\\big)L^{-\\top} = AA^\\top + V`;
    * ``residual`` [N], :math:`\\langle d_n\\rangle = \\psi_{0,n} -
      \\mathrm{tr}(K_{uu}^{-1}\\Psi_{2,n}) = \\psi_{0,n} - \\|\\mathbf a_n\\|^2 -
      \\mathrm{tr}(K_{uu}^{-1}C_n)`, clipped at zero (:func:`residual_variance`).
    """

    L: tf.Tensor
    A: tf.Tensor
    V: tf.Tensor
    residual: tf.Tensor


def _sum_and_trace(
    psi1: tf.Tensor, psi2: tf.Tensor, weights: tf.Tensor, centre: bool
) -> tuple[tf.Tensor, tf.Tensor]:
    """
    :math:`\\sum_n C_n` [M, M] and :math:`\\mathrm{tr}(W C_n)` [N] for ``weights`` :math:`W`
    [M, M], with :math:`C_n = \\Psi_{2,n} - \\boldsymbol\\psi_{1,n}\\boldsymbol\\psi_{1,n}^\\top`
    if ``centre``, else :math:`C_n = \\Psi_{2,n}`. The rows :math:`C_n` are formed once (and kept
    for the gradient with respect to :math:`W`, :math:`\\sum_n \\bar t_n C_n`); the gradient with
    respect to ``psi2`` is the rank-2 matrix :math:`\\mathbf 1\\,\\mathrm{vec}(\\bar T)^\\top +
    \\bar{\\mathbf t}\\,\\mathrm{vec}(W)^\\top` [N, M²], formed by one matrix product, and that
    with respect to ``psi1`` costs :math:`O(NM^2)`.
    """

    @tf.custom_gradient
    def sum_and_trace(psi1: tf.Tensor, psi2: tf.Tensor, weights: tf.Tensor) -> Any:
        num_inducing = tf.shape(weights)[0]
        flat_shape = tf.stack([-1, num_inducing * num_inducing])
        rows = tf.reshape(psi2, flat_shape)
        if centre:  # per point, before any sum or contraction: no large terms cancel afterwards
            rows -= tf.reshape(tf.einsum("na,nb->nab", psi1, psi1), flat_shape)
        ones = tf.ones(tf.shape(rows)[:1], dtype=rows.dtype)
        # the sum over points as a matrix-vector product: 2-5 times faster than reduce_sum on CPU
        total = tf.reshape(tf.linalg.matvec(rows, ones, transpose_a=True), tf.shape(weights))
        trace = tf.linalg.matvec(rows, tf.reshape(weights, [-1]))

        def gradient(d_total: tf.Tensor | None, d_trace: tf.Tensor | None) -> Any:
            d_total = tf.zeros_like(total) if d_total is None else d_total
            d_trace = tf.zeros_like(trace) if d_trace is None else d_trace
            left = tf.stack([tf.ones_like(d_trace), d_trace], axis=1)  # [N, 2]
            right = tf.stack([tf.reshape(d_total, [-1]), tf.reshape(weights, [-1])], axis=0)
            d_psi2 = tf.reshape(tf.linalg.matmul(left, right), tf.shape(psi2))
            d_psi1 = tf.zeros_like(psi1)
            if centre:  # C_n depends on ψ1_n through -ψ1_n ψ1_nᵀ: the gradient is -ψ1_n (G + Gᵀ)
                d_psi1 = -tf.linalg.matmul(psi1, d_total + tf.linalg.adjoint(d_total)) - d_trace[
                    :, None
                ] * tf.linalg.matmul(psi1, weights + tf.linalg.adjoint(weights))
            # from the rows themselves, not Ψ2 minus the outer products: accurate in float32
            d_weights = tf.reshape(
                tf.linalg.matvec(rows, d_trace, transpose_a=True), tf.shape(weights)
            )
            return d_psi1, d_psi2, d_weights

        return (total, trace), gradient

    total, trace = sum_and_trace(psi1, psi2, weights)
    return total, trace


@check_shapes(
    "psi0: [N]",
    "psi1: [N, M]",
    "psi2: [N, M, M]",
    "L: [M, M]",
    "return.L: [M, M]",
    "return.A: [M, N]",
    "return.V: [M, M]",
    "return.residual: [N]",
)
def expected_projection(
    psi0: tf.Tensor, psi1: tf.Tensor, psi2: tf.Tensor, L: tf.Tensor, centred: bool | None = None
) -> ExpectedProjection:
    """
    The projection of inputs :math:`\\mathbf x_n \\sim q(\\mathbf x_n)` from their per-point psi
    statistics (``gpflow.expectations`` before the sum over points), at :math:`O(NM^2 + M^3)`:
    the collapsed Bayesian GPLVM bound (Titsias & Lawrence 2010) reads
    :math:`L^{-1}\\Psi_1^\\top` and :math:`L^{-1}(\\sum_n\\Psi_{2,n})L^{-\\top}` from it,
    the tighter one (Bui, Ashman & Turner 2025, §5) also the per-point :math:`\\langle
    d_n\\rangle`.

    :math:`L^{-1}` is applied to the mean :math:`\\boldsymbol\\psi_{1,n}` by a triangular solve
    and to the spread :math:`C_n` separately (two triangular solves of :math:`\\sum_n C_n`; the
    per-point :math:`\\mathrm{tr}(K_{uu}^{-1}C_n)` is linear in :math:`C_n`, so at this cost it is
    a contraction with :math:`K_{uu}^{-1} = L^{-\\top}L^{-1}`). :math:`C_n` is small wherever
    :math:`q(\\mathbf x_n)` is narrow, so the round-off amplified by an ill-conditioned
    :math:`K_{uu}` stays small: in float32 the bounds are then as accurate as the float32 psi
    statistics allow, several times closer to float64 than those formed from :math:`\\Psi_{2,n}`
    directly (as GPflow's ``BayesianGPLVM`` does).

    :param psi0: :math:`\\psi_{0,n}` [N].
    :param psi1: :math:`\\Psi_1` [N, M].
    :param psi2: :math:`\\Psi_{2,n}` per point [N, M, M].
    :param L: the Cholesky factor of :math:`K_{uu} + \\varepsilon I` (:func:`inducing_cholesky`).
    :param centred: whether to centre each :math:`\\Psi_{2,n}` first. By default it is done below
        float64 only: in float64 the direct contraction is accurate to round-off (the two forms
        agree to about 1e-14 relative) and skips an :math:`O(NM^2)` pass, so the bound costs
        what GPflow's does.
    """
    if centred is None:
        centred = psi2.dtype != tf.float64
    A = tf.linalg.triangular_solve(L, tf.linalg.adjoint(psi1), lower=True)
    L_inv = tf.linalg.triangular_solve(L, tf.eye(tf.shape(L)[0], dtype=L.dtype), lower=True)
    Kuu_inv = tf.linalg.matmul(L_inv, L_inv, transpose_a=True)
    total, trace = _sum_and_trace(psi1, psi2, Kuu_inv, centre=centred)
    V = tf.linalg.triangular_solve(
        L, tf.linalg.adjoint(tf.linalg.triangular_solve(L, total, lower=True)), lower=True
    )
    if centred:
        return ExpectedProjection(L, A, V, residual_variance(psi0 - trace, A))
    V -= tf.linalg.matmul(A, A, transpose_b=True)
    return ExpectedProjection(L, A, V, tf.maximum(psi0 - trace, 0.0))
