"""Behaviour shared by every model of the package."""

from typing import Any

import numpy as np
import tensorflow as tf

from ..validation import ConstructorOnly, training_objective

__all__ = ["InfiniteLossOnCholeskyFailure", "ConstructorOnly"]


class InfiniteLossOnCholeskyFailure:
    """
    Mixin for GPflow models: where a Cholesky factorisation fails, ``training_loss`` (and so
    GPflow's ``training_loss_closure``, compiled as GPflow compiles it) is ``+inf`` instead of an
    error, so that optimisers with a line search back off and carry on. GPflow's own models give
    NaN there; scipy's line searches cannot back off from NaN (L-BFGS-B and BFGS both end at the
    NaN point), while a larger-than-any loss is rejected like any other bad trial point, so a
    NaN loss is reported as ``+inf`` (its gradient stays non-finite). Everywhere else
    (predictions, ``elbo()`` called directly, the training helpers of
    :mod:`gpflow_tight.training`) the failure raises a :class:`~gpflow_tight.CholeskyError`
    that says what to do.
    """

    def training_loss(self, *args: Any, **kwargs: Any) -> Any:
        """GPflow's training loss; ``+inf`` where it is NaN (a failed factorisation)."""
        with training_objective():
            loss = super().training_loss(*args, **kwargs)  # type: ignore[misc]
        return tf.where(tf.math.is_nan(loss), tf.constant(np.inf, loss.dtype), loss)
