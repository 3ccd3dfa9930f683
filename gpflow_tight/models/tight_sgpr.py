"""
Collapsed sparse GP regression with a relaxation of the conditional :math:`q(f \\mid u)`
(:class:`RelaxedSGPR`), and its tighter-bound preset T-SGPR (:class:`TightSGPR`) of Bui,
Ashman & Turner (2025), both drop-ins for ``gpflow.models.SGPR``.
"""

from typing import Any

import numpy as np
import tensorflow as tf
from check_shapes import check_shapes, inherit_check_shapes
from gpflow.base import InputData, MeanAndVariance, Parameter, RegressionData
from gpflow.config import default_jitter
from gpflow.kernels import Kernel
from gpflow.likelihoods import Gaussian
from gpflow.models import SGPR
from gpflow.posteriors import PrecomputeCacheType, SGPRPosterior
from gpflow.utilities import add_noise_cov, to_default_float

from ..projection import (
    CollapsedTerms,
    Projection,
    collapsed_common_terms,
    collapsed_quad_term,
    project,
    residual_variance,
)
from ..relaxation import Relaxation, as_relaxation
from ..validation import (
    check_gaussian_likelihood,
    check_inducing_variable,
    check_input_dim,
    check_kernel,
    check_noise_variance,
    check_regression_data,
    checked_cholesky,
    checked_test_data,
    checked_xnew,
    checks_arguments,
    explain_cholesky_failure,
    held_data,
    inducing_input_dim,
)
from .base import ConstructorOnly, InfiniteLossOnCholeskyFailure

__all__ = ["RelaxedSGPR", "TightSGPR"]

RESIDUAL = "D_ff = K_ff - Q_ff (the residual covariance of the training inputs)"

# each collapsed model's uncollapsed peer (the same bound and relaxation, any likelihood)
UNCOLLAPSED_COUNTERPARTS = {
    "RelaxedSGPR": "RelaxedSVGP",
    "TightSGPR": "TightSVGP",
    "SOLVEGPR": "SOLVEGP",
    "TightSOLVEGPR": "TightSOLVEGP",
    "ODGPR": "ODVGP",
}


def _uncollapsed_counterpart(cls: type) -> str:
    """The uncollapsed peer of ``cls`` or of the package's class it derives from."""
    names = (base.__name__ for base in cls.__mro__)
    return next(
        UNCOLLAPSED_COUNTERPARTS[name] for name in names if name in UNCOLLAPSED_COUNTERPARTS
    )


def constant_noise_variance(likelihood: Any) -> tf.Tensor | None:
    """
    The noise variance of a ``gpflow.likelihoods.Gaussian`` whose variance (or scale) is one
    parameter rather than a function of the inputs, else ``None`` (heteroscedastic noise).
    """
    if not isinstance(likelihood, Gaussian):
        return None
    if isinstance(likelihood.variance, Parameter) and likelihood.variance.shape.rank == 0:
        return tf.convert_to_tensor(likelihood.variance)
    if isinstance(likelihood.scale, Parameter) and likelihood.scale.shape.rank == 0:
        return tf.square(tf.convert_to_tensor(likelihood.scale))
    return None


@checks_arguments(checked_test_data, "data", "predict_log_density")
@checks_arguments(
    checked_xnew,
    "Xnew",
    "predict_f",
    "predict_y",
    "predict_f_samples",
    "exact_variance_correction",
)
class RelaxedSGPR(InfiniteLossOnCholeskyFailure, ConstructorOnly, SGPR):
    """
    SGPR (:cite:t:`titsias2009variational`) whose conditional :math:`q(\\mathbf f \\mid
    \\mathbf u)` has variances :math:`m_n d_n` (:cite:t:`bui2025tighter`, §3). The optimal
    :math:`q(\\mathbf u)` does not depend on :math:`m_n`, so the collapsed bound is SGPR's with
    Titsias's trace term :math:`-\\tfrac{P}{2}\\sum_n d_n/\\sigma_n^2` replaced by the
    relaxation's residual term

    .. math::
        -\\tfrac P2 \\sum_n \\frac{m_n d_n}{\\sigma_n^2} + \\tfrac P2 \\sum_n [1 + \\log m_n - m_n],

    and ``compute_qu``, ``posterior()`` and the predictions are SGPR's.

    :param relaxation: ``"none"`` (:math:`m_n = 1`: exactly ``gpflow.models.SGPR``),
        ``"optimal"`` (:math:`m_n = \\sigma_n^2/(d_n + \\sigma_n^2)`, the T-SGPR bound, eq. 9),
        ``"beta"`` (one :math:`\\beta`, by default a constant noise variance, where it is
        optimal, else 1) or
        ``"free"``, or a :class:`~gpflow_tight.relaxation.Relaxation`.
    :param beta: initial :math:`\\beta` for ``relaxation="beta"``.
    :param exact_predictive_variance: make :meth:`predict_f` (and so ``predict_y`` and
        ``predict_log_density``) add the two :math:`O(N^3)` terms of eq. 12 that the default
        prediction drops (see :meth:`exact_variance_correction`); for small N only. Fixed at
        construction; :meth:`posterior` refuses it (its cache has no :math:`N \\times N` terms).

    The other arguments are SGPR's (a heteroscedastic Gaussian likelihood with ``variance_at``
    works). Subclasses change the inducing set through :meth:`projection`.

    Bad input is refused with a ``ValueError``/``TypeError`` that names the argument
    (:mod:`gpflow_tight.validation`): ``data`` at construction (2-D, one row per point, finite,
    as many columns as the inducing inputs), ``noise_variance``, ``likelihood`` (a
    ``gpflow.likelihoods.Gaussian``, where GPflow's SGPR fails only at the first bound),
    ``inducing_variable`` (finite), and ``Xnew`` of every prediction. Data of another real
    dtype than GPflow's default float (float32, integers) are cast to it, with a one-time
    ``DtypeCastWarning``.
    """

    _constructor_only: tuple[str, ...] = ("relaxation", "exact_predictive_variance")
    _default_relaxation = "none"
    _relaxations = ("none", "optimal", "beta", "free")

    def __init__(
        self,
        data: RegressionData,
        kernel: Kernel,
        inducing_variable: Any,
        *,
        relaxation: str | Relaxation | None = None,
        beta: Any = None,
        exact_predictive_variance: bool = False,
        **kwargs: Any,
    ) -> None:
        X, Y = check_regression_data(data)
        check_noise_variance(kwargs.get("noise_variance"))
        check_gaussian_likelihood(
            kwargs.get("likelihood"),
            f"{type(self).__name__}'s bound is collapsed for Gaussian noise; for other "
            f"likelihoods use gpflow_tight.{_uncollapsed_counterpart(type(self))}",
        )
        check_inducing_variable(inducing_variable)
        super().__init__(held_data(data, (X, Y)), kernel, inducing_variable, **kwargs)
        check_input_dim(X.shape, inducing_input_dim(self.inducing_variable), "data X")
        check_kernel(kernel, X.shape[1])
        relaxation = self._default_relaxation if relaxation is None else relaxation
        variance = getattr(self.likelihood, "variance", None)
        if relaxation == "beta" and beta is None and isinstance(variance, Parameter):
            beta = variance.numpy()  # the optimum for a constant noise variance
        self.relaxation = as_relaxation(
            relaxation,
            allowed=self._relaxations,
            model=type(self).__name__,
            num_data=X.shape[0],
            beta=beta,
        )
        self.exact_predictive_variance = bool(exact_predictive_variance)

    @classmethod
    def sharing(cls, model: SGPR, **kwargs: Any) -> "RelaxedSGPR":
        """
        This class's model on the parts of an existing ``gpflow.models.SGPR``: the same data,
        kernel, inducing variable, likelihood and mean function objects, so the two share every
        parameter. Training the returned model trains ``model``, and ``model`` keeps its own
        predictions and everything else.

        ``RelaxedSGPR.sharing(sgpr).training_loss_closure()`` is SGPR's own bound (equal to
        ``sgpr.training_loss()``) through this package's faster path
        (:func:`~gpflow_tight.projection.collapsed_common_terms`; docs/performance.md);
        ``TightSGPR.sharing(sgpr)`` is the tighter bound on the same parameters.

        :param kwargs: the keyword arguments of this class's constructor that SGPR has not
            (``relaxation``, ``beta``, ``exact_predictive_variance``).
        """
        if not isinstance(model, SGPR):
            raise TypeError(
                f"`model` must be a gpflow.models.SGPR, got {type(model).__name__}: other "
                "models do not compute SGPR's bound."
            )
        return cls(
            model.data,
            model.kernel,
            model.inducing_variable,
            likelihood=model.likelihood,
            mean_function=model.mean_function,
            num_latent_gps=model.num_latent_gps,
            **kwargs,
        )

    def projection(self, X: InputData | None = None) -> Projection:
        """:math:`(L, A, \\mathbf d)` of the inputs ``X`` (default: the training inputs)."""
        X = self.data[0] if X is None else X
        return project(self.inducing_variable, self.kernel, X, name="X")

    def common_terms(self) -> CollapsedTerms:
        """SGPR's common tensors of the bound, and the residual variances :math:`d_n`."""
        X, _ = self.data
        sigma_sq = tf.squeeze(self.likelihood.variance_at(X), axis=-1)
        return collapsed_common_terms(
            self.projection(), sigma_sq, constant_noise_variance(self.likelihood)
        )

    @inherit_check_shapes
    def logdet_term(self, common: CollapsedTerms | SGPR.CommonTensors) -> tf.Tensor:  # type: ignore[override]
        """
        :math:`-\\tfrac P2 \\big[\\log|B| + \\sum_n \\log\\sigma_n^2\\big]` plus :math:`P` times
        the relaxation's residual term (SGPR's trace term for ``"none"``).
        """
        output_dim = to_default_float(tf.shape(self.data[1])[1])
        half_logdet_b = tf.reduce_sum(tf.math.log(tf.linalg.diag_part(common.LB)))
        half_log_sigma_sq = 0.5 * tf.reduce_sum(tf.math.log(common.sigma_sq))
        residual = getattr(common, "residual", None)
        if residual is None:  # GPflow's SGPR.CommonTensors: A = L⁻¹K_uf/σ
            kernel_diag = self.kernel(self.data[0], full_cov=False)
            residual = residual_variance(kernel_diag, common.A * common.sigma)
        residual_term = self.relaxation.gaussian_residual_term(
            residual[:, None], common.sigma_sq[:, None]
        )
        return output_dim * (residual_term - half_logdet_b - half_log_sigma_sq)

    @inherit_check_shapes
    def quad_term(self, common: CollapsedTerms | SGPR.CommonTensors) -> tf.Tensor:  # type: ignore[override]
        """
        SGPR's data-fit term :math:`-\\tfrac12\\mathbf r^\\top(Q_{ff} + \\Sigma)^{-1}\\mathbf r`
        (:func:`~gpflow_tight.projection.collapsed_quad_term`).
        """
        if not isinstance(common, CollapsedTerms):  # GPflow's SGPR.CommonTensors
            return super().quad_term(common)
        X, Y = self.data
        return collapsed_quad_term(common, Y - self.mean_function(X))

    @inherit_check_shapes
    def elbo(self) -> tf.Tensor:
        """The collapsed bound with the relaxation's residual term."""
        with explain_cholesky_failure():
            common = self.common_terms()
            num_data, output_dim = (to_default_float(n) for n in tf.unstack(tf.shape(self.data[1])))
            const = -0.5 * num_data * output_dim * np.log(2 * np.pi)
            return const + self.logdet_term(common) + self.quad_term(common)  # type: ignore[arg-type]

    def posterior(
        self, precompute_cache: PrecomputeCacheType = PrecomputeCacheType.TENSOR
    ) -> SGPRPosterior:
        """SGPR's posterior (refused with ``exact_predictive_variance``, which it cannot hold)."""
        if self.exact_predictive_variance:
            raise ValueError(
                "posterior() caches SGPR's prediction, without the N x N terms of "
                "`exact_predictive_variance=True`: use `predict_f`, or `default_posterior()` for "
                "the cached prediction without them."
            )
        return self.default_posterior(precompute_cache)

    def default_posterior(
        self, precompute_cache: PrecomputeCacheType = PrecomputeCacheType.TENSOR
    ) -> Any:
        """The posterior of the default prediction (eq. 12 without its :math:`O(N^3)` terms)."""
        return SGPR.posterior(self, precompute_cache)

    @inherit_check_shapes
    def predict_f(
        self, Xnew: InputData, full_cov: bool = False, full_output_cov: bool = False
    ) -> MeanAndVariance:
        """SGPR's prediction, or with ``exact_predictive_variance`` the variance of eq. 12."""
        with explain_cholesky_failure():
            mean, var = self._predict_f_without_correction(Xnew, full_cov, full_output_cov)
            if not self.exact_predictive_variance:
                return mean, var
            correction = self.exact_variance_correction(Xnew, full_cov=full_cov)
        if full_cov:
            return mean, var + correction[None, :, :]
        return mean, var + correction[:, None]

    def _predict_f_without_correction(
        self, Xnew: InputData, full_cov: bool, full_output_cov: bool
    ) -> MeanAndVariance:
        return self.default_posterior(PrecomputeCacheType.NOCACHE).fused_predict_f(
            Xnew, full_cov=full_cov, full_output_cov=full_output_cov
        )

    @check_shapes(
        "Xnew: [N_new, D]",
        "return: [N_new, N_new] if full_cov",
        "return: [N_new] if not full_cov",
    )
    def exact_variance_correction(self, Xnew: InputData, full_cov: bool = False) -> tf.Tensor:
        """
        The two terms of eq. 12 that the default prediction drops,
        :math:`\\mathbf c_{*f} D_{ff}^{-1} S_f D_{ff}^{-1} \\mathbf c_{f*}
        - \\mathbf c_{*f} D_{ff}^{-1} \\mathbf c_{f*}`, with :math:`\\mathbf c_{*f}` the residual
        covariance of the prior conditional given the inducing variables,
        :math:`D_{ff} = C_{ff}` and :math:`S_f = M^{1/2} D_{ff} M^{1/2}`,
        :math:`M = \\mathrm{diag}(m_n)` from the relaxation. At a training input it is
        :math:`-(1 - m_n) d_n`. :math:`O(N^3)` time, :math:`O(N^2)` memory.

        :math:`D_{ff}` is often numerically singular, so the default jitter is added before
        factorising it; the error this causes grows with the jitter and the conditioning of
        :math:`D_{ff}` (about 2e-4 absolute at training inputs on Snelson's data with jitter
        1e-6).
        """
        X, _ = self.data
        jitter = default_jitter()
        train, test = self.projection(X), self.projection(Xnew)
        D_ff = self.kernel(X) - tf.linalg.matmul(train.A, train.A, transpose_a=True)
        C_new_f = self.kernel(Xnew, X) - tf.linalg.matmul(test.A, train.A, transpose_a=True)
        noise = self.likelihood.variance_at(X)
        sqrt_m = tf.sqrt(self.relaxation.weights(train.residual[:, None], noise)[:, 0])
        L_D = checked_cholesky(add_noise_cov(D_ff, tf.cast(jitter, D_ff.dtype)), RESIDUAL)
        W = tf.linalg.cholesky_solve(L_D, tf.linalg.adjoint(C_new_f))  # D_ff⁻¹ c_f*, [N, N_new]
        S_f_W = tf.linalg.matmul(sqrt_m[:, None] * D_ff * sqrt_m[None, :], W)
        if full_cov:
            return tf.linalg.matmul(W, S_f_W, transpose_a=True) - tf.linalg.matmul(C_new_f, W)
        return tf.reduce_sum(W * S_f_W, axis=0) - tf.reduce_sum(tf.linalg.adjoint(C_new_f) * W, 0)


class TightSGPR(RelaxedSGPR):
    """
    Sparse GP regression with the collapsed tighter bound (T-SGPR) of
    :cite:t:`bui2025tighter` (eq. 9):

    .. math::
        \\mathcal F_4 = \\log \\mathcal N(\\mathbf y \\mid \\mathbf 0, Q_{ff} + \\sigma^2 I)
            - \\tfrac12 \\sum_n \\log\\Big(1 + \\frac{d_n}{\\sigma_n^2}\\Big),
        \\qquad d_n = k_{nn} - k_{nu} K_{uu}^{-1} k_{un}.

    Titsias's SGPR bound has :math:`\\tfrac12 \\sum_n d_n / \\sigma_n^2` in place of the sum of
    logarithms; since :math:`\\log(1 + x) \\le x` the bound is never looser, at the same
    :math:`O(NM^2)` cost. This is :class:`RelaxedSGPR` with ``relaxation="optimal"``: the
    constructor is SGPR's, plus ``exact_predictive_variance`` (eq. 12 with the symmetric
    :math:`S_f = M^{1/2} D_{ff} M^{1/2}`; the paper's default prediction, SGPR's, drops its two
    :math:`O(N^3)` terms and its Table 1 finds no loss) and ``relaxation``.
    """

    _default_relaxation = "optimal"
