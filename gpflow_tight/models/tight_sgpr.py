"""T-SGPR: the collapsed tighter bound of Bui, Ashman & Turner (2025), as a drop-in for SGPR."""

from typing import Any

import tensorflow as tf
from check_shapes import check_shapes, inherit_check_shapes
from gpflow.base import InputData, MeanAndVariance, RegressionData
from gpflow.config import default_jitter
from gpflow.covariances import Kuf, Kuu
from gpflow.models import SGPR
from gpflow.utilities import add_noise_cov, to_default_float

from ..tighter import log_residual_term, relaxation_from_beta
from ..validation import (
    KUU,
    check_cholesky_factor,
    check_regression_data,
    checked_cholesky,
    explain_cholesky_failure,
)
from .base import ExplainsCholeskyFailures

__all__ = ["TightSGPR"]


class TightSGPR(ExplainsCholeskyFailures, SGPR):
    """
    Sparse GP regression with the collapsed tighter bound (T-SGPR) of
    :cite:t:`bui2025tighter` (eq. 9):

    .. math::
        \\mathcal F_4 = \\log \\mathcal N(\\mathbf y \\mid \\mathbf 0, Q_{ff} + \\sigma^2 I)
            - \\tfrac12 \\sum_n \\log\\Big(1 + \\frac{d_n}{\\sigma_n^2}\\Big),
        \\qquad d_n = k_{nn} - k_{nu} K_{uu}^{-1} k_{un}.

    Titsias's SGPR bound has :math:`\\tfrac12 \\sum_n d_n / \\sigma_n^2` in place of the sum of
    logarithms; since :math:`\\log(1 + x) \\le x` the bound is never looser, at the same
    :math:`O(NM^2)` cost. A heteroscedastic Gaussian likelihood (``variance_at``) is supported.

    The optimal :math:`q(\\mathbf u)` is Titsias's, so ``compute_qu``, ``posterior()`` and the
    predictions are SGPR's: the paper's default prediction drops the two :math:`O(N^3)` terms of
    its eq. 12 (its Table 1 finds no loss). With ``exact_predictive_variance=True`` (a
    constructor argument, also settable as an attribute) :meth:`predict_f`, and so ``predict_y``
    and ``predict_log_density``, use the exact variance of eq. 12, with the symmetric
    :math:`S_f = M^{1/2} D_{ff} M^{1/2}`: it builds and factorises the :math:`N \\times N` matrix
    :math:`D_{ff}` and is meant for small N only. ``posterior()``
    always uses the cheap form. :math:`D_{ff}` is often numerically singular, so the default jitter
    is added before factorising it; the error this causes grows with the jitter and the
    conditioning of :math:`D_{ff}` (about 2e-4 absolute at training inputs on Snelson's data with
    jitter 1e-6; the tests check the identity at jitter 1e-9).

    The constructor is SGPR's, plus ``exact_predictive_variance``.
    """

    def __init__(
        self,
        data: RegressionData,
        *args: Any,
        exact_predictive_variance: bool = False,
        **kwargs: Any,
    ) -> None:
        check_regression_data(data)
        super().__init__(data, *args, **kwargs)
        self.exact_predictive_variance = bool(exact_predictive_variance)

    def _common_calculation(self) -> SGPR.CommonTensors:
        common = super()._common_calculation()
        return common._replace(
            L=check_cholesky_factor(common.L, KUU),
            LB=check_cholesky_factor(common.LB, "B = I + A Aᵀ (the SGPR inner matrix)"),
        )

    @inherit_check_shapes
    def logdet_term(self, common: SGPR.CommonTensors) -> tf.Tensor:
        """
        :math:`-\\tfrac P2 \\big[\\log|B| + \\sum_n \\log\\sigma_n^2
        + \\sum_n \\log(1 + d_n/\\sigma_n^2)\\big]`, where SGPR has the trace term
        :math:`\\sum_n d_n / \\sigma_n^2` last.
        """
        x, y = self.data
        output_dim = to_default_float(tf.shape(y)[1])
        # A = L⁻¹ K_uf / σ, so the column sums of A² are q_nn / σ_n².
        scaled_residual = self.kernel(x, full_cov=False) / common.sigma_sq - tf.reduce_sum(
            tf.square(common.A), axis=0
        )
        half_logdet_b = tf.reduce_sum(tf.math.log(tf.linalg.diag_part(common.LB)))
        half_log_sigma_sq = 0.5 * tf.reduce_sum(tf.math.log(common.sigma_sq))
        return output_dim * (log_residual_term(scaled_residual) - half_logdet_b - half_log_sigma_sq)

    @inherit_check_shapes
    def elbo(self) -> tf.Tensor:
        """The T-SGPR bound :math:`\\mathcal F_4` (eq. 9)."""
        with explain_cholesky_failure():
            return super().elbo()

    @inherit_check_shapes
    def predict_f(
        self, Xnew: InputData, full_cov: bool = False, full_output_cov: bool = False
    ) -> MeanAndVariance:
        """SGPR's prediction, or with ``exact_predictive_variance`` the variance of eq. 12."""
        with explain_cholesky_failure():
            mean, var = super().predict_f(Xnew, full_cov=full_cov, full_output_cov=full_output_cov)
            if not self.exact_predictive_variance:
                return mean, var
            correction = self.exact_variance_correction(Xnew, full_cov=full_cov)
        if full_cov:
            return mean, var + correction[None, :, :]
        return mean, var + correction[:, None]

    @check_shapes(
        "Xnew: [N_new, D]",
        "return: [N_new, N_new] if full_cov",
        "return: [N_new] if not full_cov",
    )
    def exact_variance_correction(self, Xnew: InputData, full_cov: bool = False) -> tf.Tensor:
        """
        The two terms of eq. 12 that the default prediction drops,
        :math:`\\mathbf c_{*f} D_{ff}^{-1} S_f D_{ff}^{-1} \\mathbf c_{f*}
        - \\mathbf c_{*f} D_{ff}^{-1} \\mathbf c_{f*}` with
        :math:`\\mathbf c_{*f} = \\mathbf k_{*f} - \\mathbf k_{*u} K_{uu}^{-1} K_{uf}`,
        :math:`S_f = M^{1/2} D_{ff} M^{1/2}` and the collapsed optimum
        :math:`m_n = \\sigma_n^2 / (d_n + \\sigma_n^2)`. At a training input it is
        :math:`-(1 - m_n) d_n`. Costs :math:`O(N^3)` time and :math:`O(N^2)` memory.
        """
        X, _ = self.data
        jitter = default_jitter()
        L = checked_cholesky(Kuu(self.inducing_variable, self.kernel, jitter=jitter), KUU)
        A_f = tf.linalg.triangular_solve(L, Kuf(self.inducing_variable, self.kernel, X))
        A_new = tf.linalg.triangular_solve(L, Kuf(self.inducing_variable, self.kernel, Xnew))
        D_ff = self.kernel(X) - tf.linalg.matmul(A_f, A_f, transpose_a=True)
        C_new_f = self.kernel(Xnew, X) - tf.linalg.matmul(A_new, A_f, transpose_a=True)

        residual = tf.linalg.diag_part(D_ff)
        sigma_sq = tf.squeeze(self.likelihood.variance_at(X), axis=-1)
        sqrt_m = tf.sqrt(relaxation_from_beta(residual, sigma_sq))
        L_D = checked_cholesky(
            add_noise_cov(D_ff, tf.cast(jitter, D_ff.dtype)), "D_ff = K_ff - Q_ff (the residual)"
        )
        W = tf.linalg.cholesky_solve(L_D, tf.linalg.adjoint(C_new_f))  # D_ff⁻¹ c_f*, [N, N_new]
        S_f_W = tf.linalg.matmul(sqrt_m[:, None] * D_ff * sqrt_m[None, :], W)
        if full_cov:
            return tf.linalg.matmul(W, S_f_W, transpose_a=True) - tf.linalg.matmul(C_new_f, W)
        return tf.reduce_sum(W * S_f_W, axis=0) - tf.reduce_sum(tf.linalg.adjoint(C_new_f) * W, 0)
