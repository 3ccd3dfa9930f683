"""
Frequency inducing features (FIF): inter-domain inducing variables that integrate the GP against
Gaussian windows modulated by a cosine, from Lázaro-Gredilla & Figueiras-Vidal, *Inter-domain
Gaussian processes for sparse inference using inducing features* (NeurIPS 2009), the FIFGP model.

Feature :math:`m` is

.. math::
    u_m = \\int f(\\mathbf x)\\, g_m(\\mathbf x)\\, \\mathrm d\\mathbf x, \\qquad
    g_m(\\mathbf x) = \\mathcal N(\\mathbf x; \\mathbf z_m, \\mathrm{diag}(\\mathbf c_m))
        \\cos(\\varphi_m + \\boldsymbol\\omega_m^\\top \\mathbf x),

with centre :math:`\\mathbf z_m`, window variances :math:`c_{md}` (the squared ``widths``),
frequencies :math:`\\boldsymbol\\omega_m` and phase :math:`\\varphi_m`. With zero frequencies
and phases the window is a plain Gaussian: these are the multi-scale features of the same paper
(GPflow's ``Multiscale``, whose window standard deviation is :math:`\\ell + s` in GPflow's
parameterisation, i.e. :math:`c = (\\ell + s)^2 - \\ell^2`).

For the squared-exponential kernel every covariance is a Gaussian integral. Writing the cosine
as :math:`\\mathrm{Re}\\, e^{i\\theta}` and using
:math:`\\mathbb E[e^{i\\mathbf a^\\top \\mathbf x}] = e^{i\\mathbf a^\\top\\boldsymbol\\mu
- \\mathbf a^\\top\\Sigma\\mathbf a / 2}` for :math:`\\mathbf x \\sim \\mathcal N(\\boldsymbol\\mu,
\\Sigma)` gives the closed form of :func:`window_covariance` (``Kuu``, and the cross-covariance
between two sets) and of ``Kuf``. As in GPflow, the class and its windows live here and the
dispatch registrations in :mod:`gpflow_tight.covariances` (``kuus``, ``kufs``, ``kuvs``);
``import gpflow_tight`` registers them with GPflow's ``Kuu`` and ``Kuf`` dispatchers, so the
features work in every GPflow model (SGPR, SVGP, ...) and in the models of this package without
further code.

If the kernel acts on a subset of the input dimensions (``active_dims``), the windows are
restricted to those dimensions, as GPflow does for ``Multiscale``: the other columns of ``Z``,
``widths`` and ``frequencies`` are ignored.
"""

from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf
from check_shapes import Shape, check_shapes
from gpflow.base import Parameter
from gpflow.inducing_variables import InducingVariables, Multiscale
from gpflow.kernels import SquaredExponential
from gpflow.utilities import positive

__all__ = [
    "FrequencyInducingFeatures",
    "CosineWindows",
    "fif_windows",
    "multiscale_windows",
    "window_covariance",
]


def _as_array(value: Any, name: str) -> np.ndarray:
    """``value`` as a float numpy array, with a ``TypeError`` naming ``name`` if it is not one."""
    if isinstance(value, tf.Variable | tf.Tensor) or hasattr(value, "numpy"):
        value = value.numpy()
    try:
        array = np.asarray(value)
    except Exception as error:  # pragma: no cover - numpy raises many types here
        raise TypeError(f"`{name}` must be array-like, got {type(value).__name__}.") from error
    if array.dtype == object or not (
        np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)
    ):
        raise TypeError(f"`{name}` must hold real numbers, got dtype {array.dtype}.")
    return array.astype(np.float64)


def _check_finite(array: np.ndarray, name: str) -> None:
    bad = ~np.isfinite(array)
    if bad.any():
        rows = np.unique(np.nonzero(bad)[0]) if array.ndim else np.array([0])
        raise ValueError(
            f"`{name}` contains {bad.sum()} NaN or infinite value(s) (features "
            f"{rows[:5].tolist()}{'...' if rows.size > 5 else ''}); replace them with finite "
            "numbers."
        )


def _check_feature_shape(array: np.ndarray, name: str, shape: tuple[int, ...], fix: str) -> None:
    if array.shape != shape:
        expected = "[M, D]" if len(shape) == 2 else "[M]"
        raise ValueError(
            f"`{name}` must have shape {expected} = {list(shape)} to match `Z` (M = {shape[0]} "
            f"features{f', D = {shape[1]} input dimensions' if len(shape) == 2 else ''}), got "
            f"shape {array.shape}; {fix}."
        )


def _feature_array(value: Any, name: str, shape: tuple[int, ...], fix: str) -> np.ndarray:
    """A finite float array of the given shape, or a ``ValueError`` naming ``name`` and ``fix``."""
    array = _as_array(value, name)
    _check_feature_shape(array, name, shape, fix)
    _check_finite(array, name)
    return array


class FrequencyInducingFeatures(InducingVariables):
    """
    Frequency inducing features (Lázaro-Gredilla & Figueiras-Vidal 2009, FIFGP):
    :math:`u_m = \\int f(\\mathbf x) \\mathcal N(\\mathbf x; \\mathbf z_m,
    \\mathrm{diag}(\\mathbf c_m)) \\cos(\\varphi_m + \\boldsymbol\\omega_m^\\top\\mathbf x)\\,
    \\mathrm d\\mathbf x` with :math:`c_{md} = \\mathrm{widths}_{md}^2`. Every feature has its
    own window widths, so zero frequencies and phases give GPflow's ``Multiscale`` features.

    ``Kuu`` and ``Kuf`` are registered for GPflow's ``SquaredExponential`` kernel (scalar or ARD
    lengthscales); :func:`gpflow_tight.covariances.kuvs.Kuv` gives the cross-covariance with
    inducing points, ``Multiscale`` features and other frequency features.

    :param Z: window centres :math:`\\mathbf z_m`, shape [M, D] (an unconstrained parameter).
    :param widths: window standard deviations :math:`\\sqrt{c_{md}}`, shape [M, D], strictly
        positive (a parameter with GPflow's ``positive()`` transform).
    :param frequencies: :math:`\\boldsymbol\\omega_m`, shape [M, D]; zeros by default.
    :param phases: :math:`\\varphi_m`, shape [M]; zeros by default.
    :param name: the module name.

    Values are copied into new parameters of GPflow's default float type.
    """

    def __init__(
        self,
        Z: Any,
        widths: Any,
        frequencies: Any = None,
        phases: Any = None,
        name: str | None = None,
    ) -> None:
        Z_value = _as_array(Z, "Z")
        if Z_value.ndim != 2 or 0 in Z_value.shape:
            raise ValueError(
                "`Z` must be a non-empty 2-D array of window centres with shape [M, D] (one row "
                f"per feature), got shape {Z_value.shape}; reshape a vector `z` of 1-D centres "
                "with `z[:, None]`."
            )
        _check_finite(Z_value, "Z")
        num_inducing, input_dim = Z_value.shape

        shape = (num_inducing, input_dim)
        widths_value = _feature_array(
            widths,
            "widths",
            shape,
            "give one window width per feature and input dimension, e.g. `np.full(Z.shape, width)`",
        )
        if np.any(widths_value <= 0):
            raise ValueError(
                "`widths` must be strictly positive (they are the window standard deviations), "
                f"but {np.sum(widths_value <= 0)} entries are <= 0 (features "
                f"{np.unique(np.nonzero(widths_value <= 0)[0])[:5].tolist()}); use small positive "
                "widths for point-like windows."
            )
        frequencies_value = _feature_array(
            np.zeros(shape) if frequencies is None else frequencies,
            "frequencies",
            shape,
            "give one frequency per feature and input dimension (zeros: a plain Gaussian window)",
        )
        phases_value = _feature_array(
            np.zeros(num_inducing) if phases is None else phases,
            "phases",
            (num_inducing,),
            "give one phase per feature (flatten an [M, 1] array with `np.ravel`)",
        )

        super().__init__(name=name)
        self.Z = Parameter(Z_value)
        self.widths = Parameter(widths_value, transform=positive())
        self.frequencies = Parameter(frequencies_value)
        self.phases = Parameter(phases_value)

    @property
    def num_inducing(self) -> tf.Tensor:
        """The number of features M."""
        return tf.shape(self.Z)[0]

    @property
    def shape(self) -> Shape:
        """[M, D, 1], like GPflow's inducing points."""
        return tuple(self.Z.shape) + (1,)

    @property
    def window_variances(self) -> tf.Tensor:
        """:math:`c_{md} = \\mathrm{widths}_{md}^2`, shape [M, D]."""
        return tf.square(self.widths)


class CosineWindows(NamedTuple):
    """
    The windows :math:`\\mathcal N(\\mathbf x; \\mathbf z_m, \\mathrm{diag}(\\mathbf c_m))
    \\cos(\\varphi_m + \\boldsymbol\\omega_m^\\top \\mathbf x)` of a set of features, as tensors
    restricted to a kernel's active dimensions.
    """

    centres: tf.Tensor  # [M, D]
    variances: tf.Tensor  # [M, D]
    frequencies: tf.Tensor  # [M, D]
    phases: tf.Tensor  # [M]


#: The shapes of a windows function: a set of M features in, their :class:`CosineWindows` on the
#: kernel's ``D_active`` active dimensions out.
_check_window_shapes = check_shapes(
    "inducing_variable: [M, D, 1]",
    "return.centres: [M, D_active]",
    "return.variances: [M, D_active]",
    "return.frequencies: [M, D_active]",
    "return.phases: [M]",
)


@_check_window_shapes
def fif_windows(
    inducing_variable: FrequencyInducingFeatures, kernel: SquaredExponential
) -> CosineWindows:
    """The windows of frequency inducing features, restricted to ``kernel``'s active dims."""
    centres, variances = kernel.slice(inducing_variable.Z, inducing_variable.window_variances)
    frequencies, _ = kernel.slice(inducing_variable.frequencies, None)
    return CosineWindows(
        centres, variances, frequencies, tf.convert_to_tensor(inducing_variable.phases)
    )


@_check_window_shapes
def multiscale_windows(inducing_variable: Multiscale, kernel: SquaredExponential) -> CosineWindows:
    """
    GPflow's ``Multiscale`` features as frequency inducing features: zero frequencies and phases
    and window variances :math:`c = (\\ell + s)^2 - \\ell^2 = s (2\\ell + s)` (GPflow adds the
    scales :math:`s` to the kernel's lengthscales :math:`\\ell`). Tensors only, no parameters.
    """
    centres, scales = kernel.slice(inducing_variable.Z, inducing_variable.scales)
    variances = scales * (2.0 * kernel.lengthscales + scales)
    return CosineWindows(centres, variances, tf.zeros_like(centres), tf.zeros_like(centres[:, 0]))


@check_shapes(
    "windows_u.centres: [M_u, D]",
    "windows_u.variances: [M_u, D]",
    "windows_u.frequencies: [M_u, D]",
    "windows_u.phases: [M_u]",
    "windows_v.centres: [M_v, D]",
    "windows_v.variances: [M_v, D]",
    "windows_v.frequencies: [M_v, D]",
    "windows_v.phases: [M_v]",
    "return: [M_u, M_v]",
)
def window_covariance(
    windows_u: CosineWindows, windows_v: CosineWindows, kernel: SquaredExponential
) -> tf.Tensor:
    """
    :math:`\\mathrm{Cov}[u_m, v_n] = \\iint g_m(\\mathbf x) k(\\mathbf x, \\mathbf x')
    g_n(\\mathbf x') \\,\\mathrm d\\mathbf x\\, \\mathrm d\\mathbf x'` for two sets of cosine
    windows and the squared-exponential kernel (Lázaro-Gredilla & Figueiras-Vidal 2009, FIFGP;
    ``Kuu`` is this function of a set with itself).

    Per dimension, with :math:`s = c_m + c_n + \\ell^2` and :math:`\\delta = z_m - z_n`, the two
    Gaussian windows and the kernel integrate to
    :math:`Z_{mn} = \\sigma^2 \\prod_d (\\ell_d / \\sqrt{s_d}) \\exp(-\\tfrac12 \\sum_d
    \\delta_d^2 / s_d)`, and normalised they are the Gaussian density of :math:`(x, x')` with mean
    :math:`(z_m - c_m\\delta/s,\\; z_n + c_n\\delta/s)`, variances
    :math:`c_m (c_n + \\ell^2)/s` and :math:`c_n (c_m + \\ell^2)/s` and covariance
    :math:`c_m c_n / s`. Writing
    :math:`\\cos A \\cos B = \\tfrac12[\\cos(A + B) + \\cos(A - B)]`, each term is the real part of
    a Gaussian characteristic function, evaluated at
    :math:`(\\boldsymbol\\omega_m, \\pm\\boldsymbol\\omega_n)`:

    .. math::
        \\mathrm{Cov}[u_m, v_n] = \\tfrac12 Z_{mn} \\sum_{\\pm}
            e^{-q(\\boldsymbol\\omega_m, \\pm\\boldsymbol\\omega_n)/2}
            \\cos\\big(\\varphi_m \\pm \\varphi_n
            + \\theta(\\boldsymbol\\omega_m, \\pm\\boldsymbol\\omega_n)\\big),

    with :math:`q(\\mathbf a, \\mathbf b)` the variance and :math:`\\theta(\\mathbf a, \\mathbf b)`
    the mean of :math:`\\mathbf a^\\top\\mathbf x + \\mathbf b^\\top\\mathbf x'`.
    """
    lengthscales_sq = tf.square(kernel.lengthscales)
    variances_u = windows_u.variances[:, None, :]  # [M_u, 1, D]
    variances_v = windows_v.variances[None, :, :]  # [1, M_v, D]
    total = variances_u + variances_v + lengthscales_sq  # [M_u, M_v, D]
    difference = windows_u.centres[:, None, :] - windows_v.centres[None, :, :]
    log_envelope = tf.reduce_sum(
        0.5 * tf.math.log(lengthscales_sq / total) - 0.5 * tf.square(difference) / total,
        axis=-1,
    )

    # Moments of the normalised Gaussian of (x, x') per dimension. The variances are written
    # without the cancellation in c - c^2 / s.
    mean_u = windows_u.centres[:, None, :] - variances_u * difference / total
    mean_v = windows_v.centres[None, :, :] + variances_v * difference / total
    var_u = variances_u * (variances_v + lengthscales_sq) / total
    var_v = variances_v * (variances_u + lengthscales_sq) / total
    cov_uv = variances_u * variances_v / total

    frequencies_u = windows_u.frequencies[:, None, :]
    frequencies_v = windows_v.frequencies[None, :, :]
    quad_u = tf.reduce_sum(tf.square(frequencies_u) * var_u, axis=-1)
    quad_v = tf.reduce_sum(tf.square(frequencies_v) * var_v, axis=-1)
    quad_uv = tf.reduce_sum(frequencies_u * frequencies_v * cov_uv, axis=-1)
    shift_u = windows_u.phases[:, None] + tf.reduce_sum(frequencies_u * mean_u, axis=-1)
    shift_v = windows_v.phases[None, :] + tf.reduce_sum(frequencies_v * mean_v, axis=-1)

    quad_sum = quad_u + quad_v
    in_phase = tf.exp(log_envelope - 0.5 * (quad_sum + 2.0 * quad_uv)) * tf.cos(shift_u + shift_v)
    anti_phase = tf.exp(log_envelope - 0.5 * (quad_sum - 2.0 * quad_uv)) * tf.cos(shift_u - shift_v)
    return 0.5 * kernel.variance * (in_phase + anti_phase)
