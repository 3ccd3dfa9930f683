"""
Power-EP site inference for scalar likelihoods (Bui, Yan & Turner 2017, JMLR, §3.4, §3.9 and
App. F).

Each likelihood factor is approximated by a Gaussian site on the pseudo-outputs,
:math:`t_n(\\mathbf u) = \\mathcal N(\\mathbf w_n^\\top\\mathbf u; g_n, v_n)`, stored by its
natural parameters :math:`\\tau_n = 1/v_n` (``precision``) and :math:`\\nu_n = g_n/v_n`
(``shift``). With :math:`L` and :math:`A_0 = L^{-1}K_{uf}` from
:func:`gpflow_tight.projection.project`, the posterior :math:`q(\\mathbf u) \\propto
p(\\mathbf u)\\prod_n t_n(\\mathbf u)` (eqs. 119-120) is, whitened, :math:`B = I + A_0
\\mathrm{diag}(\\boldsymbol\\tau)A_0^\\top = L_B L_B^\\top` and :math:`\\mathbf c = L_B^{-1}A_0
\\boldsymbol\\nu`.

For a batch of points, every cavity :math:`q_{\\setminus n} \\propto q / t_n^\\alpha` comes from
the same :math:`q` (parallel updates, §3.9). With :math:`c_n = \\mathbf w_n^\\top V\\mathbf w_n`,
:math:`a_n = \\mathbf w_n^\\top\\mathbf m` and :math:`s_n = 1 - \\alpha\\tau_n c_n`, the cavity
marginal of :math:`g_n = f_n - \\mu(\\mathbf x_n)` is :math:`((a_n - \\alpha c_n\\nu_n)/s_n,\\;
d_n + c_n/s_n)`, and the energy of eqs. 21 and 110-126 takes the vectorised :math:`O(NM^2)` form

.. math::
    \\mathcal F = -\\log|L_B| + \\tfrac12\\|\\mathbf c\\|^2 + \\sum_n \\Big\\{
    \\frac{\\log\\tilde Z_n}{\\alpha} - \\frac{\\log s_n}{2\\alpha} + \\frac{\\tau_n a_n^2
    + \\alpha\\nu_n^2 c_n - 2\\nu_n a_n}{2 s_n}\\Big\\}.
"""

from typing import NamedTuple

import numpy as np
import tensorflow as tf
from check_shapes import check_shapes
from gpflow.base import RegressionData
from gpflow.config import default_float
from gpflow.inducing_variables import InducingVariables
from gpflow.kernels import Kernel
from gpflow.likelihoods import Bernoulli, Beta, Exponential, Gamma, Poisson, ScalarLikelihood
from gpflow.mean_functions import MeanFunction

from ..projection import project
from ..tilted import TiltedMoments, tilted_moments
from .power_ep_regression import inner_factors

__all__ = [
    "check_site_data",
    "check_site_alpha",
    "Cavity",
    "SiteBatch",
    "SiteUpdate",
    "site_posterior",
    "site_whitened_posterior",
    "site_batch",
    "site_log_marginal_likelihood",
    "site_update",
    "assign_sites",
]


# what Y may hold for the other GPflow likelihoods with a bounded support: outside it the
# tilted moments are not finite and every site update is skipped, or the energy is meaningless
_SUPPORTS = (
    (Poisson, lambda y: y >= 0, "non-negative counts"),
    (Exponential, lambda y: y >= 0, "non-negative values"),
    (Gamma, lambda y: y > 0, "positive values"),
    (Beta, lambda y: (y >= 0) & (y <= 1), "values in [0, 1]"),  # GPflow clips 0 and 1 inside
)


def check_site_data(likelihood: ScalarLikelihood, Y: np.ndarray) -> None:
    """
    One output column, labels in {0, 1} for a ``Bernoulli`` likelihood and values in the
    support of ``Poisson``, ``Exponential``, ``Gamma`` and ``Beta`` likelihoods.
    """
    if Y.shape[1] != 1:
        raise ValueError(
            f"Power-EP site updates model one output column; `data` Y has {Y.shape[1]}. "
            "Fit one model per column."
        )
    if isinstance(likelihood, Bernoulli):
        labels = np.unique(Y)
        if not np.all(np.isin(labels, (0, 1))):
            hint = " Map ±1 labels with `(Y + 1) / 2`." if np.all(np.isin(labels, (-1, 1))) else ""
            raise ValueError(
                f"`data` Y must hold labels in {{0, 1}} for a Bernoulli likelihood, got "
                f"{labels[:5].tolist()}.{hint}"
            )
    for kind, inside, what in _SUPPORTS:
        if isinstance(likelihood, kind):
            outside = Y[~inside(Y)]
            if outside.size:
                raise ValueError(
                    f"`data` Y must hold {what} for a {type(likelihood).__name__} likelihood; "
                    f"{outside.size} do not, e.g. {outside[:5].tolist()}."
                )


def check_site_alpha(alpha: np.ndarray) -> None:
    """Site updates divide by the power: :math:`\\alpha = 0` is not one."""
    if np.any(alpha == 0):
        raise ValueError(
            "`alpha=0` (the VFE limit) is not a Power-EP site update; for a non-Gaussian "
            "likelihood use gpflow.models.SVGP, or a small positive alpha."
        )


@check_shapes(
    "A: [M, N]",
    "precision: [N]",
    "shift: [N]",
    "return[0]: [M, M]",
    "return[1]: [M, 1]",
)
def site_posterior(
    A: tf.Tensor, precision: tf.Tensor, shift: tf.Tensor
) -> tuple[tf.Tensor, tf.Tensor]:
    """
    :math:`(L_B, \\mathbf c)` of the sites (eqs. 119-120, whitened) from :math:`A_0` ``A``; a
    negative precision counts as zero.
    """
    return inner_factors(A * tf.sqrt(tf.maximum(precision, 0)), tf.linalg.matmul(A, shift[:, None]))


@check_shapes(
    "X: [N, D]",
    "precision: [N]",
    "shift: [N]",
    "return[0]: [M, M]",
    "return[1]: [M, M]",
    "return[2]: [M, 1]",
)
def site_whitened_posterior(
    kernel: Kernel,
    inducing_variable: InducingVariables,
    X: tf.Tensor,
    precision: tf.Tensor,
    shift: tf.Tensor,
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """
    ``(L, LB, c)`` of the sites' :math:`q(\\mathbf u) = \\mathcal N(L L_B^{-\\top}\\mathbf c,
    L (L_B L_B^\\top)^{-1} L^\\top)`.
    """
    projection = project(inducing_variable, kernel, X, name="data X")
    return (projection.L, *site_posterior(projection.A, precision, shift))


class Cavity(NamedTuple):
    """Cavity marginals of :math:`g_n = f_n - \\mu(\\mathbf x_n)` and the terms of the energy."""

    mean: tf.Tensor
    variance: tf.Tensor
    s: tf.Tensor  # 1 - α τ c
    c: tf.Tensor  # w_nᵀ V w_n
    a: tf.Tensor  # w_nᵀ m


class SiteBatch(NamedTuple):
    """
    The whitened posterior ``LB``, ``c`` of all sites, and for a batch of points their powers,
    sites (``precision``, ``shift``, read before any update), cavities and tilted moments.
    """

    LB: tf.Tensor
    c: tf.Tensor
    alpha: tf.Tensor
    precision: tf.Tensor
    shift: tf.Tensor
    cavity: Cavity
    tilted: TiltedMoments


@check_shapes(
    "data[0]: [N, D]",
    "data[1]: [N, 1]",
    "precision: [N]",
    "shift: [N]",
    "indices: [B]",
    "return.alpha: [B_or_N]",
    "return.cavity.mean: [B_or_N]",
)
def site_batch(
    kernel: Kernel,
    inducing_variable: InducingVariables,
    likelihood: ScalarLikelihood,
    mean_function: MeanFunction,
    data: RegressionData,
    alpha: np.ndarray,
    precision: tf.Variable,
    shift: tf.Variable,
    indices: tf.Tensor | None = None,
    num_gauss_hermite_points: int = 50,
) -> SiteBatch:
    """
    The cavities and tilted moments of the points ``indices`` (all when ``None``).

    :param alpha: the powers, fixed (read-only): the probit's closed-form tilted moments are
        used when every power is 1.
    """
    X, Y = data
    projection = project(inducing_variable, kernel, X, name="data X")
    LB, c = site_posterior(projection.A, precision, shift)

    def select(values: tf.Tensor, axis: int = 0) -> tf.Tensor:
        return tf.identity(values) if indices is None else tf.gather(values, indices, axis=axis)

    alpha_all = tf.broadcast_to(tf.constant(alpha, dtype=default_float()), tf.shape(precision))
    alpha_batch, precision_batch, shift_batch = (select(t) for t in (alpha_all, precision, shift))
    projected = tf.linalg.triangular_solve(LB, select(projection.A, axis=1))
    c_n = tf.reduce_sum(tf.square(projected), axis=0)
    a_n = tf.linalg.matmul(projected, c, transpose_a=True)[:, 0]
    s = 1 - alpha_batch * precision_batch * c_n
    cavity = Cavity(
        mean=(a_n - alpha_batch * c_n * shift_batch) / s,
        variance=select(projection.residual) + c_n / s,
        s=s,
        c=c_n,
        a=a_n,
    )
    X_batch, Y_batch = select(X), select(Y)
    tilted = tilted_moments(
        likelihood,
        X_batch,
        Y_batch,
        cavity.mean + mean_function(X_batch)[:, 0],
        cavity.variance,
        alpha_batch,
        alpha_is_one=bool(np.all(alpha == 1)),
        num_gauss_hermite_points=num_gauss_hermite_points,
    )
    return SiteBatch(LB, c, alpha_batch, precision_batch, shift_batch, cavity, tilted)


@check_shapes(
    "return: []",
)
def site_log_marginal_likelihood(batch: SiteBatch, scale: tf.Tensor | float = 1.0) -> tf.Tensor:
    """
    The negative Power-EP energy (eqs. 21 and 110-126, vectorised) at the current sites, with
    the batch's data terms multiplied by ``scale`` (``N / B`` for the unbiased minibatch
    estimate).
    """
    cavity, alpha = batch.cavity, batch.alpha
    local = (
        batch.tilted.log_normaliser / alpha
        - tf.math.log(cavity.s) / (2 * alpha)
        + (
            batch.precision * tf.square(cavity.a)
            + alpha * tf.square(batch.shift) * cavity.c
            - 2 * batch.shift * cavity.a
        )
        / (2 * cavity.s)
    )
    global_terms = -tf.reduce_sum(tf.math.log(tf.linalg.diag_part(batch.LB))) + 0.5 * tf.reduce_sum(
        tf.square(batch.c)
    )
    return global_terms + scale * tf.reduce_sum(local)


class SiteUpdate(NamedTuple):
    """
    New sites of a batch (``precision``, ``shift``), whether each was updated (``valid``) and
    the largest change of a site's natural parameters relative to their scale.
    """

    precision: tf.Tensor
    shift: tf.Tensor
    valid: tf.Tensor
    max_change: tf.Tensor


def site_update(batch: SiteBatch, damping: float, update: str) -> SiteUpdate:
    """
    The damped Power-EP update of the batch's sites (eqs. 104-109): the fraction
    :math:`q / q_{\\setminus n}` of eqs. 106-107 as natural parameters, then
    :math:`t_n \\leftarrow (q / q_{\\setminus n})^{1/\\alpha}` (``"full"``) or :math:`t_n
    \\leftarrow t_n^{1-\\alpha} q / q_{\\setminus n}` (``"fractional"``, eqs. 108-109), damped:
    :math:`\\tau \\leftarrow \\rho\\tau' + (1 - \\rho)\\tau`. A site whose update would have a
    negative precision or a non-finite value keeps its value (``valid`` is false).
    """
    cavity, tilted = batch.cavity, batch.tilted
    alpha, precision, shift = batch.alpha, batch.precision, batch.shift
    # The fraction q / q_cav of eqs. 106-107, as natural parameters: 1/v_new and g_new/v_new.
    denominator = 1 + tilted.d2 * cavity.c / cavity.s
    fraction_precision = -tilted.d2 / denominator
    fraction_shift = (tilted.d1 - tilted.d2 * cavity.mean) / denominator
    if update == "fractional":
        new_precision = fraction_precision + (1 - alpha) * precision
        new_shift = fraction_shift + (1 - alpha) * shift
    else:
        new_precision, new_shift = fraction_precision / alpha, fraction_shift / alpha
    new_precision = damping * new_precision + (1 - damping) * precision
    new_shift = damping * new_shift + (1 - damping) * shift
    valid = (
        (denominator > 0)
        & (new_precision >= 0)
        & tf.math.is_finite(new_precision)
        & tf.math.is_finite(new_shift)
    )
    new_precision = tf.where(valid, new_precision, precision)
    new_shift = tf.where(valid, new_shift, shift)
    change = tf.reduce_max(
        tf.abs(new_precision - precision) / (tf.abs(new_precision) + tf.abs(precision) + 1e-12)
        + tf.abs(new_shift - shift) / (tf.abs(new_shift) + tf.abs(shift) + 1e-12)
    )
    return SiteUpdate(new_precision, new_shift, valid, change)


def assign_sites(
    precision: tf.Variable, shift: tf.Variable, new: SiteUpdate, indices: tf.Tensor | None
) -> None:
    """Write the batch's new sites into the site variables (all of them when ``indices`` is
    ``None``)."""
    if indices is None:
        precision.assign(new.precision)
        shift.assign(new.shift)
    else:
        precision.scatter_nd_update(indices[:, None], new.precision)
        shift.scatter_nd_update(indices[:, None], new.shift)
