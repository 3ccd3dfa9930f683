"""
The collapsed Power-EP objective for Gaussian likelihoods (Bui, Yan & Turner 2017, JMLR, §3.6
and §3.7), in :math:`O(NM^2 + \\sum_b n_b^3)`.

At the fixed point every site is a Gaussian factor on the pseudo-outputs,
:math:`t_n(\\mathbf u) = \\mathcal N(\\mathbf w_n^\\top\\mathbf u; y_n, \\alpha d_n + \\sigma_n^2)`
(§3.6), or a block factor with covariance :math:`\\Lambda_b = \\alpha_b D_{bb} + \\Sigma_b`
(§3.7). With :math:`LL^\\top = K_{uu}`, :math:`A_0 = L^{-1}K_{uf}` and :math:`d_n` from
:func:`gpflow_tight.projection.project`, the factors are whitened to :math:`A =
A_0\\Lambda^{-1/2}`, :math:`\\mathbf e = \\Lambda^{-1/2}(\\mathbf y - \\mu(X))`; then :math:`B =
I + AA^\\top = L_B L_B^\\top` and :math:`\\mathbf c = L_B^{-1}A\\mathbf e` give
:math:`q(\\mathbf u) = \\mathcal N(L L_B^{-\\top}\\mathbf c, L B^{-1} L^\\top)` (eq. 18), and
:math:`\\bar K = Q_{ff} + \\Lambda` has :math:`\\log|\\bar K| = \\log|\\Lambda| + \\log|B|`
and :math:`\\mathbf y^\\top\\bar K^{-1}\\mathbf y = \\|\\mathbf e\\|^2 - \\|\\mathbf c\\|^2`:
eq. 128 and its block and multi-power forms.

The block objective uses the corrected sign of the paper's §3.7 (see ``docs/power_ep.md``).
"""

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf
from check_shapes import check_shapes
from gpflow.base import RegressionData
from gpflow.config import default_float
from gpflow.inducing_variables import InducingVariables
from gpflow.kernels import Kernel
from gpflow.likelihoods import Gaussian
from gpflow.mean_functions import MeanFunction
from scipy.cluster.vq import kmeans2

from ..projection import INNER, Projection, project
from ..validation import checked_cholesky

__all__ = [
    "power_correction",
    "cluster_blocks",
    "BlockPartition",
    "block_assignment",
    "block_layout",
    "read_only",
    "partition",
    "check_alpha",
    "GaussianFactors",
    "gaussian_factors",
    "inner_factors",
    "CollapsedProblem",
    "collapsed_posterior",
    "collapsed_log_marginal_likelihood",
]


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


def read_only(array: np.ndarray) -> np.ndarray:
    """
    A read-only copy of ``array`` whose ``WRITEABLE`` flag cannot be set again (it views an
    immutable ``bytes`` buffer): settings that shape the computation graph stay what they were.
    """
    array = np.asarray(array)
    return np.frombuffer(array.tobytes(), dtype=array.dtype).reshape(array.shape)


class BlockPartition:
    """
    A partition of the data rows into blocks (§3.7), held as ``assignment``: the block of each
    row, ``[N]`` integers, blocks numbered from 0 in their given order. The model keeps it in
    a non-trainable ``tf.Variable`` (``PowerEPSGP.block_assignment``), so that checkpoints save
    it and restoring one changes the partition the computation uses; a standalone posterior
    keeps a read-only array.

    The padded layout of the vectorised block computations, :meth:`padded`, is computed from
    ``assignment`` inside the computation graph (:math:`O(N \\log N)`), so a compiled function
    follows a restored partition. Rows of a block are in ascending order.
    """

    def __init__(self, assignment: tf.Variable | tf.Tensor | np.ndarray) -> None:
        self.assignment = assignment

    @property
    def labels(self) -> np.ndarray:
        """The current ``assignment`` as a read-only numpy array (also while tracing)."""
        with tf.init_scope():  # a variable's value, also inside tf.function
            value = self.assignment
            if isinstance(value, tf.Variable | tf.Tensor):
                value = value.numpy()
            return read_only(np.asarray(value, dtype=np.int64))

    @property
    def blocks(self) -> tuple[np.ndarray, ...]:
        """The current blocks: one read-only, ascending index array per block."""
        labels = self.labels
        return tuple(read_only(np.flatnonzero(labels == b)) for b in range(labels.max() + 1))

    def padded(self, dtype: tf.DType) -> tuple[tf.Tensor, tf.Tensor]:
        """
        ``indices`` [B, S] (int64) and ``mask`` [B, S] (``dtype``, 1 for a row, 0 for
        padding) of the blocks padded to the largest size S; padding indices are 0.
        """
        labels = tf.cast(tf.convert_to_tensor(self.assignment), tf.int64)
        num_data = tf.size(labels, out_type=tf.int64)
        tf.debugging.assert_non_negative(
            labels, message="`block_assignment` holds a negative block number"
        )
        tf.debugging.assert_less(
            labels, num_data, message="`block_assignment` holds a block number >= N (data rows)"
        )
        num_blocks = tf.reduce_max(labels) + 1
        sizes = tf.math.unsorted_segment_sum(tf.ones_like(labels), labels, num_blocks)
        order = tf.cast(tf.argsort(labels, stable=True), tf.int64)  # rows grouped by block
        sorted_labels = tf.gather(labels, order)
        starts = tf.cumsum(sizes, exclusive=True)
        position = tf.range(num_data) - tf.gather(starts, sorted_labels)
        coordinates = tf.stack([sorted_labels, position], axis=1)
        shape = tf.stack([num_blocks, tf.reduce_max(sizes)])
        indices = tf.scatter_nd(coordinates, order, shape)
        mask = tf.scatter_nd(coordinates, tf.ones([num_data], dtype), shape)
        return indices, mask


def block_assignment(blocks: Sequence[Any], num_data: int) -> np.ndarray:
    """
    Check that ``blocks`` (index arrays) partitions ``range(num_data)``; return the block of
    each row, ``[num_data]`` int64, blocks numbered in their given order.
    """
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
    labels = np.zeros(num_data, np.int64)
    for b, block in enumerate(blocks):
        labels[block] = b
    return labels


def block_layout(blocks: Sequence[Any] | BlockPartition, num_data: int | None) -> BlockPartition:
    """
    ``blocks`` as a :class:`BlockPartition`: index arrays are checked (:func:`block_assignment`)
    and held read-only; a :class:`BlockPartition` (a model's) is used as it is, so that its
    variable is read.
    """
    if isinstance(blocks, BlockPartition):
        return blocks
    if num_data is None:
        raise ValueError(
            "`blocks` needs data with a known number of rows (data in variables of shape "
            "[None, D] cannot be partitioned)."
        )
    return BlockPartition(read_only(block_assignment(blocks, num_data)))


def partition(
    X: np.ndarray, blocks: Sequence[Any] | None, block_size: int | None, seed: int = 0
) -> np.ndarray | None:
    """
    The block of each row (:func:`block_assignment`) of ``blocks``, or of k-means clusters of
    about ``block_size`` inputs (:func:`cluster_blocks`); ``None`` for neither (one factor per
    data point).
    """
    if blocks is not None and block_size is not None:
        raise ValueError("Pass either `blocks` or `block_size`, not both.")
    if block_size is not None:
        if isinstance(block_size, bool) or not isinstance(block_size, int | np.integer):
            raise TypeError(f"`block_size` must be an int, got {block_size!r}.")
        if block_size < 1:
            raise ValueError(f"`block_size` must be at least 1, got {block_size}.")
        blocks = cluster_blocks(X, int(block_size), seed=seed)
    return None if blocks is None else block_assignment(blocks, len(X))


def check_alpha(alpha: Any, num_data: int | None, num_blocks: int | None) -> np.ndarray:
    """
    ``alpha`` as a read-only float64 array: a number, one power per data point (shape
    ``[num_data]``) or, with blocks, one per block (``[num_blocks]``), each in [0, 1].
    """
    try:
        array = np.array(alpha, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise TypeError(
            f"`alpha` must be a number or an array of numbers, got {alpha!r}."
        ) from error
    allowed = [(), (num_data,)] if num_blocks is None else [(), (num_blocks,)]
    if array.shape not in allowed:
        what = "one per data point" if num_blocks is None else "one per block"
        raise ValueError(
            f"`alpha` must be a number or an array of shape {allowed[1]} ({what}), got shape "
            f"{array.shape}."
        )
    if not np.all(np.isfinite(array)) or np.any(array < 0) or np.any(array > 1):
        raise ValueError(
            "`alpha` must lie in (0, 1] (α = 1 is FITC/EP, α → 0 is VFE; alpha=0 gives the "
            f"exact VFE limit with a Gaussian likelihood), got {alpha!r}."
        )
    return read_only(array)


class GaussianFactors(NamedTuple):
    """
    Gaussian factors whitened by their covariance
    :math:`\\Lambda = \\mathrm{blkdiag}(\\alpha_b D_{bb} + \\Sigma_b)`:
    ``A`` :math:`= A_0 \\Lambda^{-1/2}`, ``e`` :math:`= \\Lambda^{-1/2} (\\mathbf y - \\mu(X))`,
    ``log_det`` :math:`= \\log|\\Lambda|` and ``correction``, the power correction :math:`\\sum_b
    \\frac{1-\\alpha_b}{2\\alpha_b} \\log|I + \\alpha_b \\Sigma_b^{-1} D_{bb}|` of one output
    column. With blocks, the columns of ``A`` and rows of ``e`` are the padded blocks'.
    """

    A: tf.Tensor
    e: tf.Tensor
    log_det: tf.Tensor
    correction: tf.Tensor


@check_shapes(
    "X: [N, D]",
    "error: [N, R]",
    "noise: [N]",
    "projection.A: [M, N]",
    "projection.residual: [N]",
    "return.A: [M, N_padded]",
    "return.e: [N_padded, R]",
    "return.log_det: []",
    "return.correction: []",
)
def gaussian_factors(
    kernel: Kernel,
    X: tf.Tensor,
    error: tf.Tensor,
    noise: tf.Tensor,
    projection: Projection,
    alpha: np.ndarray,
    layout: BlockPartition | None,
) -> GaussianFactors:
    """
    The fixed-point factors of §3.6 (diagonal, :math:`\\lambda_n = \\alpha_n d_n + \\sigma_n^2`)
    or §3.7 (blocks of ``layout``) for residuals ``error`` :math:`= \\mathbf y - \\mu(X)` and
    noise variances ``noise``.

    :param alpha: the powers, fixed (read-only): which of the power correction's forms is
        computed depends on their values.
    """
    alpha_tensor = tf.constant(alpha, dtype=default_float())
    if layout is None:
        precision_sqrt = tf.math.rsqrt(alpha_tensor * projection.residual + noise)
        return GaussianFactors(
            A=projection.A * precision_sqrt,
            e=error * precision_sqrt[:, None],
            log_det=-2 * tf.reduce_sum(tf.math.log(precision_sqrt)),
            correction=tf.reduce_sum(power_correction(alpha_tensor, projection.residual / noise)),
        )
    return _block_factors(kernel, X, error, noise, projection, alpha, alpha_tensor, layout)


def _block_factors(
    kernel: Kernel,
    X: tf.Tensor,
    error: tf.Tensor,
    noise: tf.Tensor,
    projection: Projection,
    alpha: np.ndarray,
    alpha_tensor: tf.Tensor,
    layout: BlockPartition,
) -> GaussianFactors:
    """Block factors, padded to a common size S: padding rows have D = 0 and unit noise."""
    index, mask = layout.padded(default_float())
    if alpha.ndim == 1:  # one power per block: the partition (a variable) must still match
        tf.debugging.assert_equal(
            tf.shape(index, out_type=tf.int64)[0],
            tf.constant(alpha.shape[0], tf.int64),
            message=(
                f"`alpha` has one power for each of {alpha.shape[0]} blocks, but the block "
                "partition (`block_assignment`, e.g. restored from a checkpoint) has another "
                "number of blocks; build the model with the checkpoint's blocks"
            ),
        )
    pair_mask = mask[:, :, None] * mask[:, None, :]
    A0_blocks = tf.gather(tf.linalg.adjoint(projection.A), index) * mask[..., None]
    K_blocks = kernel(tf.gather(X, index))  # [B, S, S]
    D_blocks = pair_mask * (K_blocks - tf.linalg.matmul(A0_blocks, A0_blocks, transpose_b=True))
    noise_blocks = tf.gather(noise, index) * mask + (1 - mask)
    block_alpha = alpha_tensor[:, None, None] if alpha.ndim == 1 else alpha_tensor
    L_blocks = checked_cholesky(
        block_alpha * D_blocks + tf.linalg.diag(noise_blocks),
        "Λ_b = α_b D_bb + σ² I (a block factor)",
    )
    A_blocks = tf.linalg.triangular_solve(L_blocks, A0_blocks)  # [B, S, M]
    e_blocks = tf.linalg.triangular_solve(L_blocks, tf.gather(error, index) * mask[..., None])
    noise_sqrt = tf.sqrt(noise_blocks)
    scaled = D_blocks / noise_sqrt[:, :, None] / noise_sqrt[:, None, :]
    if np.all(alpha == 1):  # PITC: the correction vanishes, skip the eigenvalues
        correction = tf.zeros([], dtype=scaled.dtype)
    elif np.all(alpha == 0):
        correction = 0.5 * tf.reduce_sum(tf.linalg.trace(scaled))
    else:
        eigenvalues = tf.maximum(tf.linalg.eigvalsh(scaled), 0)  # [B, S]
        eigen_alpha = alpha_tensor[:, None] if alpha.ndim == 1 else alpha_tensor
        correction = tf.reduce_sum(power_correction(eigen_alpha, eigenvalues))
    num_inducing = tf.shape(projection.A)[0]
    return GaussianFactors(
        A=tf.linalg.adjoint(tf.reshape(A_blocks, [-1, num_inducing])),
        e=tf.reshape(e_blocks, [-1, tf.shape(error)[1]]),
        log_det=2 * tf.reduce_sum(tf.math.log(tf.linalg.diag_part(L_blocks))),
        correction=correction,
    )


@check_shapes(
    "A: [M, N]",
    "shift: [M, R]",
    "return[0]: [M, M]",
    "return[1]: [M, R]",
)
def inner_factors(A: tf.Tensor, shift: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """
    The whitened :math:`q(\\mathbf v)`, :math:`\\mathbf u = L\\mathbf v`, of Gaussian factors
    :math:`A`: :math:`L_B = \\mathrm{chol}(I + AA^\\top)` and :math:`\\mathbf c = L_B^{-1}`
    ``shift`` (``shift`` is :math:`A\\mathbf e` for the factors of this module, :math:`A_0
    \\boldsymbol\\nu` for sites).
    """
    eye = tf.eye(tf.shape(A)[0], dtype=A.dtype)
    LB = checked_cholesky(eye + tf.linalg.matmul(A, A, transpose_b=True), INNER)
    return LB, tf.linalg.triangular_solve(LB, shift)


class CollapsedProblem(NamedTuple):
    """
    What defines the closed-form fixed point of a Gaussian likelihood (§3.6-3.7): the model's
    parts, the data ``(X, Y)``, the powers ``alpha`` (fixed, read-only: which form of the power
    correction is computed depends on their values) and the block ``layout`` (``None`` for one
    factor per data point).
    """

    kernel: Kernel
    inducing_variable: InducingVariables
    data: RegressionData
    likelihood: Gaussian
    mean_function: MeanFunction
    alpha: np.ndarray
    layout: BlockPartition | None


class _Collapsed(NamedTuple):
    projection: Projection
    factors: GaussianFactors
    LB: tf.Tensor
    c: tf.Tensor


def _collapsed(problem: CollapsedProblem) -> _Collapsed:
    X, Y = problem.data
    projection = project(problem.inducing_variable, problem.kernel, X, name="data X")
    error = Y - problem.mean_function(X)
    noise = problem.likelihood.variance_at(X)[:, 0]
    factors = gaussian_factors(
        problem.kernel, X, error, noise, projection, problem.alpha, problem.layout
    )
    LB, c = inner_factors(factors.A, tf.linalg.matmul(factors.A, factors.e))
    return _Collapsed(projection, factors, LB, c)


@check_shapes(
    "problem.data[0]: [N, D]",
    "problem.data[1]: [N, R]",
    "return[0]: [M, M]",
    "return[1]: [M, M]",
    "return[2]: [M, R]",
)
def collapsed_posterior(problem: CollapsedProblem) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """
    ``(L, LB, c)`` of the fixed point (§3.6-3.7): :math:`q(\\mathbf u) = \\mathcal N(L
    L_B^{-\\top}\\mathbf c, L (L_B L_B^\\top)^{-1} L^\\top)` (eq. 18).
    """
    terms = _collapsed(problem)
    return terms.projection.L, terms.LB, terms.c


@check_shapes(
    "problem.data[0]: [N, D]",
    "problem.data[1]: [N, R]",
    "return: []",
)
def collapsed_log_marginal_likelihood(
    problem: CollapsedProblem, include_power_correction: bool = True
) -> tf.Tensor:
    """
    :math:`\\log\\mathcal Z_\\alpha`, eq. 128 and its block and multi-power forms (§3.7); the
    ``R`` output columns share the factors. Without the power correction (``False``) it is
    :math:`\\log\\mathcal N(\\mathbf y; \\mu(X), \\bar K)`, which at :math:`\\alpha = 0` is DTC's.
    """
    terms = _collapsed(problem)
    factors, LB, c = terms.factors, terms.LB, terms.c
    num_outputs = tf.cast(tf.shape(factors.e)[1], default_float())
    num_data = tf.cast(tf.shape(problem.data[0])[0], default_float())
    log_det = factors.log_det + 2 * tf.reduce_sum(tf.math.log(tf.linalg.diag_part(LB)))
    quad = tf.reduce_sum(tf.square(factors.e)) - tf.reduce_sum(tf.square(c))
    objective = -0.5 * num_outputs * (num_data * np.log(2 * np.pi) + log_det) - 0.5 * quad
    if include_power_correction:
        objective -= num_outputs * factors.correction
    return objective
