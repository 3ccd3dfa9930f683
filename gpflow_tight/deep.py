"""
Deep GPs with the tighter conditional: :class:`TightGPLayer`, a drop-in for GPflux's
``gpflux.layers.GPLayer`` (doubly stochastic variational inference, :cite:t:`salimbeni2017doubly`)
whose conditional :math:`q(f_n \\mid \\mathbf u)` has variance :math:`m_n d_n` while training, as
in T-SVGP (:cite:t:`bui2025tighter`, eq. 8 and 10, and their §7: "can be easily applied to ...
deep GPs").

This module needs GPflux (``pip install "gpflow-tight[integrations]"``); ``gpflow_tight`` itself
does not import it.
"""

from typing import Any

import tensorflow as tf
import tensorflow_probability as tfp
from gpflow import set_trainable
from gpflow.config import default_float
from gpflow.kernels import Kernel, LinearCoregionalization
from gpflow.posteriors import IndependentPosterior, get_posterior_class
from gpflux.layers import GPLayer
from gpflux.models import DeepGP

from .models.solve import decoupled_prior_kl, orthogonal_variational_parameters
from .models.tight_svgp import relaxed_marginals
from .orthogonal import (
    INDUCING_SET_ADVICE,
    INDUCING_SETS,
    LatentBlock,
    check_orthogonal_sets,
    checked_sets,
    latent_blocks,
    orthogonal_sets,
)
from .posteriors import OrthogonalPosterior
from .projection import marginals_with_residual, project
from .relaxation import Relaxation, as_relaxation, conditional_relaxation_term, initial_beta

__all__ = ["TightGPLayer", "tighten"]


class TightGPLayer(GPLayer):
    """
    GPflux's sparse variational GP layer with the tighter conditional of
    :cite:t:`bui2025tighter`. When the layer is called with ``training=True`` (Keras ``fit``,
    ``DeepGP.elbo``), the marginal of output :math:`\\ell` at an input :math:`x_n` of the
    layer (a sample of the layer below) is

    .. math:: q(f_{n\\ell}) = \\mathcal N\\big(\\mu_{n\\ell},\\; s_{n\\ell}
        + m_{n\\ell} d_{n\\ell}\\big), \\qquad m_{n\\ell} = \\frac{\\beta_\\ell}{d_{n\\ell}
        + \\beta_\\ell},

    with :math:`s` the variance carried by :math:`q(\\mathbf u)` and :math:`d` the residual
    variance of the prior conditional, and the layer's loss per data point gains
    :math:`-\\tfrac12 \\langle \\sum_\\ell [1 + \\log m_{n\\ell} - m_{n\\ell}] \\rangle_n`
    (the batch mean, so that ``DeepGP.elbo`` is eq. 10 summed over layers and unbiased over
    minibatches and samples). Otherwise (predictions, ``training=False``) it is ``GPLayer``.
    With ``relaxation="none"`` it is ``GPLayer`` exactly; as :math:`\\beta \\to \\infty` the
    tight layer tends to it. A one-layer ``DeepGP`` of a ``TightGPLayer`` is
    :class:`~gpflow_tight.TightSVGP`.

    :param relaxation: ``"beta"`` (the default: one positive, trainable :math:`\\beta` per
        latent GP), ``"none"`` (``GPLayer``'s conditional), or a
        :class:`~gpflow_tight.relaxation.Relaxation` of those kinds. The per-point ``"free"``
        and the Gaussian-likelihood ``"optimal"`` relaxations do not apply to a layer.
    :param beta: initial :math:`\\beta` (scalar or one per latent GP), default 1 (a layer does
        not see the likelihood). For the last layer pass
        ``gpflow_tight.relaxation.initial_beta(likelihood)``, as ``TightSVGP`` does: the noise
        variance for a Gaussian likelihood (the optimum), 4 for a logistic Bernoulli.
    :param orthogonal_inducing_variable: an orthogonal inducing set (SOLVE-GP,
        :cite:t:`shi2020sparse`), as for :class:`~gpflow_tight.SOLVEGP`: an array [M_v, D] or
        (shared or separate) inducing variables. The layer's posterior is then
        :class:`~gpflow_tight.posteriors.OrthogonalPosterior` (:math:`f = g + h + l`), its KL
        that of both sets, and :math:`d_n` the residual given both sets: with the default
        relaxation a one-layer model is :class:`~gpflow_tight.TightSOLVEGP`, with ``"none"``
        :class:`~gpflow_tight.SOLVEGP`. ``sample()`` (GPflux's pathwise sampling from
        :math:`q(\\mathbf u)` alone) is refused then.
    :param q_mu_orthogonal: initial mean of :math:`q(\\mathbf v_\\perp)`, [M_v, L] (default 0).
    :param q_sqrt_orthogonal: initial Cholesky factor of its covariance, [L, M_v, M_v]
        (default: the prior's).

    All other arguments are ``GPLayer``'s. The kernel and inducing variable must give
    independent latent GPs (GPflux's ``construct_basic_kernel`` and
    ``construct_basic_inducing_variables`` do; a ``LinearCoregionalization`` kernel mixes
    them). While training the layer draws marginal samples, so ``full_cov`` and
    ``full_output_cov`` must be ``False`` then.
    """

    def __init__(
        self,
        kernel: Kernel,
        inducing_variable: Any,
        num_data: int,
        mean_function: Any = None,
        *,
        relaxation: str | Relaxation = "beta",
        beta: Any = None,
        orthogonal_inducing_variable: Any = None,
        q_mu_orthogonal: Any = None,
        q_sqrt_orthogonal: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(kernel, inducing_variable, num_data, mean_function, **kwargs)
        posterior_class = get_posterior_class(self.kernel, self.inducing_variable)
        if not issubclass(posterior_class, IndependentPosterior):
            raise TypeError(
                f"TightGPLayer needs independent latent GPs, but `kernel` "
                f"({type(kernel).__name__}) and `inducing_variable` "
                f"({type(inducing_variable).__name__}) give GPflow's {posterior_class.__name__}: "
                "build them with gpflux.helpers.construct_basic_kernel and "
                "construct_basic_inducing_variables (or SharedIndependent/SeparateIndependent "
                "kernels and inducing variables)."
            )
        self.relaxation = as_relaxation(
            relaxation,
            allowed=("none", "beta"),
            model="TightGPLayer",
            num_latent=self.num_latent_gps,
            beta=beta,
        )
        self.orthogonal_inducing_variable = None
        if orthogonal_inducing_variable is not None:
            self.orthogonal_inducing_variable = orthogonal_sets(
                self.kernel, self.inducing_variable, orthogonal_inducing_variable
            )  # from now on both sets are fixed (__setattr__)
            self.q_mu_orthogonal, self.q_sqrt_orthogonal = orthogonal_variational_parameters(
                self.latent_blocks(),
                self.num_latent_gps,
                q_mu_orthogonal,
                q_sqrt_orthogonal,
                q_diag=False,
                whiten=self.whiten,
            )
            check_orthogonal_sets(self.latent_blocks())
        elif q_mu_orthogonal is not None or q_sqrt_orthogonal is not None:
            raise ValueError(
                "`q_mu_orthogonal`/`q_sqrt_orthogonal` need an `orthogonal_inducing_variable`."
            )
        self._relaxed_call = False
        self._relaxation_loss: tf.Tensor | None = None

    def __setattr__(self, name: str, value: Any) -> None:
        if (
            name in INDUCING_SETS
            and getattr(self, "orthogonal_inducing_variable", None) is not None
        ):
            raise AttributeError(
                f"`{name}` of a TightGPLayer with an orthogonal set is fixed at construction "
                f"{INDUCING_SET_ADVICE[name]}"
            )
        super().__setattr__(name, value)

    @classmethod
    def from_gp_layer(
        cls,
        layer: GPLayer,
        *,
        relaxation: str | Relaxation = "beta",
        beta: Any = None,
        orthogonal_inducing_variable: Any = None,
    ) -> "TightGPLayer":
        """
        The tight version of a GPflux ``GPLayer``: the same kernel, inducing variable and mean
        function objects (shared, not copied), the same settings, and a copy of its
        :math:`q(\\mathbf u)` (values and ``trainable`` flags; the layer's own ``trainable``
        too); optionally with an orthogonal inducing set, whose :math:`q(\\mathbf v_\\perp)`
        starts at the prior.
        """
        tight = cls(
            layer.kernel,
            layer.inducing_variable,
            layer.num_data,
            layer.mean_function,
            relaxation=relaxation,
            beta=beta,
            orthogonal_inducing_variable=orthogonal_inducing_variable,
            num_samples=layer.num_samples,
            full_cov=layer.full_cov,
            full_output_cov=layer.full_output_cov,
            num_latent_gps=layer.num_latent_gps,
            whiten=layer.whiten,
            name=layer.name,
            verbose=False,
        )
        for name in ("q_mu", "q_sqrt"):
            source, copy = getattr(layer, name), getattr(tight, name)
            copy.assign(source)
            set_trainable(copy, source.trainable)
        tight.trainable = layer.trainable
        return tight

    @property
    def beta(self) -> Any:
        """The relaxation's :math:`\\beta` (``relaxation="beta"`` only)."""
        if self.relaxation.kind != "beta":
            raise AttributeError(
                f"`beta` belongs to relaxation='beta'; this layer has relaxation="
                f"{self.relaxation.kind!r}."
            )
        return self.relaxation.beta

    def training_marginals(self, inputs: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """
        Mean (with the mean function) and relaxed variance :math:`s_n + m_n d_n` of each output
        at the layer's inputs ``[..., N, D]`` (any leading sample dimensions), and the
        :math:`m_n` of each latent GP, ``[..., N, L]``.
        """
        leading = tf.shape(inputs)[:-1]
        X = tf.reshape(inputs, [-1, tf.shape(inputs)[-1]])
        if self.orthogonal_inducing_variable is None:
            projection = project(self.inducing_variable, self.kernel, X)
            latent = marginals_with_residual(projection, self.q_mu, self.q_sqrt, self.whiten)
        else:
            latent = self.orthogonal_posterior().latent_marginals_with_residual(X)
        mixing = self.kernel.W if isinstance(self.kernel, LinearCoregionalization) else None
        mean, variance, m = relaxed_marginals(latent, self.relaxation, mixing=mixing)
        mean = mean + self.mean_function(X)

        def unflatten(tensor: tf.Tensor) -> tf.Tensor:
            return tf.reshape(tensor, tf.concat([leading, tf.shape(tensor)[-1:]], axis=0))

        return unflatten(mean), unflatten(variance), unflatten(m)

    def _sets(self) -> Any:
        """The orthogonal set (which holds the regular one), checked to be the model's own."""
        return checked_sets(self.inducing_variable, self.orthogonal_inducing_variable)

    def latent_blocks(self) -> list[LatentBlock]:
        """The kernel and orthogonal inducing set of each group of latent GPs."""
        return latent_blocks(self.kernel, self._sets())

    def orthogonal_posterior(self) -> OrthogonalPosterior:
        """The layer's SOLVE-GP posterior (without the mean function), from the live parameters."""
        if self.orthogonal_inducing_variable is None:
            raise AttributeError("This layer has no `orthogonal_inducing_variable`.")
        return OrthogonalPosterior(
            self.kernel,
            self._sets(),
            self.q_mu,
            self.q_sqrt,
            self.q_mu_orthogonal,
            self.q_sqrt_orthogonal,
            whiten=self.whiten,
            precompute_cache=None,
        )

    def predict(
        self, inputs: Any, *, full_cov: bool = False, full_output_cov: bool = False
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """``GPLayer.predict``; with an orthogonal set, from both sets (SOLVE-GP's posterior)."""
        if self.orthogonal_inducing_variable is None:
            return super().predict(inputs, full_cov=full_cov, full_output_cov=full_output_cov)
        inputs = tf.convert_to_tensor(inputs, dtype=default_float())
        X = inputs if full_cov else tf.reshape(inputs, [-1, tf.shape(inputs)[-1]])
        mean, covariance = self.orthogonal_posterior().fused_predict_f(
            X, full_cov=full_cov, full_output_cov=full_output_cov
        )
        if not full_cov:  # leading sample dimensions back
            leading = tf.shape(inputs)[:-1]
            mean = tf.reshape(mean, tf.concat([leading, tf.shape(mean)[1:]], 0))
            covariance = tf.reshape(covariance, tf.concat([leading, tf.shape(covariance)[1:]], 0))
        return mean + self.mean_function(inputs), covariance

    def prior_kl(self) -> tf.Tensor:
        """``GPLayer.prior_kl``; with an orthogonal set, the KL of both (Fernlund's eq. 5.24)."""
        if self.orthogonal_inducing_variable is None:
            return super().prior_kl()
        q = (self.q_mu, self.q_sqrt, self.q_mu_orthogonal, self.q_sqrt_orthogonal)
        return decoupled_prior_kl(self.latent_blocks(), q, self.whiten)

    def sample(self) -> Any:
        """GPflux's pathwise sample of the layer; refused with an orthogonal set."""
        if self.orthogonal_inducing_variable is not None:
            raise NotImplementedError(
                "GPflux's `sample()` draws functions from q(u) alone and would ignore the "
                "orthogonal set: use `predict` or the layer's marginal samples instead."
            )
        return super().sample()

    def _make_distribution_fn(self, previous_layer_outputs: Any) -> tfp.distributions.Distribution:
        if not self._relaxed_call:
            return super()._make_distribution_fn(previous_layer_outputs)
        if self.full_cov or self.full_output_cov:
            raise ValueError(
                "TightGPLayer trains on marginals: set `full_cov` and `full_output_cov` to False "
                "while training (they may be True for predictions)."
            )
        inputs = tf.convert_to_tensor(previous_layer_outputs, dtype=default_float())
        mean, variance, m = self.training_marginals(inputs)
        rows = tf.cast(tf.reduce_prod(tf.shape(m)[:-1]), default_float())
        self._relaxation_loss = -conditional_relaxation_term(m) / rows
        return tfp.distributions.MultivariateNormalDiag(loc=mean, scale_diag=tf.sqrt(variance))

    def call(self, inputs: Any, *args: Any, **kwargs: Any) -> tf.Tensor:
        """
        ``GPLayer.call`` with the tighter conditional while training: the one loss the layer
        adds is ``(KL − log prior) / num_data`` plus the relaxation's per-point price.
        """
        training = bool(kwargs.get("training"))
        self._relaxed_call = training and self.relaxation.kind != "none"
        try:
            outputs = super(GPLayer, self).call(inputs, *args, **kwargs)
            relaxation_loss = self._relaxation_loss
        finally:
            self._relaxed_call = False
            self._relaxation_loss = None
        if training:
            parameters = self.kernel.trainable_parameters + self.relaxation.trainable_parameters
            log_prior = tf.add_n(
                [tf.constant(0.0, default_float())] + [p.log_prior_density() for p in parameters]
            )
            loss_per_datapoint = (self.prior_kl() - log_prior) / self.num_data
            if relaxation_loss is not None:
                loss_per_datapoint += relaxation_loss
        else:
            loss_per_datapoint = tf.constant(0.0, dtype=default_float())
        self.add_loss(loss_per_datapoint)
        name = f"{self.name}_prior_kl" if self.name else "prior_kl"
        self.add_metric(loss_per_datapoint, name=name, aggregation="mean")
        return outputs


def tighten(
    model: DeepGP,
    *,
    hidden_beta: Any = 1.0,
    last_beta: Any = None,
    orthogonal_inducing_variables: Any = None,
) -> DeepGP:
    """
    A GPflux ``DeepGP`` whose ``GPLayer``\\ s are replaced by :class:`TightGPLayer`\\ s
    (:meth:`TightGPLayer.from_gp_layer`): kernels, inducing variables, mean functions and the
    likelihood layer are shared with ``model``, :math:`q(\\mathbf u)` is copied (with its
    ``trainable`` flags), and so are the input and target dimensions. So any GPflux
    builder, e.g. ``gpflux.architectures.build_constant_input_dim_deep_gp``, gives a tight deep GP.

    :param hidden_beta: initial :math:`\\beta` of the hidden layers.
    :param last_beta: initial :math:`\\beta` of the last layer; by default
        :func:`~gpflow_tight.relaxation.initial_beta` of the likelihood, as for ``TightSVGP``
        (the noise variance of a Gaussian likelihood with constant variance, the optimum).
    :param orthogonal_inducing_variables: optionally one orthogonal inducing set (or ``None``)
        per layer of ``model.f_layers``, as ``TightGPLayer``'s ``orthogonal_inducing_variable``.
    """
    if orthogonal_inducing_variables is None:
        orthogonal_inducing_variables = [None] * len(model.f_layers)
    if len(orthogonal_inducing_variables) != len(model.f_layers):
        raise ValueError(
            f"`orthogonal_inducing_variables` needs one entry (a set or None) per layer: the "
            f"model has {len(model.f_layers)}, got {len(orthogonal_inducing_variables)}."
        )
    if last_beta is None:
        last_beta = initial_beta(model.likelihood_layer.likelihood)
    layers = []
    for depth, (layer, orthogonal) in enumerate(zip(model.f_layers, orthogonal_inducing_variables)):
        if isinstance(layer, GPLayer) and not isinstance(layer, TightGPLayer):
            last = depth == len(model.f_layers) - 1
            layer = TightGPLayer.from_gp_layer(
                layer,
                beta=last_beta if last else hidden_beta,
                orthogonal_inducing_variable=orthogonal,
            )
        elif orthogonal is not None:
            raise ValueError(
                f"Layer {depth} ({type(layer).__name__}) is not a GPflux GPLayer to tighten: its "
                "entry of `orthogonal_inducing_variables` must be None."
            )
        layers.append(layer)
    return DeepGP(
        layers,
        model.likelihood_layer,
        input_dim=model.inputs.shape[-1],
        target_dim=model.targets.shape[-1],
        num_data=model.num_data,
        default_model_class=model.default_model_class,
    )
