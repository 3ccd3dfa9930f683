"""
The computations shared by every model with the tighter conditional :math:`q(f \\mid u)`.

Bui, Ashman & Turner, *Tighter sparse variational Gaussian processes* (2025), §3, replace the
prior conditional :math:`p(f_n \\mid u)`, whose variance is the residual variance

.. math:: d_n = k_{nn} - k_{nu} K_{uu}^{-1} k_{un},

by a conditional with variance :math:`m_n d_n`, :math:`m_n > 0`. The bound gains the term
:math:`\\tfrac12 \\sum_n [1 + \\log m_n - m_n] \\le 0` (eq. 8) and every marginal variance at a
training input shrinks by :math:`(1 - m_n) d_n`. With a Gaussian likelihood the optimal
:math:`m_n` is :math:`\\sigma^2 / (d_n + \\sigma^2)`; the paper's parameterisation for other
likelihoods is :math:`m_n = \\beta / (d_n + \\beta)` with one :math:`\\beta > 0` per latent GP.
"""

import tensorflow as tf
from check_shapes import check_shapes

__all__ = [
    "relaxation_from_beta",
    "conditional_relaxation_term",
    "log_residual_term",
]


@check_shapes(
    "residual_variance: [batch...]",
    "beta: [broadcast batch...]",
    "return: [batch...]",
)
def relaxation_from_beta(residual_variance: tf.Tensor, beta: tf.Tensor) -> tf.Tensor:
    """
    :math:`m_n = \\beta / (d_n + \\beta)` (Bui et al. 2025, §3, "Non-Gaussian likelihoods").
    """
    return beta / (residual_variance + beta)


@check_shapes(
    "relaxation: [batch...]",
    "return: []",
)
def conditional_relaxation_term(relaxation: tf.Tensor) -> tf.Tensor:
    """
    :math:`\\tfrac12 \\sum_n [1 + \\log m_n - m_n]`, the (non-positive) price of the tighter
    conditional in the uncollapsed bound (Bui et al. 2025, eq. 8). Zero when all :math:`m_n = 1`.
    """
    return 0.5 * tf.reduce_sum(1.0 + tf.math.log(relaxation) - relaxation)


@check_shapes(
    "scaled_residual: [batch...]",
    "return: []",
)
def log_residual_term(scaled_residual: tf.Tensor) -> tf.Tensor:
    """
    :math:`-\\tfrac12 \\sum_n \\log(1 + d_n / \\sigma_n^2)`, which replaces Titsias's trace term
    :math:`-\\tfrac12 \\sum_n d_n / \\sigma_n^2` in the collapsed bound (Bui et al. 2025, eq. 9).

    :param scaled_residual: :math:`d_n / \\sigma_n^2`. Round-off can make it slightly negative
        when :math:`d_n \\approx 0`; it is clipped at zero, where the exact value lies.
    """
    return -0.5 * tf.reduce_sum(tf.math.log1p(tf.maximum(scaled_residual, 0.0)))
