"""
Uncollapsed sparse variational GPs with a relaxation of the conditional :math:`q(f \\mid u)`
(:class:`RelaxedSVGP`), and its tighter-bound preset T-SVGP (:class:`TightSVGP`) of Bui,
Ashman & Turner (2025), both drop-ins for ``gpflow.models.SVGP``.
"""

from typing import Any

import tensorflow as tf
from check_shapes import check_shapes, inherit_check_shapes
from gpflow.base import InputData, MeanAndVariance, Parameter, RegressionData
from gpflow.conditionals import conditional
from gpflow.conditionals.util import mix_latent_gp
from gpflow.kernels import Kernel
from gpflow.likelihoods import Gaussian, Likelihood
from gpflow.models import SVGP
from gpflow.posteriors import (
    IndependentPosterior,
    LinearCoregionalizationPosterior,
    get_posterior_class,
)

from ..projection import marginals_with_residual, project
from ..relaxation import Relaxation, as_relaxation, conditional_relaxation_term, initial_beta
from ..validation import (
    check_inducing_variable,
    check_kernel,
    check_num_data,
    checked_batch,
    checked_prediction,
    checked_xnew,
    checks_arguments,
    explain_cholesky_failure,
    inducing_input_dim,
)
from .base import ConstructorOnly, InfiniteLossOnCholeskyFailure

__all__ = ["RelaxedSVGP", "TightSVGP", "relaxed_marginals"]

_FREE_NEEDS_ALL_ROWS = (
    "relaxation='free' has one m_n per training point: pass the whole training set, in a fixed "
    "order, to every bound evaluation (no minibatches), or use relaxation='beta' to train on "
    "minibatches"
)


@check_shapes(
    "latent_marginals[0]: [N, L]",
    "latent_marginals[1]: [N, L]",
    "latent_marginals[2]: [N, L]",
    "mixing: [P, L] if mixing is not None",
    "noise_variance: [N, 1] if noise_variance is not None",
    "return[0]: [N, P]",
    "return[1]: [N, P]",
    "return[2]: [N, L]",
)
def relaxed_marginals(
    latent_marginals: tuple[tf.Tensor, tf.Tensor, tf.Tensor],
    relaxation: Relaxation,
    *,
    mixing: tf.Tensor | None = None,
    noise_variance: tf.Tensor | None = None,
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """
    The marginals of :math:`q(f_n)` under the tighter conditional (:cite:t:`bui2025tighter`,
    eq. 8) for independent latent GPs: from each latent GP's mean, variance :math:`s_n` carried
    by :math:`q(\\mathbf u)` and residual :math:`d_n` (``latent_marginals``, as
    :func:`~gpflow_tight.projection.marginals_with_residual` returns them), the mean, the
    variance :math:`s_n + m_n d_n` and :math:`m_n`; the latent GPs are mixed by ``mixing``
    (a linear coregionalisation's ``W``) if given. No mean function is added.
    """
    mean, q_variance, residual = latent_marginals
    m = relaxation.weights(residual, noise_variance)
    variance = m * residual + q_variance
    if mixing is not None:
        mean, variance = mix_latent_gp(
            mixing, mean, variance, full_cov=False, full_output_cov=False
        )
    return mean, variance, m


def _checked_batch(model: "RelaxedSVGP", data: Any) -> tuple[Any, ...]:
    """
    A batch ``(X, Y)`` of a loss, checked and cast (:func:`~gpflow_tight.validation.checked_batch`):
    integer Y stays integer labels unless the likelihood is Gaussian, and ``relaxation="free"``
    needs all ``num_data`` rows.
    """
    num_rows = None
    if model.relaxation.kind == "free" and model.num_data is not None:
        num_rows = int(model.num_data)
    return checked_batch(
        data,
        input_dim=inducing_input_dim(model.inducing_variable),
        cast_integer_labels=isinstance(model.likelihood, Gaussian),
        num_rows=num_rows,
        fix_rows=_FREE_NEEDS_ALL_ROWS,
    )


def _checked_test_data(model: "RelaxedSVGP", data: Any) -> tuple[Any, ...]:
    """Held-out ``(X, Y)`` for ``predict_log_density``, checked and cast."""
    return checked_batch(
        data,
        input_dim=inducing_input_dim(model.inducing_variable),
        cast_integer_labels=isinstance(model.likelihood, Gaussian),
        allow_empty=True,
    )


@checks_arguments(_checked_test_data, "data", "predict_log_density")
@checks_arguments(checked_xnew, "Xnew", "predict_f", "predict_y", "predict_f_samples")
@checks_arguments(
    _checked_batch, "data", "training_loss", "maximum_log_likelihood_objective", "elbo"
)
class RelaxedSVGP(InfiniteLossOnCholeskyFailure, ConstructorOnly, SVGP):
    """
    SVGP (:cite:t:`hensman2013gaussian`) whose conditional :math:`q(\\mathbf f \\mid
    \\mathbf u)` has variances :math:`m_n d_n` (:cite:t:`bui2025tighter`, eq. 8 and 10):

    .. math::
        \\mathcal F_2 = \\sum_n \\mathbb E_{\\mathcal N(f_n; \\mu_n, v_n)} \\log p(y_n \\mid f_n)
            + \\tfrac12 \\sum_n [1 + \\log m_n - m_n] - \\mathrm{KL}[q(u) \\| p(u)],
        \\qquad v_n = s_n + m_n d_n,

    with :math:`s_n` the variance carried by :math:`q(\\mathbf u)` and :math:`d_n` the residual
    variance of the prior conditional at :math:`x_n`. With minibatches both sums over :math:`n`
    are scaled by ``num_data / batch_size``. Everything else is SVGP's: any likelihood, ``whiten``,
    ``q_diag``, every multi-output setting of GPflow, ``posterior()`` and the predictions (the
    relaxation acts on training data only, as in the paper).

    :param relaxation: how :math:`m_n` is obtained: ``"none"`` (:math:`m_n = 1`, exactly SVGP),
        ``"beta"`` (:math:`m_n = \\beta/(d_n + \\beta)` with one positive ``beta`` per latent GP;
        for GPflow's fully-correlated and fallback multi-output posteriors it acts on the output
        process, with one shared ``beta``), ``"free"`` (a positive :math:`m_n` per training
        point and latent GP, initialised at 1; needs ``num_data`` and the whole training set,
        in a fixed order, in every bound evaluation), ``"optimal"`` (Gaussian likelihoods only:
        :math:`m_n = \\sigma_n^2/(d_n + \\sigma_n^2)`), or a
        :class:`~gpflow_tight.relaxation.Relaxation`. Fixed at construction.
    :param beta: initial value of ``beta`` for ``relaxation="beta"`` (scalar or one per latent
        GP); defaults to :func:`~gpflow_tight.relaxation.initial_beta` of the likelihood, the
        inverse Fisher information at the prior mean: the noise variance for a Gaussian
        likelihood with constant variance (the optimum), 4 for a logistic Bernoulli,
        :math:`C^2/(C-1)` for a :math:`C`-class softmax, 1 where no rule is registered.

    All other arguments are SVGP's. Subclasses change the marginals through
    :meth:`latent_marginals_with_residual`.

    Every batch a loss sees (``training_loss``, ``elbo``) and every ``Xnew`` is checked first
    (:mod:`gpflow_tight.validation`): a ``ValueError``/``TypeError`` that names ``data`` or
    ``Xnew`` eagerly and when a ``tf.function`` is traced, a graph assertion with the same
    message for values (NaN, inf) inside a compiled step. Data of another real dtype than
    GPflow's default float are cast to it (once noted); integer labels stay integers for
    non-Gaussian likelihoods, as GPflow takes them. ``num_data`` must be positive.
    """

    _constructor_only: tuple[str, ...] = ("relaxation",)
    _default_relaxation = "none"
    _relaxations = ("none", "beta", "free", "optimal")

    def __init__(
        self,
        kernel: Kernel,
        likelihood: Likelihood,
        inducing_variable: Any,
        *,
        relaxation: str | Relaxation | None = None,
        beta: Any = None,
        **kwargs: Any,
    ) -> None:
        check_num_data(kwargs.get("num_data"))
        check_inducing_variable(inducing_variable)
        super().__init__(kernel, likelihood, inducing_variable, **kwargs)
        check_kernel(kernel, inducing_input_dim(self.inducing_variable))
        self._independent_latents, self._mixes_latents = self._latent_structure()
        relaxation = self._default_relaxation if relaxation is None else relaxation
        if relaxation == "beta" and beta is None:
            beta = initial_beta(self.likelihood)
        if relaxation == "optimal" and not isinstance(self.likelihood, Gaussian):
            raise ValueError(
                f"relaxation='optimal' is the optimum for a Gaussian likelihood, got "
                f"{type(self.likelihood).__name__}: use relaxation='beta'."
            )
        self.relaxation = as_relaxation(
            relaxation,
            allowed=self._relaxations,
            model=type(self).__name__,
            num_latent=self.num_latent_gps if self._independent_latents else 1,
            num_data=None if self.num_data is None else int(self.num_data),
            beta=beta,
        )

    def _latent_structure(self) -> tuple[bool, bool]:
        """Whether the latent GPs are independent, and whether they are mixed (by ``W``)."""
        posterior_class = get_posterior_class(self.kernel, self.inducing_variable)
        return (
            issubclass(posterior_class, IndependentPosterior),
            issubclass(posterior_class, LinearCoregionalizationPosterior),
        )

    @property
    def beta(self) -> Parameter:
        """The relaxation's ``beta`` (``relaxation="beta"`` only)."""
        return self._relaxation_parameter("beta", "beta")

    @property
    def m(self) -> Parameter:
        """The relaxation's per-point :math:`m_n` (``relaxation="free"`` only)."""
        return self._relaxation_parameter("m", "free")

    def _relaxation_parameter(self, name: str, kind: str) -> Parameter:
        if self.relaxation.kind != kind:
            raise AttributeError(
                f"`{name}` belongs to relaxation={kind!r}; this {type(self).__name__} has "
                f"relaxation={self.relaxation.kind!r}."
            )
        return getattr(self.relaxation, name)

    @check_shapes(
        "X: [N, D]",
        "return[0]: [N, L]",
        "return[1]: [N, L]",
        "return[2]: [N, L]",
    )
    def latent_marginals_with_residual(
        self, X: InputData
    ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """
        For each independent latent GP at inputs X (before any mixing and without the mean
        function): the mean of :math:`q(f_n)`, the variance :math:`s_n` carried by
        :math:`q(\\mathbf u)` and the residual :math:`d_n`.
        """
        projection = project(self.inducing_variable, self.kernel, X)
        return marginals_with_residual(projection, self.q_mu, self.q_sqrt, self.whiten)

    @check_shapes(
        "X: [N, D]",
        "return[0]: [N, P]",
        "return[1]: [N, P]",
        "return[2]: [N, R]",
    )
    def training_marginals(self, X: InputData) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """
        Mean and relaxed variance :math:`v_n` of :math:`q(f_n)` at training inputs, and the
        :math:`m_n` used. Costs what SVGP's ``predict_f`` costs for independent latent GPs (and
        their linear coregionalisation); the fully-correlated and fallback multi-output
        posteriors add one prior conditional to get :math:`d_n`.
        """
        noise = self._noise_variance(X)
        if self._independent_latents:
            mean, variance, m = relaxed_marginals(
                self.latent_marginals_with_residual(X),
                self.relaxation,
                mixing=self.kernel.W if self._mixes_latents else None,
                noise_variance=noise,
            )
            return mean + self.mean_function(X), variance, m

        mean, variance = SVGP.predict_f(self, X, full_cov=False, full_output_cov=False)
        _, residual = conditional(
            X,
            self.inducing_variable,
            self.kernel,
            tf.zeros_like(self.q_mu),
            full_cov=False,
            full_output_cov=False,
            white=self.whiten,
        )
        residual = tf.maximum(residual, 0.0)  # the round-off policy of projection.residual_variance
        m = self.relaxation.weights(residual, noise)
        return mean, variance - (1.0 - m) * residual, m

    def _noise_variance(self, X: InputData) -> tf.Tensor | None:
        if not self.relaxation.needs_noise_variance:
            return None
        return self.likelihood.variance_at(X)

    @inherit_check_shapes
    def elbo(self, data: RegressionData) -> tf.Tensor:
        """The relaxed bound (eq. 8), or its unbiased minibatch estimate (eq. 10)."""
        X, Y = data
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
        """
        SVGP's prediction from :math:`q(\\mathbf u)` (the relaxation acts on training data); a
        failed factorisation raises :class:`~gpflow_tight.CholeskyError` (GPflow's SVGP returns
        NaN on CPU).
        """
        with explain_cholesky_failure():
            mean, var = super().predict_f(Xnew, full_cov=full_cov, full_output_cov=full_output_cov)
            return checked_prediction(mean, var)


class TightSVGP(RelaxedSVGP):
    """
    Sparse variational GP with the uncollapsed tighter bound (T-SVGP) of
    :cite:t:`bui2025tighter` (eq. 8 and 10): :class:`RelaxedSVGP` with ``relaxation="beta"``
    by default, :math:`m_n = \\beta/(d_n + \\beta)` with one positive ``beta`` per latent GP (the
    paper's choice; :math:`\\beta = \\sigma^2` is optimal for a Gaussian likelihood). The
    constructor is SVGP's, plus ``relaxation`` and ``beta``.
    """

    _default_relaxation = "beta"
