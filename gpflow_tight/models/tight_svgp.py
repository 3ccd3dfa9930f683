"""T-SVGP: the uncollapsed tighter bound of Bui, Ashman & Turner (2025), as a drop-in for SVGP."""

from typing import Any, Literal

import numpy as np
import tensorflow as tf
from check_shapes import check_shapes, inherit_check_shapes
from gpflow.base import InputData, MeanAndVariance, Parameter, RegressionData
from gpflow.conditionals import conditional
from gpflow.conditionals.util import mix_latent_gp
from gpflow.config import default_float
from gpflow.likelihoods import Gaussian
from gpflow.models import SVGP
from gpflow.posteriors import (
    IndependentPosterior,
    LinearCoregionalizationPosterior,
    get_posterior_class,
)
from gpflow.utilities import positive

from ..conditionals import independent_marginals_with_residual
from ..tighter import conditional_relaxation_term, relaxation_from_beta
from ..validation import check_batch, check_positive, explain_cholesky_failure
from .base import ExplainsCholeskyFailures

__all__ = ["TightSVGP"]

Relaxation = Literal["beta", "free"]


class TightSVGP(ExplainsCholeskyFailures, SVGP):
    """
    Sparse variational GP with the uncollapsed tighter bound (T-SVGP) of
    :cite:t:`bui2025tighter` (eq. 8 and 10):

    .. math::
        \\mathcal F_2 = \\sum_n \\mathbb E_{\\mathcal N(f_n; \\mu_n, v_n)} \\log p(y_n \\mid f_n)
            + \\tfrac12 \\sum_n [1 + \\log m_n - m_n] - \\mathrm{KL}[q(u) \\| p(u)],
        \\qquad v_n = v_n^{\\text{SVGP}} - (1 - m_n) d_n,

    with :math:`d_n` the residual variance of the prior conditional at :math:`x_n`. With
    minibatches both sums over :math:`n` are scaled by ``num_data / batch_size``. Everything else
    is SVGP's: any likelihood (through ``variational_expectations``), ``whiten``, ``q_diag``,
    every multi-output setting of GPflow, ``posterior()`` and the predictions (which drop the
    expensive terms of eq. 12, as the paper does).

    :param relaxation: how :math:`m_n` is parameterised.

        * ``"beta"`` (default): :math:`m_n = \\beta / (d_n + \\beta)` with one positive ``beta``
          per latent GP (the paper's choice; :math:`\\beta = \\sigma^2` is optimal for a
          Gaussian likelihood). For GPflow's fully-correlated and fallback multi-output
          posteriors the relaxation acts on the output process, with a single shared ``beta``.
        * ``"free"``: a positive :math:`m_n` per training point and latent GP (N extra
          parameters, initialised at 1, where the bound equals SVGP's). The data passed to
          :meth:`elbo` must then be the whole training set, in a fixed order.

    :param beta: initial value of ``beta`` (scalar or one per latent GP). Defaults to the
        likelihood variance for a Gaussian likelihood with constant variance, otherwise 1.

    All other arguments are SVGP's. For ``relaxation="free"``, ``num_data`` is required.
    """

    def __init__(
        self,
        *args: Any,
        relaxation: Relaxation = "beta",
        beta: Any = None,
        **kwargs: Any,
    ) -> None:
        if relaxation not in ("beta", "free"):
            raise ValueError(f"`relaxation` must be 'beta' or 'free', got {relaxation!r}.")
        super().__init__(*args, **kwargs)
        self.relaxation = relaxation
        posterior_class = get_posterior_class(self.kernel, self.inducing_variable)
        self._independent_latents = issubclass(posterior_class, IndependentPosterior)
        self._mixes_latents = issubclass(posterior_class, LinearCoregionalizationPosterior)
        num_relaxations = self.num_latent_gps if self._independent_latents else 1

        if relaxation == "beta":
            if beta is None:
                beta = self._default_beta()
            beta = check_positive(beta, "beta")
            if beta.ndim > 1 or beta.size not in (1, num_relaxations):
                raise ValueError(
                    f"`beta` must be a scalar or have one value per latent GP ({num_relaxations})"
                    f", got shape {beta.shape}."
                )
            values: np.ndarray = np.broadcast_to(beta, (num_relaxations,)).astype(default_float())
            self.beta = Parameter(values, transform=positive(), name="beta")
        else:
            if beta is not None:
                raise ValueError("`beta` is only used with relaxation='beta'; leave it unset.")
            if self.num_data is None:
                raise ValueError(
                    "relaxation='free' has one m_n per training point: pass `num_data`."
                )
            ones: np.ndarray = np.ones((int(self.num_data), num_relaxations), dtype=default_float())
            self.m = Parameter(ones, transform=positive(), name="m")

    def _default_beta(self) -> Any:
        variance = getattr(self.likelihood, "variance", None)
        if isinstance(self.likelihood, Gaussian) and isinstance(variance, Parameter):
            return variance.numpy()
        return 1.0

    @check_shapes(
        "residual: [N, R]",
        "return: [N, R]",
    )
    def relaxation_weights(self, residual: tf.Tensor) -> tf.Tensor:
        """:math:`m_n` for residual variances :math:`d_n` of the training points in a batch."""
        if self.relaxation == "beta":
            return relaxation_from_beta(residual, self.beta)
        return tf.broadcast_to(self.m, tf.shape(residual))

    @check_shapes(
        "X: [N, D]",
        "return[0]: [N, P]",
        "return[1]: [N, P]",
        "return[2]: [N, R]",
    )
    def training_marginals(self, X: InputData) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """
        Mean and tighter variance :math:`v_n` of :math:`q(f_n)` at training inputs, and the
        :math:`m_n` used. Costs what SVGP's ``predict_f`` costs for the independent and
        linear-coregionalisation posteriors; the fully-correlated and fallback multi-output
        posteriors add one prior conditional to get :math:`d_n`.
        """
        if self._independent_latents:
            mean, q_variance, residual = independent_marginals_with_residual(
                self.kernel, self.inducing_variable, self.q_mu, self.q_sqrt, self.whiten, X
            )
            m = self.relaxation_weights(residual)
            variance = m * residual + q_variance
            if self._mixes_latents:
                mean, variance = mix_latent_gp(
                    self.kernel.W, mean, variance, full_cov=False, full_output_cov=False
                )
            return mean + self.mean_function(X), variance, m

        mean, variance = self.predict_f(X, full_cov=False, full_output_cov=False)
        _, residual = conditional(
            X,
            self.inducing_variable,
            self.kernel,
            tf.zeros_like(self.q_mu),
            full_cov=False,
            full_output_cov=False,
            white=self.whiten,
        )
        m = self.relaxation_weights(residual)
        return mean, variance - (1.0 - m) * residual, m

    @inherit_check_shapes
    def elbo(self, data: RegressionData) -> tf.Tensor:
        """The T-SVGP bound (eq. 8), or its unbiased minibatch estimate (eq. 10)."""
        X, Y = data
        check_batch(X, Y)
        if self.relaxation == "free":
            tf.debugging.assert_equal(
                tf.shape(X)[0],
                tf.cast(self.num_data, tf.int32),
                message="relaxation='free' needs the whole training set in each ELBO call",
            )
        with explain_cholesky_failure():
            kl = self.prior_kl()
            f_mean, f_var, m = self.training_marginals(X)
        var_exp = self.likelihood.variational_expectations(X, f_mean, f_var, Y)
        if self.num_data is not None:
            scale = tf.cast(self.num_data, kl.dtype) / tf.cast(tf.shape(X)[0], kl.dtype)
        else:
            scale = tf.cast(1.0, kl.dtype)
        return scale * (tf.reduce_sum(var_exp) + conditional_relaxation_term(m)) - kl

    @inherit_check_shapes
    def predict_f(
        self, Xnew: InputData, full_cov: bool = False, full_output_cov: bool = False
    ) -> MeanAndVariance:
        """SVGP's prediction from :math:`q(\\mathbf u)`: the relaxation acts on training data."""
        with explain_cholesky_failure():
            return super().predict_f(Xnew, full_cov=full_cov, full_output_cov=full_output_cov)
