"""
Tilted distributions of Power EP (Bui, Yan & Turner 2017, §3.4 and App. G).

The projection step of Power EP for data point :math:`n` needs the log-normaliser of the tilted
distribution of :math:`f_n`,

.. math:: \\log \\tilde Z_n = \\log \\int \\mathcal N(f; m, v)\\, p(y_n \\mid f)^\\alpha \\, df,

and its first two derivatives with respect to the cavity mean :math:`m`,
:math:`d_1 = \\partial_m \\log \\tilde Z_n` and :math:`d_2 = \\partial_m^2 \\log \\tilde Z_n`
(eqs. 20, 48-49). They are closed form for a Gaussian likelihood (eq. 127) and for the probit
likelihood at :math:`\\alpha = 1` (§3.8); every other scalar likelihood uses Gauss-Hermite
quadrature, with :math:`d_1, d_2` from the tilted mean and variance:
:math:`d_1 = (\\hat\\mu - m)/v`, :math:`d_2 = (\\hat s^2 - v)/v^2`.
"""

from typing import NamedTuple

import gpflow
import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp
from check_shapes import check_shapes
from gpflow.likelihoods.utils import inv_probit

__all__ = ["TiltedMoments", "exact_probit", "log_normal_cdf", "tilted_moments"]

_INV_PROBIT_JITTER = 1e-3  # gpflow.likelihoods.utils.inv_probit squeezes Φ into [ε, 1 - ε]


def exact_probit(F: tf.Tensor) -> tf.Tensor:
    """
    The standard normal CDF :math:`\\Phi`, without the jitter of GPflow's ``inv_probit``. The
    paper's probit likelihood is :class:`~gpflow_tight.likelihoods.ExactProbit`, which uses it.
    """
    return 0.5 * tf.math.erfc(-F / np.sqrt(2.0))


def log_normal_cdf(x: tf.Tensor) -> tf.Tensor:
    """:math:`\\log \\Phi(x)`, accurate far into both tails (``tfp``'s ``log_ndtr``)."""
    return tfp.distributions.Normal(tf.zeros([], x.dtype), tf.ones([], x.dtype)).log_cdf(x)


class TiltedMoments(NamedTuple):
    """:math:`\\log \\tilde Z` and its first two derivatives in the cavity mean, each [B]."""

    log_normaliser: tf.Tensor
    d1: tf.Tensor
    d2: tf.Tensor


def _probit_jitter(likelihood: gpflow.likelihoods.Likelihood) -> float | None:
    """ε of a probit Bernoulli likelihood (0 for :func:`exact_probit`), else ``None``."""
    if isinstance(likelihood, gpflow.likelihoods.Bernoulli):
        if likelihood.invlink is inv_probit:
            return _INV_PROBIT_JITTER
        if likelihood.invlink is exact_probit:
            return 0.0
    return None


def _gaussian(
    noise: tf.Tensor, y: tf.Tensor, mean: tf.Tensor, variance: tf.Tensor, alpha: tf.Tensor
) -> TiltedMoments:
    """Eq. 127: the tilted normaliser of :math:`\\mathcal N(y; f, \\sigma^2)^\\alpha`."""
    total = variance + noise / alpha
    residual = y - mean
    log_normaliser = (
        -0.5 * alpha * tf.math.log(2 * np.pi * noise)
        + 0.5 * tf.math.log(noise)
        - 0.5 * tf.math.log(alpha * variance + noise)
        - 0.5 * tf.square(residual) / total
    )
    return TiltedMoments(log_normaliser, residual / total, -1.0 / total)


def _probit_log_likelihood(jitter: float, y: tf.Tensor, F: tf.Tensor) -> tf.Tensor:
    """
    :math:`\\log(\\epsilon + (1 - 2\\epsilon)\\Phi(sF))`, :math:`s = 2y - 1`, accurate in both
    tails (GPflow's Bernoulli forms :math:`1 - p`, which cancels, and a small power
    :math:`\\alpha` magnifies that error).
    """
    log_phi = log_normal_cdf((2 * y - 1) * F)
    if jitter == 0:
        return log_phi
    return tf.math.log(jitter + (1 - 2 * jitter) * tf.exp(log_phi))


def _probit(jitter: float, y: tf.Tensor, mean: tf.Tensor, variance: tf.Tensor) -> TiltedMoments:
    """
    :math:`\\alpha = 1` with :math:`p(y = 1 \\mid f) = \\epsilon + (1 - 2\\epsilon)\\Phi(f)`:
    :math:`\\tilde Z = \\epsilon + (1 - 2\\epsilon)\\Phi(z)`, :math:`z = s m / \\sqrt{1 + v}`,
    :math:`s = 2y - 1` (Bui, Yan & Turner 2017, §3.8 at :math:`\\alpha = 1`; Rasmussen & Williams
    2006, eq. 3.82), extended to GPflow's jittered probit.
    """
    sign = 2 * y - 1
    scale = tf.sqrt(1 + variance)
    z = sign * mean / scale
    log_normaliser = _probit_log_likelihood(jitter, tf.ones_like(y), z)
    log_pdf = -0.5 * tf.square(z) - 0.5 * np.log(2 * np.pi)
    ratio = (1 - 2 * jitter) * tf.exp(log_pdf - log_normaliser)
    return TiltedMoments(
        log_normaliser, sign * ratio / scale, -ratio * (z + ratio) / (1 + variance)
    )


def _quadrature(
    likelihood: gpflow.likelihoods.Likelihood,
    jitter: float | None,
    X: tf.Tensor,
    Y: tf.Tensor,
    mean: tf.Tensor,
    variance: tf.Tensor,
    alpha: tf.Tensor,
    num_points: int,
) -> TiltedMoments:
    """Gauss-Hermite quadrature on :math:`f = m + \\sqrt{2v}\\, x_i`."""
    nodes, weights = np.polynomial.hermite.hermgauss(num_points)
    nodes = tf.constant(nodes, dtype=mean.dtype)
    log_weights = tf.constant(np.log(weights) - 0.5 * np.log(np.pi), dtype=mean.dtype)
    F = mean[:, None] + tf.sqrt(2 * variance)[:, None] * nodes  # [B, H]
    if jitter is None:
        log_lik = likelihood.log_prob(X[:, None, :], F[..., None], Y[:, None, :])  # [B, H]
    else:
        log_lik = _probit_log_likelihood(jitter, Y, F)
    log_terms = log_weights + alpha[:, None] * log_lik
    log_normaliser = tf.reduce_logsumexp(log_terms, axis=1)
    tilted = tf.exp(log_terms - log_normaliser[:, None])
    first = tf.reduce_sum(tilted * nodes, axis=1)  # E[x], E[x²] under the tilted weights
    second = tf.reduce_sum(tilted * tf.square(nodes), axis=1)
    d1 = tf.sqrt(2 / variance) * first
    d2 = (2 * (second - tf.square(first)) - 1) / variance
    return TiltedMoments(log_normaliser, d1, d2)


@check_shapes(
    "X: [B, D]",
    "Y: [B, 1]",
    "mean: [B]",
    "variance: [B]",
    "alpha: [B]",
)
def tilted_moments(
    likelihood: gpflow.likelihoods.Likelihood,
    X: tf.Tensor,
    Y: tf.Tensor,
    mean: tf.Tensor,
    variance: tf.Tensor,
    alpha: tf.Tensor,
    *,
    alpha_is_one: bool = False,
    num_gauss_hermite_points: int = 50,
) -> TiltedMoments:
    """
    :math:`\\log \\tilde Z_n, d_1, d_2` for a cavity :math:`\\mathcal N(f_n; m_n, v_n)` and
    power :math:`\\alpha_n` (each [B]).

    :param alpha_is_one: the caller knows every :math:`\\alpha_n` is exactly 1, which enables
        the closed form for a probit Bernoulli likelihood (GPflow's jittered ``inv_probit`` or
        :func:`exact_probit`).
    """
    y = Y[:, 0]
    if isinstance(likelihood, gpflow.likelihoods.Gaussian):
        noise = likelihood.variance_at(X)[:, 0]
        return _gaussian(noise, y, mean, variance, alpha)
    jitter = _probit_jitter(likelihood)
    if jitter is not None and alpha_is_one:
        return _probit(jitter, y, mean, variance)
    return _quadrature(likelihood, jitter, X, Y, mean, variance, alpha, num_gauss_hermite_points)
