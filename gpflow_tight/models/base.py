"""Behaviour shared by every model of the package."""

from typing import Any

from ..validation import ConstructorOnly, training_objective

__all__ = ["NaNLossOnCholeskyFailure", "ConstructorOnly"]


class NaNLossOnCholeskyFailure:
    """
    Mixin for GPflow models: where a Cholesky factorisation fails, ``training_loss`` (and so
    GPflow's ``training_loss_closure``, compiled as GPflow compiles it) is non-finite, as in
    GPflow's models, so that optimisers with a line search back off and carry on. Everywhere
    else (predictions, ``elbo()`` called directly, the training helpers of
    :mod:`gpflow_tight.training`) the failure raises a :class:`~gpflow_tight.CholeskyError`
    that says what to do.
    """

    def training_loss(self, *args: Any, **kwargs: Any) -> Any:
        """GPflow's training loss; NaN where a Cholesky factorisation fails."""
        with training_objective():
            return super().training_loss(*args, **kwargs)  # type: ignore[misc]
