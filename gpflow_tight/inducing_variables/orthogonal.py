"""
Orthogonally decoupled inducing variables (SOLVE-GP; Shi, Titsias & Mnih 2020; Fernlund 2022,
ch. 5): the class only. Its ``Kuu`` and ``Kuf`` are registered in
:mod:`gpflow_tight.covariances`, and the computations that every orthogonally decoupled model
shares are in :mod:`gpflow_tight.orthogonal`.
"""

from typing import Any

import tensorflow as tf
from check_shapes import Shape
from gpflow.inducing_variables import InducingVariables
from gpflow.models.util import inducingpoint_wrapper

__all__ = ["OrthogonalInducingVariables"]


class OrthogonalInducingVariables(InducingVariables):
    """
    The inducing variables :math:`\\mathbf v_\\perp = \\mathbf v - K_{vu} K_{uu}^{-1}\\mathbf u`
    of the part of the GP that is orthogonal to the ``regular`` inducing variables
    :math:`\\mathbf u` (Shi, Titsias & Mnih 2020, sec. 3; Fernlund 2022, eqs. 5.4-5.5).

    ``Kuu`` returns :math:`C_{vv} + \\varepsilon I` and ``Kuf`` returns :math:`C_{vf}`, with
    the jitter convention of :mod:`gpflow_tight.orthogonal` (the registrations are in
    :mod:`gpflow_tight.covariances`). Both sets may be any inducing variables with GPflow
    ``Kuu``/``Kuf`` registrations and a :func:`~gpflow_tight.covariances.kuvs.Kuv`
    cross-covariance between them (inducing points, GPflow's ``Multiscale``,
    :class:`~gpflow_tight.inducing_variables.frequency.FrequencyInducingFeatures`, in any
    combination).

    :param orthogonal: the inducing variables :math:`\\mathbf v` (an array [M_v, D] is taken as
        inducing points).
    :param regular: the inducing variables :math:`\\mathbf u` they are made orthogonal to. The
        object is shared, not copied: a model that trains :math:`Z_u` moves this set too. It is
        a reference: its parameters belong to the model's ``inducing_variable``, and GPflow's
        ``print_summary``/``parameter_dict`` and ``trainable_variables`` list them there only.
    """

    _TF_MODULE_IGNORED_PROPERTIES = InducingVariables._TF_MODULE_IGNORED_PROPERTIES | {"regular"}

    def __init__(self, orthogonal: Any, regular: Any) -> None:
        super().__init__(name="OrthogonalInducingVariables")
        self.orthogonal = inducingpoint_wrapper(orthogonal)
        self.regular = inducingpoint_wrapper(regular)
        if isinstance(self.orthogonal, OrthogonalInducingVariables) or isinstance(
            self.regular, OrthogonalInducingVariables
        ):
            raise TypeError(
                "Nested orthogonal sets are not supported: pass plain inducing variables as "
                "`orthogonal` and `regular`."
            )
        shape_u, shape_v = self.regular.shape, self.orthogonal.shape
        if shape_u is not None and shape_v is not None and shape_u[1] != shape_v[1]:
            raise ValueError(
                "The regular and orthogonal inducing variables must live in the same input "
                f"space: the regular ones (`inducing_variable` of a SOLVE model, `regular` here) "
                f"have D = {shape_u[1]} columns, the orthogonal ones "
                f"(`orthogonal_inducing_variable`, `orthogonal` here) D = {shape_v[1]}; give both "
                "sets one column per input dimension."
            )

    @property
    def num_inducing(self) -> tf.Tensor:
        """The number of orthogonal inducing variables (the regular set is counted apart)."""
        return self.orthogonal.num_inducing

    @property
    def shape(self) -> Shape:
        """The orthogonal set's shape."""
        return self.orthogonal.shape
