"""
Orthogonally decoupled inducing variables (SOLVE-GP; Shi, Titsias & Mnih 2020; Fernlund 2022,
ch. 5): the computations every orthogonally decoupled model and posterior shares, the block
factorisation of the two inducing sets and the layout of latent GPs into blocks.

Split the GP as :math:`f = f_\\parallel + f_\\perp` with
:math:`f_\\parallel(x) = \\mathbf k_u(x)^\\top K_{uu}^{-1} \\mathbf u`. The residual
:math:`f_\\perp` is independent of :math:`\\mathbf u` and has the kernel
:math:`c(x, x') = k(x, x') - \\mathbf k_u(x)^\\top K_{uu}^{-1} \\mathbf k_u(x')`. The orthogonal
inducing variables are :math:`\\mathbf v_\\perp = f_\\perp(Z_v)` (or any inter-domain feature of
:math:`f_\\perp`): their covariance is :math:`C_{vv} = K_{vv} - K_{vu} K_{uu}^{-1} K_{uv}` and
their covariance with :math:`f(x)` is :math:`C_{vx} = K_{vx} - K_{vu} K_{uu}^{-1} K_{ux}`
(Fernlund 2022, eqs. 5.4-5.5; Shi, Titsias & Mnih 2020, sec. 3).
:class:`~gpflow_tight.inducing_variables.orthogonal.OrthogonalInducingVariables` (defined in
:mod:`gpflow_tight.inducing_variables`, importable from here too) has exactly these as GPflow's
``Kuu`` and ``Kuf`` (registered in :mod:`gpflow_tight.covariances`), so it is an ordinary
inducing variable of :math:`f` for GPflow.

Jitter: the thesis adds it to the diagonals of :math:`K_{uu}` and :math:`C_{vv}` (Fernlund
2022, sec. 5.4.3) without saying where. Here :math:`\\varepsilon` is added to :math:`K_{uu}` and
to :math:`K_{vv}`, so that :math:`(L_u, L_u^{-1} K_{uv}, \\mathrm{chol}(C_{vv} + \\varepsilon
I))` is the block Cholesky factor of the jittered covariance of :math:`[\\mathbf u; \\mathbf
v]`.
"""

from typing import Any, NamedTuple

import tensorflow as tf
from check_shapes import check_shapes
from gpflow.base import TensorType
from gpflow.config import default_jitter
from gpflow.covariances import Kuf, Kuu
from gpflow.inducing_variables import (
    FallbackSeparateIndependentInducingVariables,
    FallbackSharedIndependentInducingVariables,
    InducingPoints,
    MultioutputInducingVariables,
    SeparateIndependentInducingVariables,
)
from gpflow.kernels import (
    IndependentLatent,
    Kernel,
    MultioutputKernel,
    SeparateIndependent,
    SharedIndependent,
)
from gpflow.models.util import inducingpoint_wrapper

from .covariances.kuvs import Kuv
from .inducing_variables.orthogonal import OrthogonalInducingVariables
from .validation import KUU, check_inducing_variable, checked_cholesky, explain_cholesky_failure

__all__ = [
    "OrthogonalInducingVariables",
    "LatentBlock",
    "latent_kernels",
    "latent_blocks",
    "orthogonal_sets",
    "OrthogonalFactors",
    "orthogonal_factors",
    "check_orthogonal_sets",
    "orthogonal_projections",
    "decoupled_marginals",
    "whiten_variational_parameters",
]

CVV = (
    "C_vv = K_vv - K_vu K_uu⁻¹ K_uv (the covariance of the orthogonal inducing variables; it is "
    "singular when an orthogonal inducing point coincides with a regular one or with another "
    "orthogonal one, or when the two sets overlap so densely that v is nearly determined by u: "
    "move or drop those orthogonal points)"
)


class OrthogonalFactors(NamedTuple):
    """
    The block Cholesky factor of the jittered covariance of :math:`[\\mathbf u; \\mathbf v]`:
    ``L_u`` with :math:`L_u L_u^\\top = K_{uu} + \\varepsilon I`, ``D_v`` :math:`= L_u^{-1}
    K_{uv}` and ``L_v`` with :math:`L_v L_v^\\top = C_{vv} + \\varepsilon I`.
    """

    L_u: tf.Tensor
    D_v: tf.Tensor
    L_v: tf.Tensor


@tf.autograph.experimental.do_not_convert
def _plain_points(inducing_variable: OrthogonalInducingVariables, kernel: Kernel) -> bool:
    """
    Whether both sets are inducing points whose covariances are GPflow's generic kernel
    evaluations: then one evaluation over the union serves both sets (five kernel calls become
    two, which is most of the cost of a small model's step when it runs eagerly).
    """
    generic_kuu = Kuu.dispatch(InducingPoints, Kernel)
    generic_kuf = Kuf.dispatch(InducingPoints, Kernel, tf.Tensor)
    return all(
        type(points) is InducingPoints
        and Kuu.dispatch(type(points), type(kernel)) is generic_kuu
        and Kuf.dispatch(type(points), type(kernel), tf.Tensor) is generic_kuf
        for points in (inducing_variable.regular, inducing_variable.orthogonal)
    )


@tf.autograph.experimental.do_not_convert
def _union_locations(inducing_variable: OrthogonalInducingVariables) -> tuple[tf.Tensor, Any]:
    regular = inducing_variable.regular.Z
    union = tf.concat([regular, inducing_variable.orthogonal.Z], axis=0)
    return union, tf.shape(regular)[0]


@tf.autograph.experimental.do_not_convert
@check_shapes(
    "return[0]: [M_u, M_u]",
    "return[1]: [M_u, M_v]",
    "return[2]: [M_v, M_v]",
)
def _inducing_covariances(
    inducing_variable: OrthogonalInducingVariables, kernel: Kernel, jitter: float
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """:math:`K_{uu} + \\varepsilon I`, :math:`K_{uv}` and :math:`K_{vv} + \\varepsilon I`."""
    regular, orthogonal = inducing_variable.regular, inducing_variable.orthogonal
    if not _plain_points(inducing_variable, kernel):
        return (
            Kuu(regular, kernel, jitter=jitter),
            Kuv(regular, orthogonal, kernel),
            Kuu(orthogonal, kernel, jitter=jitter),
        )
    union, num_regular = _union_locations(inducing_variable)
    K = kernel(union)
    K += jitter * tf.eye(tf.shape(K)[0], dtype=K.dtype)
    return (
        K[:num_regular, :num_regular],
        K[:num_regular, num_regular:],
        K[num_regular:, num_regular:],
    )


@tf.autograph.experimental.do_not_convert
@check_shapes(
    "return[0]: [M_u, M_u]",
    "return[1]: [M_u, M_v]",
    "return[2]: [M_v, M_v]",
)
def _regular_factor(
    inducing_variable: OrthogonalInducingVariables, kernel: Kernel, jitter: float
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """:math:`L_u`, :math:`D_v = L_u^{-1} K_{uv}` and :math:`K_{vv} + \\varepsilon I`."""
    K_uu, K_uv, K_vv = _inducing_covariances(inducing_variable, kernel, jitter)
    L_u = checked_cholesky(K_uu, KUU)
    return L_u, tf.linalg.triangular_solve(L_u, K_uv, lower=True), K_vv


@tf.autograph.experimental.do_not_convert
@check_shapes(
    "X: [N, D]",
    "return[0]: [M_u, N]",
    "return[1]: [M_v, N]",
)
def _inducing_cross_covariances(
    inducing_variable: OrthogonalInducingVariables, kernel: Kernel, X: TensorType
) -> tuple[tf.Tensor, tf.Tensor]:
    """:math:`K_{uX}` and :math:`K_{vX}`."""
    if not _plain_points(inducing_variable, kernel):
        return (
            Kuf(inducing_variable.regular, kernel, X),
            Kuf(inducing_variable.orthogonal, kernel, X),
        )
    union, num_regular = _union_locations(inducing_variable)
    K = kernel(union, X)
    return K[:num_regular], K[num_regular:]


@tf.autograph.experimental.do_not_convert
@check_shapes(
    "L_u: [M_u, M_u]",
    "D_v: [M_u, M_v]",
    "X: [N, D]",
    "return[0]: [M_u, N]",
    "return[1]: [M_v, N]",
)
def _residual_cross_covariance(
    inducing_variable: OrthogonalInducingVariables,
    kernel: Kernel,
    L_u: tf.Tensor,
    D_v: tf.Tensor,
    X: TensorType,
) -> tuple[tf.Tensor, tf.Tensor]:
    """
    :math:`\\mathbf a_u(X) = L_u^{-1} K_{uX}` and :math:`C_{vX} = K_{vX} - D_v^\\top
    \\mathbf a_u(X)` (Algorithm 3 of Fernlund 2022, lines 19-20, with the line-20 erratum
    corrected).
    """
    K_uX, K_vX = _inducing_cross_covariances(inducing_variable, kernel, X)
    a_u = tf.linalg.triangular_solve(L_u, K_uX, lower=True)
    return a_u, K_vX - tf.linalg.matmul(D_v, a_u, transpose_a=True)


@tf.autograph.experimental.do_not_convert
@check_shapes(
    "return.L_u: [M_u, M_u]",
    "return.D_v: [M_u, M_v]",
    "return.L_v: [M_v, M_v]",
)
def orthogonal_factors(
    inducing_variable: OrthogonalInducingVariables, kernel: Kernel, jitter: float | None = None
) -> OrthogonalFactors:
    """
    Algorithm 3 of Fernlund 2022, lines 2-5, with :math:`\\varepsilon` added to :math:`K_{uu}`
    and :math:`C_{vv}`: :math:`O(M_u^3 + M_u^2 M_v + M_u M_v^2 + M_v^3)`. Fails with a
    :class:`~gpflow_tight.CholeskyError` naming the matrix when :math:`K_{uu}` or :math:`C_{vv}`
    is not numerically positive definite.
    """
    jitter = default_jitter() if jitter is None else jitter
    L_u, D_v, K_vv = _regular_factor(inducing_variable, kernel, jitter)
    C_vv = K_vv - tf.linalg.matmul(D_v, D_v, transpose_a=True)
    return OrthogonalFactors(L_u, D_v, checked_cholesky(C_vv, CVV))


@tf.autograph.experimental.do_not_convert
@check_shapes(
    "X: [N, D]",
    "return[0]: [M_u, N]",
    "return[1]: [M_v, N]",
)
def orthogonal_projections(
    inducing_variable: OrthogonalInducingVariables,
    kernel: Kernel,
    factors: OrthogonalFactors,
    X: TensorType,
) -> tuple[tf.Tensor, tf.Tensor]:
    """
    :math:`\\mathbf a_u(X) = L_u^{-1} K_{uX}` and :math:`\\mathbf a_v(X) = L_v^{-1} C_{vX}`,
    at :math:`O(N(M_u^2 + M_u M_v + M_v^2))`. In these coordinates
    :math:`\\|\\mathbf a_u\\|^2 + \\|\\mathbf a_v\\|^2` is the Nyström variance of the union
    of both sets.
    """
    a_u, C_vX = _residual_cross_covariance(inducing_variable, kernel, factors.L_u, factors.D_v, X)
    return a_u, tf.linalg.triangular_solve(factors.L_v, C_vX, lower=True)


@tf.autograph.experimental.do_not_convert
@check_shapes(
    "L: [M, M] if L is not None",
    "q_mu: [M, L]",
    "return[0]: [M, L]",
    "return[1]: [L, M, M]",
)
def whiten_variational_parameters(
    L: tf.Tensor | None, q_mu: tf.Tensor, q_sqrt: tf.Tensor | None, whiten: bool
) -> tuple[tf.Tensor, tf.Tensor | None]:
    """
    :math:`q = \\mathcal N(\\mathbf m, S)` with :math:`S = RR^\\top` (``q_sqrt`` is [L, M, M]
    lower-triangular or [M, L] diagonal) in whitened coordinates :math:`\\tilde{\\mathbf u} =
    L^{-1}\\mathbf u`: :math:`(L^{-1}\\mathbf m, L^{-1}R)`, or unchanged if ``whiten``. The KL to
    the prior is the same in both coordinates.

    ``q_sqrt=None`` means :math:`S = LL^\\top`, the prior's covariance (ODVGP's orthogonal set,
    Fernlund 2022, eq. 5.8): its whitened square root is the identity, returned as ``None``.
    """
    if q_sqrt is None:
        if whiten:
            return q_mu, None
        if L is None:
            raise ValueError("Non-whitened means need the prior's Cholesky factor L.")
        return tf.linalg.triangular_solve(L, q_mu, lower=True), None
    if q_sqrt.shape.ndims == 2:
        q_sqrt = tf.linalg.diag(tf.transpose(q_sqrt))
    else:
        q_sqrt = tf.linalg.band_part(q_sqrt, -1, 0)
    if whiten:
        return q_mu, q_sqrt
    if L is None:
        raise ValueError("Non-whitened variational parameters need the prior's Cholesky factor L.")
    L_batch = tf.broadcast_to(L, tf.shape(q_sqrt))
    return (
        tf.linalg.triangular_solve(L, q_mu, lower=True),
        tf.linalg.triangular_solve(L_batch, q_sqrt, lower=True),
    )


@tf.autograph.experimental.do_not_convert
@check_shapes(
    "a_u: [M_u, N]",
    "a_v: [M_v, N]",
    "prior_covariance: [N, N] if full_cov",
    "prior_covariance: [N] if not full_cov",
    "q_mu_u: [M_u, L]",
    "q_sqrt_u: [L_or_1, M_u, M_u]",
    "q_mu_v: [M_v, L]",
    "q_sqrt_v: [L_or_1, M_v, M_v] if q_sqrt_v is not None",
    "return[0]: [N, L]",
    "return[1]: [L_or_1, N, N] if full_cov",
    "return[1]: [N, L_or_1] if not full_cov",
    "return[2]: [N, N] if full_cov",
    "return[2]: [N] if not full_cov",
)
def decoupled_marginals(
    a_u: tf.Tensor,
    a_v: tf.Tensor,
    prior_covariance: tf.Tensor,
    q_mu_u: tf.Tensor,
    q_sqrt_u: tf.Tensor,
    q_mu_v: tf.Tensor,
    q_sqrt_v: tf.Tensor | None,
    full_cov: bool = False,
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """
    The SOLVE-GP posterior :math:`f = g + h + l` in whitened coordinates (Fernlund 2022,
    eqs. 5.14-5.16, whitened as in Shi, Titsias & Mnih 2020): the mean
    :math:`\\mathbf a_u^\\top\\tilde{\\mathbf m}_u + \\mathbf a_v^\\top\\tilde{\\mathbf m}_v`, the
    covariance carried by :math:`q`, :math:`\\mathbf a_u^\\top \\tilde S_u \\mathbf a_u +
    \\mathbf a_v^\\top \\tilde S_v \\mathbf a_v`, and the residual of the prior conditional
    given both sets, :math:`k - \\mathbf a_u^\\top\\mathbf a_u - \\mathbf a_v^\\top\\mathbf a_v`
    (the :math:`d_n` of the tighter bounds). The predictive covariance is the sum of the last
    two: the residual is counted once (adding two GPflow ``conditional`` outputs, one per set,
    would count it twice).

    ``q_sqrt_u`` and ``q_sqrt_v`` may be any square roots :math:`R` of :math:`\\tilde S = RR^\\top`,
    triangular or not. ``q_sqrt_v=None`` is :math:`\\tilde S_v = I`, i.e. :math:`S_v = C_{vv}`
    (ODVGP, Fernlund 2022, eqs. 5.7-5.9): :math:`h` then carries
    :math:`\\mathbf a_v^\\top\\mathbf a_v`, which cancels in the sum with :math:`l`, so that the
    predictive covariance is eq. 5.56's, without :math:`v`-terms.
    """
    mean = tf.linalg.matmul(a_u, q_mu_u, transpose_a=True) + tf.linalg.matmul(
        a_v, q_mu_v, transpose_a=True
    )
    Rt_a_u = tf.linalg.matmul(q_sqrt_u, a_u, transpose_a=True)  # [L, M_u, N]
    # S̃_v = I (ODVGP): R_vᵀ a_v is a_v, without the O(N M_v²) product
    Rt_a_v = a_v[None] if q_sqrt_v is None else tf.linalg.matmul(q_sqrt_v, a_v, transpose_a=True)
    if full_cov:
        q_covariance = tf.linalg.matmul(Rt_a_u, Rt_a_u, transpose_a=True) + tf.linalg.matmul(
            Rt_a_v, Rt_a_v, transpose_a=True
        )
        residual = (
            prior_covariance
            - tf.linalg.matmul(a_u, a_u, transpose_a=True)
            - tf.linalg.matmul(a_v, a_v, transpose_a=True)
        )
        return mean, q_covariance, residual
    q_variance = tf.reduce_sum(tf.square(Rt_a_u), axis=-2) + tf.reduce_sum(
        tf.square(Rt_a_v), axis=-2
    )
    residual = (
        prior_covariance
        - tf.reduce_sum(tf.square(a_u), axis=0)
        - tf.reduce_sum(tf.square(a_v), axis=0)
    )
    return mean, tf.transpose(q_variance), residual


class LatentBlock(NamedTuple):
    """
    Latent GPs that share a kernel and an orthogonal inducing set: ``latents`` selects their
    columns of ``q_mu`` (all of them when one block serves every latent GP).
    """

    kernel: Kernel
    inducing_variable: Any
    latents: slice


def check_orthogonal_sets(blocks: list[LatentBlock]) -> None:
    """
    Fail early, with advice, when the covariance of an orthogonal set given the regular one is
    not positive definite (e.g. orthogonal points on top of regular ones). Without orthogonal
    points nothing is checked, as SGPR and SVGP check nothing at construction.
    """
    if not tf.executing_eagerly():
        return
    with explain_cholesky_failure():
        for block in blocks:
            if int(block.inducing_variable.num_inducing) > 0:
                orthogonal_factors(block.inducing_variable, block.kernel)


def latent_kernels(kernel: Kernel) -> list[Kernel]:
    """The kernels of independent latent GPs (one for a single-output or shared kernel)."""
    if isinstance(kernel, SeparateIndependent | IndependentLatent):
        return list(kernel.kernels)
    if isinstance(kernel, SharedIndependent):
        return [kernel.kernel]
    if isinstance(kernel, MultioutputKernel):
        raise TypeError(
            f"SOLVE-GP supports single-output kernels, SharedIndependent, SeparateIndependent "
            f"and LinearCoregionalization; got {type(kernel).__name__}."
        )
    return [kernel]


def latent_blocks(kernel: Kernel, orthogonal_inducing_variable: Any) -> list[LatentBlock]:
    """The kernel and orthogonal inducing set of each group of latent GPs."""
    latent = latent_kernels(kernel)
    if isinstance(orthogonal_inducing_variable, SeparateIndependentInducingVariables):
        sets = list(orthogonal_inducing_variable.inducing_variable_list)
    else:
        sets = [orthogonal_inducing_variable]
    size = max(len(latent), len(sets))
    if size == 1:
        return [LatentBlock(latent[0], sets[0], slice(None))]
    latent, sets = latent * (size // len(latent)), sets * (size // len(sets))
    return [LatentBlock(k, v, slice(i, i + 1)) for i, (k, v) in enumerate(zip(latent, sets))]


# The orthogonal set holds the regular one (to compute K_uv), so a model that replaced either
# object would keep computing with the old points: the models refuse it, with this advice.
INDUCING_SETS = ("inducing_variable", "orthogonal_inducing_variable")
INDUCING_SET_ADVICE = {
    name: "(its orthogonal set holds the regular one, so the old points would stay in use): to "
    "move the points, assign new values of the same shape to the `Z` of the inducing points it "
    f"holds, in place (`{name}{points}.Z.assign(Z_new)`; in a shared multi-output set "
    f"`{name}{points}.inducing_variable.Z`, in a separate one "
    f"`{name}{points}.inducing_variable_list[i].Z`); for another number of points, build a new "
    "model."
    for name, points in zip(INDUCING_SETS, ("", ".orthogonal"))
}


def _regular_sets(inducing_variable: Any) -> list[Any]:
    """The inducing sets of each group of latent GPs in ``inducing_variable``, unwrapped."""
    # GPflow's Fallback* classes are the bases of its Separate/SharedIndependent ones
    if isinstance(inducing_variable, FallbackSeparateIndependentInducingVariables):
        return list(inducing_variable.inducing_variable_list)
    if isinstance(inducing_variable, FallbackSharedIndependentInducingVariables):
        return [inducing_variable.inducing_variable]
    return [inducing_variable]


def checked_sets(inducing_variable: Any, orthogonal_inducing_variable: Any) -> Any:
    """
    ``orthogonal_inducing_variable``, after checking that the regular sets it holds are still
    the objects in ``inducing_variable`` (a ``ValueError`` if a set was replaced inside it, e.g.
    ``model.inducing_variable.inducing_variable = ...``, which the old points would outlive).
    """
    if isinstance(orthogonal_inducing_variable, SeparateIndependentInducingVariables):
        held = [v.regular for v in orthogonal_inducing_variable.inducing_variable_list]
    else:
        held = [orthogonal_inducing_variable.regular]
    current = {id(regular) for regular in _regular_sets(inducing_variable)}
    if {id(regular) for regular in held} != current:
        raise ValueError(
            "A regular inducing set was replaced after construction, inside `inducing_variable` "
            "or `orthogonal_inducing_variable`, but the orthogonal set holds the regular one, so "
            "the old points would stay in use. Move points in place instead (assign new values "
            "of the same shape to the `Z` of the inducing points), or build a new model for "
            "another number of points."
        )
    return orthogonal_inducing_variable


def _as_list(inducing_variable: Any, name: str) -> list[Any]:
    """The inducing sets of each group of latent GPs, each checked (finite) as ``name``."""
    if isinstance(inducing_variable, MultioutputInducingVariables) and not isinstance(
        inducing_variable,
        FallbackSeparateIndependentInducingVariables | FallbackSharedIndependentInducingVariables,
    ):
        raise TypeError(
            f"SOLVE-GP takes independent latent GPs; {type(inducing_variable).__name__} is not "
            "supported: use SharedIndependentInducingVariables or "
            "SeparateIndependentInducingVariables."
        )
    sets = _regular_sets(inducing_variable)
    for inducing in sets:  # before GPflow wraps an array (and fails on NaN, unclearly)
        check_inducing_variable(inducing, name)
    return [inducingpoint_wrapper(inducing) for inducing in sets]


def orthogonal_sets(kernel: Kernel, inducing_variable: Any, orthogonal: Any) -> Any:
    """
    One :class:`~gpflow_tight.OrthogonalInducingVariables` when every latent GP shares both
    sets, else GPflow's ``SeparateIndependentInducingVariables`` of one per latent GP (they share
    the regular sets' objects, so training moves both).
    """
    if orthogonal is None:
        raise ValueError(
            "Pass `orthogonal_inducing_variable` (an array [M_v, D] or inducing variables; an "
            "array of shape [0, D] gives the model without orthogonal points)."
        )
    regular = _as_list(inducing_variable, "inducing_variable")
    orthogonal = _as_list(orthogonal, "orthogonal_inducing_variable")
    if isinstance(kernel, MultioutputKernel) and not isinstance(
        inducing_variable, MultioutputInducingVariables
    ):
        raise TypeError(
            f"With a multi-output kernel ({type(kernel).__name__}), plain inducing points mean "
            "GPflow's fully correlated q(u) over M x P outputs, which SOLVE-GP's orthogonal "
            "decomposition (one per independent latent GP) does not cover. Wrap the inducing "
            "points: `gpflow.inducing_variables.SharedIndependentInducingVariables("
            "gpflow.inducing_variables.InducingPoints(Z))` (and the same for the orthogonal set)."
        )
    size = max(len(regular), len(orthogonal), len(latent_kernels(kernel)))
    if size == 1:
        return OrthogonalInducingVariables(orthogonal[0], regular=regular[0])
    for name, sets in (
        ("inducing_variable", regular),
        ("orthogonal_inducing_variable", orthogonal),
    ):
        if len(sets) not in (1, size):
            raise ValueError(
                f"`{name}` has {len(sets)} separate sets but the model has {size} latent GPs."
            )
    pairs = zip(orthogonal * (size // len(orthogonal)), regular * (size // len(regular)))
    return SeparateIndependentInducingVariables(
        [OrthogonalInducingVariables(v, regular=u) for v, u in pairs]
    )
