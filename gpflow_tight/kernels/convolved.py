"""
Process convolutions for multi-output GPs (Boyle & Frean 2005; Álvarez & Lawrence 2009, 2011;
lecture notes 002, last part): every output is a smoothed version of Q independent latent
processes,

.. math::
    f_d(\\mathbf x) = \\sum_{q=1}^{Q} \\int G_{d,q}(\\mathbf x - \\mathbf z)\\,
        u_q(\\mathbf z)\\, \\mathrm d\\mathbf z, \\qquad
    G_{d,q}(\\boldsymbol\\tau) = S_{d,q}\\, \\mathcal N(\\boldsymbol\\tau; \\mathbf 0,
        P_d^{-1}), \\quad P_d^{-1} = \\mathrm{diag}(w_{d,1}^2, \\dots, w_{d,D}^2),

with sensitivities :math:`S_{d,q}` and per-output ARD smoothing widths :math:`w_{d,i}` (the
standard deviations of the Gaussian smoothing kernel).

**Normalisation.** The latent processes are squared-exponential with *unit variance* and their
own ARD lengthscales :math:`\\ell_{q,i}`, :math:`k_q(\\mathbf z, \\mathbf z') =
\\exp(-\\tfrac12 (\\mathbf z - \\mathbf z')^\\top \\Lambda_q (\\mathbf z - \\mathbf z'))`,
:math:`\\Lambda_q^{-1} = \\mathrm{diag}(\\ell_{q,i}^2)`; the scale of each output lives in the
sensitivities. This is Álvarez & Lawrence's (2011) normalised latent kernel
:math:`\\mathcal N(\\mathbf z - \\mathbf z'; \\mathbf 0, \\Lambda_q^{-1})` times the constant
:math:`(2\\pi)^{D/2} |\\Lambda_q^{-1}|^{1/2}`, which their sensitivities would absorb. Writing
:math:`k_q` as that constant times a Gaussian density, the two convolutions are convolutions of
Gaussian densities and

.. math::
    K_{f_d f_{d'}}(\\mathbf x, \\mathbf x') = \\sum_q S_{d,q} S_{d',q}\\,
        (2\\pi)^{D/2} |\\Lambda_q^{-1}|^{1/2}\\,
        \\mathcal N(\\mathbf x - \\mathbf x'; \\mathbf 0, P_d^{-1} + P_{d'}^{-1} + \\Lambda_q^{-1})
    = \\sum_q S_{d,q} S_{d',q} \\prod_{i=1}^{D} \\frac{\\ell_{q,i}}{\\sqrt{T_{dd'q,i}}}
        \\exp\\Big(-\\frac12 \\sum_{i=1}^{D} \\frac{(x_i - x'_i)^2}{T_{dd'q,i}}\\Big),

with :math:`T_{dd'q,i} = w_{d,i}^2 + w_{d',i}^2 + \\ell_{q,i}^2`. As the widths go to 0
(:math:`G_{d,q} \\to S_{d,q}\\delta`), one output with one latent process is the SE kernel with
variance :math:`S^2` and the latent lengthscales. The cross-covariance between a latent value and
an output, used by :class:`~gpflow_tight.inducing_variables.LatentInducingPoints`, is one
convolution:

.. math::
    \\mathrm{Cov}[u_q(\\mathbf z), f_d(\\mathbf x)] = S_{d,q} \\prod_i
        \\frac{\\ell_{q,i}}{\\sqrt{\\ell_{q,i}^2 + w_{d,i}^2}}
        \\exp\\Big(-\\frac12 \\sum_i \\frac{(x_i - z_i)^2}{\\ell_{q,i}^2 + w_{d,i}^2}\\Big).

**Stacked outputs.** As with ``gpflow.kernels.Coregion``, the inputs carry the output index
:math:`d \\in \\{0, \\dots, D_{\\rm out} - 1\\}` as their *last* column: a row
``[x_1, ..., x_D, d]`` stands for :math:`f_d(\\mathbf x)`. Outputs may be observed at different
inputs (heterotopic data), and ``gpflow.models.GPR((X_aug, Y), kernel)`` is the exact
multi-output GP. A non-integer or out-of-range index is a ``ValueError`` when the kernel runs
eagerly and a failed graph assertion inside ``tf.function``.
"""

from typing import Any

import numpy as np
import tensorflow as tf
from check_shapes import check_shapes
from gpflow.base import Parameter, TensorType
from gpflow.kernels import Kernel
from gpflow.utilities import positive

from ..validation import _graph_assert, as_default_float, check_positive

__all__ = ["ConvolvedKernel"]


def _parameter_matrix(value: Any, name: str, rows: str, columns: str) -> np.ndarray:
    """A finite 2-D float array, or a ``ValueError`` naming ``name`` and the expected shape."""
    array = as_default_float(value, name)
    if array.ndim != 2 or 0 in array.shape:
        raise ValueError(
            f"`{name}` must be a non-empty 2-D array [{rows}, {columns}], got shape "
            f"{array.shape}; reshape a vector with `v[:, None]` (one column) or `v[None, :]`."
        )
    if not np.all(np.isfinite(array)):
        raise ValueError(f"`{name}` contains NaN or infinite values; give finite numbers.")
    return array


class ConvolvedKernel(Kernel):
    """
    The process-convolution kernel of multi-output GPs with Gaussian smoothing kernels and Q
    unit-variance SE latent processes (module docstring: equations, normalisation and the
    stacked-output convention; Álvarez & Lawrence 2011, Boyle & Frean 2005).

    Inputs are ``[N, D + 1]``: D input columns followed by the output index.

    :param sensitivities: :math:`S_{d,q}`, shape [D_out, Q] (unconstrained parameter).
    :param smoothing_widths: :math:`w_{d,i} > 0`, the standard deviations of the smoothing
        kernel of output d along input dimension i, shape [D_out, D] (``positive()``).
    :param latent_lengthscales: :math:`\\ell_{q,i} > 0`, the ARD lengthscales of latent process
        q, shape [Q, D] (``positive()``).
    :param name: the module name.
    """

    def __init__(
        self,
        sensitivities: Any,
        smoothing_widths: Any,
        latent_lengthscales: Any,
        name: str | None = None,
    ) -> None:
        S = _parameter_matrix(sensitivities, "sensitivities", "D_out", "Q")
        widths = _parameter_matrix(smoothing_widths, "smoothing_widths", "D_out", "D")
        lengthscales = _parameter_matrix(latent_lengthscales, "latent_lengthscales", "Q", "D")
        check_positive(widths, "smoothing_widths")
        check_positive(lengthscales, "latent_lengthscales")
        if widths.shape[0] != S.shape[0]:
            raise ValueError(
                f"`smoothing_widths` must have one row per output, D_out = {S.shape[0]} (the rows "
                f"of `sensitivities`), got shape {widths.shape}."
            )
        if lengthscales.shape[0] != S.shape[1]:
            raise ValueError(
                f"`latent_lengthscales` must have one row per latent process, Q = {S.shape[1]} "
                f"(the columns of `sensitivities`), got shape {lengthscales.shape}."
            )
        if lengthscales.shape[1] != widths.shape[1]:
            raise ValueError(
                "`latent_lengthscales` and `smoothing_widths` must have the same number of "
                f"columns D (input dimensions), got {lengthscales.shape[1]} and "
                f"{widths.shape[1]}."
            )
        super().__init__(name=name)
        self.sensitivities = Parameter(S)
        self.smoothing_widths = Parameter(widths, transform=positive())
        self.latent_lengthscales = Parameter(lengthscales, transform=positive())

    @property
    def num_outputs(self) -> int:
        """D_out, the number of outputs."""
        return int(self.sensitivities.shape[0])

    @property
    def num_latent(self) -> int:
        """Q, the number of latent processes."""
        return int(self.sensitivities.shape[1])

    @property
    def input_dim(self) -> int:
        """D, the input columns before the output-index column."""
        return int(self.latent_lengthscales.shape[1])

    def split_inputs(self, X: TensorType, name: str = "X") -> tuple[tf.Tensor, tf.Tensor]:
        """
        ``X`` [..., N, D + 1] as its inputs [..., N, D] and output indices [..., N] (int32),
        checking that the last column holds integers in ``[0, D_out)``: eagerly a ``ValueError``
        naming ``name``, inside ``tf.function`` a graph assertion.
        """
        X = tf.convert_to_tensor(X)
        if X.shape.rank is not None and X.shape.rank < 2:
            raise ValueError(
                f"`{name}` must be [N, D + 1] (inputs, then the output index), got shape "
                f"{tuple(X.shape)}; reshape a single point with `x[None, :]`."
            )
        columns = X.shape[-1] if X.shape.rank is not None else None
        if columns is not None and columns != self.input_dim + 1:
            raise ValueError(
                f"`{name}` must have D + 1 = {self.input_dim + 1} columns (the kernel's D = "
                f"{self.input_dim} input dimensions, then the output index), got {columns}."
            )
        index = X[..., -1]
        message = (
            f"the output-index column (last column) of `{name}` must hold integers in "
            f"[0, {self.num_outputs}) (D_out = {self.num_outputs} outputs)"
        )
        valid = tf.reduce_all(
            (index == tf.round(index)) & (index >= 0) & (index < self.num_outputs)
        )
        if tf.executing_eagerly():
            if not bool(valid):
                values = np.reshape(index.numpy(), [-1])
                bad = ~((values == np.round(values)) & (values >= 0) & (values < self.num_outputs))
                raise ValueError(
                    f"{message}; got {np.unique(values[bad])[:5].tolist()} (flat rows "
                    f"{np.nonzero(bad)[0][:5].tolist()})."
                )
            return X[..., :-1], tf.cast(index, tf.int32)
        with tf.control_dependencies([_graph_assert(valid, message)]):
            return tf.identity(X[..., :-1]), tf.cast(index, tf.int32)

    def _pairwise(self, x1: tf.Tensor, d1: tf.Tensor, x2: tf.Tensor, d2: tf.Tensor) -> tf.Tensor:
        """The closed form for inputs [..., N, D], [..., M, D] (batches broadcast): [..., N, M]."""
        widths_sq = tf.square(self.smoothing_widths)  # [P, D]
        lengthscales_sq = tf.square(self.latent_lengthscales)  # [Q, D]
        total = (
            tf.gather(widths_sq, d1)[..., :, None, None, :]
            + tf.gather(widths_sq, d2)[..., None, :, None, :]
            + lengthscales_sq
        )  # [..., N, M, Q, D]
        difference = x1[..., :, None, None, :] - x2[..., None, :, None, :]
        log_k = 0.5 * tf.reduce_sum(
            tf.math.log(lengthscales_sq / total) - tf.square(difference) / total, axis=-1
        )  # [..., N, M, Q]
        weights = (
            tf.gather(self.sensitivities, d1)[..., :, None, :]
            * tf.gather(self.sensitivities, d2)[..., None, :, :]
        )
        return tf.reduce_sum(weights * tf.exp(log_k), axis=-1)

    @check_shapes(
        "X: [batch..., N, D_aug]",
        "X2: [batch2..., M, D_aug]",
        "return: [batch..., N, batch2..., M] if X2 is not None",
        "return: [batch..., N, N] if X2 is None",
    )
    def K(self, X: TensorType, X2: TensorType | None = None) -> tf.Tensor:
        """
        :math:`K_{f_d f_{d'}}(\\mathbf x, \\mathbf x')` of the module docstring, with GPflow's
        batch semantics.
        """
        x1, d1 = self.split_inputs(X, "X")
        if X2 is None:
            return self._pairwise(x1, d1, x1, d1)
        x2, d2 = self.split_inputs(X2, "X2")
        batch1, batch2 = tf.shape(d1), tf.shape(d2)
        K = self._pairwise(
            tf.reshape(x1, [-1, self.input_dim]),
            tf.reshape(d1, [-1]),
            tf.reshape(x2, [-1, self.input_dim]),
            tf.reshape(d2, [-1]),
        )
        return tf.reshape(K, tf.concat([batch1, batch2], axis=0))

    @check_shapes(
        "X: [batch..., N, D_aug]",
        "return: [batch..., N]",
    )
    def K_diag(self, X: TensorType) -> tf.Tensor:
        """:math:`\\sum_q S_{d,q}^2 \\prod_i \\ell_{q,i} / \\sqrt{2 w_{d,i}^2 + \\ell_{q,i}^2}`."""
        _, d = self.split_inputs(X, "X")
        lengthscales_sq = tf.square(self.latent_lengthscales)  # [Q, D]
        total = 2.0 * tf.gather(tf.square(self.smoothing_widths), d)[..., None, :] + lengthscales_sq
        scale = tf.exp(0.5 * tf.reduce_sum(tf.math.log(lengthscales_sq / total), axis=-1))
        return tf.reduce_sum(tf.square(tf.gather(self.sensitivities, d)) * scale, axis=-1)

    def check_latent_index(self, latent_index: Any, name: str = "latent_index") -> None:
        """A ``ValueError`` naming ``name`` unless every latent index is in ``[0, Q)``."""
        values = np.asarray(latent_index)
        if values.size and (values.min() < 0 or values.max() >= self.num_latent):
            raise ValueError(
                f"`{name}` must hold latent-process indices in [0, {self.num_latent}) (the "
                f"kernel has Q = {self.num_latent} latent processes), got values "
                f"{np.unique(values[(values < 0) | (values >= self.num_latent)])[:5].tolist()}."
            )

    @check_shapes(
        "Z: [M, D]",
        "latent_index: [M]",
        "return: [M, M]",
    )
    def K_latent(self, Z: TensorType, latent_index: TensorType) -> tf.Tensor:
        """
        :math:`\\mathrm{Cov}[u_{q_m}(\\mathbf z_m), u_{q_n}(\\mathbf z_n)] =
        \\delta_{q_m q_n} k_{q_m}(\\mathbf z_m, \\mathbf z_n)` (independent unit-variance SE
        latent processes; block-diagonal over latents when the points are sorted by latent).
        """
        lengthscales_sq = tf.gather(tf.square(self.latent_lengthscales), latent_index)  # [M, D]
        difference = Z[:, None, :] - Z[None, :, :]
        K = tf.exp(-0.5 * tf.reduce_sum(tf.square(difference) / lengthscales_sq[:, None, :], -1))
        same = tf.equal(latent_index[:, None], latent_index[None, :])
        return tf.where(same, K, tf.zeros_like(K))

    @check_shapes(
        "Z: [M, D]",
        "latent_index: [M]",
        "X: [N, D_aug]",
        "return: [M, N]",
    )
    def K_latent_output(self, Z: TensorType, latent_index: TensorType, X: TensorType) -> tf.Tensor:
        """
        :math:`\\mathrm{Cov}[u_{q_m}(\\mathbf z_m), f_{d_n}(\\mathbf x_n)]` of the module
        docstring, for inducing inputs ``Z`` of latents ``latent_index`` and stacked inputs ``X``.
        """
        x, d = self.split_inputs(X, "Xnew")
        total = (
            tf.gather(tf.square(self.latent_lengthscales), latent_index)[:, None, :]
            + tf.gather(tf.square(self.smoothing_widths), d)[None, :, :]
        )  # [M, N, D]
        difference = Z[:, None, :] - x[None, :, :]
        log_k = 0.5 * tf.reduce_sum(
            tf.math.log(tf.square(tf.gather(self.latent_lengthscales, latent_index))[:, None, :])
            - tf.math.log(total)
            - tf.square(difference) / total,
            axis=-1,
        )
        weights = tf.gather(tf.gather(self.sensitivities, d), latent_index, axis=1)  # [N, M]
        return tf.transpose(weights) * tf.exp(log_k)
