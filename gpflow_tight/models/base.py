"""Behaviour shared by every model of the package."""

from typing import Any

from ..validation import translate_cholesky_failure

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


class ConstructorOnly:
    """
    Mixin for models whose Python settings decide the structure of their computation graph (a
    relaxation kind, a power, a prediction mode): the attributes named in ``_constructor_only``
    are set once, in the constructor. A later assignment would be ignored by functions that
    were already compiled, so it is refused with an ``AttributeError`` that says to build a new
    model instead.
    """

    _constructor_only: tuple[str, ...] = ()

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self._constructor_only and name in self.__dict__:
            raise AttributeError(
                f"`{name}` of {type(self).__name__} is fixed at construction (compiled functions "
                f"would keep the old value): build a new model with `{name}=...` instead, e.g. "
                "`gpflow.utilities.deepcopy` the model's parameters into it with "
                "`gpflow.utilities.multiple_assign`."
            )
        super().__setattr__(name, value)
