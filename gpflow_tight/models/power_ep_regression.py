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

import warnings
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
from scipy.spatial import cKDTree

from ..projection import INNER, Projection, project
from ..validation import check_count, checked_cholesky

__all__ = [
    "power_correction",
    "cluster_blocks",
    "block_layout_shape",
    "BlockPartition",
    "block_assignment",
    "block_layout",
    "read_only",
    "partition",
    "check_alpha",
    "GaussianFactors",
    "gaussian_factors",
    "inner_factors",
    "inner_factors_from_gram",
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
    :math:`d_n / \\sigma_n^2` (block factors compute theirs from a Cholesky factor,
    :func:`gaussian_factors`).
    """
    positive = alpha > 0
    safe_alpha = tf.where(positive, alpha, tf.ones_like(alpha))  # no NaN gradients at α = 0
    powered = (1 - safe_alpha) / (2 * safe_alpha) * tf.math.log1p(safe_alpha * scaled_residual)
    return tf.where(positive, powered, 0.5 * scaled_residual)


def block_layout_shape(num_data: int, block_size: int) -> tuple[int, int]:
    """
    The static layout of the balanced partition of ``num_data`` rows with blocks of at most
    ``block_size`` rows (:func:`cluster_blocks`): :math:`B = \\lceil N / S \\rceil` blocks of at
    most :math:`\\lceil N / B \\rceil \\le S` rows, a function of :math:`N` and :math:`S` only, so
    that a partition restored from a checkpoint (another seed) fits the same padded shapes.
    """
    num_blocks = -(-num_data // block_size)
    return num_blocks, -(-num_data // num_blocks)


def _capped_assignment(X: np.ndarray, centres: np.ndarray, capacity: int) -> np.ndarray:
    """
    Each row of ``X`` to a centre, no centre taking more than ``capacity`` rows: in rounds, every
    unassigned row proposes to its nearest centre with room left, and each centre accepts its
    closest proposers up to its room. A round fills a centre or places every row, so there are at
    most as many rounds as centres.
    """
    labels = np.full(len(X), -1, dtype=np.int64)
    room = np.full(len(centres), capacity, dtype=np.int64)
    todo = np.arange(len(X))
    while todo.size:
        open_centres = np.flatnonzero(room > 0)
        distance, nearest = cKDTree(centres[open_centres]).query(X[todo])
        target = open_centres[np.asarray(nearest).reshape(-1)]
        order = np.lexsort((np.asarray(distance).reshape(-1), target))  # by centre, then distance
        target = target[order]
        rank = np.arange(len(order)) - np.searchsorted(target, target, side="left")
        accept = rank < room[target]
        labels[todo[order[accept]]] = target[accept]
        room -= np.bincount(target[accept], minlength=len(centres))
        todo = np.sort(todo[order[~accept]])
    return labels


def cluster_blocks(
    X: np.ndarray,
    block_size: int | None,
    seed: int = 0,
    iterations: int = 10,
    *,
    num_blocks: int | None = None,
) -> list[np.ndarray]:
    """
    A balanced partition of the rows of ``X`` into :math:`B = \\lceil N / S \\rceil` blocks of
    nearby points, each of at most :math:`\\lceil N / B \\rceil \\le S` = ``block_size`` rows
    (:func:`block_layout_shape`), none empty: k-means with a size cap. With ``num_blocks``
    instead of ``block_size`` (pass ``None``), :math:`B` = ``num_blocks`` (at most N) blocks of
    at most :math:`\\lceil N / B \\rceil` rows. The centres start from
    ``scipy.cluster.vq.kmeans2`` (k-means++, ``seed``); then, ``iterations`` times at most, the
    rows are assigned to centres under the cap (:func:`_capped_assignment`) and the centres
    moved to their rows' means. A centre left without rows takes the nearest row of a block
    with two or more.
    """
    X = np.asarray(X, dtype=float)
    num_data = len(X)
    if num_blocks is None:
        if block_size is None:
            raise ValueError("Pass `block_size` or `num_blocks` to `cluster_blocks`.")
        num_blocks, capacity = block_layout_shape(num_data, block_size)
    else:
        capacity = -(-num_data // num_blocks)
    if num_blocks == 1:
        return [np.arange(num_data)]
    with warnings.catch_warnings():  # an empty k-means cluster is fixed below
        warnings.simplefilter("ignore", UserWarning)
        centres, _ = kmeans2(X, num_blocks, minit="++", seed=seed)
    labels = np.full(num_data, -1, dtype=np.int64)
    for _ in range(iterations):
        new_labels = _capped_assignment(X, centres, capacity)
        if np.array_equal(new_labels, labels):
            break
        labels = new_labels
        counts = np.bincount(labels, minlength=num_blocks)
        sums = np.zeros_like(centres)
        np.add.at(sums, labels, X)
        filled = counts > 0
        centres[filled] = sums[filled] / counts[filled, None]
    counts = np.bincount(labels, minlength=num_blocks)
    for empty in np.flatnonzero(counts == 0):
        movable = np.flatnonzero(counts[labels] > 1)
        row = movable[np.argmin(np.sum((X[movable] - centres[empty]) ** 2, axis=1))]
        counts[labels[row]] -= 1
        labels[row], counts[empty] = empty, 1
    return [np.flatnonzero(labels == b) for b in range(num_blocks)]


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

    The padded layout of the vectorised block computations, :meth:`padded`, has a static shape,
    ``[num_blocks, capacity]``, fixed when the partition is made (from :math:`N` and the block
    size for :func:`cluster_blocks`, from the largest block for given blocks), so that compiled
    functions, XLA among them, know it at trace time. Which rows fill it is computed from
    ``assignment`` inside the graph (:math:`O(N \\log N)`), so a compiled function follows a
    restored partition that fits the layout. Rows of a block are in ascending order.
    """

    def __init__(
        self,
        assignment: tf.Variable | tf.Tensor | np.ndarray,
        num_blocks: int | None = None,
        capacity: int | None = None,
    ) -> None:
        self.assignment = assignment
        if num_blocks is None or capacity is None:
            counts = np.bincount(self.labels)
            num_blocks = len(counts) if num_blocks is None else num_blocks
            capacity = int(counts.max()) if capacity is None else capacity
        self.num_blocks = int(num_blocks)
        self.capacity = int(capacity)

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

    def padded(self, dtype: tf.DType, exact: bool = False) -> tuple[tf.Tensor, tf.Tensor]:
        """
        ``indices`` [B, S] (int64) and ``mask`` [B, S] (``dtype``, 1 for a row, 0 for
        padding) of the blocks padded to ``capacity`` S, B = ``num_blocks`` (static shapes);
        padding indices are 0. A partition (restored from a checkpoint) with a block number of B
        or more, or a block larger than S, is refused (``InvalidArgumentError``), and with
        ``exact`` (one power per block) also one with fewer than B blocks.
        """
        labels = tf.cast(tf.convert_to_tensor(self.assignment), tf.int64)
        num_data = tf.size(labels, out_type=tf.int64)
        sizes = tf.math.unsorted_segment_sum(
            tf.ones_like(labels), tf.clip_by_value(labels, 0, self.num_blocks - 1), self.num_blocks
        )
        checks = [
            tf.debugging.assert_non_negative(
                labels, message="`block_assignment` holds a negative block number"
            ),
        ]
        if exact:
            checks.append(
                tf.debugging.assert_equal(
                    tf.reduce_max(labels) + 1,
                    tf.constant(self.num_blocks, tf.int64),
                    message=(
                        f"`alpha` has one power for each of {self.num_blocks} blocks, but the "
                        "block partition (`block_assignment`, e.g. restored from a checkpoint) "
                        "has another number of blocks; build the model with the checkpoint's "
                        "blocks"
                    ),
                )
            )
        checks += [
            tf.debugging.assert_less(
                labels,
                tf.constant(self.num_blocks, tf.int64),
                message=(
                    f"`block_assignment` (e.g. restored from a checkpoint) holds a block number "
                    f">= {self.num_blocks}, the number of blocks this model was built with; "
                    "build the model with the checkpoint's blocks (`blocks=...`)"
                ),
            ),
            tf.debugging.assert_less_equal(
                sizes,
                tf.constant(self.capacity, tf.int64),
                message=(
                    f"`block_assignment` (e.g. restored from a checkpoint) has a block of more "
                    f"than {self.capacity} rows, the largest this model was built with; build the "
                    "model with the checkpoint's blocks (`blocks=...`)"
                ),
            ),
        ]
        with tf.control_dependencies(checks):
            order = tf.argsort(labels * num_data + tf.range(num_data))  # rows grouped by block
        order = tf.cast(order, tf.int64)
        sorted_labels = tf.gather(labels, order)
        starts = tf.cumsum(sizes, exclusive=True)
        position = tf.range(num_data) - tf.gather(starts, sorted_labels)
        coordinates = tf.stack([sorted_labels, position], axis=1)
        shape = tf.constant([self.num_blocks, self.capacity], tf.int64)
        indices = tf.scatter_nd(coordinates, order, shape)
        mask = tf.scatter_nd(coordinates, tf.ones([num_data], dtype), shape)
        return indices, mask


def block_assignment(blocks: Sequence[Any], num_data: int, name: str = "blocks") -> np.ndarray:
    """
    Check that ``blocks`` (index arrays) partitions ``range(num_data)``; return the block of
    each row, ``[num_data]`` int64, blocks numbered in their given order. Errors name the
    argument ``name``.
    """
    try:
        blocks = [np.asarray(block).reshape(-1) for block in blocks]
    except (TypeError, ValueError) as error:
        raise TypeError(f"`{name}` must be a sequence of integer index arrays.") from error
    if any(block.size == 0 for block in blocks):
        raise ValueError(f"`{name}` contains an empty block; remove it.")
    for block in blocks:
        if not np.issubdtype(block.dtype, np.integer):
            raise TypeError(
                f"`{name}` must hold integer row indices, got a block of dtype {block.dtype} "
                "(cast it with `.astype(int)` if its values are whole numbers)."
            )
    blocks = [block.astype(np.int64) for block in blocks]
    everything = np.concatenate(blocks) if blocks else np.zeros(0, np.int64)
    counts = np.bincount(
        everything[(everything >= 0) & (everything < num_data)], minlength=num_data
    )
    if everything.min(initial=0) < 0 or everything.max(initial=0) >= num_data:
        raise ValueError(f"`{name}` holds indices outside 0..{num_data - 1} (the data rows).")
    if np.any(counts != 1):
        repeated, missing = np.flatnonzero(counts > 1), np.flatnonzero(counts == 0)
        raise ValueError(
            f"`{name}` must partition the data rows: every row in exactly one block. "
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
) -> BlockPartition | None:
    """
    The partition (read-only labels, :func:`block_assignment`) of ``blocks``, padded to their
    largest block, or the balanced partition of ``block_size`` (:func:`cluster_blocks`), padded
    to :func:`block_layout_shape`; ``None`` for neither (one factor per data point).
    """
    if blocks is not None and block_size is not None:
        raise ValueError("Pass either `blocks` or `block_size`, not both.")
    if block_size is not None:
        check_count(block_size, "block_size")
        labels = block_assignment(cluster_blocks(X, int(block_size), seed=seed), len(X))
        return BlockPartition(read_only(labels), *block_layout_shape(len(X), int(block_size)))
    if blocks is None:
        return None
    return BlockPartition(read_only(block_assignment(blocks, len(X))))


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
    :math:`\\Lambda = \\mathrm{blkdiag}(\\alpha_b D_{bb} + \\Sigma_b)`, through what the
    collapsed objective needs of :math:`A = A_0 \\Lambda^{-1/2}` and :math:`\\mathbf e =
    \\Lambda^{-1/2} (\\mathbf y - \\mu(X))`: ``gram`` :math:`= AA^\\top = A_0\\Lambda^{-1}
    A_0^\\top`, ``shift`` :math:`= A\\mathbf e`, ``quad`` :math:`= \\|\\mathbf e\\|^2` (summed
    over the output columns), ``log_det`` :math:`= \\log|\\Lambda|` and ``correction``, the power
    correction :math:`\\sum_b \\frac{1-\\alpha_b}{2\\alpha_b} \\log|I + \\alpha_b \\Sigma_b^{-1}
    D_{bb}|` of one output column.
    """

    gram: tf.Tensor
    shift: tf.Tensor
    quad: tf.Tensor
    log_det: tf.Tensor
    correction: tf.Tensor


@check_shapes(
    "X: [N, D]",
    "error: [N, R]",
    "noise: [N]",
    "projection.A: [M, N]",
    "projection.residual: [N]",
    "return.gram: [M, M]",
    "return.shift: [M, R]",
    "return.quad: []",
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
        A = projection.A * precision_sqrt
        e = error * precision_sqrt[:, None]
        return GaussianFactors(
            gram=tf.linalg.matmul(A, A, transpose_b=True),
            shift=tf.linalg.matmul(A, e),
            quad=tf.reduce_sum(tf.square(e)),
            log_det=-2 * tf.reduce_sum(tf.math.log(precision_sqrt)),
            correction=tf.reduce_sum(power_correction(alpha_tensor, projection.residual / noise)),
        )
    return _block_factors(kernel, X, error, noise, projection, alpha, alpha_tensor, layout)


def _whitened_blocks(
    K: tf.Tensor, A0: tf.Tensor, E: tf.Tensor, alpha: tf.Tensor
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
    """
    For blocks :math:`\\Lambda_b = I + \\alpha_b(K_b - A_{0,b}A_{0,b}^\\top)` ([B, S, S], from
    ``K`` [B, S, S], ``A0`` [B, S, M], constant ``alpha``) and right-hand sides ``E`` [B, S, R]:
    :math:`G = \\sum_b A_{0,b}^\\top\\Lambda_b^{-1}A_{0,b}` [M, M], :math:`\\mathbf g =
    \\sum_b A_{0,b}^\\top\\Lambda_b^{-1}E_b` [M, R], :math:`q = \\sum_b \\mathrm{tr}\\,
    E_b^\\top\\Lambda_b^{-1}E_b` and :math:`\\log|\\Lambda_b|` [B], from one batched Cholesky
    :math:`\\Lambda_b = L_bL_b^\\top` and one triangular solve :math:`V_b = L_b^{-1}[A_{0,b},
    E_b]`.

    The gradient is written out rather than taken through the Cholesky factor (TensorFlow's
    Cholesky gradient forms :math:`L_b^{-1}` and three [S, S] products per block). With
    :math:`U_b = \\Lambda_b^{-1}[A_{0,b}, E_b] = L_b^{-\\top}V_b` and the upstream gradients
    :math:`\\bar G, \\bar{\\mathbf g}, \\bar q, \\bar\\ell_b` gathered in the symmetric
    :math:`H = \\begin{pmatrix} \\tfrac12(\\bar G + \\bar G^\\top) & \\tfrac12\\bar{\\mathbf g}
    \\\\ \\tfrac12\\bar{\\mathbf g}^\\top & \\bar q I\\end{pmatrix}`, the function is
    :math:`\\sum_b \\mathrm{tr}(H [A_{0,b}, E_b]^\\top\\Lambda_b^{-1}[A_{0,b}, E_b]) +
    \\bar\\ell_b\\log|\\Lambda_b|`, so (from :math:`d\\Lambda^{-1} = -\\Lambda^{-1}d\\Lambda
    \\Lambda^{-1}` and :math:`d\\log|\\Lambda| = \\mathrm{tr}\\,\\Lambda^{-1}d\\Lambda`)
    :math:`T_b = U_bH`, :math:`\\bar\\Lambda_b = \\bar\\ell_b\\Lambda_b^{-1} - T_bU_b^\\top`,
    :math:`[\\bar A_{0,b}, \\bar E_b] = 2T_b - [2\\alpha_b\\bar\\Lambda_bA_{0,b}, 0]` and
    :math:`\\bar K_b = \\alpha_b\\bar\\Lambda_b`: one [N, M+R] x [M+R, M+R] product and
    :math:`O(BS^2(M + R) + BS^3)` block work, against about twice that through the Cholesky.
    """

    @tf.custom_gradient
    def whitened(K: tf.Tensor, A0: tf.Tensor, E: tf.Tensor) -> Any:
        num_inducing = tf.shape(A0)[-1]
        eye = tf.eye(tf.shape(K)[-1], batch_shape=tf.shape(K)[:1], dtype=K.dtype)
        Lam = eye + alpha * (K - tf.linalg.matmul(A0, A0, transpose_b=True))
        L = checked_cholesky(Lam, "Λ_b = α_b D_bb + σ² I (a block factor)")
        both = tf.concat([A0, E], axis=-1)  # [B, S, M + R]
        V = tf.linalg.triangular_solve(L, both)
        flat = tf.reshape(V, [-1, tf.shape(both)[-1]])
        VA, VE = flat[:, :num_inducing], flat[:, num_inducing:]
        gram = tf.linalg.matmul(VA, VA, transpose_a=True)
        shift = tf.linalg.matmul(VA, VE, transpose_a=True)
        quad = tf.reduce_sum(tf.square(VE))
        log_det = 2 * tf.reduce_sum(tf.math.log(tf.linalg.diag_part(L)), axis=-1)

        def gradient(
            d_gram: tf.Tensor, d_shift: tf.Tensor, d_quad: tf.Tensor, d_log_det: tf.Tensor
        ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
            U = tf.linalg.triangular_solve(L, V, adjoint=True)  # Λ⁻¹ [A0, E]
            num_outputs = tf.shape(E)[-1]
            H = tf.concat(
                [
                    tf.concat([0.5 * (d_gram + tf.linalg.adjoint(d_gram)), 0.5 * d_shift], 1),
                    tf.concat(
                        [
                            0.5 * tf.linalg.adjoint(d_shift),
                            d_quad * tf.eye(num_outputs, dtype=K.dtype),
                        ],
                        1,
                    ),
                ],
                0,
            )
            T = tf.reshape(
                tf.linalg.matmul(tf.reshape(U, tf.shape(flat)), H), tf.shape(both)
            )  # [B, S, M + R]
            inverse = tf.linalg.cholesky_solve(L, eye)
            d_Lam = d_log_det[:, None, None] * inverse - tf.linalg.matmul(T, U, transpose_b=True)
            d_Lam = 0.5 * (d_Lam + tf.linalg.adjoint(d_Lam))
            d_A0 = 2 * T[..., :num_inducing] - 2 * alpha * tf.linalg.matmul(d_Lam, A0)
            return alpha * d_Lam, d_A0, 2 * T[..., num_inducing:]

        return (gram, shift, quad, log_det), gradient

    return whitened(K, A0, E)


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
    """
    Block factors, padded to the layout's static shape [B, S]: padding rows have D = 0 and unit
    noise, so they add nothing.

    One batched Cholesky gives both the whitening and the power correction. With
    :math:`\\Sigma_b` the block's (diagonal) noise and :math:`\\tilde D_b = \\Sigma_b^{-1/2}
    D_{bb} \\Sigma_b^{-1/2}`, factor :math:`I + \\alpha_b \\tilde D_b = \\tilde L_b
    \\tilde L_b^\\top`; then :math:`\\Lambda_b = \\alpha_b D_{bb} + \\Sigma_b =
    (\\Sigma_b^{1/2}\\tilde L_b)(\\Sigma_b^{1/2}\\tilde L_b)^\\top`, so the whitened factors
    are :math:`A_b = \\tilde L_b^{-1}\\Sigma_b^{-1/2} A_{0,b}^\\top` (one triangular solve,
    :func:`_whitened_blocks`), :math:`\\log|\\Lambda_b| = \\log|\\Sigma_b| + \\log|I +
    \\alpha_b\\tilde D_b|` and the power correction of §3.7 (with the corrected sign) is

    .. math::
        \\frac{1 - \\alpha_b}{2\\alpha_b} \\log|I + \\alpha_b \\tilde D_b| =
        \\frac{1 - \\alpha_b}{\\alpha_b} \\sum_i \\log [\\tilde L_b]_{ii},

    no eigendecomposition. At :math:`\\alpha_b = 1` (PITC) it vanishes and is not computed; at
    :math:`\\alpha_b = 0` it is the limit :math:`\\frac12\\mathrm{tr}\\,\\tilde D_b = \\frac12
    \\sum_{n \\in b} d_n / \\sigma_n^2` (Remark 6), from the diagonal alone.
    """
    # with one power per block, the partition (a variable) must keep the number of blocks
    index, mask = layout.padded(default_float(), exact=alpha.ndim == 1)
    noise_blocks = tf.gather(noise, index) * mask + (1 - mask)  # [B, S]
    noise_rsqrt = tf.math.rsqrt(noise_blocks) * mask  # 0 on padding
    A0_blocks = tf.gather(tf.linalg.adjoint(projection.A), index) * noise_rsqrt[..., None]
    K_blocks = kernel(tf.gather(X, index))  # [B, S, S]
    scaled_K = noise_rsqrt[:, :, None] * K_blocks * noise_rsqrt[:, None, :]
    block_alpha = alpha_tensor[:, None, None] if alpha.ndim == 1 else alpha_tensor
    E_blocks = tf.gather(error, index) * noise_rsqrt[..., None]
    gram, shift, quad, block_log_det = _whitened_blocks(
        scaled_K, A0_blocks, E_blocks, block_alpha
    )  # block_log_det = log|I + α_b D̃_b|
    log_noise = tf.reduce_sum(tf.math.log(noise_blocks))  # padding: log 1 = 0
    if np.all(alpha == 1):  # PITC: the correction vanishes
        correction = tf.zeros([], dtype=gram.dtype)
    else:
        per_block = alpha_tensor if alpha.ndim == 1 else alpha_tensor * tf.ones_like(block_log_det)
        positive = per_block > 0
        safe_alpha = tf.where(positive, per_block, tf.ones_like(per_block))
        trace = tf.math.unsorted_segment_sum(  # ½ tr D̃_b, the α_b → 0 limit
            0.5 * projection.residual / noise,
            tf.cast(tf.convert_to_tensor(layout.assignment), tf.int64),
            layout.num_blocks,
        )
        correction = tf.reduce_sum(
            tf.where(positive, (1 - safe_alpha) / (2 * safe_alpha) * block_log_det, trace)
        )
    return GaussianFactors(
        gram=gram,
        shift=shift,
        quad=quad,
        log_det=log_noise + tf.reduce_sum(block_log_det),
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
    return inner_factors_from_gram(tf.linalg.matmul(A, A, transpose_b=True), shift)


@check_shapes(
    "gram: [M, M]",
    "shift: [M, R]",
    "return[0]: [M, M]",
    "return[1]: [M, R]",
)
def inner_factors_from_gram(gram: tf.Tensor, shift: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """:func:`inner_factors` from ``gram`` :math:`= AA^\\top`."""
    eye = tf.eye(tf.shape(gram)[0], dtype=gram.dtype)
    LB = checked_cholesky(eye + gram, INNER)
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
    LB, c = inner_factors_from_gram(factors.gram, factors.shift)
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
    num_outputs = tf.cast(tf.shape(factors.shift)[1], default_float())
    num_data = tf.cast(tf.shape(problem.data[0])[0], default_float())
    log_det = factors.log_det + 2 * tf.reduce_sum(tf.math.log(tf.linalg.diag_part(LB)))
    quad = factors.quad - tf.reduce_sum(tf.square(c))
    objective = -0.5 * num_outputs * (num_data * np.log(2 * np.pi) + log_det) - 0.5 * quad
    if include_power_correction:
        objective -= num_outputs * factors.correction
    return objective
