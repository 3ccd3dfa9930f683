"""
The Power-EP pseudo-point family of Bui, Yan & Turner, *A unifying framework for Gaussian
process pseudo-point approximations using Power Expectation Propagation* (JMLR 2017).

One class, :class:`PowerEPSGP`, covers the family through the power :math:`\\alpha`: FITC at
:math:`\\alpha = 1`, Titsias's VFE in the limit :math:`\\alpha \\to 0`, PITC with block factors,
a private power per data point or block, and inter-domain pseudo-points through GPflow's
``Kuu``/``Kuf`` dispatch. Regression is closed form; other likelihoods run Power-EP site updates.
"""

from collections.abc import Sequence
from typing import Any, NamedTuple

import gpflow
import numpy as np
import tensorflow as tf
from check_shapes import check_shapes, inherit_check_shapes
from gpflow.base import InputData, MeanAndVariance, RegressionData
from gpflow.config import default_float, default_jitter
from gpflow.covariances import Kuf, Kuu
from gpflow.kernels import Kernel
from gpflow.likelihoods import Gaussian, Likelihood, ScalarLikelihood
from gpflow.mean_functions import MeanFunction
from gpflow.models import GPModel, InternalDataTrainingLossMixin
from gpflow.models.util import InducingVariablesLike, data_input_to_tensor, inducingpoint_wrapper
from gpflow.posteriors import (
    AbstractPosterior,
    PrecomputeCacheType,
    PrecomputedValue,
    SGPRPosterior,
)
from scipy.cluster.vq import kmeans2

from ..tilted import tilted_moments
from ..validation import KUU, check_regression_data, checked_cholesky, explain_cholesky_failure
from .base import ExplainsCholeskyFailures

__all__ = ["PowerEPSGP", "PowerEPPosterior", "FITC", "PITC", "VFE", "DTC", "cluster_blocks"]

INNER = "B = I + A Aᵀ (the whitened precision of q(u))"


@check_shapes(
    "alpha: [broadcast batch...]",
    "scaled_residual: [batch...]",
    "return: [batch...]",
)
def power_correction(alpha: tf.Tensor, scaled_residual: tf.Tensor) -> tf.Tensor:
    """
    :math:`\\frac{1 - \\alpha}{2\\alpha} \\log(1 + \\alpha x)`, and its limit :math:`x / 2` at
    :math:`\\alpha = 0` (Bui et al. 2017, eq. 128 and Remark 3), elementwise. ``x`` is
    :math:`d_n / \\sigma_n^2`, or an eigenvalue of :math:`\\Sigma_b^{-1/2} D_{bb} \\Sigma_b^{-1/2}`
    for a block factor.
    """
    positive = alpha > 0
    safe_alpha = tf.where(positive, alpha, tf.ones_like(alpha))  # no NaN gradients at α = 0
    powered = (1 - safe_alpha) / (2 * safe_alpha) * tf.math.log1p(safe_alpha * scaled_residual)
    return tf.where(positive, powered, 0.5 * scaled_residual)


def cluster_blocks(X: np.ndarray, block_size: int, seed: int = 0) -> list[np.ndarray]:
    """
    Partition the rows of ``X`` into about ``N / block_size`` blocks of nearby points with
    k-means (``scipy.cluster.vq.kmeans2``); block sizes vary around ``block_size``.
    """
    X = np.asarray(X, dtype=float)
    num_blocks = int(np.ceil(len(X) / block_size))
    if num_blocks == 1:
        return [np.arange(len(X))]
    _, labels = kmeans2(X, num_blocks, minit="++", seed=seed)
    return [np.flatnonzero(labels == k) for k in np.unique(labels)]


def _block_layout(blocks: Sequence[Any], num_data: int) -> tuple[np.ndarray, np.ndarray]:
    """Padded ``[B, S]`` index and mask arrays of a partition of ``range(num_data)``."""
    try:
        blocks = [np.asarray(block, dtype=np.int64).reshape(-1) for block in blocks]
    except (TypeError, ValueError) as error:
        raise TypeError("`blocks` must be a sequence of integer index arrays.") from error
    if any(block.size == 0 for block in blocks):
        raise ValueError("`blocks` contains an empty block; remove it.")
    everything = np.concatenate(blocks) if blocks else np.zeros(0, np.int64)
    counts = np.bincount(
        everything[(everything >= 0) & (everything < num_data)], minlength=num_data
    )
    if everything.min(initial=0) < 0 or everything.max(initial=0) >= num_data:
        raise ValueError(f"`blocks` holds indices outside 0..{num_data - 1} (the data rows).")
    if np.any(counts != 1):
        repeated, missing = np.flatnonzero(counts > 1), np.flatnonzero(counts == 0)
        raise ValueError(
            "`blocks` must partition the data rows: every row in exactly one block. "
            f"Rows in several blocks: {repeated[:5].tolist()}; rows in none: "
            f"{missing[:5].tolist()}."
        )
    size = max(block.size for block in blocks)
    index = np.zeros((len(blocks), size), np.int64)
    mask = np.zeros((len(blocks), size), bool)
    for b, block in enumerate(blocks):
        index[b, : block.size] = block
        mask[b, : block.size] = True
    return index, mask


class _Projection(NamedTuple):
    """``L = chol(K_uu)``, ``A0 = L⁻¹ K_uf`` and the residual variances ``d``."""

    L: tf.Tensor
    A0: tf.Tensor
    residual: tf.Tensor


class _GaussianSites(NamedTuple):
    """
    Gaussian factors whitened by their covariance
    :math:`\\Lambda = \\mathrm{blkdiag}(\\alpha_b D_{bb} + \\Sigma_b)`:
    ``A = L⁻¹ K_uf Λ^{-1/2}``, ``e = Λ^{-1/2} (y - μ)``, :math:`\\log|\\Lambda|` and the power
    correction :math:`\\sum_b \\frac{1-\\alpha_b}{2\\alpha_b}
    \\log|I + \\alpha_b \\Sigma_b^{-1} D_{bb}|` (per output column).
    """

    A: tf.Tensor
    e: tf.Tensor
    log_det: tf.Tensor
    correction: tf.Tensor


class _Cavity(NamedTuple):
    """Cavity marginals of :math:`g(x_n)` and the quantities of the vectorised energy (§3.4)."""

    mean: tf.Tensor  # of g = f - mean function
    variance: tf.Tensor
    s: tf.Tensor  # 1 - α τ c
    c: tf.Tensor  # w_nᵀ V w_n
    a: tf.Tensor  # w_nᵀ m


class PowerEPPosterior(SGPRPosterior):
    """
    The posterior of a :class:`PowerEPSGP`. Power EP's :math:`q(\\mathbf u)` has the same whitened
    form as SGPR's, :math:`\\mathbf u = L \\mathbf v`, :math:`q(\\mathbf v) = \\mathcal N(L_B^{-T}
    \\mathbf c, (L_B L_B^T)^{-1})`, so SGPR's cached prediction is reused with the model's
    :math:`(L, L_B, \\mathbf c)`; the test conditional :math:`p(f_* \\mid \\mathbf u)` is exact.
    """

    def __init__(
        self,
        model: "PowerEPSGP",
        *,
        precompute_cache: PrecomputeCacheType | None,
    ) -> None:
        AbstractPosterior.__init__(
            self, model.kernel, model.data[0], mean_function=model.mean_function
        )
        self.inducing_variable = model.inducing_variable
        self.num_latent_gps = model.num_latent_gps
        self._whitened_posterior = model.whitened_posterior
        if precompute_cache is not None:
            self.update_cache(precompute_cache)

    def _precompute(self) -> tuple[PrecomputedValue, ...]:
        L, LB, c = self._whitened_posterior()
        return (
            PrecomputedValue(L, (False, False)),
            PrecomputedValue(LB, (False, False)),
            PrecomputedValue(c, (False, False)),
        )


class PowerEPSGP(ExplainsCholeskyFailures, GPModel, InternalDataTrainingLossMixin):
    """
    Sparse GP with the Power-EP pseudo-point approximation of :cite:t:`bui2017unifying`.

    Each likelihood factor :math:`p(y_n \\mid f_n)` is replaced by a Gaussian site on the
    pseudo-outputs :math:`t_n(\\mathbf u) = \\mathcal N(\\mathbf w_n^T \\mathbf u; g_n, v_n)`,
    :math:`\\mathbf w_n = K_{uu}^{-1}\\mathbf k_{un}`, fitted by Power EP with power
    :math:`\\alpha`. The objective is the negative Power-EP energy, an approximation of
    :math:`\\log p(\\mathbf y)`.

    **Gaussian likelihood** (``inference="closed_form"``, the default): the fixed point is
    closed form (§3.6) and the objective is eq. 128,

    .. math::
        \\log \\mathcal Z_\\alpha = \\log \\mathcal N(\\mathbf y; \\mathbf 0, Q_{ff} +
        \\alpha\\,\\mathrm{diag}(\\mathbf d) + \\sigma^2 I) - \\frac{1 - \\alpha}{2\\alpha}
        \\sum_n \\log\\Big(1 + \\frac{\\alpha d_n}{\\sigma^2}\\Big),

    computed in :math:`O(NM^2)`. ``alpha=1`` is FITC (``gpflow.models.GPRFITC``); ``alpha=0`` is
    the exact limit :math:`\\alpha \\to 0`, Titsias's bound (``gpflow.models.SGPR``). The
    objective is non-decreasing in :math:`\\alpha`. Extensions (§3.7): ``alpha`` may be an
    array with one power per data point (multi-power); ``blocks`` (a partition of the data rows)
    or ``block_size`` (k-means clusters of the inputs) give block factors, and then ``alpha``
    may hold one power per block; ``alpha=1`` with blocks is PITC. The structured objective uses
    the corrected sign of the paper's §3.7 (see ``docs/power_ep.md``). A heteroscedastic
    Gaussian likelihood (``variance_at``) gives per-point noise.

    **Other likelihoods** (``inference="sites"``, scalar likelihoods with one latent GP): the
    sites are state of the model (:attr:`site_precision` :math:`\\tau_n = 1 / v_n` and
    :attr:`site_shift` :math:`\\nu_n = g_n / v_n`, saved by ``tf.train.Checkpoint``), updated by
    :meth:`sweep` (damped parallel Power-EP updates, optionally on a minibatch of points) and
    held fixed by :meth:`log_marginal_likelihood`, the energy of eq. 110 in its vectorised
    :math:`O(NM^2)` form, whose gradient is the hyperparameter gradient at a fixed point. The
    tilted moments are closed form for a probit ``Bernoulli`` at ``alpha=1`` and use
    Gauss-Hermite quadrature otherwise. Use :func:`gpflow_tight.training.fit_power_ep` to
    alternate sweeps and optimiser steps. ``inference="sites"`` also works with a Gaussian
    likelihood, where it converges to the closed form.

    :param data: ``(X, Y)``, ``X`` [N, D], ``Y`` [N, R] (R = 1 and labels in {0, 1} for
        ``Bernoulli``).
    :param alpha: the power, in [0, 1]: a number, an array [N] (one per point) or, with
        blocks, an array [number of blocks]. 0 (the VFE limit) needs a Gaussian likelihood.
    :param likelihood: defaults to ``gpflow.likelihoods.Gaussian(noise_variance)``.
    :param noise_variance: initial noise variance of the default Gaussian likelihood.
    :param blocks: a partition of ``range(N)`` into index arrays (Gaussian likelihood only).
    :param block_size: instead of ``blocks``: cluster the inputs into blocks of about this size.
    :param inference: ``"closed_form"`` (Gaussian likelihoods) or ``"sites"``; by default the
        first when the likelihood is Gaussian.
    :param num_gauss_hermite_points: quadrature points for the tilted moments (more than
        GPflow's 20 by default: the energy divides their error by :math:`\\alpha`).
    """

    _includes_power_correction = True  # False only for DTC, which is not a Power-EP energy

    def __init__(
        self,
        data: RegressionData,
        kernel: Kernel,
        inducing_variable: InducingVariablesLike,
        alpha: Any = 0.5,
        *,
        likelihood: Likelihood | None = None,
        noise_variance: float | None = None,
        mean_function: MeanFunction | None = None,
        blocks: Sequence[Any] | None = None,
        block_size: int | None = None,
        inference: str | None = None,
        num_gauss_hermite_points: int = 50,
        seed: int = 0,
    ) -> None:
        X, Y = check_regression_data(data)
        if likelihood is None:
            likelihood = Gaussian(1.0 if noise_variance is None else noise_variance)
        elif noise_variance is not None:
            raise ValueError(
                "Pass either `likelihood` or `noise_variance` (for the default Gaussian "
                "likelihood), not both."
            )
        inference = _check_inference(inference, likelihood)
        if inference == "sites":
            _check_site_data(likelihood, Y)
        super().__init__(kernel, likelihood, mean_function, num_latent_gps=Y.shape[1])
        self.data = data_input_to_tensor((X, Y))
        self.num_data = X.shape[0]
        self.inducing_variable = inducingpoint_wrapper(inducing_variable)
        self.inference = inference
        self.num_gauss_hermite_points = int(num_gauss_hermite_points)

        if blocks is not None and block_size is not None:
            raise ValueError("Pass either `blocks` or `block_size`, not both.")
        if block_size is not None:
            if isinstance(block_size, bool) or not isinstance(block_size, int | np.integer):
                raise TypeError(f"`block_size` must be an int, got {block_size!r}.")
            if block_size < 1:
                raise ValueError(f"`block_size` must be at least 1, got {block_size}.")
            blocks = cluster_blocks(X, int(block_size), seed=seed)
        self.blocks: list[np.ndarray] | None = None
        if blocks is not None:
            if inference != "closed_form":
                raise ValueError(
                    "Block (PITC-like) factors are implemented for Gaussian likelihoods with "
                    "`inference='closed_form'` only; drop `blocks`/`block_size`."
                )
            index, mask = _block_layout(blocks, self.num_data)
            self.blocks = [row[keep] for row, keep in zip(index, mask)]
            self._block_index = tf.constant(index)
            self._block_mask = tf.constant(mask)
        self.alpha = _check_alpha(alpha, self.num_data, self.blocks, inference)

        if inference == "sites":
            zeros = tf.zeros([self.num_data], dtype=default_float())
            self.site_precision = tf.Variable(zeros, trainable=False, name="site_precision")
            self.site_shift = tf.Variable(zeros, trainable=False, name="site_shift")

    # ---------------------------------------------------------------------------------------
    # shared pieces

    def _alpha_tensor(self) -> tf.Tensor:
        return tf.constant(self.alpha, dtype=default_float())

    def _projection(self) -> _Projection:
        X, _ = self.data
        L = checked_cholesky(Kuu(self.inducing_variable, self.kernel, jitter=default_jitter()), KUU)
        A0 = tf.linalg.triangular_solve(L, Kuf(self.inducing_variable, self.kernel, X))
        residual = self.kernel(X, full_cov=False) - tf.reduce_sum(tf.square(A0), axis=0)
        return _Projection(L, A0, tf.maximum(residual, 0))

    @staticmethod
    def _inner(A: tf.Tensor, shift: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """``LB = chol(I + A Aᵀ)`` and ``c = LB⁻¹ shift``."""
        eye = tf.eye(tf.shape(A)[0], dtype=A.dtype)
        LB = checked_cholesky(eye + tf.linalg.matmul(A, A, transpose_b=True), INNER)
        return LB, tf.linalg.triangular_solve(LB, shift)

    # ---------------------------------------------------------------------------------------
    # Gaussian likelihood, closed form

    def _gaussian_sites(self, projection: _Projection) -> _GaussianSites:
        X, Y = self.data
        error = Y - self.mean_function(X)
        noise = self.likelihood.variance_at(X)[:, 0]
        alpha = self._alpha_tensor()
        if self.blocks is None:
            precision_sqrt = tf.math.rsqrt(alpha * projection.residual + noise)
            return _GaussianSites(
                A=projection.A0 * precision_sqrt,
                e=error * precision_sqrt[:, None],
                log_det=-2 * tf.reduce_sum(tf.math.log(precision_sqrt)),
                correction=tf.reduce_sum(power_correction(alpha, projection.residual / noise)),
            )
        return self._gaussian_block_sites(projection, error, noise, alpha)

    def _gaussian_block_sites(
        self, projection: _Projection, error: tf.Tensor, noise: tf.Tensor, alpha: tf.Tensor
    ) -> _GaussianSites:
        """Block factors, padded to a common size S: padding rows have D = 0 and unit noise."""
        X, _ = self.data
        index, mask = self._block_index, tf.cast(self._block_mask, default_float())
        pair_mask = mask[:, :, None] * mask[:, None, :]
        A0_blocks = tf.gather(tf.linalg.adjoint(projection.A0), index) * mask[..., None]
        K_blocks = self.kernel(tf.gather(X, index))  # [B, S, S]
        D_blocks = pair_mask * (K_blocks - tf.linalg.matmul(A0_blocks, A0_blocks, transpose_b=True))
        noise_blocks = tf.gather(noise, index) * mask + (1 - mask)
        block_alpha = alpha[:, None, None] if alpha.shape.rank == 1 else alpha
        L_blocks = checked_cholesky(
            block_alpha * D_blocks + tf.linalg.diag(noise_blocks),
            "Λ_b = α_b D_bb + σ² I (a block factor)",
        )
        A_blocks = tf.linalg.triangular_solve(L_blocks, A0_blocks)  # [B, S, M]
        e_blocks = tf.linalg.triangular_solve(L_blocks, tf.gather(error, index) * mask[..., None])
        noise_sqrt = tf.sqrt(noise_blocks)
        scaled = D_blocks / noise_sqrt[:, :, None] / noise_sqrt[:, None, :]
        if np.all(self.alpha == 1):  # PITC: the correction vanishes, skip the eigenvalues
            correction = tf.zeros([], dtype=scaled.dtype)
        elif np.all(self.alpha == 0):
            correction = 0.5 * tf.reduce_sum(tf.linalg.trace(scaled))
        else:
            eigenvalues = tf.maximum(tf.linalg.eigvalsh(scaled), 0)  # [B, S]
            eigen_alpha = alpha[:, None] if alpha.shape.rank == 1 else alpha
            correction = tf.reduce_sum(power_correction(eigen_alpha, eigenvalues))
        num_inducing = tf.shape(projection.A0)[0]
        return _GaussianSites(
            A=tf.linalg.adjoint(tf.reshape(A_blocks, [-1, num_inducing])),
            e=tf.reshape(e_blocks, [-1, tf.shape(error)[1]]),
            log_det=2 * tf.reduce_sum(tf.math.log(tf.linalg.diag_part(L_blocks))),
            correction=correction,
        )

    def _closed_form_log_marginal_likelihood(self) -> tf.Tensor:
        projection = self._projection()
        sites = self._gaussian_sites(projection)
        LB, c = self._inner(sites.A, tf.linalg.matmul(sites.A, sites.e))
        num_outputs = tf.cast(tf.shape(sites.e)[1], default_float())
        num_data = tf.cast(self.num_data, default_float())
        log_det = sites.log_det + 2 * tf.reduce_sum(tf.math.log(tf.linalg.diag_part(LB)))
        quad = tf.reduce_sum(tf.square(sites.e)) - tf.reduce_sum(tf.square(c))
        objective = -0.5 * num_outputs * (num_data * np.log(2 * np.pi) + log_det) - 0.5 * quad
        if self._includes_power_correction:
            objective -= num_outputs * sites.correction
        return objective

    # ---------------------------------------------------------------------------------------
    # sites

    def _site_inner(self, projection: _Projection) -> tuple[tf.Tensor, tf.Tensor]:
        A = projection.A0 * tf.sqrt(tf.maximum(self.site_precision, 0))
        return self._inner(A, tf.linalg.matmul(projection.A0, self.site_shift[:, None]))

    def _cavity(
        self,
        projection: _Projection,
        LB: tf.Tensor,
        c: tf.Tensor,
        indices: tf.Tensor | None,
    ) -> _Cavity:
        """Cavities :math:`q_{\\setminus n}` of the points ``indices`` (all when ``None``)."""

        def select(values: tf.Tensor, axis: int = 0) -> tf.Tensor:
            return values if indices is None else tf.gather(values, indices, axis=axis)

        alpha = select(tf.broadcast_to(self._alpha_tensor(), [self.num_data]))
        precision, shift = select(self.site_precision), select(self.site_shift)
        projected = tf.linalg.triangular_solve(LB, select(projection.A0, axis=1))
        c_n = tf.reduce_sum(tf.square(projected), axis=0)
        a_n = tf.linalg.matmul(projected, c, transpose_a=True)[:, 0]
        s = 1 - alpha * precision * c_n
        return _Cavity(
            mean=(a_n - alpha * c_n * shift) / s,
            variance=select(projection.residual) + c_n / s,
            s=s,
            c=c_n,
            a=a_n,
        )

    def _tilted(self, cavity: _Cavity, indices: tf.Tensor | None) -> Any:
        X, Y = self.data
        if indices is not None:
            X, Y = tf.gather(X, indices), tf.gather(Y, indices)
        alpha = tf.broadcast_to(self._alpha_tensor(), [self.num_data])
        if indices is not None:
            alpha = tf.gather(alpha, indices)
        return tilted_moments(
            self.likelihood,
            X,
            Y,
            cavity.mean + self.mean_function(X)[:, 0],
            cavity.variance,
            alpha,
            alpha_is_one=bool(np.all(self.alpha == 1)),
            num_gauss_hermite_points=self.num_gauss_hermite_points,
        )

    def _site_log_marginal_likelihood(self, indices: tf.Tensor | None) -> tf.Tensor:
        """The vectorised energy (spec §3.4), minibatch estimate when ``indices`` is given."""
        projection = self._projection()
        LB, c = self._site_inner(projection)
        cavity = self._cavity(projection, LB, c, indices)
        tilted = self._tilted(cavity, indices)
        alpha, precision, shift = (
            tf.broadcast_to(self._alpha_tensor(), [self.num_data]),
            self.site_precision,
            self.site_shift,
        )
        if indices is not None:
            alpha, precision, shift = (tf.gather(t, indices) for t in (alpha, precision, shift))
        local = (
            tilted.log_normaliser / alpha
            - tf.math.log(cavity.s) / (2 * alpha)
            + (
                precision * tf.square(cavity.a)
                + alpha * tf.square(shift) * cavity.c
                - 2 * shift * cavity.a
            )
            / (2 * cavity.s)
        )
        scale = 1.0
        if indices is not None:
            scale = tf.cast(self.num_data, local.dtype) / tf.cast(tf.size(indices), local.dtype)
        global_terms = -tf.reduce_sum(tf.math.log(tf.linalg.diag_part(LB))) + 0.5 * tf.reduce_sum(
            tf.square(c)
        )
        return global_terms + scale * tf.reduce_sum(local)

    def sweep(
        self,
        indices: tf.Tensor | None = None,
        damping: float = 0.5,
        update: str = "full",
    ) -> dict[str, tf.Tensor]:
        """
        One parallel Power-EP sweep over the points ``indices`` (all when ``None``): every cavity
        is taken from the same current :math:`q(\\mathbf u)`, each site is projected (eqs.
        104-107) and updated, then damped: :math:`\\tau \\leftarrow \\rho\\tau' + (1 - \\rho)\\tau`
        with ``damping`` :math:`\\rho \\in (0, 1]`. The posterior is recomputed from all sites
        at the next use, :math:`O(NM^2)`.

        ``update="full"`` (default) is the Power-EP update :math:`t_n \\leftarrow (q /
        q_{\\setminus n})^{1/\\alpha}`; ``"fractional"`` is the paper's eqs. 108-109,
        :math:`t_n \\leftarrow t_n^{1-\\alpha} q / q_{\\setminus n}`. Both have the same fixed
        points, and ``"fractional"`` with damping :math:`\\rho` equals ``"full"`` with damping
        :math:`\\rho\\alpha`, so it converges slowly for small :math:`\\alpha` (at rate
        :math:`1 - \\alpha` for a Gaussian likelihood, where one undamped ``"full"`` sweep reaches
        the fixed point).
        A site whose update would give a negative precision (possible only for likelihoods that
        are not log-concave) or a non-finite value is left unchanged.

        :return: ``max_change`` (the largest change of a site's natural parameters, relative to
            their scale) and ``num_skipped`` (sites left unchanged).
        """
        if self.inference != "sites":
            raise ValueError(
                "`sweep` needs `inference='sites'`; with a Gaussian likelihood the default "
                "closed form needs no site updates."
            )
        if update not in ("fractional", "full"):
            raise ValueError(f"`update` must be 'fractional' or 'full', got {update!r}.")
        if not 0 < damping <= 1:
            raise ValueError(f"`damping` must lie in (0, 1], got {damping!r}.")
        projection = self._projection()
        LB, c = self._site_inner(projection)
        cavity = self._cavity(projection, LB, c, indices)
        tilted = self._tilted(cavity, indices)
        alpha = tf.broadcast_to(self._alpha_tensor(), [self.num_data])
        precision, shift = self.site_precision, self.site_shift
        if indices is not None:
            alpha, precision, shift = (tf.gather(t, indices) for t in (alpha, precision, shift))
        else:
            precision, shift = tf.identity(precision), tf.identity(shift)
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
        if indices is None:
            self.site_precision.assign(new_precision)
            self.site_shift.assign(new_shift)
        else:
            self.site_precision.scatter_nd_update(indices[:, None], new_precision)
            self.site_shift.scatter_nd_update(indices[:, None], new_shift)
        return {
            "max_change": change,
            "num_skipped": tf.reduce_sum(tf.cast(~valid, tf.int32)),
        }

    # ---------------------------------------------------------------------------------------
    # public interface

    @check_shapes("return: []")
    def log_marginal_likelihood(self, indices: tf.Tensor | None = None) -> tf.Tensor:
        """
        The approximate log marginal likelihood, i.e. the negative Power-EP energy: eq. 128
        (and its block and multi-power forms) for ``inference="closed_form"``; the energy of eq.
        110 at the current sites for ``inference="sites"``, where ``indices`` (an int tensor of
        data rows) gives the unbiased minibatch estimate of its data terms.
        """
        with explain_cholesky_failure():
            if self.inference == "closed_form":
                if indices is not None:
                    raise ValueError(
                        "The closed-form objective uses all data; `indices` is for "
                        "`inference='sites'`."
                    )
                return self._closed_form_log_marginal_likelihood()
            return self._site_log_marginal_likelihood(indices)

    @inherit_check_shapes
    def maximum_log_likelihood_objective(self) -> tf.Tensor:  # type: ignore[override]
        """``log_marginal_likelihood()``; ``training_loss()`` is −(this + log prior density)."""
        return self.log_marginal_likelihood()

    @check_shapes(
        "return[0]: [M, M]",
        "return[1]: [M, M]",
        "return[2]: [M, R]",
    )
    def whitened_posterior(self) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """
        ``(L, LB, c)`` with :math:`L L^T = K_{uu}`, :math:`q(\\mathbf u) = \\mathcal N(L L_B^{-T}
        \\mathbf c,\\; L (L_B L_B^T)^{-1} L^T)`: from the closed-form fixed point (eq. 18 and §3.6)
        or from the current sites (eqs. 119-120).
        """
        projection = self._projection()
        if self.inference == "closed_form":
            sites = self._gaussian_sites(projection)
            LB, c = self._inner(sites.A, tf.linalg.matmul(sites.A, sites.e))
        else:
            LB, c = self._site_inner(projection)
        return projection.L, LB, c

    @check_shapes(
        "return[0]: [M, R]",
        "return[1]: [M, M]",
    )
    def compute_qu(self) -> tuple[tf.Tensor, tf.Tensor]:
        """Mean and covariance of :math:`q(\\mathbf u)`, as ``gpflow.models.SGPR.compute_qu``."""
        with explain_cholesky_failure():
            L, LB, c = self.whitened_posterior()
            factor = tf.linalg.adjoint(tf.linalg.triangular_solve(LB, tf.linalg.adjoint(L)))
            mean = tf.linalg.matmul(L, tf.linalg.triangular_solve(LB, c, adjoint=True))
            return mean, tf.linalg.matmul(factor, factor, transpose_b=True)  # factor = L LB⁻ᵀ

    def posterior(
        self, precompute_cache: PrecomputeCacheType = PrecomputeCacheType.TENSOR
    ) -> PowerEPPosterior:
        """The posterior for (cached) predictions; see ``gpflow.models.SGPR.posterior``."""
        with explain_cholesky_failure():
            return PowerEPPosterior(self, precompute_cache=precompute_cache)

    @inherit_check_shapes
    def predict_f(
        self, Xnew: InputData, full_cov: bool = False, full_output_cov: bool = False
    ) -> MeanAndVariance:
        """Eq. 7 / 18: the exact test conditional under :math:`q(\\mathbf u)`."""
        with explain_cholesky_failure():
            return self.posterior(PrecomputeCacheType.NOCACHE).fused_predict_f(
                Xnew, full_cov=full_cov, full_output_cov=full_output_cov
            )


def _check_inference(inference: str | None, likelihood: Likelihood) -> str:
    gaussian = isinstance(likelihood, Gaussian)
    if inference is None:
        inference = "closed_form" if gaussian else "sites"
    if inference not in ("closed_form", "sites"):
        raise ValueError(f"`inference` must be 'closed_form' or 'sites', got {inference!r}.")
    if inference == "closed_form" and not gaussian:
        raise ValueError(
            f"`inference='closed_form'` needs a Gaussian likelihood, got "
            f"{type(likelihood).__name__}; use `inference='sites'` (Power-EP site updates)."
        )
    if inference == "sites" and not isinstance(likelihood, ScalarLikelihood):
        raise TypeError(
            "Power-EP site updates need a scalar likelihood with one latent GP "
            f"(a gpflow.likelihoods.ScalarLikelihood), got {type(likelihood).__name__}."
        )
    return inference


def _check_site_data(likelihood: Likelihood, Y: np.ndarray) -> None:
    if Y.shape[1] != 1:
        raise ValueError(
            f"Power-EP site updates model one output column; `data` Y has {Y.shape[1]}. "
            "Fit one model per column."
        )
    if isinstance(likelihood, gpflow.likelihoods.Bernoulli):
        labels = np.unique(Y)
        if not np.all(np.isin(labels, (0, 1))):
            hint = " Map ±1 labels with `(Y + 1) / 2`." if np.all(np.isin(labels, (-1, 1))) else ""
            raise ValueError(
                f"`data` Y must hold labels in {{0, 1}} for a Bernoulli likelihood, got "
                f"{labels[:5].tolist()}.{hint}"
            )


def _check_alpha(
    alpha: Any, num_data: int, blocks: list[np.ndarray] | None, inference: str
) -> np.ndarray:
    try:
        array = np.array(alpha, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise TypeError(
            f"`alpha` must be a number or an array of numbers, got {alpha!r}."
        ) from error
    allowed = [(), (num_data,)] if blocks is None else [(), (len(blocks),)]
    if array.shape not in allowed:
        what = "one per data point" if blocks is None else "one per block"
        raise ValueError(
            f"`alpha` must be a number or an array of shape {allowed[1]} ({what}), got shape "
            f"{array.shape}."
        )
    if not np.all(np.isfinite(array)) or np.any(array < 0) or np.any(array > 1):
        raise ValueError(
            "`alpha` must lie in (0, 1] (α = 1 is FITC/EP, α → 0 is VFE; alpha=0 gives the "
            f"exact VFE limit with a Gaussian likelihood), got {alpha!r}."
        )
    if inference == "sites" and np.any(array == 0):
        raise ValueError(
            "`alpha=0` (the VFE limit) is not a Power-EP site update; for a non-Gaussian "
            "likelihood use gpflow.models.SVGP, or a small positive alpha."
        )
    return array


class FITC(PowerEPSGP):
    """
    FITC (Snelson & Ghahramani 2006): :class:`PowerEPSGP` with :math:`\\alpha = 1` (Bui et al.
    2017, Remark 2), the same objective and predictions as ``gpflow.models.GPRFITC``.
    """

    def __init__(self, data: RegressionData, kernel: Kernel, inducing_variable: Any, **kwargs: Any):
        super().__init__(data, kernel, inducing_variable, alpha=1.0, **kwargs)


class VFE(PowerEPSGP):
    """
    Titsias's variational free energy: the limit :math:`\\alpha \\to 0` of :class:`PowerEPSGP`
    (Remark 3), the same bound and predictions as ``gpflow.models.SGPR``.
    """

    def __init__(self, data: RegressionData, kernel: Kernel, inducing_variable: Any, **kwargs: Any):
        super().__init__(data, kernel, inducing_variable, alpha=0.0, **kwargs)


class PITC(PowerEPSGP):
    """
    PITC (Quiñonero-Candela & Rasmussen 2005): block factors with :math:`\\alpha_b = 1`
    (Remark 5), objective :math:`\\log \\mathcal N(\\mathbf y; \\mathbf 0, Q_{ff} +
    \\mathrm{blkdiag}(D_{bb}) + \\sigma^2 I)`. Needs ``blocks`` or ``block_size``.
    """

    def __init__(self, data: RegressionData, kernel: Kernel, inducing_variable: Any, **kwargs: Any):
        if kwargs.get("blocks") is None and kwargs.get("block_size") is None:
            raise ValueError("PITC needs `blocks` (a partition of the data rows) or `block_size`.")
        super().__init__(data, kernel, inducing_variable, alpha=1.0, **kwargs)


class DTC(PowerEPSGP):
    """
    Deterministic training conditional (Seeger et al. 2003; also PLV/PPA): objective
    :math:`\\log \\mathcal N(\\mathbf y; \\mathbf 0, Q_{ff} + \\sigma^2 I)`. Not a Power-EP
    energy: it lacks VFE's :math:`-\\mathrm{tr}(K_{ff} - Q_{ff}) / 2\\sigma^2` and is the
    :math:`\\alpha \\to 0` member of the :math:`\\alpha`-generative family (eq. 4). Its posterior
    and predictions are VFE's.
    """

    _includes_power_correction = False

    def __init__(self, data: RegressionData, kernel: Kernel, inducing_variable: Any, **kwargs: Any):
        super().__init__(data, kernel, inducing_variable, alpha=0.0, **kwargs)
