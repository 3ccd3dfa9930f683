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
    error, which an optimiser can handle. GPflow's own models give NaN there, and scipy's L-BFGS-B
    and BFGS both end a run at the NaN point. With ``+inf``, BFGS's line search backs off and
    carries on, and L-BFGS-B's (scipy 1.17) ends the run at the last finite iterate, which
    :func:`~gpflow_tight.training.fit_scipy` reports as not converged. The gradient there stays
    non-finite. Everywhere else
    (predictions, ``elbo()`` called directly, the training helpers of
    :mod:`gpflow_tight.training`) the failure raises a :class:`~gpflow_tight.CholeskyError`
    that says what to do.
    """

    def training_loss(self, *args: Any, **kwargs: Any) -> Any:
        """GPflow's training loss; ``+inf`` where it is NaN (a failed factorisation)."""
        with training_objective():
            loss = super().training_loss(*args, **kwargs)  # type: ignore[misc]
        return tf.where(tf.math.is_nan(loss), tf.constant(np.inf, loss.dtype), loss)
