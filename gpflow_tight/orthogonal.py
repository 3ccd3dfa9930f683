"""
Orthogonally decoupled inducing variables (SOLVE-GP; Shi, Titsias & Mnih 2020; Fernlund 2022,
ch. 5), and the computations every orthogonally decoupled model shares.

Split the GP as :math:`f = f_\\parallel + f_\\perp` with
:math:`f_\\parallel(x) = \\mathbf k_u(x)^\\top K_{uu}^{-1} \\mathbf u`. The residual
:math:`f_\\perp` is independent of :math:`\\mathbf u` and has the kernel
:math:`c(x, x') = k(x, x') - \\mathbf k_u(x)^\\top K_{uu}^{-1} \\mathbf k_u(x')`. The orthogonal
inducing variables are :math:`\\mathbf v_\\perp = f_\\perp(Z_v)` (or any inter-domain feature of
:math:`f_\\perp`): their covariance is :math:`C_{vv} = K_{vv} - K_{vu} K_{uu}^{-1} K_{uv}` and
their covariance with :math:`f(x)` is :math:`C_{vx} = K_{vx} - K_{vu} K_{uu}^{-1} K_{ux}`
(spec ``solve.md`` §1.2). :class:`OrthogonalInducingVariables` registers exactly these as
GPflow's ``Kuu`` and ``Kuf``, so it is an ordinary inducing variable of :math:`f` for GPflow.

Jitter follows spec §1.7: :math:`\\varepsilon` is added to :math:`K_{uu}` and to :math:`K_{vv}`,
so that :math:`(L_u, L_u^{-1} K_{uv}, \\mathrm{chol}(C_{vv} + \\varepsilon I))` is the block
Cholesky factor of the jittered covariance of :math:`[\\mathbf u; \\mathbf v]`.
"""

from typing import Any, NamedTuple

import tensorflow as tf
from check_shapes import Shape, check_shapes
from gpflow.base import TensorLike, TensorType
from gpflow.config import default_jitter
from gpflow.covariances import Kuf, Kuu
from gpflow.inducing_variables import InducingVariables
from gpflow.kernels import Kernel
from gpflow.models.util import inducingpoint_wrapper

from .covariances import Kuv
from .validation import KUU, checked_cholesky

__all__ = [
    "OrthogonalInducingVariables",
    "OrthogonalFactors",
    "orthogonal_factors",
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


class OrthogonalInducingVariables(InducingVariables):
    """
    The inducing variables :math:`\\mathbf v_\\perp = \\mathbf v - K_{vu} K_{uu}^{-1}\\mathbf u`
    of the part of the GP that is orthogonal to the ``regular`` inducing variables
    :math:`\\mathbf u` (spec ``solve.md`` §1.2 and §1.7).

    ``Kuu`` returns :math:`C_{vv} + \\varepsilon I` and ``Kuf`` returns :math:`C_{vf}`. Both
    sets may be any inducing variables with GPflow ``Kuu``/``Kuf`` registrations and a
    :func:`~gpflow_tight.covariances.Kuv` cross-covariance between them (inducing points,
    GPflow's ``Multiscale``, :class:`~gpflow_tight.FrequencyInducingFeatures`, in any
    combination).

    :param orthogonal: the inducing variables :math:`\\mathbf v` (an array [M_v, D] is taken as
        inducing points).
    :param regular: the inducing variables :math:`\\mathbf u` they are made orthogonal to. The
        object is shared, not copied: a model that trains :math:`Z_u` moves this set too.
    """

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
                f"The regular and orthogonal inducing variables must live in the same input "
                f"space: their input dimensions are {shape_u[1]} and {shape_v[1]}."
            )

    @property
    def num_inducing(self) -> tf.Tensor:
        """The number of orthogonal inducing variables (the regular set is counted apart)."""
        return self.orthogonal.num_inducing

    @property
    def shape(self) -> Shape:
        """The orthogonal set's shape."""
        return self.orthogonal.shape


class OrthogonalFactors(NamedTuple):
    """
    The block Cholesky factor of the jittered covariance of :math:`[\\mathbf u; \\mathbf v]`:
    ``L_u`` with :math:`L_u L_u^\\top = K_{uu} + \\varepsilon I`, ``D_v`` :math:`= L_u^{-1}
    K_{uv}` and ``L_v`` with :math:`L_v L_v^\\top = C_{vv} + \\varepsilon I`.
    """

    L_u: tf.Tensor
    D_v: tf.Tensor
    L_v: tf.Tensor


@check_shapes(
    "return[0]: [M_u, M_u]",
    "return[1]: [M_u, M_v]",
)
def _regular_factor(
    inducing_variable: OrthogonalInducingVariables, kernel: Kernel, jitter: float
) -> tuple[tf.Tensor, tf.Tensor]:
    """:math:`L_u` and :math:`D_v = L_u^{-1} K_{uv}`."""
    regular = inducing_variable.regular
    L_u = checked_cholesky(Kuu(regular, kernel, jitter=jitter), KUU)
    K_uv = Kuv(regular, inducing_variable.orthogonal, kernel)
    return L_u, tf.linalg.triangular_solve(L_u, K_uv, lower=True)


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
    corrected; spec §2.5).
    """
    a_u = tf.linalg.triangular_solve(L_u, Kuf(inducing_variable.regular, kernel, X), lower=True)
    C_vX = Kuf(inducing_variable.orthogonal, kernel, X) - tf.linalg.matmul(
        D_v, a_u, transpose_a=True
    )
    return a_u, C_vX


@check_shapes(
    "return.L_u: [M_u, M_u]",
    "return.D_v: [M_u, M_v]",
    "return.L_v: [M_v, M_v]",
)
def orthogonal_factors(
    inducing_variable: OrthogonalInducingVariables, kernel: Kernel, jitter: float | None = None
) -> OrthogonalFactors:
    """
    Spec §2.6, first lines: :math:`O(M_u^3 + M_u^2 M_v + M_u M_v^2 + M_v^3)`. Fails with a
    :class:`~gpflow_tight.CholeskyError` naming the matrix when :math:`K_{uu}` or :math:`C_{vv}`
    is not numerically positive definite.
    """
    jitter = default_jitter() if jitter is None else jitter
    L_u, D_v = _regular_factor(inducing_variable, kernel, jitter)
    C_vv = Kuu(inducing_variable.orthogonal, kernel, jitter=jitter) - tf.linalg.matmul(
        D_v, D_v, transpose_a=True
    )
    return OrthogonalFactors(L_u, D_v, checked_cholesky(C_vv, CVV))


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


@Kuu.register(OrthogonalInducingVariables, Kernel)
@check_shapes(
    "inducing_variable: [M_v, D, 1]",
    "return: [M_v, M_v]",
)
def _kuu_orthogonal(
    inducing_variable: OrthogonalInducingVariables, kernel: Kernel, *, jitter: float = 0.0
) -> tf.Tensor:
    _, D_v = _regular_factor(inducing_variable, kernel, default_jitter())
    K_vv = Kuu(inducing_variable.orthogonal, kernel, jitter=jitter)
    return K_vv - tf.linalg.matmul(D_v, D_v, transpose_a=True)


@Kuf.register(OrthogonalInducingVariables, Kernel, TensorLike)
@check_shapes(
    "inducing_variable: [M_v, D, 1]",
    "Xnew: [N, D]",
    "return: [M_v, N]",
)
def _kuf_orthogonal(
    inducing_variable: OrthogonalInducingVariables, kernel: Kernel, Xnew: TensorType
) -> tf.Tensor:
    L_u, D_v = _regular_factor(inducing_variable, kernel, default_jitter())
    return _residual_cross_covariance(inducing_variable, kernel, L_u, D_v, Xnew)[1]


@check_shapes(
    "L: [M, M] if L is not None",
    "q_mu: [M, L]",
    "return[0]: [M, L]",
    "return[1]: [L, M, M]",
)
def whiten_variational_parameters(
    L: tf.Tensor | None, q_mu: tf.Tensor, q_sqrt: tf.Tensor, whiten: bool
) -> tuple[tf.Tensor, tf.Tensor]:
    """
    :math:`q = \\mathcal N(\\mathbf m, S)` with :math:`S = RR^\\top` (``q_sqrt`` is [L, M, M]
    lower-triangular or [M, L] diagonal) in whitened coordinates :math:`\\tilde{\\mathbf u} =
    L^{-1}\\mathbf u`: :math:`(L^{-1}\\mathbf m, L^{-1}R)`, or unchanged if ``whiten``. The KL to
    the prior is the same in both coordinates.
    """
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


@check_shapes(
    "a_u: [M_u, N]",
    "a_v: [M_v, N]",
    "prior_covariance: [N, N] if full_cov",
    "prior_covariance: [N] if not full_cov",
    "q_mu_u: [M_u, L]",
    "q_sqrt_u: [L_or_1, M_u, M_u]",
    "q_mu_v: [M_v, L]",
    "q_sqrt_v: [L_or_1, M_v, M_v]",
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
    q_sqrt_v: tf.Tensor,
    full_cov: bool = False,
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """
    The SOLVE-GP posterior :math:`f = g + h + l` in whitened coordinates (spec §1.5): the mean
    :math:`\\mathbf a_u^\\top\\tilde{\\mathbf m}_u + \\mathbf a_v^\\top\\tilde{\\mathbf m}_v`, the
    covariance carried by :math:`q`, :math:`\\mathbf a_u^\\top \\tilde S_u \\mathbf a_u +
    \\mathbf a_v^\\top \\tilde S_v \\mathbf a_v`, and the residual of the prior conditional
    given both sets, :math:`k - \\mathbf a_u^\\top\\mathbf a_u - \\mathbf a_v^\\top\\mathbf a_v`
    (the :math:`d_n` of the tighter bounds). The predictive covariance is the sum of the last
    two: the residual is counted once (spec §1.5, "GPflow implementation trap").

    ``q_sqrt_u`` and ``q_sqrt_v`` may be any square roots :math:`R` of :math:`\\tilde S = RR^\\top`,
    triangular or not.
    """
    mean = tf.linalg.matmul(a_u, q_mu_u, transpose_a=True) + tf.linalg.matmul(
        a_v, q_mu_v, transpose_a=True
    )
    Rt_a_u = tf.linalg.matmul(q_sqrt_u, a_u, transpose_a=True)  # [L, M_u, N]
    Rt_a_v = tf.linalg.matmul(q_sqrt_v, a_v, transpose_a=True)  # [L, M_v, N]
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
