"""
Likelihoods for the package's models that GPflow lacks.

:class:`ExactProbit` is the probit likelihood :math:`p(y = 1 \\mid f) = \\Phi(f)` of the Power EP
paper (Bui, Yan & Turner 2017, §3.8 and §4.3), without the :math:`\\epsilon` that GPflow's
``inv_probit`` mixes in and with every quantity computed in log space, so that it stays finite
in both tails.
"""

from typing import Any

import tensorflow as tf
from check_shapes import inherit_check_shapes
from gpflow.base import MeanAndVariance, TensorType
from gpflow.likelihoods import Bernoulli

from .tilted import exact_probit, log_normal_cdf

__all__ = ["ExactProbit"]


class ExactProbit(Bernoulli):
    """
    Binary labels :math:`y \\in \\{0, 1\\}` with :math:`p(y \\mid f) = \\Phi((2y - 1) f)`;
    as in GPflow's ``Bernoulli``, a label other than 1 (e.g. -1) counts as 0.

    ``Bernoulli(invlink=exact_probit)`` has the same model, but evaluates
    :math:`\\log(1 - \\Phi(f))`, which is :math:`-\\infty` for :math:`f > 8.3` (float64), inside
    SVGP's Gauss-Hermite quadrature, and predicts by quadrature. Here the log-likelihood is
    :math:`\\log \\Phi((2y - 1) f)` and the predictive is closed form:
    :math:`p(y_* = 1) = \\Phi(z)`, :math:`z = \\mu / \\sqrt{1 + \\sigma^2}`, with variance
    :math:`\\Phi(z)\\Phi(-z)` and log density :math:`\\log \\Phi(\\pm z)`.
    GPflow's default ``Bernoulli()`` is instead
    :math:`\\epsilon + (1 - 2\\epsilon)\\Phi(f)`, :math:`\\epsilon = 10^{-3}`.

    :class:`~gpflow_tight.PowerEPSGP` recognises it (closed-form tilted moments at
    :math:`\\alpha = 1`, stable quadrature otherwise), as it does
    ``Bernoulli(invlink=exact_probit)``.
    """

    def __init__(self, **kwargs: Any) -> None:
        """:param kwargs: passed to GPflow's ``Bernoulli``, e.g. ``quadrature``."""
        super().__init__(invlink=exact_probit, **kwargs)

    @inherit_check_shapes
    def _scalar_log_prob(self, X: TensorType, F: TensorType, Y: TensorType) -> tf.Tensor:
        return log_normal_cdf(_label_sign(Y, F.dtype) * F)

    @inherit_check_shapes
    def _predict_mean_and_var(
        self, X: TensorType, Fmu: TensorType, Fvar: TensorType
    ) -> MeanAndVariance:
        z = Fmu / tf.sqrt(1 + Fvar)
        p = exact_probit(z)
        return p, p * exact_probit(-z)  # p(1 - p) without cancelling

    @inherit_check_shapes
    def _predict_log_density(
        self, X: TensorType, Fmu: TensorType, Fvar: TensorType, Y: TensorType
    ) -> tf.Tensor:
        z = Fmu / tf.sqrt(1 + Fvar)
        return tf.reduce_sum(log_normal_cdf(_label_sign(Y, z.dtype) * z), axis=-1)


def _label_sign(Y: TensorType, dtype: tf.DType) -> tf.Tensor:
    """+1 for the label 1, -1 for any other (GPflow's ``Bernoulli`` reads y != 1 as 0)."""
    return tf.where(tf.equal(Y, tf.ones_like(Y)), tf.ones([], dtype), -tf.ones([], dtype))
