"""
Orthogonally decoupled sparse GPs (SOLVE-GP): the collapsed SOLVEGPR and the uncollapsed SOLVEGP,
with their tighter variants (Bui, Ashman & Turner 2025, §4 and eq. 14).

The variational family is :math:`q(\\mathbf u)\\,q(\\mathbf v_\\perp)` with
:math:`\\mathbf v_\\perp` the orthogonal inducing variables of
:class:`~gpflow_tight.orthogonal.OrthogonalInducingVariables` (Shi, Titsias & Mnih 2020; Fernlund
2022, ch. 5). References to equations are to ``spec/solve.md``.
"""

from collections.abc import Callable
from typing import Any, Literal, NamedTuple

import numpy as np
import tensorflow as tf
from check_shapes import check_shapes, inherit_check_shapes
from gpflow.base import InputData, MeanAndVariance, Parameter, RegressionData
from gpflow.conditionals.util import expand_independent_outputs, mix_latent_gp
from gpflow.config import default_float
from gpflow.inducing_variables import (
    SeparateIndependentInducingVariables,
    SharedIndependentInducingVariables,
)
from gpflow.kernels import (
    IndependentLatent,
    Kernel,
    LinearCoregionalization,
    MultioutputKernel,
    SeparateIndependent,
    SharedIndependent,
)
from gpflow.kullback_leiblers import gauss_kl
from gpflow.models import SGPR, SVGP
from gpflow.models.util import inducingpoint_wrapper
from gpflow.posteriors import AbstractPosterior, PrecomputeCacheType, PrecomputedValue
from gpflow.utilities import positive, to_default_float, triangular

from ..orthogonal import (
    OrthogonalFactors,
    OrthogonalInducingVariables,
    decoupled_marginals,
    orthogonal_factors,
    orthogonal_projections,
    whiten_variational_parameters,
)
from ..validation import (
    check_cholesky_factor,
    check_regression_data,
    explain_cholesky_failure,
)
from .base import ExplainsCholeskyFailures
from .tight_sgpr import TightSGPR
from .tight_svgp import TightSVGP

__all__ = [
    "SOLVEGPR",
    "TightSOLVEGPR",
    "SOLVEGP",
    "TightSOLVEGP",
    "OrthogonalPosterior",
    "LatentBlock",
]

CollapsedBound = Literal["solve", "thesis"]

# whitened q(u) and q(v⊥): (m̃_u [M_u, L], R_u [L or 1, M_u, M_u], m̃_v, R_v), S̃ = R Rᵀ
WhitenedQ = tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]


def _half_logdet(cholesky_factor: tf.Tensor) -> tf.Tensor:
    return tf.reduce_sum(tf.math.log(tf.linalg.diag_part(cholesky_factor)))


class SOLVEGPR(ExplainsCholeskyFailures, SGPR):
    """
    Collapsed SOLVE-GP regression: the bound of the orthogonally decoupled family with the
    optimal :math:`q(\\mathbf u)\\,q(\\mathbf v_\\perp)` for a Gaussian likelihood.

    :param bound: the training objective.

        * ``"solve"`` (default): the exact collapsed SOLVE-GP bound (spec §2.3),
          :math:`\\mathcal L_{\\rm SOLVE} = \\mathcal L_{\\rm thesis} - \\Delta` with
          :math:`\\Delta = \\tfrac12\\log|B_v| - \\tfrac12\\log|Q| \\ge 0`, the value of the
          uncollapsed SOLVE-GP ELBO at its optimum. Its log-determinant decouples into
          :math:`-\\tfrac12(\\log|B_u| + \\log|B_v|)`.
        * ``"thesis"``: Fernlund's (2022) eq. 5.33. This is *exactly* ``gpflow.models.SGPR`` with
          the inducing set :math:`Z_u \\cup Z_v` (spec §0.1): the orthogonal split only changes
          the predictive variance, which then does not come from the :math:`q` that attains
          the reported bound.

    Both give the same predictive mean, that of SGPR on the union (spec §0.3), and the mean-field
    predictive variance of Fernlund's eq. 5.57 (spec §2.6), computed without :math:`N\\times N`
    matrices. :meth:`compute_qu` returns the optimal :math:`q` (eq. 5.26), which
    :class:`SOLVEGP` accepts. ``upper_bound`` is SGPR's for :math:`Z_u` alone (still an upper
    bound on the evidence).

    The constructor is SGPR's with ``orthogonal_inducing_variable`` (an array [M_v, D] or any
    inducing variables with ``Kuu``/``Kuf`` and a :func:`~gpflow_tight.covariances.Kuv` with
    ``inducing_variable``) and ``bound``.
    """

    def __init__(
        self,
        data: RegressionData,
        kernel: Kernel,
        inducing_variable: Any,
        orthogonal_inducing_variable: Any = None,
        *,
        bound: CollapsedBound = "solve",
        **kwargs: Any,
    ) -> None:
        check_regression_data(data)
        if bound not in ("solve", "thesis"):
            raise ValueError(f"`bound` must be 'solve' or 'thesis', got {bound!r}.")
        super().__init__(data, kernel, inducing_variable, **kwargs)
        if isinstance(kernel, MultioutputKernel):
            raise TypeError(
                "SOLVEGPR, like SGPR, takes a single-output kernel (shared by the output "
                f"columns); got the multi-output kernel {type(kernel).__name__}. Use SOLVEGP."
            )
        self.orthogonal_inducing_variable = _orthogonal_sets(
            kernel, self.inducing_variable, orthogonal_inducing_variable
        )
        self.bound = bound
        if tf.executing_eagerly():
            with explain_cholesky_failure():
                orthogonal_factors(self.orthogonal_inducing_variable, self.kernel)

    def _common_calculation(self, factors: OrthogonalFactors | None = None) -> SGPR.CommonTensors:
        """
        SGPR's tensors for the union :math:`[\\mathbf u; \\mathbf v]`, from the orthogonal block
        factorisation (spec §2.6): ``A`` is :math:`[A_u; A_v]` and ``L`` the block Cholesky
        factor of the jittered :math:`K_{[uv][uv]}`.
        """
        X, _ = self.data
        if factors is None:
            factors = orthogonal_factors(self.orthogonal_inducing_variable, self.kernel)
        orthogonal = self.orthogonal_inducing_variable
        a_u, a_v = orthogonal_projections(orthogonal, self.kernel, factors, X)
        sigma_sq = tf.squeeze(self.likelihood.variance_at(X), axis=-1)
        sigma = tf.sqrt(sigma_sq)
        A = tf.concat([a_u, a_v], axis=0) / sigma
        AAT = tf.linalg.matmul(A, A, transpose_b=True)
        B = AAT + tf.eye(tf.shape(A)[0], dtype=A.dtype)
        LB = check_cholesky_factor(tf.linalg.cholesky(B), "B = I + A Aᵀ (the SGPR inner matrix)")
        num_regular, num_orthogonal = tf.shape(a_u)[0], tf.shape(a_v)[0]
        L = tf.concat(
            [
                tf.concat([factors.L_u, tf.zeros([num_regular, num_orthogonal], A.dtype)], 1),
                tf.concat([tf.linalg.adjoint(factors.D_v), factors.L_v], 1),
            ],
            axis=0,
        )
        return self.CommonTensors(sigma_sq, sigma, A, B, LB, AAT, L)

    @check_shapes("return: []")
    def decoupling_gap(self, common: SGPR.CommonTensors) -> tf.Tensor:
        """
        :math:`\\Delta = \\sum_i \\log (L_{B_v})_{ii} - \\sum_i \\log (L_Q)_{ii}` (spec §2.3), the
        KL from the SOLVE-GP posterior process to SGPR's on the union. :math:`L_Q` is the
        orthogonal block of the Cholesky factor of :math:`B`.
        """
        num_regular = self.inducing_variable.num_inducing
        L_Bv = tf.linalg.cholesky(common.B[num_regular:, num_regular:])
        L_Q = common.LB[num_regular:, num_regular:]
        return _half_logdet(L_Bv) - _half_logdet(L_Q)

    @inherit_check_shapes
    def logdet_term(self, common: SGPR.CommonTensors) -> tf.Tensor:
        """SGPR's term on :math:`Z_u \\cup Z_v`, minus :math:`P\\Delta` for ``bound="solve"``."""
        # explicit super() here and below: autograph once failed to bind the zero-argument form
        logdet = super(SOLVEGPR, self).logdet_term(common)  # noqa: UP008
        if self.bound == "thesis":
            return logdet
        output_dim = to_default_float(tf.shape(self.data[1])[1])
        return logdet - output_dim * self.decoupling_gap(common)

    @inherit_check_shapes
    def elbo(self) -> tf.Tensor:
        """The collapsed SOLVE-GP bound (``bound="solve"``) or the thesis bound."""
        with explain_cholesky_failure():
            return super(SOLVEGPR, self).elbo()  # noqa: UP008

    @check_shapes("return: []")
    def decoupling_kl(self) -> tf.Tensor:
        """:math:`P\\,\\Delta`: how much looser the ``"solve"`` bound is than ``"thesis"``."""
        output_dim = to_default_float(tf.shape(self.data[1])[1])
        with explain_cholesky_failure():
            return output_dim * self.decoupling_gap(self._common_calculation())

    def whitened_optimal_q(self, factors: OrthogonalFactors) -> WhitenedQ:
        """
        Fernlund's eq. 5.26 in whitened coordinates (spec §2.1): :math:`\\tilde{\\mathbf m} =
        B^{-1} A \\mathbf y / \\sigma` split into its two blocks, :math:`\\tilde S_u = B_u^{-1}`
        and :math:`\\tilde S_v = B_v^{-1}`, with square roots :math:`L_{B_u}^{-\\top}` and
        :math:`L_{B_v}^{-\\top}`.
        """
        common = self._common_calculation(factors)
        X, Y = self.data
        err = (Y - self.mean_function(X)) / common.sigma[:, None]
        c = tf.linalg.triangular_solve(common.LB, tf.linalg.matmul(common.A, err), lower=True)
        q_mu = tf.linalg.triangular_solve(tf.linalg.adjoint(common.LB), c, lower=False)
        num_regular = self.inducing_variable.num_inducing

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

    @check_shapes(
        "return[0]: [M_u, P]",
        "return[1]: [M_u, M_u]",
        "return[2]: [M_v, P]",
        "return[3]: [M_v, M_v]",
    )
    def compute_qu(self) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:  # type: ignore[override]
        """
        The optimal :math:`q(\\mathbf u) = \\mathcal N(\\mathbf m_u, S_u)` and
        :math:`q(\\mathbf v_\\perp) = \\mathcal N(\\mathbf m_v, S_v)` (eq. 5.26; spec §2.6,
        export): ``(m_u, S_u, m_v, S_v)``. :class:`SOLVEGP` with ``whiten=False`` and these
        values predicts as this model, and its ELBO is the ``"solve"`` bound.
        """
        with explain_cholesky_failure():
            factors = orthogonal_factors(self.orthogonal_inducing_variable, self.kernel)
            m_u, R_u, m_v, R_v = self.whitened_optimal_q(factors)
        LR_u = tf.linalg.matmul(factors.L_u, R_u[0])
        LR_v = tf.linalg.matmul(factors.L_v, R_v[0])
        return (
            tf.linalg.matmul(factors.L_u, m_u),
            tf.linalg.matmul(LR_u, LR_u, transpose_b=True),
            tf.linalg.matmul(factors.L_v, m_v),
            tf.linalg.matmul(LR_v, LR_v, transpose_b=True),
        )

    def posterior(
        self, precompute_cache: PrecomputeCacheType = PrecomputeCacheType.TENSOR
    ) -> "OrthogonalPosterior":
        """The decoupled posterior with the optimal :math:`q` (see :class:`OrthogonalPosterior`)."""
        block = LatentBlock(self.kernel, self.orthogonal_inducing_variable, slice(None))
        return OrthogonalPosterior(
            [block],
            lambda _, factors: self.whitened_optimal_q(factors),
            self.mean_function,
            precompute_cache=precompute_cache,
        )

    @inherit_check_shapes
    def predict_f(
        self, Xnew: InputData, full_cov: bool = False, full_output_cov: bool = False
    ) -> MeanAndVariance:
        """Fernlund's eq. 5.55 (mean, = SGPR-on-the-union's) and 5.57 (variance)."""
        with explain_cholesky_failure():
            return self.posterior(PrecomputeCacheType.NOCACHE).fused_predict_f(
                Xnew, full_cov=full_cov, full_output_cov=full_output_cov
            )


class TightSOLVEGPR(SOLVEGPR, TightSGPR):
    """
    :class:`SOLVEGPR` with the tighter conditional of Bui, Ashman & Turner (2025): the trace term
    :math:`\\tfrac{1}{2\\sigma^2}\\sum_n d_n` becomes :math:`\\tfrac12\\sum_n\\log(1 +
    d_n/\\sigma^2)`, with :math:`d_n = k_{nn} - [Q_u + C_{fv}C_{vv}^{-1}C_{vf}]_{nn}` the
    residual given both sets (spec §3.3, derived there: it is in neither source). With
    ``bound="thesis"`` this is exactly T-SGPR on :math:`Z_u\\cup Z_v`; the default ``"solve"``
    subtracts the same :math:`\\Delta` as :class:`SOLVEGPR`. Predictions are SOLVEGPR's (the
    optimal :math:`q` does not change; Bui et al. drop the expensive variance terms).
    """


class LatentBlock(NamedTuple):
    """
    Latent GPs that share a kernel and an orthogonal inducing set: ``latents`` selects their
    columns of ``q_mu`` (all of them when one block serves every latent GP).
    """

    kernel: Kernel
    inducing_variable: OrthogonalInducingVariables
    latents: slice


def _as_list(inducing_variable: Any) -> list[Any]:
    if isinstance(inducing_variable, SeparateIndependentInducingVariables):
        return list(inducing_variable.inducing_variable_list)
    if isinstance(inducing_variable, SharedIndependentInducingVariables):
        return [inducing_variable.inducing_variable]
    return [inducingpoint_wrapper(inducing_variable)]


def _latent_kernels(kernel: Kernel) -> list[Kernel]:
    if isinstance(kernel, SeparateIndependent | IndependentLatent):
        return list(kernel.kernels)
    if isinstance(kernel, SharedIndependent):
        return [kernel.kernel]
    if isinstance(kernel, MultioutputKernel):
        raise TypeError(
            f"SOLVEGP supports single-output kernels, SharedIndependent, SeparateIndependent and "
            f"LinearCoregionalization; got {type(kernel).__name__}."
        )
    return [kernel]


def _orthogonal_sets(kernel: Kernel, inducing_variable: Any, orthogonal: Any) -> Any:
    """
    One :class:`OrthogonalInducingVariables` when every latent GP shares both sets, else GPflow's
    ``SeparateIndependentInducingVariables`` of one per latent GP (they share the regular sets'
    objects, so training moves both).
    """
    if orthogonal is None:
        raise ValueError(
            "Pass `orthogonal_inducing_variable` (an array [M_v, D] or inducing variables; an "
            "array of shape [0, D] gives the model without orthogonal points)."
        )
    regular, orthogonal = _as_list(inducing_variable), _as_list(orthogonal)
    size = max(len(regular), len(orthogonal), len(_latent_kernels(kernel)))
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


class SOLVEGP(ExplainsCholeskyFailures, SVGP):
    """
    The uncollapsed SOLVE-GP (Shi, Titsias & Mnih 2020; spec §1.6):

    .. math::
        \\mathcal L = \\sum_n \\mathbb E_{q(f_n)} \\log p(y_n \\mid f_n)
            - \\mathrm{KL}[q(\\mathbf u) \\| p(\\mathbf u)]
            - \\mathrm{KL}[q(\\mathbf v_\\perp) \\| p(\\mathbf v_\\perp)],

    with :math:`q(f_n) = \\mathcal N(\\mu_n, d_n + s_n)` from both inducing sets (spec §1.5). The
    constructor is SVGP's with ``orthogonal_inducing_variable`` and the variational parameters
    of :math:`\\mathbf v_\\perp`, ``q_mu_orthogonal`` [M_v, L] and ``q_sqrt_orthogonal``
    ([L, M_v, M_v], or [M_v, L] with ``q_diag``). ``whiten`` applies to both sets
    (:math:`\\mathbf u = L_u\\tilde{\\mathbf u}`,
    :math:`\\mathbf v_\\perp = L_v\\tilde{\\mathbf v}`).

    Any likelihood (through ``variational_expectations``), minibatches (``num_data``), and the
    multi-output settings of SVGP with independent latent GPs: a single-output kernel or
    ``SharedIndependent`` with ``num_latent_gps`` latent GPs, ``SeparateIndependent``, and
    ``LinearCoregionalization`` (the latent GPs mixed by ``W``). Each of the two inducing sets
    may be shared (an array, inducing variables or ``SharedIndependentInducingVariables``) or
    separate per latent GP (``SeparateIndependentInducingVariables``).
    """

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
        self.orthogonal_inducing_variable = _orthogonal_sets(
            kernel, self.inducing_variable, orthogonal_inducing_variable
        )
        num_orthogonal = int(self.latent_blocks()[0].inducing_variable.num_inducing)
        shape_mu = (num_orthogonal, self.num_latent_gps)
        if q_mu_orthogonal is None:
            q_mu_orthogonal = np.zeros(shape_mu)
        if np.shape(q_mu_orthogonal) != shape_mu:
            raise ValueError(
                f"`q_mu_orthogonal` must have shape {shape_mu} ([M_v, L]), got "
                f"{np.shape(q_mu_orthogonal)}."
            )
        self.q_mu_orthogonal = Parameter(q_mu_orthogonal, dtype=default_float())
        # TFP's FillTriangular cannot hold a 0 x 0 matrix: an empty set keeps the diagonal form
        q_diag = len(self.q_sqrt.shape) == 2 or num_orthogonal == 0
        if q_diag:
            shape_sqrt: tuple[int, ...] = shape_mu
            default_sqrt = np.ones(shape_mu)
        else:
            shape_sqrt = (self.num_latent_gps, num_orthogonal, num_orthogonal)
            default_sqrt = np.tile(np.eye(num_orthogonal), (self.num_latent_gps, 1, 1))
        if q_sqrt_orthogonal is None:
            q_sqrt_orthogonal = default_sqrt
        if np.shape(q_sqrt_orthogonal) != shape_sqrt:
            raise ValueError(
                f"`q_sqrt_orthogonal` must have shape {shape_sqrt}, got "
                f"{np.shape(q_sqrt_orthogonal)}."
            )
        self.q_sqrt_orthogonal = Parameter(
            q_sqrt_orthogonal,
            transform=positive() if q_diag else triangular(),
            dtype=default_float(),
        )
        if tf.executing_eagerly():
            with explain_cholesky_failure():
                for block in self.latent_blocks():
                    orthogonal_factors(block.inducing_variable, block.kernel)

    def latent_blocks(self) -> list[LatentBlock]:
        """The kernel and orthogonal inducing set of each group of latent GPs."""
        kernels = _latent_kernels(self.kernel)
        if isinstance(self.orthogonal_inducing_variable, SeparateIndependentInducingVariables):
            sets = list(self.orthogonal_inducing_variable.inducing_variable_list)
        else:
            sets = [self.orthogonal_inducing_variable]
        size = max(len(kernels), len(sets))
        if size == 1:
            return [LatentBlock(kernels[0], sets[0], slice(None))]
        kernels, sets = kernels * (size // len(kernels)), sets * (size // len(sets))
        return [LatentBlock(k, v, slice(i, i + 1)) for i, (k, v) in enumerate(zip(kernels, sets))]

    def mixing_matrix(self) -> tf.Tensor | None:
        """``W`` of a ``LinearCoregionalization`` kernel, else ``None``."""
        return self.kernel.W if isinstance(self.kernel, LinearCoregionalization) else None

    def whitened_q(self, block: LatentBlock, factors: OrthogonalFactors | None) -> WhitenedQ:
        """
        The variational parameters of a block's latent GPs in whitened coordinates (``factors``
        may be ``None`` if ``whiten``).
        """
        L_u, L_v = (None, None) if factors is None else (factors.L_u, factors.L_v)

        def columns(q_sqrt: tf.Tensor) -> tf.Tensor:
            return q_sqrt[:, block.latents] if q_sqrt.shape.ndims == 2 else q_sqrt[block.latents]

        m_u, R_u = whiten_variational_parameters(
            L_u, self.q_mu[:, block.latents], columns(self.q_sqrt), self.whiten
        )
        m_v, R_v = whiten_variational_parameters(
            L_v,
            self.q_mu_orthogonal[:, block.latents],
            columns(self.q_sqrt_orthogonal),
            self.whiten,
        )
        return m_u, R_u, m_v, R_v

    @inherit_check_shapes
    def prior_kl(self) -> tf.Tensor:
        """:math:`\\mathrm{KL}_u + \\mathrm{KL}_v` (spec §1.6; Fernlund's eq. 5.24 with
        :math:`M_v`), both taken in whitened coordinates, where the priors are standard normal."""
        kl = tf.constant(0.0, dtype=default_float())
        with explain_cholesky_failure():
            for block in self.latent_blocks():
                factors = None
                if not self.whiten:
                    factors = orthogonal_factors(block.inducing_variable, block.kernel)
                m_u, R_u, m_v, R_v = self.whitened_q(block, factors)
                kl += gauss_kl(m_u, R_u) + gauss_kl(m_v, R_v)
        return kl

    @check_shapes(
        "X: [N, D]",
        "return[0]: [N, L]",
        "return[1]: [N, L]",
        "return[2]: [N, L]",
    )
    def latent_marginals_with_residual(
        self, X: InputData
    ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """
        For each latent GP at inputs X (before any mixing and without the mean function): the
        mean of :math:`q`, the variance carried by :math:`q`, :math:`s_n`, and the residual
        :math:`d_n` given both sets (spec §1.6).
        """
        means, q_variances, residuals = [], [], []
        with explain_cholesky_failure():
            for block in self.latent_blocks():
                factors = orthogonal_factors(block.inducing_variable, block.kernel)
                a_u, a_v = orthogonal_projections(block.inducing_variable, block.kernel, factors, X)
                mean, q_variance, residual = decoupled_marginals(
                    a_u, a_v, block.kernel(X, full_cov=False), *self.whitened_q(block, factors)
                )
                means.append(mean)
                q_variances.append(tf.broadcast_to(q_variance, tf.shape(mean)))
                residuals.append(tf.broadcast_to(residual[:, None], tf.shape(mean)))
        return tf.concat(means, 1), tf.concat(q_variances, 1), tf.concat(residuals, 1)

    def posterior(
        self, precompute_cache: PrecomputeCacheType = PrecomputeCacheType.TENSOR
    ) -> "OrthogonalPosterior":
        """The SOLVE-GP posterior of spec §1.5 (see :class:`OrthogonalPosterior`)."""
        return OrthogonalPosterior(
            self.latent_blocks(),
            self.whitened_q,
            self.mean_function,
            mixing=self.mixing_matrix(),
            precompute_cache=precompute_cache,
        )

    @inherit_check_shapes
    def predict_f(
        self, Xnew: InputData, full_cov: bool = False, full_output_cov: bool = False
    ) -> MeanAndVariance:
        """The decoupled predictive of :class:`OrthogonalPosterior` (``posterior().predict_f``)."""
        with explain_cholesky_failure():
            return super(SOLVEGP, self).predict_f(  # noqa: UP008
                Xnew, full_cov=full_cov, full_output_cov=full_output_cov
            )


class TightSOLVEGP(SOLVEGP, TightSVGP):
    """
    T-SOLVEGP (Bui, Ashman & Turner 2025, eq. 14; spec §3.2): :class:`SOLVEGP` with the tighter
    conditional :math:`q(\\mathbf f \\mid \\mathbf u, \\mathbf v)` of variance :math:`m_n d_n`,
    where :math:`d_n` is the residual given both sets, and the bound's extra term
    :math:`\\tfrac12\\sum_n [1 + \\log m_n - m_n]`. ``relaxation`` and ``beta`` are
    :class:`~gpflow_tight.TightSVGP`'s (default: :math:`m_n = \\beta/(d_n + \\beta)` with one
    :math:`\\beta` per latent GP, the paper's choice). Predictions are SOLVEGP's, as in the paper.
    """

    @check_shapes(
        "X: [N, D]",
        "return[0]: [N, P]",
        "return[1]: [N, P]",
        "return[2]: [N, L]",
    )
    def training_marginals(self, X: InputData) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """Mean and tighter variance :math:`m_n d_n + s_n` of :math:`q(f_n)`, and :math:`m_n`."""
        mean, q_variance, residual = self.latent_marginals_with_residual(X)
        m = self.relaxation_weights(residual)
        variance = m * residual + q_variance
        W = self.mixing_matrix()
        if W is not None:
            mean, variance = mix_latent_gp(W, mean, variance, full_cov=False, full_output_cov=False)
        return mean + self.mean_function(X), variance, m


class OrthogonalPosterior(AbstractPosterior):
    """
    The posterior of the SOLVE-GP family, :math:`f = g + h + l` (spec §1.5), from whitened
    :math:`q(\\tilde{\\mathbf u})` and :math:`q(\\tilde{\\mathbf v})`. The prior residual is
    counted once. The cache holds each block's factorisation and whitened :math:`q`, so a cached
    prediction costs :math:`O(N_*(M_u^2 + M_u M_v + M_v^2))` per block.

    :param blocks: the latent GPs, by kernel and orthogonal inducing set.
    :param whitened_q: maps a block and its
        :class:`~gpflow_tight.orthogonal.OrthogonalFactors` to ``(m̃_u, R_u, m̃_v, R_v)`` with
        :math:`\\tilde S = RR^\\top` (a model's current variational parameters, or SOLVEGPR's
        optimal ones).
    :param mixing: ``W`` [P, L] of a linear coregionalisation, or ``None``.
    """

    def __init__(
        self,
        blocks: list[LatentBlock],
        whitened_q: Callable[[LatentBlock, OrthogonalFactors], WhitenedQ],
        mean_function: Any = None,
        *,
        mixing: tf.Tensor | None = None,
        precompute_cache: PrecomputeCacheType | None,
    ) -> None:
        super().__init__(blocks[0].kernel, blocks[0].inducing_variable, mean_function=mean_function)
        self.blocks = blocks
        self.mixing = mixing
        self._whitened_q = whitened_q
        if precompute_cache is not None:
            self.update_cache(precompute_cache)

    def _precompute(self) -> tuple[PrecomputedValue, ...]:
        values = []
        for block in self.blocks:
            factors = orthogonal_factors(block.inducing_variable, block.kernel)
            values.extend([*factors, *self._whitened_q(block, factors)])
        return tuple(PrecomputedValue(v, (False,) * len(v.shape)) for v in values)

    def _conditional_with_precompute(
        self,
        cache: tuple[tf.Tensor, ...],
        Xnew: Any,
        full_cov: bool = False,
        full_output_cov: bool = False,
    ) -> MeanAndVariance:
        means, covariances = [], []
        for index, block in enumerate(self.blocks):
            L_u, D_v, L_v, m_u, R_u, m_v, R_v = cache[7 * index : 7 * index + 7]
            factors = OrthogonalFactors(L_u, D_v, L_v)
            a_u, a_v = orthogonal_projections(block.inducing_variable, block.kernel, factors, Xnew)
            prior = block.kernel(Xnew, full_cov=full_cov)
            mean, q_covariance, residual = decoupled_marginals(
                a_u, a_v, prior, m_u, R_u, m_v, R_v, full_cov=full_cov
            )
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

    def _conditional_fused(
        self, Xnew: Any, full_cov: bool = False, full_output_cov: bool = False
    ) -> MeanAndVariance:
        cache = tuple(value.value for value in self._precompute())
        return self._conditional_with_precompute(cache, Xnew, full_cov, full_output_cov)
