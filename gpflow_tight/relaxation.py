"""
The tighter conditional :math:`q(f \\mid u)` of Bui, Ashman & Turner, *Tighter sparse
variational Gaussian processes* (2025), §3, as objects a model takes.

The prior conditional :math:`p(f_n \\mid \\mathbf u)` has variance :math:`d_n = k_{nn} -
\\mathbf k_{nu} K_{uu}^{-1}\\mathbf k_{un}` (see :mod:`gpflow_tight.projection`). The tighter
conditional has variance :math:`m_n d_n`, :math:`m_n > 0`. Every marginal variance at a training
input becomes :math:`s_n + m_n d_n` and the bound gains the (non-positive) term

.. math:: \\tfrac12 \\sum_n [1 + \\log m_n - m_n] \\qquad \\text{(eq. 8)}.

With a Gaussian likelihood of variance :math:`\\sigma_n^2` the expected log-likelihood holds
:math:`-\\tfrac12\\sum_n m_n d_n / \\sigma_n^2`, so a collapsed bound's residual term is

.. math:: -\\tfrac12 \\sum_n \\frac{m_n d_n}{\\sigma_n^2} + \\tfrac12 \\sum_n [1 + \\log m_n - m_n],

maximised by :math:`m_n = \\sigma_n^2 / (d_n + \\sigma_n^2)`, where it equals
:math:`-\\tfrac12\\sum_n \\log(1 + d_n/\\sigma_n^2)` (eq. 9). :math:`m_n = 1` gives the standard
bounds (Titsias 2009; Hensman et al. 2013).

A relaxation says how :math:`m_n` is obtained:

* :class:`NoRelaxation` (``"none"``): :math:`m_n = 1`;
* :class:`OptimalRelaxation` (``"optimal"``): the Gaussian optimum above (collapsed bounds);
* :class:`BetaRelaxation` (``"beta"``): :math:`m_n = \\beta / (d_n + \\beta)`, one positive
  :math:`\\beta` per latent GP (the paper's choice for other likelihoods);
* :class:`FreeRelaxation` (``"free"``): a positive :math:`m_n` per training point and latent GP;
* :class:`SampledOptimalRelaxation` (``"sampled"``): the Bayesian GPLVM's optimum at sampled
  latent inputs (§5), estimated by Monte Carlo.

:func:`initial_beta` gives a likelihood's starting ``beta``: the inverse Fisher information of the
likelihood at the latent value 0 (the prior mean), which is :math:`\\sigma^2` for a Gaussian.
"""

from typing import Any

import numpy as np
import tensorflow as tf
from check_shapes import check_shapes, inherit_check_shapes
from gpflow.base import Module, Parameter
from gpflow.config import default_float
from gpflow.likelihoods import Bernoulli, Gaussian, Likelihood, Poisson, Softmax, StudentT
from gpflow.utilities import Dispatcher, positive

from .validation import ConstructorOnly, check_count, graph_message

__all__ = [
    "Relaxation",
    "NoRelaxation",
    "OptimalRelaxation",
    "BetaRelaxation",
    "FreeRelaxation",
    "SampledOptimalRelaxation",
    "conditional_relaxation_term",
    "relaxation_from_beta",
    "initial_beta",
    "as_relaxation",
]


@check_shapes(
    "residual_variance: [batch...]",
    "beta: [broadcast batch...]",
    "return: [batch...]",
)
def relaxation_from_beta(residual_variance: tf.Tensor, beta: tf.Tensor) -> tf.Tensor:
    """:math:`m_n = \\beta / (d_n + \\beta)` (Bui et al. 2025, §3, "Non-Gaussian likelihoods")."""
    return beta / (residual_variance + beta)


@check_shapes(
    "relaxation: [batch...]",
    "return: []",
)
def conditional_relaxation_term(relaxation: tf.Tensor) -> tf.Tensor:
    """
    :math:`\\tfrac12 \\sum_n [1 + \\log m_n - m_n]`, the price of the tighter conditional
    (Bui et al. 2025, eq. 8). Zero when all :math:`m_n = 1`.
    """
    return 0.5 * tf.reduce_sum(1.0 + tf.math.log(relaxation) - relaxation)


class Relaxation(ConstructorOnly, Module):
    """
    How the variances :math:`m_n d_n` of the tighter conditional are obtained. Subclasses
    define :meth:`weights`; the bound terms follow from it.
    """

    #: ``"none"``, ``"optimal"``, ``"beta"``, ``"free"`` or ``"sampled"``
    kind: str = ""
    #: whether :meth:`weights` needs the Gaussian noise variance
    needs_noise_variance = False

    @check_shapes(
        "residual: [N, R]",
        "noise_variance: [N, 1] if noise_variance is not None",
        "return: [N, R]",
    )
    def weights(self, residual: tf.Tensor, noise_variance: tf.Tensor | None = None) -> tf.Tensor:
        """:math:`m_n` for residual variances :math:`d_n` of training points."""
        raise NotImplementedError

    @check_shapes(
        "residual: [N, R]",
        "noise_variance: [N, 1]",
        "return: []",
    )
    def gaussian_residual_term(self, residual: tf.Tensor, noise_variance: tf.Tensor) -> tf.Tensor:
        """
        :math:`-\\tfrac12\\sum_n m_n d_n/\\sigma_n^2 + \\tfrac12\\sum_n[1 + \\log m_n - m_n]`: the
        term of a collapsed bound that holds the residual variances (Titsias's trace term when
        :math:`m_n = 1`).
        """
        m = self.weights(residual, noise_variance)
        return -0.5 * tf.reduce_sum(m * residual / noise_variance) + conditional_relaxation_term(m)

    def check_compatible(self, *, num_latent: int, num_data: int | None) -> None:
        """Raise a ``ValueError`` naming the fix if a model with these sizes cannot use this."""


class NoRelaxation(Relaxation):
    """:math:`m_n = 1`: the standard conditional :math:`p(f \\mid u)`."""

    kind = "none"

    @inherit_check_shapes
    def weights(self, residual: tf.Tensor, noise_variance: tf.Tensor | None = None) -> tf.Tensor:
        return tf.ones_like(residual)

    @inherit_check_shapes
    def gaussian_residual_term(self, residual: tf.Tensor, noise_variance: tf.Tensor) -> tf.Tensor:
        """Titsias's trace term :math:`-\\tfrac12\\sum_n d_n / \\sigma_n^2`."""
        return -0.5 * tf.reduce_sum(residual / noise_variance)


class OptimalRelaxation(Relaxation):
    """
    :math:`m_n = \\sigma_n^2/(d_n + \\sigma_n^2)`, the optimum for a Gaussian likelihood
    (Bui et al. 2025, eq. 9): the residual term is :math:`-\\tfrac12\\sum_n\\log(1 + d_n /
    \\sigma_n^2)`.
    """

    kind = "optimal"
    needs_noise_variance = True

    @inherit_check_shapes
    def weights(self, residual: tf.Tensor, noise_variance: tf.Tensor | None = None) -> tf.Tensor:
        if noise_variance is None:
            raise ValueError(
                "relaxation='optimal' is the optimum for a Gaussian likelihood: it needs the "
                "noise variance. Use relaxation='beta' for other likelihoods."
            )
        return relaxation_from_beta(residual, noise_variance)

    @inherit_check_shapes
    def gaussian_residual_term(self, residual: tf.Tensor, noise_variance: tf.Tensor) -> tf.Tensor:
        """:math:`-\\tfrac12\\sum_n\\log(1 + d_n/\\sigma_n^2)`."""
        return -0.5 * tf.reduce_sum(tf.math.log1p(residual / noise_variance))


class BetaRelaxation(Relaxation):
    """
    :math:`m_n = \\beta_l / (d_n + \\beta_l)` with a positive ``beta`` per latent GP
    (:math:`\\beta = \\sigma^2` is optimal for a Gaussian likelihood).

    :param beta: initial value, a scalar or one value per latent GP.
    :param num_latent: the number of latent GPs (columns of the residuals).
    """

    kind = "beta"
    _constructor_only = ("beta",)

    def __init__(self, beta: Any = 1.0, num_latent: int = 1) -> None:
        super().__init__(name="BetaRelaxation")
        array = np.asarray(beta, dtype=float)
        if not np.all(np.isfinite(array)) or np.any(array <= 0):
            raise ValueError(f"`beta` must be finite and strictly positive, got {beta!r}.")
        if array.ndim > 1 or array.size not in (1, num_latent):
            raise ValueError(
                f"`beta` must be a scalar or have one value per latent GP ({num_latent}), got "
                f"shape {array.shape}."
            )
        values: np.ndarray = np.broadcast_to(array, (num_latent,)).astype(default_float())
        self.beta = Parameter(values, transform=positive(), name="beta")

    @inherit_check_shapes
    def weights(self, residual: tf.Tensor, noise_variance: tf.Tensor | None = None) -> tf.Tensor:
        return relaxation_from_beta(residual, self.beta)

    def check_compatible(self, *, num_latent: int, num_data: int | None) -> None:
        if self.beta.shape[0] not in (1, num_latent):
            raise ValueError(
                f"The relaxation has {self.beta.shape[0]} values of beta but the model has "
                f"{num_latent} latent GPs; pass one per latent GP or a scalar."
            )


class FreeRelaxation(Relaxation):
    """
    A positive :math:`m_n` per training point and latent GP (``m`` [N, R], initialised at 1,
    where the bound is the standard one). Each bound evaluation must see every training point,
    in the order of ``m``.
    """

    kind = "free"
    _constructor_only = ("m",)

    def __init__(self, num_data: int, num_latent: int = 1) -> None:
        super().__init__(name="FreeRelaxation")
        if num_data is None or int(num_data) < 1:
            raise ValueError(
                "relaxation='free' has one m_n per training point: pass `num_data` (the number "
                "of training points)."
            )
        ones: np.ndarray = np.ones((int(num_data), num_latent), dtype=default_float())
        self.m = Parameter(ones, transform=positive(), name="m")

    @inherit_check_shapes
    def weights(self, residual: tf.Tensor, noise_variance: tf.Tensor | None = None) -> tf.Tensor:
        num_data, rows = self.m.shape[0], residual.shape[0]
        message = (
            f"relaxation='free' has one m_n per training point (num_data = {num_data}): pass the "
            "whole training set, in a fixed order, to every bound evaluation (no minibatches), "
            "or use relaxation='beta' to train on minibatches"
        )
        if rows is not None:  # known when tracing: a ValueError, not a graph assertion
            if rows != num_data:
                raise ValueError(f"{message}; got {rows} rows.")
            return self.m * tf.ones_like(residual)
        message = graph_message(message)
        same = tf.debugging.assert_equal(tf.shape(residual)[0], num_data, message=message)
        # The assertion runs first. (Not `tf.broadcast_to(m, tf.shape(residual))`: from it,
        # TensorFlow's graph optimiser infers tf.shape(residual) = m's shape, folds the assertion
        # away and broadcasts to the wrong size without an error.)
        with tf.control_dependencies([same]):
            return self.m * tf.ones_like(residual)

    def check_compatible(self, *, num_latent: int, num_data: int | None) -> None:
        if num_data is not None and self.m.shape[0] != num_data:
            raise ValueError(
                f"The free relaxation holds {self.m.shape[0]} values of m_n but the model has "
                f"{num_data} training points."
            )
        if self.m.shape[1] not in (1, num_latent):
            raise ValueError(
                f"The free relaxation has {self.m.shape[1]} columns but the model has "
                f"{num_latent} latent GPs."
            )


class SampledOptimalRelaxation(OptimalRelaxation):
    """
    The Bayesian GPLVM's :math:`m_n(\\mathbf x_n) = \\sigma^2/(d_n(\\mathbf x_n) + \\sigma^2)`
    (Bui et al. 2025, §5): the residual term :math:`-\\tfrac12\\sum_n\\langle\\log(1 +
    d_n(\\mathbf x_n)/\\sigma^2)\\rangle_{q(\\mathbf x_n)}` is estimated without bias from
    ``num_samples`` reparameterised samples of each :math:`q(\\mathbf x_n)` per evaluation.

    With ``seed=None`` (default) every evaluation draws new samples: an unbiased, noisy
    objective for stochastic optimisers such as Adam. With an int ``seed`` every evaluation uses
    the same standard normal draws (``tf.random.stateless_normal``), so the objective is a
    deterministic sample-average approximation of the bound that L-BFGS can optimise
    (``fit_scipy``); score the result with fresh samples (``seed=None``) afterwards.
    """

    kind = "sampled"
    _constructor_only = ("num_samples", "seed")

    def __init__(self, num_samples: int = 10, seed: int | None = None) -> None:
        super().__init__(name="SampledOptimalRelaxation")
        self.num_samples = check_count(num_samples, "num_samples")
        self.seed = None if seed is None else check_count(seed, "seed", minimum=None)

    def standard_normal(self, shape: Any) -> tf.Tensor:
        """Standard normal draws of ``shape``: new ones per call, or the same for a ``seed``."""
        if self.seed is None:
            return tf.random.normal(shape, dtype=default_float())
        return tf.random.stateless_normal(shape, seed=[self.seed, 0], dtype=default_float())

    @inherit_check_shapes
    def gaussian_residual_term(self, residual: tf.Tensor, noise_variance: tf.Tensor) -> tf.Tensor:
        """The term at residuals of samples (rows of ``residual``), averaged over samples."""
        return -0.5 * tf.reduce_sum(tf.math.log1p(residual / noise_variance)) / self.num_samples


initial_beta = Dispatcher("initial_beta")
initial_beta.__doc__ = """
The starting ``beta`` of :class:`BetaRelaxation` for a likelihood: :math:`1 / I(0)`, the inverse
Fisher information :math:`I(f) = \\mathbb E_{y \\mid f}[-\\partial_f^2 \\log p(y \\mid f)]` at
:math:`f = 0`. Where the prior conditional variance :math:`d_n` is small and the latent mean is 0
(a model at its prior), the per-point optimum of the tighter bound in :math:`m_n` is
:math:`1 / (1 + I(0)\\, d_n)` (Bui et al. 2025, eq. 8 with a quadratic log-likelihood; for
canonical links the curvature does not depend on :math:`y`), which is
:math:`m_n = \\beta / (d_n + \\beta)` at :math:`\\beta = 1 / I(0)`: :math:`\\sigma^2` for a
Gaussian (the optimum at every :math:`q`), 4 for a logistic and :math:`\\pi / 2` for a probit
Bernoulli, :math:`C^2 / (C - 1)` for a :math:`C`-class softmax. Likelihoods without a registered
rule, or without a finite positive :math:`I(0)` (a robust max), start at 1. Register a rule for
another likelihood with ``@initial_beta.register(MyLikelihood)``; it returns a positive float.
"""


@initial_beta.register(Likelihood)
def _initial_beta_default(likelihood: Likelihood) -> float:
    return 1.0


@initial_beta.register(Gaussian)
def _initial_beta_gaussian(likelihood: Gaussian) -> Any:
    variance = getattr(likelihood, "variance", None)
    return variance.numpy() if isinstance(variance, Parameter) else 1.0  # else heteroscedastic


def _link_at_zero(invlink: Any) -> tuple[float, float]:
    """The inverse link and its derivative at 0."""
    zero = tf.zeros([], dtype=default_float())
    with tf.GradientTape() as tape:
        tape.watch(zero)
        value = invlink(zero)
    return float(value), float(tape.gradient(value, zero))


def _inverse_information(information: float) -> float:
    return 1.0 / information if np.isfinite(information) and information > 0 else 1.0


@initial_beta.register(Bernoulli)
def _initial_beta_bernoulli(likelihood: Bernoulli) -> float:
    p, slope = _link_at_zero(likelihood.invlink)
    return _inverse_information(slope**2 / (p * (1 - p)))


@initial_beta.register(Poisson)
def _initial_beta_poisson(likelihood: Poisson) -> float:
    rate, slope = _link_at_zero(likelihood.invlink)
    return _inverse_information(likelihood.binsize * slope**2 / rate)


@initial_beta.register(Softmax)
def _initial_beta_softmax(likelihood: Softmax) -> float:
    classes = likelihood.num_classes  # each latent's curvature at 0 is p (1 - p), p = 1 / C
    assert classes is not None  # Softmax sets it
    return classes**2 / (classes - 1)


@initial_beta.register(StudentT)
def _initial_beta_student_t(likelihood: StudentT) -> float:
    scale = getattr(likelihood, "scale", None)
    if not isinstance(scale, Parameter):  # a heteroscedastic scale function
        return 1.0
    return float(scale.numpy()) ** 2 * (likelihood.df + 3) / (likelihood.df + 1)


def as_relaxation(
    relaxation: Any,
    *,
    allowed: tuple[str, ...],
    model: str,
    num_latent: int = 1,
    num_data: int | None = None,
    beta: Any = None,
    num_samples: int | None = None,
) -> Relaxation:
    """
    A :class:`Relaxation` from a model's ``relaxation`` argument: one of the names in ``allowed``
    or an instance of a kind in ``allowed``. Anything else is refused with a ``ValueError``
    that names the choices, as is a ``beta`` or ``num_samples`` the chosen kind does not use.
    """
    if isinstance(relaxation, Relaxation):
        chosen = relaxation
        if beta is not None or num_samples is not None:
            raise ValueError(
                "Pass `beta`/`num_samples` to the relaxation object, not to the model, when "
                "`relaxation` is an object."
            )
    elif isinstance(relaxation, str) and relaxation in allowed:
        if beta is not None and relaxation != "beta":
            raise ValueError(f"`beta` is only used with relaxation='beta', not {relaxation!r}.")
        if num_samples is not None and relaxation != "sampled":
            raise ValueError(
                f"`num_samples` is only used with relaxation='sampled', not {relaxation!r}."
            )
        if relaxation == "none":
            chosen = NoRelaxation()
        elif relaxation == "optimal":
            chosen = OptimalRelaxation()
        elif relaxation == "beta":
            chosen = BetaRelaxation(1.0 if beta is None else beta, num_latent)
        elif relaxation == "free":
            chosen = FreeRelaxation(num_data, num_latent)  # type: ignore[arg-type]
        else:
            chosen = SampledOptimalRelaxation(10 if num_samples is None else num_samples)
    else:
        raise ValueError(
            f"`relaxation` of {model} must be one of {', '.join(map(repr, allowed))} or a "
            f"gpflow_tight.relaxation.Relaxation of one of those kinds, got {relaxation!r}."
        )
    if chosen.kind not in allowed:
        raise ValueError(
            f"{model} cannot use a {type(chosen).__name__} (relaxation {chosen.kind!r}); it "
            f"takes {', '.join(map(repr, allowed))}."
        )
    chosen.check_compatible(num_latent=num_latent, num_data=num_data)
    return chosen
