"""Behaviour shared by every model of the package."""

from typing import Any

from ..validation import ConstructorOnly, translate_cholesky_failure

__all__ = ["ExplainsCholeskyFailures", "ConstructorOnly"]


class ExplainsCholeskyFailures:
    """
    Mixin for GPflow models: the closures of ``training_loss_closure`` re-raise a failed Cholesky
    factorisation as :class:`~gpflow_tight.validation.CholeskyError`, whose message says what to
    do, instead of TensorFlow's bare ``InvalidArgumentError``.
    """

    def training_loss_closure(self, *args: Any, **kwargs: Any) -> Any:
        """GPflow's closure; a failed Cholesky raises a :class:`~.validation.CholeskyError`."""
        closure = super().training_loss_closure(*args, **kwargs)  # type: ignore[misc]
        return translate_cholesky_failure(closure)
