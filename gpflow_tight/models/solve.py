"""
Orthogonally decoupled sparse GPs (SOLVE-GP; Shi, Titsias & Mnih 2020; Fernlund 2022, ch. 5):
the collapsed :class:`SOLVEGPR` and the uncollapsed :class:`SOLVEGP`, with their tighter
presets (Bui, Ashman & Turner 2025, §4 and eq. 14), and the orthogonally decoupled models whose
orthogonal set carries a mean only (ODVGP; Salimbeni et al. 2018; Fernlund 2022, eqs. 5.7-5.9),
:class:`ODGPR` and :class:`ODVGP`, thin variants of the two.

The variational family is :math:`q(\\mathbf u)\\,q(\\mathbf v_\\perp)` with
:math:`\\mathbf v_\\perp` the orthogonal inducing variables of
:class:`~gpflow_tight.OrthogonalInducingVariables`. Both models are thin: SOLVEGPR is a
:class:`~gpflow_tight.models.RelaxedSGPR` whose projection is onto both sets, SOLVEGP a
:class:`~gpflow_tight.models.RelaxedSVGP` whose marginals come from both sets.
"""

from typing import Any

import numpy as np
import tensorflow as tf
from check_shapes import check_shapes, inherit_check_shapes
from gpflow.base import InputData, Parameter, RegressionData
from gpflow.config import default_float
from gpflow.kernels import Kernel, LinearCoregionalization, MultioutputKernel
from gpflow.kullback_leiblers import gauss_kl
from gpflow.posteriors import PrecomputeCacheType
from gpflow.utilities import positive, to_default_float, triangular

from ..orthogonal import (
    INDUCING_SET_ADVICE,
    INDUCING_SETS,
    LatentBlock,
    OrthogonalFactors,
    check_orthogonal_sets,
    checked_sets,
    latent_blocks,
    orthogonal_factors,
    orthogonal_sets,
)
from ..posteriors import (
    CollapsedOrthogonalMeanPosterior,
    CollapsedOrthogonalPosterior,
    OrthogonalPosterior,
    optimal_whitened_q,
    union_projection,
    whitened_block_q,
)
from ..projection import Projection
from ..validation import check_shape, explain_cholesky_failure
from .tight_sgpr import RelaxedSGPR
from .tight_svgp import RelaxedSVGP

__all__ = ["SOLVEGPR", "TightSOLVEGPR", "SOLVEGP", "TightSOLVEGP", "ODGPR", "ODVGP"]


def _half_logdet(cholesky_factor: tf.Tensor) -> tf.Tensor:
    return tf.reduce_sum(tf.math.log(tf.linalg.diag_part(cholesky_factor)))


def orthogonal_variational_parameters(
    blocks: list[LatentBlock],
    num_latent_gps: int,
    q_mu: Any = None,
    q_sqrt: Any = None,
    *,
    q_diag: bool,
    whiten: bool,
) -> tuple[Parameter, Parameter]:
    """
    ``q_mu_orthogonal`` [M_v, L] and ``q_sqrt_orthogonal`` ([L, M_v, M_v], or [M_v, L] for
    ``q_diag``) of :math:`q(\\mathbf v_\\perp)`, checked, defaulting to the prior: zero mean
    and an identity factor if ``whiten``, else the Cholesky factor of :math:`C_{vv}` per latent
    GP (:math:`\\mathcal N(\\mathbf 0, I)` would start thousands of nats of KL away from the
    prior where :math:`C_{vv}` is small).
    """
    q_mu = orthogonal_mean_parameter(blocks, num_latent_gps, q_mu)
    num_orthogonal, shape_mu = q_mu.shape[0], tuple(q_mu.shape)
    # TFP's FillTriangular cannot hold a 0 x 0 matrix: an empty set keeps the diagonal form
    q_diag = q_diag or num_orthogonal == 0
    if q_diag:
        shape_sqrt: tuple[int, ...] = shape_mu
        default_sqrt = np.ones(shape_mu)
    else:
        shape_sqrt = (num_latent_gps, num_orthogonal, num_orthogonal)
        default_sqrt = np.tile(np.eye(num_orthogonal), (num_latent_gps, 1, 1))
    if q_sqrt is None:
        q_sqrt = default_sqrt
        if not whiten and num_orthogonal > 0 and tf.executing_eagerly():
            q_sqrt = _prior_sqrt_orthogonal(blocks, num_latent_gps, q_diag)
    check_shape(q_sqrt, shape_sqrt, "q_sqrt_orthogonal", "[M_v, L]" if q_diag else "[L, M_v, M_v]")
    return (
        q_mu,
        Parameter(q_sqrt, transform=positive() if q_diag else triangular(), dtype=default_float()),
    )


def orthogonal_mean_parameter(
    blocks: list[LatentBlock], num_latent_gps: int, q_mu: Any = None
) -> Parameter:
    """``q_mu_orthogonal`` [M_v, L], the mean of :math:`q(\\mathbf v_\\perp)`, checked."""
    shape_mu = (int(blocks[0].inducing_variable.num_inducing), num_latent_gps)
    if q_mu is None:
        q_mu = np.zeros(shape_mu)
    check_shape(q_mu, shape_mu, "q_mu_orthogonal", "[M_v, L]")
    return Parameter(q_mu, dtype=default_float())


def _prior_sqrt_orthogonal(
    blocks: list[LatentBlock], num_latent_gps: int, q_diag: bool
) -> np.ndarray:
    """The Cholesky factor of :math:`C_{vv}` per latent GP (the root of its diagonal for q_diag)."""
    sqrt = []
    with explain_cholesky_failure():
        for block in blocks:
            L_v = orthogonal_factors(block.inducing_variable, block.kernel).L_v.numpy()
            count = len(range(num_latent_gps)[block.latents])
            sqrt += [np.sqrt(np.sum(L_v**2, axis=-1))] * count if q_diag else [L_v] * count
    return np.stack(sqrt, axis=-1 if q_diag else 0)


def decoupled_prior_kl(blocks: list[LatentBlock], q: tuple[Any, ...], whiten: bool) -> tf.Tensor:
    """
    :math:`\\mathrm{KL}[q(\\mathbf u)\\|p(\\mathbf u)] + \\mathrm{KL}[q(\\mathbf v_\\perp)\\|
    p(\\mathbf v_\\perp)]` (Fernlund's eq. 5.24), both in whitened coordinates where the priors
    are standard normal; ``q = (q_mu, q_sqrt, q_mu_orthogonal, q_sqrt_orthogonal)``. With
    ``q_sqrt_orthogonal=None`` (ODVGP, :math:`S_v = C_{vv}`) the second KL is
    :math:`\\tfrac12 \\mathbf m_v^\\top C_{vv}^{-1}\\mathbf m_v = \\tfrac12\\|\\tilde{\\mathbf
    m}_v\\|^2` (eq. 5.24 at :math:`S_v = C_{vv}`).
    """
    kl = tf.constant(0.0, dtype=default_float())
    with explain_cholesky_failure():
        for block in blocks:
            factors = None if whiten else orthogonal_factors(block.inducing_variable, block.kernel)
            m_u, R_u, m_v, R_v = whitened_block_q(block, factors, q, whiten)
            kl += gauss_kl(m_u, R_u)
            kl += 0.5 * tf.reduce_sum(tf.square(m_v)) if R_v is None else gauss_kl(m_v, R_v)
    return kl


class SOLVEGPR(RelaxedSGPR):
    """
    Collapsed SOLVE-GP regression: the bound of the orthogonally decoupled family with the
    optimal :math:`q(\\mathbf u)\\,q(\\mathbf v_\\perp)` for a Gaussian likelihood.

    :param bound: the training objective.

        * ``"solve"`` (default): the exact collapsed SOLVE-GP bound,
          :math:`\\mathcal L_{\\rm SOLVE} = \\mathcal L_{\\rm thesis} - \\Delta` with
          :math:`\\Delta = \\tfrac12\\log|B_v| - \\tfrac12\\log|Q| \\ge 0`, the value of the
          uncollapsed SOLVE-GP ELBO at its optimum (``docs/solve.md``). Its log-determinant
          decouples into :math:`-\\tfrac12(\\log|B_u| + \\log|B_v|)`.
        * ``"thesis"``: Fernlund's (2022) eq. 5.33. This is *exactly* ``gpflow.models.SGPR`` with
          the inducing set :math:`Z_u \\cup Z_v`: the orthogonal split only changes the
          predictive variance, which then does not come from the :math:`q` that attains the
          reported bound.

    :param relaxation: as :class:`~gpflow_tight.models.RelaxedSGPR` (default ``"none"``), with
        :math:`d_n` the residual given both sets.

    Both bounds give the predictive mean of SGPR on the union and the mean-field predictive
    variance of Fernlund's eq. 5.57, computed without :math:`N\\times N` matrices
    (:class:`~gpflow_tight.posteriors.CollapsedOrthogonalPosterior`). :meth:`compute_qu` and
    :meth:`compute_qv` return the optimal :math:`q(\\mathbf u)` and :math:`q(\\mathbf v_\\perp)`
    (eq. 5.26), which :class:`SOLVEGP` accepts. ``upper_bound`` is SGPR's for :math:`Z_u` alone
    (still an upper bound on the evidence).

    The constructor is SGPR's with ``orthogonal_inducing_variable`` (an array [M_v, D] or any
    inducing variables with ``Kuu``/``Kuf`` and a :func:`~gpflow_tight.covariances.Kuv` with
    ``inducing_variable``; an array [0, D] gives SGPR), ``bound`` and ``relaxation``.
    """

    _constructor_only = (*RelaxedSGPR._constructor_only, "bound", *INDUCING_SETS)
    _constructor_only_advice = INDUCING_SET_ADVICE
    # the training objectives: the exact collapsed bound of the model's family first
    _bounds: tuple[str, ...] = ("solve", "thesis")
    _posterior_class: type[CollapsedOrthogonalPosterior] = CollapsedOrthogonalPosterior

    def __init__(
        self,
        data: RegressionData,
        kernel: Kernel,
        inducing_variable: Any,
        orthogonal_inducing_variable: Any = None,
        *,
        bound: str = "solve",
        **kwargs: Any,
    ) -> None:
        if bound not in self._bounds:
            choices = " or ".join(repr(choice) for choice in self._bounds)
            raise ValueError(f"`bound` must be {choices}, got {bound!r}.")
        if isinstance(kernel, MultioutputKernel):
            raise TypeError(
                "SOLVEGPR, like SGPR, takes a single-output kernel (shared by the output "
                f"columns); got the multi-output kernel {type(kernel).__name__}. Use SOLVEGP."
            )
        super().__init__(data, kernel, inducing_variable, **kwargs)
        self.orthogonal_inducing_variable = orthogonal_sets(
            kernel, self.inducing_variable, orthogonal_inducing_variable
        )
        self.bound = bound
        check_orthogonal_sets([LatentBlock(kernel, self.orthogonal_inducing_variable, slice(None))])

    def _sets(self) -> Any:
        """The orthogonal set (which holds the regular one), checked to be the model's own."""
        return checked_sets(self.inducing_variable, self.orthogonal_inducing_variable)

    def projection(
        self, X: InputData | None = None, factors: OrthogonalFactors | None = None
    ) -> Projection:
        """
        The projection onto both sets, :math:`A = [\\mathbf a_u; \\mathbf a_v]` with ``L`` the
        block Cholesky factor of the jittered covariance of :math:`[\\mathbf u; \\mathbf v]`
        (Fernlund 2022, Algorithm 3), so that :math:`\\|\\mathbf a_n\\|^2` is the Nyström variance
        of the union and :math:`d_n` the residual given both sets.
        """
        X, sets = self.data[0] if X is None else X, self._sets()
        if factors is None:
            factors = orthogonal_factors(sets, self.kernel)
        return union_projection(sets, self.kernel, X, factors)

    @check_shapes("return: []")
    def decoupling_gap(self, common: Any) -> tf.Tensor:
        """
        :math:`\\Delta = \\sum_i \\log (L_{B_v})_{ii} - \\sum_i \\log (L_Q)_{ii}`, the KL from the
        SOLVE-GP posterior process to SGPR's on the union (``docs/solve.md``). :math:`L_Q` is the
        orthogonal block of the Cholesky factor of :math:`B`.
        """
        num_regular = self.inducing_variable.num_inducing
        L_Bv = tf.linalg.cholesky(common.B[num_regular:, num_regular:])
        L_Q = common.LB[num_regular:, num_regular:]
        return _half_logdet(L_Bv) - _half_logdet(L_Q)

    @inherit_check_shapes
    def logdet_term(self, common: Any) -> tf.Tensor:
        """
        The relaxed SGPR term on :math:`Z_u \\cup Z_v`, minus :math:`P` times
        :meth:`decoupling_gap` for the exact bound ("solve").
        """
        logdet = super().logdet_term(common)
        if self.bound == "thesis":
            return logdet
        output_dim = to_default_float(tf.shape(self.data[1])[1])
        return logdet - output_dim * self.decoupling_gap(common)

    @check_shapes("return: []")
    def decoupling_kl(self) -> tf.Tensor:
        """:math:`P\\,\\Delta`: how much looser the exact bound is than ``"thesis"``."""
        output_dim = to_default_float(tf.shape(self.data[1])[1])
        with explain_cholesky_failure():
            return output_dim * self.decoupling_gap(self.common_terms())

    def whitened_optimal_q(self, factors: OrthogonalFactors) -> tuple[tf.Tensor, ...]:
        """
        Fernlund's eq. 5.26 in whitened coordinates: :math:`\\tilde{\\mathbf m} = B^{-1} A
        \\mathbf y / \\sigma` split into its two blocks, :math:`\\tilde S_u = B_u^{-1}` and
        :math:`\\tilde S_v = B_v^{-1}`, as ``(m̃_u, R_u, m̃_v, R_v)`` with :math:`\\tilde S = R
        R^\\top`.
        """
        return optimal_whitened_q(
            self._sets(),
            self.kernel,
            self.data,
            self.likelihood,
            self.mean_function,
            factors,
        )

    def _optimal_q(self) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
        """:math:`(\\mathbf m_u, S_u, \\mathbf m_v, S_v)` of eq. 5.26, unwhitened."""
        with explain_cholesky_failure():
            factors = orthogonal_factors(self._sets(), self.kernel)
            m_u, R_u, m_v, R_v = self.whitened_optimal_q(factors)
        LR_u = tf.linalg.matmul(factors.L_u, R_u[0])
        LR_v = factors.L_v if R_v is None else tf.linalg.matmul(factors.L_v, R_v[0])
        return (
            tf.linalg.matmul(factors.L_u, m_u),
            tf.linalg.matmul(LR_u, LR_u, transpose_b=True),
            tf.linalg.matmul(factors.L_v, m_v),
            tf.linalg.matmul(LR_v, LR_v, transpose_b=True),
        )

    @check_shapes(
        "return[0]: [M_u, P]",
        "return[1]: [M_u, M_u]",
    )
    def compute_qu(self) -> tuple[tf.Tensor, tf.Tensor]:
        """
        The optimal :math:`q(\\mathbf u) = \\mathcal N(\\mathbf m_u, S_u)` (eq. 5.26), as
        ``gpflow.models.SGPR.compute_qu``: at :math:`Z_u` the posterior is exactly this.
        """
        m_u, S_u, _, _ = self._optimal_q()
        return m_u, S_u

    @check_shapes(
        "return[0]: [M_v, P]",
        "return[1]: [M_v, M_v]",
    )
    def compute_qv(self) -> tuple[tf.Tensor, tf.Tensor]:
        """
        The optimal :math:`q(\\mathbf v_\\perp) = \\mathcal N(\\mathbf m_v, S_v)` (eq. 5.26).
        :class:`SOLVEGP` with ``whiten=False``, ``compute_qu()`` and these values predicts as
        this model, and its ELBO is the ``"solve"`` bound.
        """
        _, _, m_v, S_v = self._optimal_q()
        return m_v, S_v

    def default_posterior(
        self, precompute_cache: PrecomputeCacheType = PrecomputeCacheType.TENSOR
    ) -> CollapsedOrthogonalPosterior:
        """
        The decoupled posterior with the optimal :math:`q` (Fernlund's eq. 5.55, 5.57; for
        :class:`ODGPR`, eq. 5.55 and 5.56).
        """
        return self._posterior_class(
            self.kernel,
            self.data,
            self._sets(),
            self.likelihood,
            mean_function=self.mean_function,
            precompute_cache=precompute_cache,
        )


class TightSOLVEGPR(SOLVEGPR):
    """
    :class:`SOLVEGPR` with the tighter conditional of Bui, Ashman & Turner (2025): the trace term
    :math:`\\tfrac{1}{2\\sigma^2}\\sum_n d_n` becomes :math:`\\tfrac12\\sum_n\\log(1 +
    d_n/\\sigma^2)`, with :math:`d_n = k_{nn} - [Q_u + C_{fv}C_{vv}^{-1}C_{vf}]_{nn}` the
    residual given both sets (derived in ``docs/solve.md``: it is in neither source). With
    ``bound="thesis"`` this is exactly T-SGPR on :math:`Z_u\\cup Z_v`; the default ``"solve"``
    subtracts the same :math:`\\Delta` as :class:`SOLVEGPR`. Predictions are SOLVEGPR's (the
    optimal :math:`q` does not change), or with ``exact_predictive_variance`` those of eq. 12
    with the residual given both sets.
    """

    _default_relaxation = "optimal"


class SOLVEGP(RelaxedSVGP):
    """
    The uncollapsed SOLVE-GP (Shi, Titsias & Mnih 2020, eq. 9):

    .. math::
        \\mathcal L = \\sum_n \\mathbb E_{q(f_n)} \\log p(y_n \\mid f_n)
            - \\mathrm{KL}[q(\\mathbf u) \\| p(\\mathbf u)]
            - \\mathrm{KL}[q(\\mathbf v_\\perp) \\| p(\\mathbf v_\\perp)],

    with :math:`q(f_n) = \\mathcal N(\\mu_n, s_n + d_n)` from both inducing sets. The
    constructor is SVGP's with ``orthogonal_inducing_variable`` and the variational parameters
    of :math:`\\mathbf v_\\perp`, ``q_mu_orthogonal`` [M_v, L] and ``q_sqrt_orthogonal``
    ([L, M_v, M_v], or [M_v, L] with ``q_diag``), and ``relaxation``/``beta`` as
    :class:`~gpflow_tight.models.RelaxedSVGP` (default ``"none"``). ``whiten`` applies to both
    sets (:math:`\\mathbf u = L_u\\tilde{\\mathbf u}`,
    :math:`\\mathbf v_\\perp = L_v\\tilde{\\mathbf v}`).

    Any likelihood, minibatches (``num_data``), and the multi-output settings of SVGP with
    independent latent GPs: a single-output kernel or ``SharedIndependent`` with
    ``num_latent_gps`` latent GPs, ``SeparateIndependent``, and ``LinearCoregionalization`` (the
    latent GPs mixed by ``W``). Each of the two inducing sets may be shared (an array, inducing
    variables or ``SharedIndependentInducingVariables``) or separate per latent GP
    (``SeparateIndependentInducingVariables``).
    """

    _constructor_only = (*RelaxedSVGP._constructor_only, *INDUCING_SETS)
    _constructor_only_advice = INDUCING_SET_ADVICE
    # False: q(v⊥) has a mean only, S_v = C_vv (ODVGP); q_sqrt_orthogonal is then None
    _orthogonal_covariance = True

    def __init__(
        self,
        kernel: Kernel,
        likelihood: Any,
        inducing_variable: Any,
        orthogonal_inducing_variable: Any = None,
        *,
        q_mu_orthogonal: Any = None,
        q_sqrt_orthogonal: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(kernel, likelihood, inducing_variable, **kwargs)
        self.orthogonal_inducing_variable = orthogonal_sets(
            kernel, self.inducing_variable, orthogonal_inducing_variable
        )
        self.q_sqrt_orthogonal: Parameter | None
        if self._orthogonal_covariance:
            self.q_mu_orthogonal, self.q_sqrt_orthogonal = orthogonal_variational_parameters(
                self.latent_blocks(),
                self.num_latent_gps,
                q_mu_orthogonal,
                q_sqrt_orthogonal,
                q_diag=len(self.q_sqrt.shape) == 2,
                whiten=self.whiten,
            )
        else:
            self.q_mu_orthogonal = orthogonal_mean_parameter(
                self.latent_blocks(), self.num_latent_gps, q_mu_orthogonal
            )
            self.q_sqrt_orthogonal = None
        check_orthogonal_sets(self.latent_blocks())

    def _latent_structure(self) -> tuple[bool, bool]:
        """Independent latent GPs always; mixed when the kernel is a linear coregionalisation."""
        return True, isinstance(self.kernel, LinearCoregionalization)

    def _sets(self) -> Any:
        """The orthogonal set (which holds the regular one), checked to be the model's own."""
        return checked_sets(self.inducing_variable, self.orthogonal_inducing_variable)

    def latent_blocks(self) -> list[LatentBlock]:
        """The kernel and orthogonal inducing set of each group of latent GPs."""
        return latent_blocks(self.kernel, self._sets())

    def whitened_q(
        self, block: LatentBlock, factors: OrthogonalFactors | None
    ) -> tuple[tf.Tensor, ...]:
        """
        The variational parameters of a block's latent GPs in whitened coordinates, as
        ``(m̃_u, R_u, m̃_v, R_v)`` (``factors`` may be ``None`` if ``whiten``).
        """
        return whitened_block_q(
            block,
            factors,
            (self.q_mu, self.q_sqrt, self.q_mu_orthogonal, self.q_sqrt_orthogonal),
            self.whiten,
        )

    @inherit_check_shapes
    def prior_kl(self) -> tf.Tensor:
        """
        :math:`\\mathrm{KL}_u + \\mathrm{KL}_v` (Fernlund's eq. 5.24), both in whitened
        coordinates, where the priors are standard normal.
        """
        q = (self.q_mu, self.q_sqrt, self.q_mu_orthogonal, self.q_sqrt_orthogonal)
        return decoupled_prior_kl(self.latent_blocks(), q, self.whiten)

    @inherit_check_shapes
    def latent_marginals_with_residual(
        self, X: InputData
    ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """Mean, :math:`s_n` and :math:`d_n` of each latent GP, given both sets."""
        with explain_cholesky_failure():
            posterior = self.posterior(PrecomputeCacheType.NOCACHE)
            return posterior.latent_marginals_with_residual(X)

    def posterior(
        self, precompute_cache: PrecomputeCacheType = PrecomputeCacheType.TENSOR
    ) -> OrthogonalPosterior:
        """The SOLVE-GP posterior :math:`f = g + h + l` (:class:`OrthogonalPosterior`)."""
        return OrthogonalPosterior(
            self.kernel,
            self._sets(),
            self.q_mu,
            self.q_sqrt,
            self.q_mu_orthogonal,
            self.q_sqrt_orthogonal,
            whiten=self.whiten,
            mean_function=self.mean_function,
            precompute_cache=precompute_cache,
        )


class TightSOLVEGP(SOLVEGP):
    """
    T-SOLVEGP (Bui, Ashman & Turner 2025, eq. 14): :class:`SOLVEGP` with the tighter
    conditional :math:`q(\\mathbf f \\mid \\mathbf u, \\mathbf v)` of variance :math:`m_n d_n`,
    where :math:`d_n` is the residual given both sets, and the bound's extra term
    :math:`\\tfrac12\\sum_n [1 + \\log m_n - m_n]`. ``relaxation`` and ``beta`` are
    :class:`~gpflow_tight.TightSVGP`'s (default: :math:`m_n = \\beta/(d_n + \\beta)` with one
    :math:`\\beta` per latent GP, the paper's choice). Predictions are SOLVEGP's, as in the paper.
    """

    _default_relaxation = "beta"


class ODGPR(SOLVEGPR):
    """
    ODGPR: collapsed regression with the orthogonally decoupled family of Salimbeni et al.
    (2018), ODVGP's :math:`q(\\mathbf u)\\,q(\\mathbf v_\\perp)` with :math:`S_v \\equiv C_{vv}`
    fixed (Fernlund 2022, eqs. 5.7-5.8 and §5.3-5.4), at its optimal :math:`\\mathbf m_u, S_u,
    \\mathbf m_v` (eq. 5.26, the same as SOLVE-GP's). :class:`SOLVEGPR`'s constructor, with
    ``bound``:

    * ``"od"`` (default): the exact collapsed ODVGP bound, the uncollapsed ODVGP ELBO at that
      optimum,

      .. math::
          \\mathcal L_{\\rm OD} = \\mathcal L_{\\rm thesis}
              - \\tfrac12\\big(\\mathrm{tr}(A_v A_v^\\top) - \\log|Q|\\big)
          \\le \\mathcal L_{\\rm SOLVE},

      with :math:`A_v = \\sigma^{-1} L_v^{-1} C_{vf}` and :math:`Q = B_v - B_{uv}^\\top B_u^{-1}
      B_{uv}` (eq. 5.37, 5.40; ``docs/solve.md``): the KL from :math:`q` with :math:`S_v = C_{vv}`
      to the exact posterior of the whitened inducing variables, in place of SOLVEGPR's
      :math:`\\Delta`.
    * ``"thesis"``: Fernlund's eq. 5.33, which the thesis says ODGPR and SOLVE-GPR share: SGPR on
      :math:`Z_u \\cup Z_v` exactly. The thesis's Fig. 6.1 was trained on it; the predictive
      variance then does not come from the :math:`q` that attains the bound.

    Predictions: the mean of SGPR on the union (eq. 5.55) and eq. 5.56's variance, in which the
    orthogonal set has no term (it moves the mean only), through
    :class:`~gpflow_tight.posteriors.CollapsedOrthogonalMeanPosterior`. :meth:`compute_qv` gives
    :math:`(\\mathbf m_v, C_{vv})`. ``relaxation`` is :class:`~gpflow_tight.models.RelaxedSGPR`'s
    (default ``"none"``), with :math:`d_n` the residual given both sets.
    """

    _bounds = ("od", "thesis")
    _posterior_class = CollapsedOrthogonalMeanPosterior  # eq. 5.55's mean, eq. 5.56's variance

    def __init__(
        self,
        data: RegressionData,
        kernel: Kernel,
        inducing_variable: Any,
        orthogonal_inducing_variable: Any = None,
        *,
        bound: str = "od",
        **kwargs: Any,
    ) -> None:
        super().__init__(
            data, kernel, inducing_variable, orthogonal_inducing_variable, bound=bound, **kwargs
        )

    @inherit_check_shapes
    def decoupling_gap(self, common: Any) -> tf.Tensor:
        """
        :math:`\\tfrac12 \\mathrm{tr}(A_v A_v^\\top) - \\sum_i \\log (L_Q)_{ii}`: the KL from
        ODVGP's :math:`q` (optimal means and :math:`S_u`, :math:`\\tilde S_v = I`) to the
        posterior :math:`\\mathcal N(B^{-1}A\\mathbf y/\\sigma, B^{-1})` of the whitened inducing
        variables (``docs/solve.md``).
        """
        num_regular = self.inducing_variable.num_inducing
        trace = tf.linalg.trace(common.AAT[num_regular:, num_regular:])
        return 0.5 * trace - _half_logdet(common.LB[num_regular:, num_regular:])

    def whitened_optimal_q(self, factors: OrthogonalFactors) -> tuple[tf.Tensor, ...]:
        """
        Eq. 5.26's means and :math:`\\tilde S_u = B_u^{-1}` in whitened coordinates, as
        ``(m̃_u, R_u, m̃_v, None)``: :math:`\\tilde S_v = I` (:math:`S_v = C_{vv}`).
        """
        m_u, R_u, m_v, _ = super().whitened_optimal_q(factors)
        return m_u, R_u, m_v, None


class ODVGP(SOLVEGP):
    """
    The orthogonally decoupled variational GP (ODVGP; Salimbeni, Cheng, Boots & Deisenroth 2018;
    Fernlund 2022, eqs. 5.7-5.9): :class:`SOLVEGP` with the covariance of
    :math:`q(\\mathbf v_\\perp)` fixed to the prior's, :math:`S_v \\equiv C_{vv}`, so that the
    orthogonal set moves the predictive mean only,

    .. math::
        \\mathcal L = \\sum_n \\mathbb E_{q(f_n)} \\log p(y_n \\mid f_n)
            - \\mathrm{KL}[q(\\mathbf u) \\| p(\\mathbf u)]
            - \\tfrac12 \\mathbf m_v^\\top C_{vv}^{-1} \\mathbf m_v,

    with :math:`q(f_n) = \\mathcal N(\\mu_n, s_n + d_n)`: the mean from both sets and the
    variance of eq. 5.9 (SVGP's on :math:`Z_u`, eq. 5.56 in the collapsed case), :math:`k_{nn} -
    \\mathbf k_{un}^\\top K_{uu}^{-1}(K_{uu} - S_u)K_{uu}^{-1}\\mathbf k_{un}`.

    The constructor is :class:`SOLVEGP`'s without ``q_sqrt_orthogonal`` (refused with a
    ``TypeError``): ``q_mu_orthogonal`` [M_v, L] is :math:`\\mathbf m_v`, or
    :math:`L_v^{-1}\\mathbf m_v` with ``whiten`` (the default). Any likelihood, minibatches, the
    multi-output settings, ``relaxation``/``beta`` (with :math:`d_n` the residual given both
    sets) and ``q_diag`` (for :math:`q(\\mathbf u)`) as SOLVEGP. ``q_sqrt_orthogonal`` is
    ``None``; :meth:`posterior` is :class:`~gpflow_tight.posteriors.OrthogonalPosterior` with it.
    """

    _orthogonal_covariance = False

    def __init__(
        self,
        kernel: Kernel,
        likelihood: Any,
        inducing_variable: Any,
        orthogonal_inducing_variable: Any = None,
        *,
        q_mu_orthogonal: Any = None,
        **kwargs: Any,
    ) -> None:
        if kwargs.get("q_sqrt_orthogonal") is not None:
            raise TypeError(
                "ODVGP takes no `q_sqrt_orthogonal`: its orthogonal inducing variables carry a "
                "mean only, with the covariance fixed to C_vv (Fernlund 2022, eq. 5.8). Use "
                "SOLVEGP to learn that covariance."
            )
        kwargs.pop("q_sqrt_orthogonal", None)
        super().__init__(
            kernel,
            likelihood,
            inducing_variable,
            orthogonal_inducing_variable,
            q_mu_orthogonal=q_mu_orthogonal,
            **kwargs,
        )
