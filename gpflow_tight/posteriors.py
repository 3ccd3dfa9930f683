"""
The posteriors of the package's models, with GPflow's contract
(:class:`gpflow.posteriors.AbstractPosterior`): a constructor that takes the parts of the
posterior (kernel, inducing variables, variational or optimal parameters, mean function) and
``precompute_cache``; ``_precompute`` returns what a prediction reuses; ``fused_predict_f``
recomputes everything; ``predict_f`` reads the cache, which a ``VARIABLE`` cache keeps until
``update_cache()``. As in GPflow, a cache freezes what is derived from the inducing variables
and :math:`q`; the kernel's covariances with the test inputs are always evaluated live.

None of these posteriors is registered with :func:`gpflow.posteriors.get_posterior_class`:
that dispatcher picks a posterior from a (kernel, inducing variable) pair, and none of ours is
identified by one. The SOLVE posteriors need two inducing sets' :math:`q`, Power EP's depends on
the power and the sites, VNNGP's on the neighbour structure, while the inducing variables
themselves (orthogonal sets, frequency features) are ordinary ones for GPflow's own posteriors,
which handle them correctly through ``Kuu``/``Kuf``.

One module, as GPflow keeps its posteriors, in four sections: SOLVE-GP, Power EP, the classic
approximations on DTC's :math:`q(\\mathbf u)` (SoR, Nyström), VNNGP.
"""

import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import tensorflow as tf
from check_shapes import check_shapes, inherit_check_shapes
from gpflow import kernels
from gpflow.conditionals.util import expand_independent_outputs, mix_latent_gp
from gpflow.config import default_jitter
from gpflow.covariances import Kuf
from gpflow.mean_functions import Zero
from gpflow.posteriors import AbstractPosterior, PrecomputeCacheType, PrecomputedValue

from .neighbors import graph_nearest_neighbors, over_row_blocks
from .orthogonal import (
    LatentBlock,
    OrthogonalFactors,
    decoupled_marginals,
    latent_blocks,
    orthogonal_factors,
    orthogonal_projections,
    whiten_variational_parameters,
)
from .projection import Projection, collapsed_common_terms, project, residual_variance
from .validation import (
    ConstructorOnly,
    _user_stacklevel,
    check_count,
    checked_cholesky,
    checked_xnew,
    checks_arguments,
)

__all__ = [
    "OrthogonalPosterior",
    "CollapsedOrthogonalPosterior",
    "CollapsedOrthogonalMeanPosterior",
    "PowerEPPosterior",
    "SoRPosterior",
    "NystromPosterior",
    "NegativeVarianceWarning",
    "VNNGPPosterior",
    "whitened_block_q",
    "union_projection",
    "optimal_whitened_q",
]


# ---------------------------------------------------------------------------------------------
# SOLVE-GP: orthogonally decoupled inducing sets (Shi, Titsias & Mnih 2020; Fernlund 2022)


# whitened q(u) and q(v⊥): (m̃_u [M_u, L], R_u [L or 1, M_u, M_u], m̃_v, R_v), S̃ = R Rᵀ
# (R_v is None for ODVGP's S_v = C_vv: the whitened identity)
WhitenedQ = tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor | None]


@tf.autograph.experimental.do_not_convert
def whitened_block_q(
    block: LatentBlock,
    factors: OrthogonalFactors | None,
    q: tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor],
    whiten: bool,
) -> WhitenedQ:
    """
    ``(m̃_u, R_u, m̃_v, R_v)``: the columns of ``q = (q_mu, q_sqrt, q_mu_orthogonal,
    q_sqrt_orthogonal)`` that belong to ``block``, in whitened coordinates (``factors`` may be
    ``None`` if ``whiten``). ``q_sqrt_orthogonal=None`` is ODVGP's :math:`S_v = C_{vv}`
    (Fernlund 2022, eq. 5.8), whose whitened square root ``R_v`` is the identity, kept as ``None``.
    """
    q_mu, q_sqrt, q_mu_v, q_sqrt_v = q
    L_u, L_v = (None, None) if factors is None else (factors.L_u, factors.L_v)

    every_latent = block.latents == slice(None)

    def columns(sqrt: tf.Tensor, latent_axis: int) -> tf.Tensor:
        # a block of every latent GP takes the tensors whole: no slicing ops in eager training
        if every_latent:
            return sqrt
        return sqrt[:, block.latents] if latent_axis == 1 else sqrt[block.latents]

    def latent_axis(sqrt: tf.Tensor) -> int:
        return 1 if sqrt.shape.ndims == 2 else 0

    m_u, R_u = whiten_variational_parameters(
        L_u, columns(q_mu, 1), columns(q_sqrt, latent_axis(q_sqrt)), whiten
    )
    sqrt_v = None if q_sqrt_v is None else columns(q_sqrt_v, latent_axis(q_sqrt_v))
    m_v, R_v = whiten_variational_parameters(L_v, columns(q_mu_v, 1), sqrt_v, whiten)
    return m_u, R_u, m_v, R_v


@check_shapes(
    "X: [N, D]",
    "return.L: [M, M]",
    "return.A: [M, N]",
    "return.residual: [N]",
)
def union_projection(
    inducing_variable: Any, kernel: kernels.Kernel, X: Any, factors: OrthogonalFactors
) -> Projection:
    """
    The projection onto both sets, :math:`A = [\\mathbf a_u; \\mathbf a_v]`, with ``L`` the block
    Cholesky factor of the jittered covariance of :math:`[\\mathbf u; \\mathbf v]` (Fernlund
    2022, Algorithm 3): :math:`\\|\\mathbf a_n\\|^2` is the Nyström variance of the union and
    :math:`d_n` the residual given both sets.
    """
    a_u, a_v = orthogonal_projections(inducing_variable, kernel, factors, X)
    A = tf.concat([a_u, a_v], axis=0)
    num_regular, num_orthogonal = tf.shape(a_u)[0], tf.shape(a_v)[0]
    L = tf.concat(
        [
            tf.concat([factors.L_u, tf.zeros([num_regular, num_orthogonal], A.dtype)], 1),
            tf.concat([tf.linalg.adjoint(factors.D_v), factors.L_v], 1),
        ],
        axis=0,
    )
    return Projection(L, A, residual_variance(kernel(X, full_cov=False), A))


def optimal_whitened_q(
    inducing_variable: Any,
    kernel: kernels.Kernel,
    data: tuple[tf.Tensor, tf.Tensor],
    likelihood: Any,
    mean_function: Any,
    factors: OrthogonalFactors,
) -> WhitenedQ:
    """
    The optimal :math:`q(\\mathbf u)\\,q(\\mathbf v_\\perp)` of collapsed SOLVE-GP regression
    (Fernlund's eq. 5.26) in whitened coordinates: :math:`\\tilde{\\mathbf m} = B^{-1}A\\mathbf y/
    \\sigma` split into its two blocks, :math:`\\tilde S_u = B_u^{-1}` and :math:`\\tilde S_v =
    B_v^{-1}`, with square roots :math:`L_{B_u}^{-\\top}` and :math:`L_{B_v}^{-\\top}`.
    """
    X, Y = data
    mean_function = Zero() if mean_function is None else mean_function
    sigma_sq = tf.squeeze(likelihood.variance_at(X), axis=-1)
    common = collapsed_common_terms(
        union_projection(inducing_variable, kernel, X, factors), sigma_sq
    )
    err = (Y - mean_function(X)) / common.sigma[:, None]
    c = tf.linalg.triangular_solve(common.LB, tf.linalg.matmul(common.A, err), lower=True)
    q_mu = tf.linalg.triangular_solve(tf.linalg.adjoint(common.LB), c, lower=False)
    num_regular = tf.shape(factors.L_u)[0]

    def inverse_transposed(L: tf.Tensor) -> tf.Tensor:
        eye = tf.eye(tf.shape(L)[0], dtype=L.dtype)
        return tf.linalg.adjoint(tf.linalg.triangular_solve(L, eye, lower=True))[None]

    # chol(B_u) is the leading block of chol(B); B_v needs its own factor
    return (
        q_mu[:num_regular],
        inverse_transposed(common.LB[:num_regular, :num_regular]),
        q_mu[num_regular:],
        inverse_transposed(tf.linalg.cholesky(common.B[num_regular:, num_regular:])),
    )


@checks_arguments(checked_xnew, "Xnew", "predict_f", "fused_predict_f")
class FusedFromCache(AbstractPosterior):
    """
    A posterior whose fused prediction is its cached one on values computed afresh: what
    ``_precompute`` returns is all a prediction needs, so ``fused_predict_f`` reads the live
    parameters and ``predict_f`` the cache, through the same ``_conditional_with_precompute``.
    Both check ``Xnew`` first (a ``ValueError`` naming it; a graph assertion for NaN inside
    ``tf.function``) and cast it to GPflow's default float.
    """

    def fresh_cache(self) -> tuple[tf.Tensor, ...]:
        """What ``_precompute`` would cache, from the current parameters."""
        return tuple(value.value for value in self._precompute())

    def _conditional_fused(
        self, Xnew: Any, full_cov: bool = False, full_output_cov: bool = False
    ) -> tuple[tf.Tensor, tf.Tensor]:
        return self._conditional_with_precompute(
            self.fresh_cache(), Xnew, full_cov, full_output_cov
        )


class OrthogonalPosterior(FusedFromCache):
    """
    The posterior of the SOLVE-GP family, :math:`f = g + h + l` (Shi et al. 2020, eq. 7;
    Fernlund 2022, eq. 5.55-5.57): the regular part :math:`g` from :math:`q(\\mathbf u)`, the
    orthogonal part :math:`h` from :math:`q(\\mathbf v_\\perp)` and the residual :math:`l` of the
    prior conditional given both sets, counted once. The cache holds each block's factorisation
    and whitened :math:`q`, so a cached prediction costs :math:`O(N_*(M_u^2 + M_u M_v + M_v^2))`
    per block.

    The constructor is GPflow's ``BasePosterior``'s with the orthogonal set's variational
    parameters: ``inducing_variable`` is the model's orthogonal set (an
    :class:`~gpflow_tight.OrthogonalInducingVariables`, which holds the regular set, or
    ``SeparateIndependentInducingVariables`` of them), ``q_mu``/``q_sqrt`` belong to the regular
    set and ``q_mu_orthogonal``/``q_sqrt_orthogonal`` to the orthogonal one. A
    ``LinearCoregionalization`` kernel mixes the latent GPs by ``W``. ``q_sqrt_orthogonal=None``
    is ODVGP's posterior (Salimbeni et al. 2018; Fernlund 2022, eqs. 5.7-5.9): :math:`S_v =
    C_{vv}`, so :math:`\\mathbf v_\\perp` moves the mean only.

    No :func:`gpflow.posteriors.get_posterior_class` registration: a (kernel,
    ``OrthogonalInducingVariables``) pair does not identify this posterior, which needs both
    sets' :math:`q`. GPflow's own posterior is the right one for an SVGP whose only inducing
    variables are orthogonal ones.
    """

    def __init__(
        self,
        kernel: kernels.Kernel,
        inducing_variable: Any,
        q_mu: Any = None,
        q_sqrt: Any = None,
        q_mu_orthogonal: Any = None,
        q_sqrt_orthogonal: Any = None,
        whiten: bool = True,
        mean_function: Any = None,
        *,
        precompute_cache: PrecomputeCacheType | None,
    ) -> None:
        super().__init__(kernel, inducing_variable, mean_function=mean_function)
        self.inducing_variable = inducing_variable
        self.q_mu, self.q_sqrt = q_mu, q_sqrt
        self.q_mu_orthogonal, self.q_sqrt_orthogonal = q_mu_orthogonal, q_sqrt_orthogonal
        self.whiten = whiten
        self.blocks = latent_blocks(kernel, inducing_variable)
        self.mixing = kernel.W if isinstance(kernel, kernels.LinearCoregionalization) else None
        if precompute_cache is not None:
            self.update_cache(precompute_cache)

    def whitened_q(self, block: LatentBlock, factors: OrthogonalFactors) -> WhitenedQ:
        """A block's :math:`q` in whitened coordinates."""
        q = (self.q_mu, self.q_sqrt, self.q_mu_orthogonal, self.q_sqrt_orthogonal)
        return whitened_block_q(block, factors, q, self.whiten)

    def has_orthogonal_covariance(self) -> bool:
        """Whether :math:`q(\\mathbf v_\\perp)` has a covariance of its own (not ODVGP's)."""
        return self.q_sqrt_orthogonal is not None

    @tf.autograph.experimental.do_not_convert
    def fresh_cache(self) -> tuple[tf.Tensor, ...]:
        """
        Each block's factors and whitened :math:`q`, from the current parameters (without
        :math:`R_v` when :math:`\\tilde S_v = I`).
        """
        values = []
        for block in self.blocks:
            factors = orthogonal_factors(block.inducing_variable, block.kernel)
            q = self.whitened_q(block, factors)
            values.extend([*factors, *(q if self.has_orthogonal_covariance() else q[:3])])
        return tuple(values)

    def _precompute(self) -> tuple[PrecomputedValue, ...]:
        return tuple(PrecomputedValue(v, (False,) * len(v.shape)) for v in self.fresh_cache())

    @tf.autograph.experimental.do_not_convert
    def _latent_conditionals(
        self, cache: tuple[tf.Tensor, ...], Xnew: Any, full_cov: bool
    ) -> list[tuple[tf.Tensor, tf.Tensor, tf.Tensor]]:
        """Per block: the mean, the covariance carried by q and the prior residual."""
        results = []
        size = 7 if self.has_orthogonal_covariance() else 6
        for index, block in enumerate(self.blocks):
            values = cache[size * index : size * (index + 1)]
            L_u, D_v, L_v, m_u, R_u, m_v = values[:6]
            R_v = values[6] if size == 7 else None
            factors = OrthogonalFactors(L_u, D_v, L_v)
            a_u, a_v = orthogonal_projections(block.inducing_variable, block.kernel, factors, Xnew)
            prior = block.kernel(Xnew, full_cov=full_cov)
            results.append(
                decoupled_marginals(a_u, a_v, prior, m_u, R_u, m_v, R_v, full_cov=full_cov)
            )
        return results

    @tf.autograph.experimental.do_not_convert
    def latent_marginals_with_residual(self, X: Any) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """
        For each latent GP at X (before mixing, without the mean function), from the live
        parameters: the mean, the variance :math:`s_n` carried by :math:`q` and the residual
        :math:`d_n` given both sets; each [N, L].
        """
        means, q_variances, residuals = [], [], []
        for mean, q_variance, residual in self._latent_conditionals(self.fresh_cache(), X, False):
            means.append(mean)
            q_variances.append(tf.broadcast_to(q_variance, tf.shape(mean)))
            residuals.append(tf.broadcast_to(residual[:, None], tf.shape(mean)))
        return tf.concat(means, 1), tf.concat(q_variances, 1), tf.concat(residuals, 1)

    @tf.autograph.experimental.do_not_convert
    def _conditional_with_precompute(
        self,
        cache: tuple[tf.Tensor, ...],
        Xnew: Any,
        full_cov: bool = False,
        full_output_cov: bool = False,
    ) -> tuple[tf.Tensor, tf.Tensor]:
        means, covariances = [], []
        for mean, q_covariance, residual in self._latent_conditionals(cache, Xnew, full_cov):
            num_latent, num_new = tf.shape(mean)[1], tf.shape(mean)[0]
            if full_cov:
                shape = tf.stack([num_latent, num_new, num_new])
                covariances.append(tf.broadcast_to(q_covariance + residual[None], shape))
            else:
                covariances.append(
                    tf.broadcast_to(q_covariance + residual[:, None], tf.shape(mean))
                )
            means.append(mean)
        mean, covariance = tf.concat(means, 1), tf.concat(covariances, 0 if full_cov else 1)
        if self.mixing is not None:
            return mix_latent_gp(self.mixing, mean, covariance, full_cov, full_output_cov)
        return mean, expand_independent_outputs(covariance, full_cov, full_output_cov)


class CollapsedOrthogonalPosterior(OrthogonalPosterior):
    """
    The posterior of collapsed SOLVE-GP regression: :class:`OrthogonalPosterior` at the optimal
    :math:`q(\\mathbf u)\\,q(\\mathbf v_\\perp)` (Fernlund's eq. 5.26), recomputed from the data
    by ``update_cache()``. The constructor is GPflow's ``SGPRPosterior``'s, with the model's
    orthogonal set as ``inducing_variable``.
    """

    def __init__(
        self,
        kernel: kernels.Kernel,
        data: tuple[Any, Any],
        inducing_variable: Any,
        likelihood: Any,
        num_latent_gps: int | None = None,
        mean_function: Any = None,
        *,
        precompute_cache: PrecomputeCacheType | None,
    ) -> None:
        self.data = data
        self.likelihood = likelihood
        self.num_latent_gps = num_latent_gps
        super().__init__(
            kernel, inducing_variable, mean_function=mean_function, precompute_cache=None
        )
        if precompute_cache is not None:
            self.update_cache(precompute_cache)

    def has_orthogonal_covariance(self) -> bool:
        """SOLVE-GP's optimal :math:`q(\\mathbf v_\\perp)` has its own covariance (eq. 5.26)."""
        return True

    def whitened_q(self, block: LatentBlock, factors: OrthogonalFactors) -> WhitenedQ:
        """The optimal :math:`q` in whitened coordinates."""
        return optimal_whitened_q(
            block.inducing_variable,
            block.kernel,
            self.data,
            self.likelihood,
            self.mean_function,
            factors,
        )


class CollapsedOrthogonalMeanPosterior(CollapsedOrthogonalPosterior):
    """
    The posterior of ODGPR, collapsed regression with ODVGP's family (Fernlund 2022, §5.3-5.4):
    the optimal :math:`\\mathbf m_u, S_u, \\mathbf m_v` of eq. 5.26 (those of
    :class:`CollapsedOrthogonalPosterior`) and :math:`S_v = C_{vv}` fixed, so that the mean is
    SGPR's on :math:`Z_u \\cup Z_v` (eq. 5.55) and the covariance eq. 5.56's, without
    :math:`v`-terms. Same constructor and caches as :class:`CollapsedOrthogonalPosterior`.
    """

    def has_orthogonal_covariance(self) -> bool:
        """ODVGP's :math:`S_v = C_{vv}`: no covariance of its own."""
        return False

    def whitened_q(self, block: LatentBlock, factors: OrthogonalFactors) -> WhitenedQ:
        """The optimal :math:`q`, whitened, with :math:`\\tilde S_v = I` (``None``)."""
        m_u, R_u, m_v, _ = super().whitened_q(block, factors)
        return m_u, R_u, m_v, None


# ---------------------------------------------------------------------------------------------
# Power EP: FITC, VFE, PITC and the α family (Bui, Yan & Turner 2017)


@tf.autograph.experimental.do_not_convert
def _power_ep_modules() -> tuple[ModuleType, ModuleType]:
    """The Power-EP inference modules, imported on first use (``gpflow_tight.models`` imports
    this module, so importing them at the top would be circular)."""
    from .models import power_ep_regression, power_ep_sites

    return power_ep_regression, power_ep_sites


class PowerEPPosterior(ConstructorOnly, FusedFromCache):
    """
    The posterior of :class:`~gpflow_tight.PowerEPSGP` (Bui, Yan & Turner 2017, eqs. 7 and 18):
    the exact test conditional :math:`p(\\mathbf f_* \\mid \\mathbf u)` under :math:`q(\\mathbf u)`,
    held whitened, :math:`\\mathbf u = L\\mathbf v`, :math:`q(\\mathbf v) = \\mathcal N(L_B^{-\\top}
    \\mathbf c, (L_B L_B^\\top)^{-1})` with :math:`LL^\\top = K_{uu}`. The cache is
    :math:`(L, L_B, \\mathbf c)`; a cached prediction costs :math:`O(N_* M^2)`.

    The constructor is GPflow's ``SGPRPosterior``'s plus what defines :math:`q(\\mathbf u)`,
    exactly one of:

    * ``alpha`` (and optionally ``blocks``): the closed-form fixed point of a Gaussian
      likelihood (§3.6-3.7), recomputed from the data, kernel, inducing variable, likelihood
      and mean function by ``update_cache()``. ``alpha=0`` (VFE, and DTC's posterior) gives
      ``gpflow.models.SGPR``'s posterior, ``alpha=1`` ``GPRFITC``'s.
    * ``sites``: the site variables ``(precision, shift)``, :math:`\\tau_n` and :math:`\\nu_n`
      ([N] each) of Power-EP site inference (eqs. 119-120), read by ``update_cache()``; the
      likelihood and ``data[1]`` are then not used.

    ``alpha`` and ``blocks`` are stored read-only: they decide the form of the computation.

    :param alpha: the power: a number, one per data point or, with ``blocks``, one per block.
    :param blocks: a partition of the data rows into index arrays (block factors).
    """

    _constructor_only = ("alpha", "blocks", "_layout", "sites")

    @check_shapes(
        "data[0]: [N, D]",
        "data[1]: [N, R]",
        "sites[0]: [N]",
        "sites[1]: [N]",
    )
    def __init__(
        self,
        kernel: kernels.Kernel,
        data: tuple[Any, Any],
        inducing_variable: Any,
        likelihood: Any,
        num_latent_gps: int,
        mean_function: Any = None,
        *,
        alpha: Any = None,
        blocks: Any = None,
        sites: tuple[tf.Variable, tf.Variable] | None = None,
        precompute_cache: PrecomputeCacheType | None,
    ) -> None:
        X, Y = data
        super().__init__(kernel, X, mean_function=mean_function)
        self.Y_data = Y
        self.likelihood = likelihood
        self.inducing_variable = inducing_variable
        self.num_latent_gps = num_latent_gps
        if (alpha is None) == (sites is None):
            raise ValueError(
                "Pass exactly one of `alpha` (the closed-form posterior of a Gaussian "
                "likelihood) and `sites` (the site variables of Power-EP site inference)."
            )
        if sites is not None and blocks is not None:
            raise ValueError("`blocks` belongs to the closed-form posterior (`alpha`), not sites.")
        regression, _ = _power_ep_modules()
        num_data = X.shape[0]
        self._layout = None if blocks is None else regression.block_layout(blocks, num_data)
        self.blocks = None if self._layout is None else self._layout.blocks
        if alpha is not None:
            num_blocks = None if self.blocks is None else len(self.blocks)
            alpha = regression.check_alpha(alpha, num_data, num_blocks)
        self.alpha = alpha
        self.sites = sites
        if precompute_cache is not None:
            self.update_cache(precompute_cache)

    @check_shapes(
        "return[0]: [M, M]",
        "return[1]: [M, M]",
        "return[2]: [M, R]",
    )
    def _precompute(self) -> tuple[PrecomputedValue, ...]:
        regression, site_inference = _power_ep_modules()
        if self.sites is None:
            mean_function = Zero() if self.mean_function is None else self.mean_function
            problem = regression.CollapsedProblem(
                self.kernel,
                self.inducing_variable,
                (self.X_data, self.Y_data),
                self.likelihood,
                mean_function,
                self.alpha,
                self._layout,
            )
            L, LB, c = regression.collapsed_posterior(problem)
        else:
            L, LB, c = site_inference.site_whitened_posterior(
                self.kernel, self.inducing_variable, self.X_data, *self.sites
            )
        return (
            PrecomputedValue(L, (False, False)),
            PrecomputedValue(LB, (False, False)),
            PrecomputedValue(c, (False, c.shape[-1] is None)),
        )

    @inherit_check_shapes
    def _conditional_with_precompute(
        self,
        cache: tuple[tf.Tensor, ...],
        Xnew: Any,
        full_cov: bool = False,
        full_output_cov: bool = False,
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """
        :math:`\\mathbf a_* = L^{-1}\\mathbf k_{u*}`, :math:`\\mathbf b_* = L_B^{-1}\\mathbf a_*`:
        mean :math:`\\mathbf b_*^\\top\\mathbf c`, covariance :math:`k_{**} - \\mathbf a_*^\\top
        \\mathbf a_* + \\mathbf b_*^\\top\\mathbf b_*`, shared by the output columns.
        """
        L, LB, c = cache
        Kus = Kuf(self.inducing_variable, self.kernel, Xnew)
        A = tf.linalg.triangular_solve(L, Kus, lower=True)
        B = tf.linalg.triangular_solve(LB, A, lower=True)
        mean = tf.linalg.matmul(B, c, transpose_a=True)
        if full_cov:
            var = self._prior_residual(Xnew, A, full_cov) + tf.linalg.matmul(B, B, transpose_a=True)
            var = tf.tile(var[None, ...], [self.num_latent_gps, 1, 1])  # [P, N, N]
        else:
            var = self._prior_residual(Xnew, A, full_cov) + tf.reduce_sum(tf.square(B), 0)
            var = tf.tile(var[:, None], [1, self.num_latent_gps])  # [N, P]
        return mean, expand_independent_outputs(var, full_cov, full_output_cov)

    def _prior_residual(self, Xnew: Any, A: tf.Tensor, full_cov: bool) -> tf.Tensor:
        """
        The covariance of the prior conditional :math:`p(\\mathbf f_* \\mid \\mathbf u)`,
        :math:`K_{**} - Q_{**} = K_{**} - \\mathbf a_*^\\top\\mathbf a_*` ([N, N], or its
        diagonal [N]), which the predictive adds to what :math:`q(\\mathbf u)` carries.
        """
        if full_cov:
            return self.kernel(Xnew) - tf.linalg.matmul(A, A, transpose_a=True)
        return self.kernel(Xnew, full_cov=False) - tf.reduce_sum(tf.square(A), 0)


# ---------------------------------------------------------------------------------------------
# Classic approximations on DTC's q(u): SoR and the Nyström GP (Quiñonero-Candela & Rasmussen
# 2005; Williams & Seeger 2001)


class NegativeVarianceWarning(UserWarning):
    """
    Predictions of the Nyström GP (:class:`~gpflow_tight.Nystrom`) with a negative variance,
    returned as computed (not clipped), with the number and the indices of the test points and
    what to do. Also shown when such predictions are traced by ``tf.function``, where the
    variances cannot be checked without a host round trip.
    """


class SoRPosterior(PowerEPPosterior):
    """
    The degenerate posterior of the subset of regressors (Quiñonero-Candela & Rasmussen 2005,
    §4; spec §4.1, §4.5): DTC's :math:`q(\\mathbf u) = \\mathcal N(\\sigma^{-2}K_{uu}\\Sigma
    K_{uf}\\mathbf y, K_{uu}\\Sigma K_{uu})`, :math:`\\Sigma = (K_{uu} + \\sigma^{-2}K_{uf}
    K_{fu})^{-1}`, under the deterministic conditional :math:`f_* = \\mathbf k_{*u}K_{uu}^{-1}
    \\mathbf u` of the finite-rank prior: DTC's mean and the covariance
    :math:`K_{*u}\\Sigma K_{u*}`, DTC's minus :math:`K_{**} - Q_{**}`. It vanishes away from
    the inducing inputs.

    The constructor and the cache are :class:`PowerEPPosterior`'s, at :math:`\\alpha = 0`
    (``alpha=0.0``, no blocks, no sites: what :class:`~gpflow_tight.SoR` passes).
    """

    def _prior_residual(self, Xnew: Any, A: tf.Tensor, full_cov: bool) -> tf.Tensor:
        """Zero: SoR's prior has rank M, so :math:`f_*` is a function of :math:`\\mathbf u`."""
        num_new = tf.shape(A)[1]
        shape = tf.stack([num_new, num_new]) if full_cov else num_new[None]
        return tf.zeros(shape, dtype=A.dtype)


class NystromPosterior(PowerEPPosterior):
    """
    The Nyström GP of Williams & Seeger (2001): the exact GP predictive with :math:`K_{ff}`
    replaced by :math:`Q_{ff} = K_{fu}K_{uu}^{-1}K_{uf}` inside the inverse only (spec §4.2),

    .. math::
        \\mu_* = \\mathbf k_{*f}(Q_{ff} + \\Sigma)^{-1}\\mathbf y,\\qquad
        \\Sigma_* = K_{**} - K_{*f}(Q_{ff} + \\Sigma)^{-1}K_{f*},

    with noise variances :math:`\\Sigma = \\mathrm{diag}(\\sigma_n^2)`. Splitting
    :math:`K_{f*} = Q_{f*} + E` (:math:`E = K_{f*} - Q_{f*}`, the part of the test covariance the
    inducing variables miss) and applying the Woodbury identity, :math:`(Q_{ff} + \\Sigma)^{-1} =
    \\Sigma^{-1/2}(I - G^\\top G)\\Sigma^{-1/2}` with :math:`G = L_B^{-1}A\\Sigma^{-1/2}`,
    :math:`A = L^{-1}K_{uf}` (the shared projection) and :math:`L_B L_B^\\top = I +
    A\\Sigma^{-1}A^\\top`, gives DTC's predictive plus terms in :math:`\\tilde E =
    \\Sigma^{-1/2}E`:

    .. math::
        \\mu_* = \\tilde{\\mathbf b}_*^\\top\\mathbf c + \\tilde E^\\top\\Sigma^{-1/2}\\mathbf y,
        \\qquad \\Sigma_* = K_{**} - Q_{**} - \\tilde E^\\top\\tilde E +
        \\tilde B_*^\\top\\tilde B_*,\\qquad \\tilde B_* = L_B^{-1}(L^{-1}K_{u*} -
        A\\Sigma^{-1/2}\\tilde E),

    with DTC's :math:`\\mathbf c = G\\Sigma^{-1/2}\\mathbf y`. At :math:`E = 0` (e.g. test
    inputs among the inducing inputs) this is DTC's predictive. No :math:`N \\times N` matrix is
    formed: the cache costs :math:`O(NM^2)`, a prediction :math:`O(N_* N M)`.

    The term :math:`-\\tilde E^\\top\\tilde E` can outweigh the others: the variance can be
    **negative** (spec §4.2; the smaller the noise, the likelier). Negative variances are
    returned as computed, never clipped (a clipped 0 would claim certainty), and each eager
    prediction that has any shows a :class:`NegativeVarianceWarning` naming the test points.
    Inside ``tf.function`` the check would need a host round trip (``tf.py_function``) or an op
    XLA cannot compile (``tf.print``), so compiled predictions are not checked: tracing shows
    the warning, saying so; check ``var < 0`` on their result.

    The constructor is :class:`PowerEPPosterior`'s, at :math:`\\alpha = 0` (``alpha=0.0``, no
    blocks, no sites: what :class:`~gpflow_tight.Nystrom` passes). The cache is
    :math:`(L, L_B, \\mathbf c,
    A\\Sigma^{-1/2}, \\Sigma^{-1/2}(\\mathbf y - \\mu(X)), \\mathrm{diag}(\\Sigma)^{1/2})`;
    the kernel's covariances with the test inputs, :math:`K_{f*}` among them, are evaluated
    live.
    """

    @check_shapes(
        "return[0]: [M, M]",
        "return[1]: [M, M]",
        "return[2]: [M, R]",
        "return[3]: [M, N]",
        "return[4]: [N, R]",
        "return[5]: [N]",
    )
    def _precompute(self) -> tuple[PrecomputedValue, ...]:
        X = self.X_data
        mean_function = Zero() if self.mean_function is None else self.mean_function
        projection = project(self.inducing_variable, self.kernel, X, name="data X")
        sigma_sq = self.likelihood.variance_at(X)[:, 0]
        common = collapsed_common_terms(projection, sigma_sq)
        scaled_error = (self.Y_data - mean_function(X)) / common.sigma[:, None]
        c = tf.linalg.triangular_solve(
            common.LB, tf.linalg.matmul(common.A, scaled_error), lower=True
        )
        dynamic_outputs = c.shape[-1] is None
        return (
            PrecomputedValue(common.L, (False, False)),
            PrecomputedValue(common.LB, (False, False)),
            PrecomputedValue(c, (False, dynamic_outputs)),
            PrecomputedValue(common.A, (False, True)),
            PrecomputedValue(scaled_error, (True, dynamic_outputs)),
            PrecomputedValue(common.sigma, (True,)),
        )

    @inherit_check_shapes
    def _conditional_with_precompute(
        self,
        cache: tuple[tf.Tensor, ...],
        Xnew: Any,
        full_cov: bool = False,
        full_output_cov: bool = False,
    ) -> tuple[tf.Tensor, tf.Tensor]:
        L, LB, c, A_data, scaled_error, sigma = cache
        A = tf.linalg.triangular_solve(
            L, Kuf(self.inducing_variable, self.kernel, Xnew), lower=True
        )
        # Ẽ = Σ^{-1/2}(K_f* − Q_f*) [N, N*], and B̃_* = L_B⁻¹(a_* − AΣ^{-1/2}Ẽ) [M, N*]
        E = self.kernel(self.X_data, Xnew) / sigma[:, None] - tf.linalg.matmul(
            A_data, A, transpose_a=True
        )
        B = tf.linalg.triangular_solve(LB, A - tf.linalg.matmul(A_data, E), lower=True)
        mean = tf.linalg.matmul(B, c, transpose_a=True) + tf.linalg.matmul(
            E, scaled_error, transpose_a=True
        )
        if full_cov:
            var = (
                self._prior_residual(Xnew, A, full_cov)
                - tf.linalg.matmul(E, E, transpose_a=True)
                + tf.linalg.matmul(B, B, transpose_a=True)
            )
            _warn_on_negative_variance(tf.linalg.diag_part(var))
            var = tf.tile(var[None, ...], [self.num_latent_gps, 1, 1])  # [P, N, N]
        else:
            var = (
                self._prior_residual(Xnew, A, full_cov)
                - tf.reduce_sum(tf.square(E), 0)
                + tf.reduce_sum(tf.square(B), 0)
            )
            _warn_on_negative_variance(var)
            var = tf.tile(var[:, None], [1, self.num_latent_gps])  # [N, P]
        return mean, expand_independent_outputs(var, full_cov, full_output_cov)


@tf.autograph.experimental.do_not_convert
def _warn_on_negative_variance(variance: tf.Tensor) -> None:
    """
    Show a :class:`NegativeVarianceWarning` when a Nyström variance [N] is negative (eagerly),
    or, when traced, that compiled predictions are not checked. Adds no op to the graph.
    """
    fixes = (
        "more or better-placed inducing points (e.g. a subset of the data spread over the test "
        "region), a larger noise variance, or DTC / SGPR, whose variances are never negative"
    )
    if not tf.executing_eagerly():
        warnings.warn(
            "Nyström predictive variances can be negative, and predictions compiled by "
            "tf.function are not checked (a check would need a host round trip): check "
            f"`var < 0` on their result. If some are negative, use {fixes}.",
            NegativeVarianceWarning,
            stacklevel=_user_stacklevel(),
        )
        return
    negative = np.flatnonzero(variance.numpy() < 0)
    if negative.size == 0:
        return
    shown = ", ".join(str(i) for i in negative[:10]) + (", ..." if negative.size > 10 else "")
    warnings.warn(
        f"{negative.size} of {variance.shape[0]} test points have a negative Nyström predictive "
        f"variance (rows {shown} of Xnew; smallest {np.min(variance.numpy()):.3g}), returned "
        "as computed: the Nyström GP puts the rank-M approximation Q_ff only inside the inverse, "
        f"so its variance is not bounded below by 0. Use {fixes}.",
        NegativeVarianceWarning,
        stacklevel=_user_stacklevel(),
    )


# ---------------------------------------------------------------------------------------------
# VNNGP: nearest-neighbour conditionals (Wu, Pleiss & Cunningham 2022)


@check_shapes(
    "Z_neighbors: [B, K, D]",
    "X: [B, D]",
    "mask: [B, K]",
    "return: [B, D]",
)
def _neighborhood_centres(Z_neighbors: tf.Tensor, X: tf.Tensor, mask: Any = None) -> tf.Tensor:
    """
    The origin of each row's neighbourhood for :meth:`VNNGPPosterior.conditional_on_neighbors`:
    the mean of the neighbours' inputs where ``mask`` is ``True``, or x itself when the row has
    no neighbour. A stationary kernel depends on :math:`\\mathbf x - \\mathbf x'` only, so
    translating a neighbourhood by it leaves every kernel value unchanged in exact arithmetic,
    while the round-off of GPflow's squared distances :math:`\\|\\mathbf x\\|^2 +
    \\|\\mathbf z\\|^2 - 2\\mathbf x^\\top\\mathbf z` becomes that of the neighbourhood's size
    rather than of its distance from the origin (docs/float32.md, "Why VNNGP is worse").
    Centring on x itself would not do: a test input far from the data has its neighbours far
    from it.
    """
    if mask is None:
        weights = tf.ones_like(Z_neighbors[..., 0])
    else:
        weights = tf.cast(mask, Z_neighbors.dtype)
    count = tf.reduce_sum(weights, axis=-1, keepdims=True)  # [B, 1]
    total = tf.reduce_sum(weights[..., None] * Z_neighbors, axis=-2)  # [B, D]
    mean = total / tf.maximum(count, tf.ones_like(count))
    return tf.where(count > 0, mean, X)


@tf.custom_gradient
def _gaussian_conditional_weights(
    K_nn: tf.Tensor, k_nx: tf.Tensor, k_xx: tf.Tensor
) -> tuple[tuple[tf.Tensor, tf.Tensor], Callable[..., tuple[tf.Tensor, tf.Tensor, tf.Tensor]]]:
    """
    :math:`\\mathbf a = K_{nn}^{-1}\\mathbf k_{nx}` and :math:`c = k_{xx} - \\mathbf
    k_{nx}^\\top\\mathbf a` for batches of small systems [..., K, K], with the gradient written
    out: for upstream gradients :math:`\\bar{\\mathbf a}, \\bar c` and :math:`\\mathbf v =
    K_{nn}^{-1}\\bar{\\mathbf a}`,

    .. math::
        \\bar K_{nn} = (\\bar c\\,\\mathbf a - \\mathbf v)\\mathbf a^\\top,\\quad
        \\bar{\\mathbf k}_{nx} = \\mathbf v - 2\\bar c\\,\\mathbf a,\\quad \\bar k_{xx} = \\bar c,

    from one more pair of triangular solves with one right-hand side: :math:`O(K^2)` per system
    where differentiating through the factorisation costs :math:`O(K^3)`. :math:`K_{nn}` is
    symmetric, so only :math:`\\bar K_{nn} + \\bar K_{nn}^\\top` reaches the kernel's
    parameters and inputs; this one outer product has the same symmetric part as the gradient
    TensorFlow gives, :math:`\\bar c\\,\\mathbf a\\mathbf a^\\top - \\tfrac12(\\mathbf v\\mathbf
    a^\\top + \\mathbf a\\mathbf v^\\top)`, in a third of the elementwise passes.
    """
    what = "K_nn (the covariance of a point's nearest inducing points)"
    L = checked_cholesky(K_nn, what)
    a = tf.linalg.cholesky_solve(L, k_nx[..., None])[..., 0]
    c = k_xx - tf.reduce_sum(k_nx * a, axis=-1)

    def gradient(grad_a: tf.Tensor, grad_c: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        v = tf.linalg.cholesky_solve(L, grad_a[..., None])[..., 0]
        grad_K = (grad_c[..., None] * a - v)[..., :, None] * a[..., None, :]
        return grad_K, v - 2.0 * grad_c[..., None] * a, grad_c

    return (a, c), gradient


class VNNGPPosterior(FusedFromCache):
    """
    The posterior of :class:`~gpflow_tight.VNNGP` (Wu, Pleiss & Cunningham 2022): a product of
    marginals (eq. 11), each from the :math:`K` nearest inducing inputs :math:`n(\\mathbf x_*)`
    of the test input among all of :math:`Z` (eq. 9),

    .. math::
        q(f_*) = \\mathcal N\\big(\\mu(\\mathbf x_*) + \\mathbf a_*^\\top(\\mathbf m_{n(*)} -
        \\boldsymbol\\mu_{n(*)}),\\; k_{**} - \\mathbf k_{n(*)*}^\\top\\mathbf a_* +
        \\textstyle\\sum_l a_{*l}^2 s_{n(*)_l}\\big),\\qquad
        \\mathbf a_* = (K_{n(*)n(*)} + \\epsilon I)^{-1}\\mathbf k_{n(*)*}

    (eq. 25 at a test input), with the model's jitter :math:`\\epsilon`. The neighbours come from
    :func:`~gpflow_tight.neighbors.graph_nearest_neighbors`, so the posterior predicts the same
    eagerly, under ``tf.function`` and in a SavedModel, with memory :math:`O(N_* K)` for the
    neighbours; rows are processed in chunks of ``prediction_batch_size``, each costing
    :math:`O(\\text{chunk} \\cdot (MD + K^3))`.

    The constructor is GPflow's ``BasePosterior``'s for a diagonal, unwhitened :math:`q`:
    ``q_mu`` [M, L] holds the means :math:`m_j` and ``q_sqrt`` [M, L] the (constrained)
    standard deviations :math:`\\sqrt{s_j}`. The cache is a snapshot of what a prediction reads
    besides the kernel: the inducing inputs :math:`Z`, :math:`\\mathbf m - \\mu(Z)` and the
    variances :math:`\\mathbf s`. So with a ``VARIABLE`` cache, ``predict_f`` keeps the
    parameters of the last ``update_cache()`` (``fused_predict_f`` always reads the live ones).
    Both read the kernel live: there is no M-sized kernel quantity to cache, since each test
    input needs its own :math:`K \\times K` block. ``full_cov=True`` gives the joint of the
    test values, whose nearest-neighbour conditionals are independent given the inducing
    variables (:math:`O(N_*^2 M)`).

    ``num_neighbors`` and ``prediction_batch_size`` are read-only: they decide the shapes of the
    computation, which compiled functions would keep. Build a new posterior to change them.

    **Nearest-neighbour q** (``VNNGP(q="nearest_neighbor")``, the paper's Appendix B): with
    ``q_sqrt_offdiag`` and ``prior_neighbors`` given, :math:`q(\\mathbf u) = \\mathcal N(\\mathbf
    m, \\tilde L\\tilde L^\\top)` per latent GP, with a sparse lower-triangular factor
    :math:`\\tilde L` whose row j holds ``q_sqrt[j]`` on the diagonal and
    ``q_sqrt_offdiag[j, k]`` in column ``prior_neighbors[j, k]`` (entries where it is -1 are
    padding, ignored). The variance of eq. 25 becomes :math:`c_* + \\mathbf a_*^\\top
    S_{n(*)n(*)}\\mathbf a_* = c_* + \\|\\sum_l a_{*l}\\tilde L_{n(*)_l,:}\\|^2`
    (:meth:`factor_quadratic_form`, :math:`O(K^2)` per test input), and ``full_cov`` gives
    :math:`(A\\tilde L)(A\\tilde L)^\\top + \\mathrm{diag}(\\mathbf c)`. The cache then holds
    :math:`Z`, :math:`\\mathbf m - \\mu(Z)`, the diagonal, the (masked) off-diagonal entries
    and the column table.

    :param inducing_variable: ``InducingPoints`` with the inducing inputs [M, D].
    :param num_neighbors: K, the nearest inducing inputs per test input, 1 ≤ K ≤ M.
    :param prediction_batch_size: rows of ``Xnew`` per chunk.
    :param jitter: :math:`\\epsilon` (read-only; ``None``: ``gpflow.config.default_jitter()``
        whenever it is used).
    :param q_sqrt_offdiag: the off-diagonal entries [M, K', L] of the factor (nearest-neighbour
        q only).
    :param prior_neighbors: their columns, integer rows [M, K'] of Z padded with -1 (the
        model's prior neighbour table; nearest-neighbour q only).
    """

    @check_shapes(
        "inducing_variable: [M, D, broadcast P]",
        "q_mu: [M, L]",
        "q_sqrt: [M, L]",
        "q_sqrt_offdiag: [M, K_prior, L]",
        "prior_neighbors: [M, K_prior]",
    )
    def __init__(
        self,
        kernel: kernels.Kernel,
        inducing_variable: Any,
        q_mu: Any,
        q_sqrt: Any,
        mean_function: Any = None,
        *,
        num_neighbors: int,
        precompute_cache: PrecomputeCacheType | None,
        prediction_batch_size: int = 10_000,
        q_sqrt_offdiag: Any = None,
        prior_neighbors: Any = None,
        jitter: float | None = None,
    ) -> None:
        super().__init__(kernel, inducing_variable, mean_function=mean_function)
        self.inducing_variable = inducing_variable
        self.q_mu = q_mu
        self.q_sqrt = q_sqrt
        if (q_sqrt_offdiag is None) != (prior_neighbors is None):
            raise ValueError(
                "`q_sqrt_offdiag` and `prior_neighbors` go together (the off-diagonal entries of "
                "a nearest-neighbour q and their columns): pass both or neither."
            )
        self.q_sqrt_offdiag = q_sqrt_offdiag
        self.prior_neighbors = prior_neighbors
        num_inducing = inducing_variable.Z.shape[0]
        self._num_neighbors = check_count(
            num_neighbors, "num_neighbors", maximum=num_inducing, hint=" (M)"
        )
        self._prediction_batch_size = check_count(prediction_batch_size, "prediction_batch_size")
        self._jitter = jitter
        if precompute_cache is not None:
            self.update_cache(precompute_cache)

    @property
    def num_neighbors(self) -> int:
        """K, the nearest inducing inputs per test input (read-only)."""
        return self._num_neighbors

    @property
    def prediction_batch_size(self) -> int:
        """Rows of ``Xnew`` per chunk (read-only)."""
        return self._prediction_batch_size

    @property
    def jitter(self) -> float | None:
        """:math:`\\epsilon`, added to every neighbour block (read-only)."""
        return self._jitter

    @staticmethod
    @check_shapes(
        "Z: [M, D]",
        "X: [B, D]",
        "neighbors: [B, K]",
        "mask: [B, K]",
        "return[0]: [B, K]",
        "return[1]: [B]",
    )
    def conditional_on_neighbors(
        kernel: kernels.Kernel,
        Z: Any,
        X: Any,
        neighbors: Any,
        mask: Any = None,
        jitter: float | None = None,
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """
        The conditional of :math:`f(\\mathbf x)` on the inducing variables of its neighbours
        (eq. 9, 17-18) for each row x of ``X``: :math:`\\mathbf a = (K_{nn} + \\epsilon
        I)^{-1}\\mathbf k_{nx}` and :math:`c = \\max(k_{xx} - \\mathbf k_{nx}^\\top\\mathbf a,
        0)`, clipped at 0 where the exact conditional variance lies (the package's round-off
        policy for residual variances, as :func:`~gpflow_tight.projection.residual_variance`).
        ``jitter`` is :math:`\\epsilon` (default ``gpflow.config.default_jitter()``). Entries
        where ``mask`` is ``False`` are padding: identity rows and columns of
        :math:`K_{nn}`, no covariance, so their :math:`a` is 0 (the Vecchia prior's :math:`j
        \\le K`).

        For a stationary kernel (``gpflow.kernels.Stationary``), each row's joint covariance of
        its neighbours and x is evaluated on the inputs translated by the mean of its unmasked
        neighbours (by x when it has none): the same matrix in exact arithmetic, without the
        float32 cancellation of inputs far from the origin (docs/float32.md). Any other kernel
        sees the inputs as they are.
        """
        Z_neighbors = tf.gather(Z, neighbors)  # [B, K, D]
        points = tf.concat([Z_neighbors, X[:, None, :]], axis=1)  # [B, K+1, D]
        if isinstance(kernel, kernels.Stationary):
            points = points - _neighborhood_centres(Z_neighbors, X, mask)[:, None, :]
        joint = kernel(points)  # [B, K+1, K+1]
        # split, not sliced: the gradient of a split is one concatenation, that of each strided
        # slice a full [B, K+1, K+1] pass
        num_neighbors = tf.shape(neighbors)[1]
        top, bottom = tf.split(joint, [num_neighbors, 1], axis=1)
        K_nn, k_nx = tf.split(top, [num_neighbors, 1], axis=2)
        k_nx, k_xx = k_nx[:, :, 0], bottom[:, 0, -1]
        eye = tf.eye(tf.shape(K_nn)[-1], dtype=K_nn.dtype)
        if mask is not None:  # one select each, forward and backward
            K_nn = tf.where(mask[:, :, None] & mask[:, None, :], K_nn, eye)
            k_nx = tf.where(mask, k_nx, tf.zeros_like(k_nx))
        epsilon = default_jitter() if jitter is None else jitter
        a, c = _gaussian_conditional_weights(K_nn + epsilon * eye, k_nx, k_xx)
        return a, tf.maximum(c, 0.0)

    @staticmethod
    @check_shapes(
        "rows: [B, R]",
        "weights: [B, R]",
        "diagonal: [B, R, L]",
        "off_diagonal: [B, R, K, L]",
        "columns: [B, R, K]",
        "return: [B, L]",
    )
    def factor_quadratic_form(
        rows: Any, weights: Any, diagonal: Any, off_diagonal: Any, columns: Any
    ) -> tf.Tensor:
        """
        :math:`\\mathbf w^\\top S_{\\mathbf r\\mathbf r}\\mathbf w = \\|\\sum_r w_r
        \\tilde L_{r,:}\\|^2` for each batch row and latent GP, where :math:`S = \\tilde
        L\\tilde L^\\top` and the rows :math:`\\tilde L_{r,:}` of the sparse factor of a
        nearest-neighbour q are given by their ``diagonal`` entries (column r) and
        ``off_diagonal`` entries (columns ``columns``, -1 for padding). The :math:`R(K+1)`
        scaled entries of a batch row are summed by column (one ``tf.unique`` over the batch),
        so the cost is :math:`O(RK)` per row, with no M-sized array.
        """
        mask = columns >= 0
        rows = tf.cast(rows, tf.int64)
        columns = tf.where(mask, tf.cast(columns, tf.int64), rows[..., None])
        columns = tf.concat([rows[..., None], columns], axis=-1)  # [B, R, K + 1]
        off_diagonal = off_diagonal * tf.cast(mask, off_diagonal.dtype)[..., None]
        values = tf.concat([diagonal[:, :, None, :], off_diagonal], axis=2)  # [B, R, K + 1, L]
        values = values * weights[:, :, None, None]
        span = tf.maximum(tf.reduce_max(columns), 0) + 1  # (an empty batch has no maximum)
        num_rows = tf.shape(columns, out_type=tf.int64)[0]
        keys = tf.range(num_rows)[:, None, None] * span + columns  # (batch row, column) pairs
        unique, segments = tf.unique(tf.reshape(keys, [-1]))
        flat = tf.reshape(values, [-1, tf.shape(values)[-1]])
        sums = tf.math.unsorted_segment_sum(flat, segments, tf.shape(unique)[0])
        return tf.math.unsorted_segment_sum(tf.square(sums), unique // span, num_rows)

    @property
    def structured(self) -> bool:
        """Whether q(u) has the sparse nearest-neighbour factor (else it is mean-field)."""
        return self.q_sqrt_offdiag is not None

    @check_shapes(
        "return[0]: [M, D]",
        "return[1]: [M, L]",
        "return[2]: [M, L]",
    )
    def _live_values(self) -> tuple[tf.Tensor, ...]:
        """
        :math:`Z`, :math:`\\mathbf m - \\mu(Z)` and :math:`\\mathbf s` from the parameters; for a
        nearest-neighbour q, the factor's diagonal, its masked off-diagonal entries and their
        columns instead of :math:`\\mathbf s`.
        """
        Z = tf.convert_to_tensor(self.inducing_variable.Z)
        residual = tf.convert_to_tensor(self.q_mu)
        if self.mean_function is not None:
            residual = residual - self.mean_function(Z)
        if not self.structured:
            return Z, residual, tf.square(tf.convert_to_tensor(self.q_sqrt))
        table = tf.convert_to_tensor(self.prior_neighbors)
        off_diagonal = tf.convert_to_tensor(self.q_sqrt_offdiag)
        off_diagonal = off_diagonal * tf.cast(table >= 0, off_diagonal.dtype)[..., None]
        return Z, residual, tf.convert_to_tensor(self.q_sqrt), off_diagonal, table

    @check_shapes(
        "return[0]: [M, D]",
        "return[1]: [M, L]",
        "return[2]: [M, L]",
    )
    def _precompute(self) -> tuple[PrecomputedValue, ...]:
        axes = [(False, False), (False, False), (False, False), (False, False, False), (False,) * 2]
        return tuple(PrecomputedValue(v, a) for v, a in zip(self._live_values(), axes))

    @inherit_check_shapes
    def _conditional_with_precompute(
        self,
        cache: tuple[tf.Tensor, ...],
        Xnew: Any,
        full_cov: bool = False,
        full_output_cov: bool = False,
    ) -> tuple[tf.Tensor, tf.Tensor]:
        Z, residual, *covariance = cache
        return self._marginals(Z, residual, covariance, Xnew, full_cov, full_output_cov)

    def _spread(self, covariance: list, neighbors: tf.Tensor, a: tf.Tensor) -> tf.Tensor:
        """:math:`\\mathbf a^\\top S_{nn}\\mathbf a` [B, L] for neighbour rows [B, K]."""
        if len(covariance) == 1:  # mean-field: the variances s
            return tf.einsum("bk,bkl->bl", tf.square(a), tf.gather(covariance[0], neighbors))
        diagonal, off_diagonal, table = covariance
        return self.factor_quadratic_form(
            neighbors,
            a,
            tf.gather(diagonal, neighbors),
            tf.gather(off_diagonal, neighbors),
            tf.gather(table, neighbors),
        )

    def _marginals(
        self,
        Z: tf.Tensor,
        residual: tf.Tensor,
        covariance: list,
        Xnew: Any,
        full_cov: bool,
        full_output_cov: bool,
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """
        Eq. 25 at each row of ``Xnew``, without the mean function: [N, L] each, in chunks; or
        the joint of :meth:`_joint` for ``full_cov``. The latent GPs are independent
        (``full_output_cov`` gives diagonal output covariances). ``covariance`` is ``[s]``
        (mean-field) or ``[diagonal, off-diagonal entries, columns]`` of the factor.
        """
        Xnew = tf.cast(Xnew, Z.dtype)
        if Xnew.shape.rank != 2 or Xnew.shape[-1] not in (None, Z.shape[-1]):
            raise ValueError(
                f"`Xnew` must be [N, {Z.shape[-1]}] (the inducing inputs' dimension), got "
                f"shape {tuple(Xnew.shape)}."
            )
        if full_cov:
            mean, joint = self._joint(Z, residual, covariance, Xnew)
        else:
            mean, joint = self._chunked_marginals(Z, residual, covariance, Xnew)
        return mean, expand_independent_outputs(joint, full_cov, full_output_cov)

    def _joint(
        self, Z: tf.Tensor, residual: tf.Tensor, covariance: list, Xnew: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """
        Mean [N, L] and joint covariance [L, N, N] of the test values: each is conditioned on
        its own neighbours' inducing variables, and the conditionals are independent given
        them (eq. 25 at several inputs), so :math:`\\mathrm{Cov} = A S A^\\top +
        \\mathrm{diag}(\\mathbf c)` with the sparse rows :math:`\\mathbf a_*` of :math:`A`
        [N, M] and :math:`S = \\mathrm{diag}(\\mathbf s)`; for a nearest-neighbour q,
        :math:`(A\\tilde L)(A\\tilde L)^\\top + \\mathrm{diag}(\\mathbf c)`, with :math:`A\\tilde
        L` [N, M] scattered from the rows of the factor. :math:`O(N^2 M)`.
        """
        neighbors = graph_nearest_neighbors(Z, Xnew, self._num_neighbors)
        a, c = self.conditional_on_neighbors(self.kernel, Z, Xnew, neighbors, jitter=self._jitter)
        rows = tf.broadcast_to(tf.range(tf.shape(neighbors)[0])[:, None], tf.shape(neighbors))
        shape = tf.stack([tf.shape(Xnew)[0], tf.shape(Z)[0]])
        A = tf.scatter_nd(tf.stack([rows, tf.cast(neighbors, rows.dtype)], axis=-1), a, shape)
        if len(covariance) == 1:
            joint = tf.einsum("nm,ml,km->lnk", A, covariance[0], A)
        else:  # A L̃ = Σ_r a_r L̃_{r,:} per test value (scatter_nd sums repeated columns)
            diagonal, off_diagonal, table = covariance
            columns = tf.gather(table, neighbors)  # [N, K, K']
            columns = tf.where(columns >= 0, columns, tf.cast(neighbors, columns.dtype)[..., None])
            columns = tf.concat([tf.cast(neighbors, columns.dtype)[..., None], columns], axis=-1)
            values = tf.concat(
                [tf.gather(diagonal, neighbors)[:, :, None, :], tf.gather(off_diagonal, neighbors)],
                axis=2,
            )  # [N, K, K' + 1, L] (padding entries are zero)
            values = values * a[:, :, None, None]
            rows = tf.broadcast_to(rows[:, :, None], tf.shape(columns))
            indices = tf.stack([rows, tf.cast(columns, rows.dtype)], axis=-1)
            shape = tf.concat([shape, tf.shape(values)[-1:]], axis=0)
            AL = tf.scatter_nd(indices, values, shape)  # [N, M, L]
            joint = tf.einsum("nml,kml->lnk", AL, AL)
        return tf.linalg.matmul(A, residual), joint + tf.linalg.diag(c)

    def _chunked_marginals(
        self, Z: tf.Tensor, residual: tf.Tensor, covariance: list, Xnew: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """Eq. 25 at each row of ``Xnew``, ``prediction_batch_size`` rows at a time."""

        def marginals(X: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            neighbors = graph_nearest_neighbors(Z, X, self._num_neighbors)
            a, c = self.conditional_on_neighbors(self.kernel, Z, X, neighbors, jitter=self._jitter)
            mean = tf.einsum("bk,bkl->bl", a, tf.gather(residual, neighbors))
            return mean, c[:, None] + self._spread(covariance, neighbors, a)

        shape = tf.stack([tf.shape(Xnew)[0], tf.shape(residual)[-1]])
        zeros = tf.zeros(shape, residual.dtype)
        mean, variance = over_row_blocks(Xnew, self._prediction_batch_size, marginals, [zeros] * 2)
        return mean, variance
