"""
Inducing variables on the latent processes of a process convolution (Álvarez & Lawrence 2009,
2011; lecture notes 002, last part): :math:`u_m = u_{q_m}(\\mathbf z_m)`, the value of latent
process :math:`q_m` at the inducing input :math:`\\mathbf z_m`, for the multi-output
:class:`~gpflow_tight.kernels.ConvolvedKernel`.

**Several latent processes.** Each point carries its latent index :math:`q_m`
(``latent_index``, fixed integers, not trained) next to its inputs ``Z`` [M, D] (a trainable
parameter), so latents may have different numbers and places of inducing inputs;
:meth:`LatentInducingPoints.for_each_latent` puts the same inputs on every latent. The set
covers the D + 1 columns of the stacked inputs (``shape`` is [M, D + 1, 1]) as GPflow's
inducing points would, though it has no output index.

Because the latents are independent, :math:`K_{uu}` is block-diagonal over latents (when the
points are sorted by latent), :math:`K_{uu}[m, n] = \\delta_{q_m q_n} k_{q_m}(\\mathbf z_m,
\\mathbf z_n)`, and :math:`K_{uf}[m, n] = \\mathrm{Cov}[u_{q_m}(\\mathbf z_m),
f_{d_n}(\\mathbf x_n)]` is one Gaussian convolution (see
:mod:`gpflow_tight.kernels.convolved`). The registrations with GPflow's ``Kuu`` and ``Kuf``
dispatchers are in :mod:`gpflow_tight.covariances`, so ``SGPR``, ``SVGP`` and this package's
sparse models take the set unchanged.
"""

from typing import Any

import numpy as np
import tensorflow as tf
from check_shapes import Shape
from gpflow.base import Parameter
from gpflow.inducing_variables import InducingVariables

from ..validation import as_default_float, check_count

__all__ = ["LatentInducingPoints"]


class LatentInducingPoints(InducingVariables):
    """
    Inducing points :math:`u_m = u_{q_m}(\\mathbf z_m)` on the latent processes of a
    :class:`~gpflow_tight.kernels.ConvolvedKernel` (module docstring).

    :param Z: the inducing inputs :math:`\\mathbf z_m` in the latent input space, shape [M, D],
        without an output-index column (a trainable parameter).
    :param latent_index: the latent process :math:`q_m` of each point, M integers
        :math:`\\ge 0`; all zeros (one latent process) by default. The kernel checks that they
        are below its number of latents Q.
    :param name: the module name.
    """

    def __init__(self, Z: Any, latent_index: Any = None, name: str | None = None) -> None:
        Z_value = as_default_float(Z, "Z")
        if Z_value.ndim != 2 or 0 in Z_value.shape:
            raise ValueError(
                "`Z` must be a non-empty 2-D array [M, D] of inducing inputs (without an "
                f"output-index column), got shape {Z_value.shape}; reshape a vector with "
                "`z[:, None]`."
            )
        if not np.all(np.isfinite(Z_value)):
            raise ValueError("`Z` contains NaN or infinite values; give finite inducing inputs.")
        num_inducing = Z_value.shape[0]
        index = np.zeros(num_inducing) if latent_index is None else np.asarray(latent_index)
        if (
            index.shape != (num_inducing,)
            or index.dtype.kind not in "fiu"
            or not np.all(np.isfinite(index))
            or np.any(index != np.round(index))
            or np.any(index < 0)
        ):
            raise ValueError(
                f"`latent_index` must be M = {num_inducing} non-negative integers (the latent "
                f"process of each row of `Z`), got {latent_index!r}."
            )
        super().__init__(name=name)
        self.Z = Parameter(Z_value)
        self._latent_index = index.astype(np.int32)

    @classmethod
    def for_each_latent(
        cls, Z: Any, num_latent: int, name: str | None = None
    ) -> "LatentInducingPoints":
        """The inputs ``Z`` [M, D] on each of ``num_latent`` latent processes: Q M points."""
        check_count(num_latent, "num_latent")
        Z_value = as_default_float(Z, "Z")
        if Z_value.ndim != 2:
            raise ValueError(f"`Z` must be a 2-D array [M, D], got shape {Z_value.shape}.")
        index = np.repeat(np.arange(num_latent), Z_value.shape[0])
        return cls(np.tile(Z_value, (num_latent, 1)), index, name=name)

    @property
    def latent_index(self) -> tf.Tensor:
        """The latent process of each point, int32 [M]."""
        return tf.constant(self._latent_index)

    @property
    def num_inducing(self) -> tf.Tensor:
        """The number of inducing points M."""
        return tf.shape(self.Z)[0]

    @property
    def shape(self) -> Shape:
        """[M, D + 1, 1]: the columns of the stacked inputs (with the output index) it covers."""
        M, D = self.Z.shape
        return (M, None if D is None else D + 1, 1)
