"""
Nearest neighbours for VNNGP (Wu, Pleiss & Cunningham 2022), by Euclidean distance on the raw
inputs, each row nearest first.

- :func:`graph_nearest_neighbors`: the ``k`` nearest inducing inputs of query points in
  TensorFlow ops only, so the same eagerly, under ``tf.function`` and in an exported SavedModel
  (under XLA up to the order of near-ties), with memory :math:`O(Qk)` plus a fixed-size working
  block; from 17 dimensions a matrix-product screen with a certified bound spares most exact
  distances, and eager float64 calls below go to the k-d tree. VNNGP uses it for predictions
  and for data batches that do not carry their neighbours.
- :func:`over_row_blocks`: a function over blocks of rows in one ``tf.while_loop``, results
  written in place, every block of one size (what XLA compiles); the searches and VNNGP's
  chunked predictions loop with it.
- :func:`graph_find_rows`: which row of ``points`` each query equals exactly, by a
  lexicographic binary search over an order from :func:`lexicographic_order`, in
  :math:`O(QD\\log M)` TensorFlow ops (VNNGP's data batches of inducing inputs, Z = X).
- :func:`nearest_neighbors` and :func:`sequential_nearest_neighbors`: tables computed once with
  ``scipy.spatial.cKDTree`` outside the graph (the training inputs' neighbours, the Vecchia
  prior's neighbour sets :math:`n(j)`).

Ties go to the lower index (row of ``points``) in :func:`graph_nearest_neighbors` and
:func:`nearest_neighbors`, which therefore return the same neighbours in the same order: both
compare the same squared distances, summed one coordinate at a time in coordinate order (for
more than 16 dimensions the graph search sums them with ``tf.reduce_sum``, and the two agree up
to the rounding of distances that are equal in exact arithmetic).
"""

from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
import tensorflow as tf
from scipy.spatial import cKDTree

from .validation import check_count, require

__all__ = [
    "graph_find_rows",
    "graph_nearest_neighbors",
    "lexicographic_order",
    "nearest_neighbors",
    "over_row_blocks",
    "sequential_nearest_neighbors",
]

_BRUTE_FORCE_BLOCK = 32  # below this block size, distances are cheaper than trees
QUERY_BLOCK = 512  # query rows per block of the graph search
FALLBACK_QUERY_BLOCK = 32  # query rows per block of the exact search after the screen
WORKING_ELEMENTS = 2**20  # distances per working block of the graph search (8 MB in float64)
_UNROLLED_DIM = 16  # up to this dimension, distances are summed one coordinate at a time
_CANDIDATES_PER_NEIGHBOR = 2  # the screen's candidates per neighbour sought
# From this dimension the search screens (see _search). Below it, exact distances summed one
# coordinate at a time took 0.6-0.7x the screen's time in float32 (1.1-1.5x in float64, whose
# eager calls go to the k-d tree there): benchmarks/results/vnngp_search_cost.md.
SCREEN_FROM_DIM = _UNROLLED_DIM + 1
HOST_SEARCH = True  # eager float64 searches of at most 16 dimensions on the CPU: k-d tree
# Machine epsilon and smallest normal number of each float dtype (TensorFlow flushes smaller
# results to zero).
_ROUNDING = {
    tf.float16: (2.0**-10, 2.0**-14),
    tf.bfloat16: (2.0**-7, 2.0**-126),
    tf.float32: (2.0**-23, 2.0**-126),
    tf.float64: (2.0**-52, 2.0**-1022),
}
# An eager search goes to the k-d tree from this many queries: fewer are cheaper in the graph
# than building the tree (kin40k, M = 36,000, D = 8, one thread: 59-64 ms on the tree for 1-8
# queries against 11-45 ms, 71 ms for 32 against 90 ms). And only for inputs whose non-zero
# magnitudes lie in _HOST_MAGNITUDES: numpy keeps subnormals and overflows where TensorFlow
# flushes to zero.
HOST_MIN_QUERIES = 32
_HOST_MAGNITUDES = (1e-100, 1e100)
_TIE_TOLERANCE = 1e-9  # k-d tree distances this close (relatively) are re-ranked exactly


@tf.autograph.experimental.do_not_convert
def graph_nearest_neighbors(
    points: tf.Tensor,
    queries: tf.Tensor,
    k: int,
    *,
    query_block: int | None = None,
    point_block: int | None = None,
) -> tf.Tensor:
    """
    Indices [Q, k] (int64) of the ``k`` nearest ``points`` [M, D] to each of the ``queries``
    [Q, D], nearest first; ties go to the lower index.

    A brute-force search that never holds the [Q, M] distance matrix: for each block of
    ``query_block`` queries (default ``QUERY_BLOCK`` = 512), a ``tf.while_loop`` scans the points
    in blocks of ``point_block`` and keeps the running nearest with ``tf.math.top_k``. Distances
    are sums of squared coordinate differences, as in a k-d tree, not
    :math:`\\|x\\|^2 - 2x^Tz + \\|z\\|^2`, whose cancellation can reorder close neighbours.
    From ``SCREEN_FROM_DIM`` = 17 dimensions, where those sums need a [query, point, D] block, a
    screen ranks the points instead by a lower bound on their distance from one matrix product
    per block and keeps 2k candidates (see :func:`_search`); the k nearest of them by exact
    distance are the answer wherever the bound proves no other point nearer, which on data
    without near-ties is every query, and the other queries are searched exactly, in blocks of
    ``FALLBACK_QUERY_BLOCK`` = 32 (with other rows filling the block). Cost
    :math:`O(QMD)`, mostly in elementwise work or matrix products and ``top_k``; memory
    :math:`O(Qk)` plus a working block of ``query_block × point_block`` values (by default
    ``point_block`` makes it ``WORKING_ELEMENTS`` = 2²⁰, 8 MB in float64, divided by D for the
    exact distances above 16 dimensions; the screen's gathered [point_block, D] rows and its
    re-ranked [rows, 2k, D] values are bounded alike, with fewer than ``query_block`` rows
    per block where 2kD calls for it). Blocks hold at least k points (2k for the screen).

    Ties: ``tf.math.top_k`` puts the lower position first among equal values, and every ranking
    that decides the answer sees its candidates in index order (see :func:`_lowest_over_blocks`),
    so the result is the ``k`` smallest (distance, index) pairs in lexicographic order, on every
    device. XLA (``jit_compile=True``) may contract the sums into fused multiply-adds, which can
    order near-ties (distances equal to rounding) differently from the plain graph.

    Only TensorFlow ops, so it runs inside ``tf.function`` and in a SavedModel alike; an eager
    call runs the same ops as a (cached) ``tf.function``, which fuses them, except on the CPU
    for float64 inputs of at most 16 dimensions (and ``HOST_SEARCH``): there
    :func:`nearest_neighbors` returns the same indices (it sums the distances of near-ties in
    the same order) from a k-d tree, several times faster. No gradient flows through it.

    :param k: 1 ≤ k ≤ M (a Python int: the output's static width).

    Non-finite values are not refused: the search runs inside training and prediction graphs,
    where a NaN parameter must give a NaN loss (which GPflow's optimisers back off from), not an
    error. A NaN or infinite row gets well-defined but meaningless neighbours, the same eagerly
    and compiled; callers check their inputs (``VNNGP`` checks ``Xnew`` and its batches).
    """
    k = check_count(k, "k")
    points = tf.stop_gradient(tf.convert_to_tensor(points))
    if points.dtype not in _ROUNDING:
        raise TypeError(
            f"`points` must be float16, bfloat16, float32 or float64, got {points.dtype.name}: "
            "cast the inputs to a float dtype."
        )
    queries = tf.stop_gradient(tf.cast(queries, points.dtype))
    dim = points.shape[-1]
    if dim is None or points.shape.rank != 2:
        raise ValueError(f"`points` must be [M, D] with a known D, got shape {points.shape}.")
    query_block = max(int(QUERY_BLOCK if query_block is None else query_block), 1)

    if queries.shape.rank != 2 or queries.shape[-1] not in (None, dim):
        raise ValueError(f"`queries` must be [Q, {dim}], got shape {queries.shape}.")
    if points.shape[0] is not None and k > points.shape[0]:
        raise ValueError(f"`k` = {k} exceeds the number of points, {points.shape[0]}.")
    blocks = _block_sizes(k, dim, query_block, point_block)
    if tf.executing_eagerly() and _on_host(points, queries, dim):
        return tf.constant(nearest_neighbors(points.numpy(), queries.numpy(), k))
    if tf.executing_eagerly():  # the same ops, compiled: fused kernels, no per-op dispatch
        return _compiled_search(points, queries, k, dim, blocks, dim >= SCREEN_FROM_DIM)
    if points.shape[0] is None:  # M known only when the graph runs
        check = require(
            tf.shape(points)[0] >= k,
            f"`k` = {k} exceeds the number of points: give at least {k} points or a smaller k.",
        )
        with tf.control_dependencies([] if check is None else [check]):
            points = tf.identity(points)
    return _search(points, queries, k, dim, blocks, dim >= SCREEN_FROM_DIM)


class _Blocks(NamedTuple):
    """Rows per block of the graph search: of queries and of points, for the screen, for the
    exact search alone and for the exact search of the rows the screen does not certify."""

    screen_queries: int
    screen_points: int
    exact_queries: int
    exact_points: int
    fallback_queries: int
    fallback_points: int


def _block_sizes(k: int, dim: int, query_block: int, point_block: int | None) -> _Blocks:
    """
    Block sizes whose working blocks hold about ``WORKING_ELEMENTS`` values: the screen's
    [queries, points] bounds, its gathered [points, D] rows and its [queries, 2k, D]
    re-ranking (so fewer than ``query_block`` queries per block where 2kD exceeds
    ``WORKING_ELEMENTS / query_block``), and the exact search's [queries, points] distances, or
    [queries, points, D] differences above ``_UNROLLED_DIM`` dimensions. The rows the screen
    leaves go in blocks of ``FALLBACK_QUERY_BLOCK``: every block has one size, so a single such
    row costs a whole block. Point blocks hold at least 2k points for the screen and k for the
    exact search. (Independent of M, so that eager calls share one compiled search.)
    """
    width = _CANDIDATES_PER_NEIGHBOR * k
    per_pair = 1 if dim <= _UNROLLED_DIM else dim  # values per (query, point) of exact sums

    def points_per_block(size: int, least: int) -> int:
        return max(int(size if point_block is None else point_block), least)

    fallback_queries = min(query_block, FALLBACK_QUERY_BLOCK)
    return _Blocks(
        screen_queries=min(query_block, max(WORKING_ELEMENTS // (width * dim), 1)),
        screen_points=points_per_block(WORKING_ELEMENTS // max(query_block, dim), width),
        exact_queries=query_block,
        exact_points=points_per_block(WORKING_ELEMENTS // (query_block * per_pair), k),
        fallback_queries=fallback_queries,
        fallback_points=points_per_block(WORKING_ELEMENTS // (fallback_queries * per_pair), k),
    )


def _on_host(points: tf.Tensor, queries: tf.Tensor, dim: int) -> bool:
    """Whether an eager search goes to :func:`nearest_neighbors`, which returns the same indices
    there: while ``HOST_SEARCH``, float64 inputs of at most ``_UNROLLED_DIM`` dimensions, both
    on the CPU, at least ``HOST_MIN_QUERIES`` queries, finite with non-zero magnitudes within
    ``_HOST_MAGNITUDES``."""
    if not (
        HOST_SEARCH
        and points.dtype == tf.float64
        and dim <= _UNROLLED_DIM
        and queries.shape[0] >= HOST_MIN_QUERIES
        and all(tf.DeviceSpec.from_string(t.device).device_type == "CPU" for t in (points, queries))
    ):
        return False
    magnitudes = np.abs(np.concatenate([points.numpy().ravel(), queries.numpy().ravel()]))
    magnitudes = magnitudes[magnitudes != 0]  # NaN stays, and fails the test below
    low, high = _HOST_MAGNITUDES
    return bool(np.all((magnitudes >= low) & (magnitudes <= high)))


@tf.autograph.experimental.do_not_convert
def _search(
    points: tf.Tensor,
    queries: tf.Tensor,
    k: int,
    dim: int,
    blocks: _Blocks,
    screen: bool,
) -> tf.Tensor:
    """
    :func:`graph_nearest_neighbors` with checked arguments and the block sizes chosen: with
    ``screen``, a screen by matrix products, exact re-ranking of its candidates, and
    :func:`_exact_search` for the rows the screen cannot certify; else :func:`_exact_search`.

    The screen ranks the points by a lower bound on their squared distance: the expansion
    :math:`\\|q'\\|^2 - 2q'^Tp' + \\|p'\\|^2` in float64 of the inputs centred on the points'
    mean, less a bound on its rounding error, :math:`\\tau(\\|q'\\| + \\|p'\\|)^2`. It keeps the
    ``_CANDIDATES_PER_NEIGHBOR`` × k lowest bounds; their exact distances (summed as the exact
    search sums them) give the k nearest candidates. A row is certified when the largest bound
    kept, less the rounding of exact distances in the inputs' precision, still exceeds the k-th
    candidate's distance: every point left out is then strictly farther, so the result is the
    exact search's, ties included. Rows not certified (many points within rounding of each
    other, or distances that overflow) are searched exactly.
    """
    # a compiled search traced for several shapes sees [None, None]: restore the static D
    points, queries = tf.ensure_shape(points, [None, dim]), tf.ensure_shape(queries, [None, dim])
    if not screen:
        return _exact_search(points, queries, k, dim, blocks.exact_queries, blocks.exact_points)
    num_points = tf.shape(points, out_type=tf.int64)[0]
    width = _CANDIDATES_PER_NEIGHBOR * k
    centre = tf.reduce_mean(tf.cast(points, tf.float64), axis=0)
    screen_tolerance = 2 * (2 * dim + 12) * float(np.finfo(np.float64).eps)
    eps, tiny = _ROUNDING[points.dtype]
    exact_shrink, exact_floor = 1 - 2 * (dim + 3) * eps, 2 * dim * tiny  # relative, flushed

    def centred(rows: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """Rows in float64 less the points' mean, and their squared norms."""
        rows = tf.cast(rows, tf.float64) - centre
        return rows, tf.reduce_sum(tf.square(rows), axis=-1)

    def search(chunk: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """The k nearest points [C, k] of the query rows ``chunk`` [C, D], and whether the
        screen certifies them [C]."""
        shifted, squared = centred(chunk)

        def lower_bounds(block: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            index, rows = _point_block(points, num_points, block, blocks.screen_points)
            rows, row_squared = centred(rows)
            products = tf.matmul(shifted, rows, transpose_b=True)
            expansion = squared[:, None] - 2 * products + row_squared
            spread = tf.square(tf.sqrt(squared)[:, None] + tf.sqrt(row_squared))
            bounds = expansion - screen_tolerance * spread
            bounds = tf.where(tf.math.is_nan(bounds), tf.constant(-np.inf, tf.float64), bounds)
            return tf.where(index < num_points, bounds, np.inf), index

        num_blocks = (num_points + blocks.screen_points - 1) // blocks.screen_points
        bounds, candidates = _lowest_over_blocks(lower_bounds, num_blocks, width)
        candidates = tf.sort(candidates, axis=1)  # top_k's ties then go to the lower index
        rows = tf.gather(points, tf.minimum(candidates, num_points - 1))  # [C, width, D]
        distances = _squared_distances(chunk[:, None, :], rows)
        distances = tf.where(candidates < num_points, distances, np.inf)
        nearest = tf.math.top_k(-distances, k=k)
        radius = tf.cast(-nearest.values[:, -1], tf.float64)
        certified = bounds[:, -1] * exact_shrink - exact_floor > radius
        certified |= width >= num_points
        return tf.gather(candidates, nearest.indices, batch_dims=1), certified

    num_queries = tf.shape(queries, out_type=tf.int64)[0]
    found, certified = over_row_blocks(
        queries,
        blocks.screen_queries,
        search,
        [tf.zeros([num_queries, k], tf.int64), tf.zeros([num_queries], tf.bool)],
    )
    uncertain_first = tf.argsort(tf.cast(certified, tf.int32), stable=True)
    num_uncertain = num_queries - tf.math.count_nonzero(certified)
    return _exact_search(
        points,
        queries,
        k,
        dim,
        blocks.fallback_queries,
        blocks.fallback_points,
        found,
        uncertain_first,
        num_uncertain,
    )


_compiled_search = tf.function(_search, reduce_retracing=True, autograph=False)


@tf.autograph.experimental.do_not_convert
def _exact_search(
    points: tf.Tensor,
    queries: tf.Tensor,
    k: int,
    dim: int,
    query_block: int,
    point_block: int,
    found: tf.Tensor | None = None,
    order: tf.Tensor | None = None,
    count: tf.Tensor | None = None,
) -> tf.Tensor:
    """
    The k nearest ``points`` [Q, k] of ``queries`` by exact squared distances alone: of the
    first ``count`` rows in ``order`` (default every row), written into ``found`` (default
    zeros) at those rows.
    """
    num_points = tf.shape(points, out_type=tf.int64)[0]

    def search(chunk: tf.Tensor) -> tuple[tf.Tensor]:
        def distances(block: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            index, rows = _point_block(points, num_points, block, point_block)
            distances = _squared_distances(chunk[:, None, :], rows[None, :, :])
            return tf.where(index < num_points, distances, np.inf), index

        num_blocks = (num_points + point_block - 1) // point_block
        return (_lowest_over_blocks(distances, num_blocks, k)[1],)

    if found is None:
        found = tf.zeros([tf.shape(queries)[0], k], tf.int64)
    return over_row_blocks(queries, query_block, search, [found], order, count)[0]


def _point_block(
    points: tf.Tensor, num_points: tf.Tensor, block: tf.Tensor, size: int
) -> tuple[tf.Tensor, tf.Tensor]:
    """Indices [P] and rows [P, D] of block ``block`` of ``size`` points; past M the indices
    go on and the rows repeat the last point."""
    index = block * size + tf.range(size, dtype=tf.int64)
    return index, tf.gather(points, tf.minimum(index, num_points - 1))


def _lowest_over_blocks(
    scores: Callable[[tf.Tensor], tuple[tf.Tensor, tf.Tensor]], num_blocks: tf.Tensor, width: int
) -> tuple[tf.Tensor, tf.Tensor]:
    """
    The ``width`` lowest scores [C, width], ascending, and their indices, over ``num_blocks``
    blocks of points: ``scores(block)`` gives a block's scores [C, P] (+inf past M) and indices
    [P], with P ≥ ``width``. A ``tf.while_loop`` merges each block's ``width`` lowest into the
    running ones with one more ``tf.math.top_k`` over 2 × ``width`` candidates.

    Ties: ``tf.math.top_k`` puts the lower position first among equal values; the running
    candidates (lower indices, sorted by score then index) precede each new block's (higher
    indices, sorted likewise), so every merge keeps the lowest (score, index) pairs in
    lexicographic order. The first block fills every slot with a real point (P ≥ ``width`` and,
    as the callers ensure, ``width`` ≤ M or the padding scores +inf), even where scores
    overflow to +inf.
    """

    def block_lowest(block: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        values, index = scores(block)
        lowest = tf.math.top_k(-values, k=width)
        return -lowest.values, tf.gather(index, lowest.indices)

    def merge(
        block: tf.Tensor, best: tf.Tensor, best_index: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        values, index = block_lowest(block)
        lowest = tf.math.top_k(-tf.concat([best, values], axis=1), k=width)
        chosen = tf.gather(tf.concat([best_index, index], axis=1), lowest.indices, batch_dims=1)
        return block + 1, -lowest.values, chosen

    best, best_index = block_lowest(tf.constant(0, tf.int64))
    _, best, best_index = tf.while_loop(
        lambda block, *_: block < num_blocks,
        merge,
        (tf.constant(1, tf.int64), best, best_index),
        parallel_iterations=1,
    )
    return best, best_index


def over_row_blocks(
    inputs: tf.Tensor,
    block_size: int,
    fn: Callable[[tf.Tensor], tuple[tf.Tensor, ...]],
    outputs: Sequence[tf.Tensor],
    order: tf.Tensor | None = None,
    count: tf.Tensor | None = None,
) -> list[tf.Tensor]:
    """
    ``fn`` over the first ``count`` rows of ``inputs`` [N, ...] in ``order`` (a permutation of
    0..N-1, default every row in turn), in a ``tf.while_loop`` over blocks of ``block_size`` ≥ 1
    rows (fewer if N is smaller), its results written into ``outputs`` (one tensor [N, ...] per
    result) at their rows; the memory of one block at a time.

    Every block has the same size, so that XLA can compile the loop: the last one ends at the
    N-th entry of ``order`` and may repeat rows of the one before (or rows past ``count``),
    whose results it writes again unchanged (``fn`` must answer each row alone).
    """
    check_count(block_size, "block_size")
    num_rows = tf.shape(inputs, out_type=tf.int64)[0]
    order = tf.range(num_rows) if order is None else tf.cast(order, tf.int64)
    count = num_rows if count is None else count
    size = tf.minimum(tf.constant(block_size, tf.int64), num_rows)
    num_blocks = (count + size - 1) // tf.maximum(size, 1)

    def next_block(block: tf.Tensor, *outputs: tf.Tensor) -> tuple:
        start = tf.minimum(block * size, num_rows - size)
        rows = tf.slice(order, tf.cast([start], tf.int32), tf.cast([size], tf.int32))
        results = fn(tf.gather(inputs, rows))
        return (
            block + 1,
            *[tf.tensor_scatter_nd_update(o, rows[:, None], r) for o, r in zip(outputs, results)],
        )

    _, *results = tf.while_loop(
        lambda block, *_: block < num_blocks,
        next_block,
        (tf.constant(0, tf.int64), *outputs),
        parallel_iterations=1,
    )
    return results


def _squared_distances(queries: tf.Tensor, points: tf.Tensor) -> tf.Tensor:
    """
    Sums of squared coordinate differences of ``queries`` [..., D] and ``points`` [..., D]
    (broadcast), accumulated in coordinate order for up to ``_UNROLLED_DIM`` dimensions, else by
    ``tf.reduce_sum``.
    """
    dim = points.shape[-1]
    if dim > _UNROLLED_DIM:
        return tf.reduce_sum(tf.square(queries - points), axis=-1)
    distances = tf.square(queries[..., 0] - points[..., 0])
    for d in range(1, dim):
        distances += tf.square(queries[..., d] - points[..., d])
    return distances


def nearest_neighbors(points: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    """
    Indices [Q, k] of the ``k`` nearest ``points`` to each query, nearest first, from a k-d
    tree; ties go to the lower index, as in :func:`graph_nearest_neighbors`. Rows whose
    ``k + 1`` nearest distances come (nearly) tied are re-ranked from the exact squared
    distances of every point within the k-th distance.

    :param k: 1 ≤ k ≤ M; ``points`` and ``queries`` must be finite.
    """
    points = np.asarray(points, dtype=float)
    queries = np.asarray(queries, dtype=float)
    check_count(k, "k", maximum=len(points), hint=" (the number of points)")
    for name, array in (("points", points), ("queries", queries)):
        if not np.all(np.isfinite(array)):
            raise ValueError(f"`{name}` must be finite (no NaN or inf).")
    tree = cKDTree(points)
    width = min(k + 1, len(points))
    distances, index = tree.query(queries, k=width)
    distances = np.reshape(distances, (len(queries), width))
    index = np.asarray(index, dtype=np.int64).reshape(len(queries), width)
    tied = np.any(distances[:, 1:] <= distances[:, :-1] * (1 + _TIE_TOLERANCE), axis=1)
    rows = np.flatnonzero(tied)
    if len(rows):
        radius = distances[rows, k - 1] * (1 + _TIE_TOLERANCE)
        for row, found in zip(rows, tree.query_ball_point(queries[rows], radius)):
            candidates = np.asarray(found, dtype=np.int64)
            squared = np.zeros(len(candidates))
            for d in range(points.shape[1]):  # the graph search's order of summation
                squared += np.square(queries[row, d] - points[candidates, d])
            index[row, :k] = candidates[np.lexsort((candidates, squared))[:k]]
    return index[:, :k]


def _merge(best_d: np.ndarray, best_i: np.ndarray, d: np.ndarray, i: np.ndarray, k: int) -> None:
    """Keep, per row, the ``k`` smallest distances of the current best and new candidates."""
    all_d = np.concatenate([best_d, d], axis=1)
    all_i = np.concatenate([best_i, i], axis=1)
    keep = np.argsort(all_d, axis=1, kind="stable")[:, :k]
    best_d[:] = np.take_along_axis(all_d, keep, axis=1)
    best_i[:] = np.take_along_axis(all_i, keep, axis=1)


def sequential_nearest_neighbors(points: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """
    For each point ``j`` (in the given order), the indices of its ``k`` nearest points among
    ``points[:j]``, nearest first: the neighbour sets :math:`n(j)` of the Vecchia prior.

    Every earlier point ``i < j`` is on the left and ``j`` on the right of exactly one pair of
    sibling blocks in a binary split of ``0..M-1``; merging each point's ``k`` nearest in every
    left sibling therefore finds its ``k`` nearest predecessors. Cost :math:`O(M \\log^2 M)` tree
    queries, memory :math:`O(Mk)`.

    :return: ``index`` [M, k] (int64, padding 0) and ``mask`` [M, k] (bool): row ``j`` holds
        ``min(k, j)`` neighbours.
    """
    points = np.asarray(points, dtype=float)
    num = len(points)
    best_d = np.full((num, k), np.inf)
    best_i = np.zeros((num, k), dtype=np.int64)
    block = 1
    while block < num:
        if block < _BRUTE_FORCE_BLOCK:
            padded = -(-num // (2 * block)) * 2 * block
            index = np.arange(padded).reshape(-1, 2, block)  # [pairs, left/right, block]
            valid = index < num
            index = np.minimum(index, num - 1)
            left, right = points[index[:, 0]], points[index[:, 1]]
            d = np.sum((right[:, :, None, :] - left[:, None, :, :]) ** 2, axis=-1)
            d = np.where(valid[:, 0, None, :], d, np.inf)  # [pairs, right, left]
            rows = index[:, 1][valid[:, 1]]
            d = d[valid[:, 1]]
            candidates = np.broadcast_to(index[:, 0][:, None, :], (len(valid), block, block))
            candidates = candidates[valid[:, 1]]
            merged_d, merged_i = best_d[rows], best_i[rows]
            _merge(merged_d, merged_i, d, candidates, k)
            best_d[rows], best_i[rows] = merged_d, merged_i
        else:
            for start in range(0, num - block, 2 * block):
                left = np.arange(start, start + block)
                right = np.arange(start + block, min(start + 2 * block, num))
                kk = min(k, block)
                d, i = cKDTree(points[left]).query(points[right], k=kk)
                d, i = np.reshape(d, (len(right), kk)), np.reshape(i, (len(right), kk))
                merged_d, merged_i = best_d[right], best_i[right]
                _merge(merged_d, merged_i, d**2, left[i], k)
                best_d[right], best_i[right] = merged_d, merged_i
        block *= 2
    mask = np.isfinite(best_d)
    return np.where(mask, best_i, 0), mask


def lexicographic_order(points: np.ndarray) -> np.ndarray:
    """The rows [M] of ``points`` [M, D] sorted lexicographically (first column first)."""
    return np.lexsort(np.asarray(points).T[::-1]).astype(np.int64)


def graph_find_rows(
    points: tf.Tensor, order: tf.Tensor, queries: tf.Tensor
) -> tuple[tf.Tensor, tf.Tensor]:
    """
    For each query [Q, D], the row of ``points`` [M, D] it equals (every coordinate ``==``) and
    whether there is one: ``(rows [Q] int64, found [Q] bool)``, ``rows`` meaningless where not
    found. ``order`` [M] sorts ``points`` lexicographically (:func:`lexicographic_order`).

    A lower-bound binary search in the lexicographic order, :math:`\\lceil\\log_2(M + 1)\\rceil`
    steps that each gather one row of ``points`` per query: :math:`O(QD\\log M)` time and
    :math:`O(QD)` memory, comparisons only (no arithmetic, so no rounding), in TensorFlow ops
    (the same eagerly, compiled and on any device). With duplicated rows, any one of them.
    """
    points = tf.convert_to_tensor(points)
    queries = tf.convert_to_tensor(queries, dtype=points.dtype)
    num_points = points.shape[0]
    if num_points is None or num_points < 1:
        raise ValueError(f"`points` must have a static number of rows ≥ 1, got {points.shape}.")
    order = tf.convert_to_tensor(order, dtype=tf.int64)
    batch = tf.shape(queries, out_type=tf.int64)[:1]
    low = tf.zeros(batch, tf.int64)
    high = tf.fill(batch, tf.constant(num_points, tf.int64))
    for _ in range(int(np.ceil(np.log2(num_points + 1)))):
        middle = (low + high) // 2
        active = low < high
        row = tf.gather(points, tf.gather(order, tf.minimum(middle, num_points - 1)))
        below = _lexicographically_less(row, queries)
        low = tf.where(active & below, middle + 1, low)
        high = tf.where(active & ~below, middle, high)
    rows = tf.gather(order, tf.minimum(low, num_points - 1))
    found = tf.reduce_all(tf.equal(tf.gather(points, rows), queries), axis=-1)
    return rows, found


def _lexicographically_less(a: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
    """Row-wise ``a < b`` [Q] in lexicographic order, for rows [Q, D]."""
    differ = tf.not_equal(a, b)
    first = tf.argmax(tf.cast(differ, tf.int32), axis=-1, output_type=tf.int32)
    a_first = tf.gather(a, first, axis=-1, batch_dims=1)
    b_first = tf.gather(b, first, axis=-1, batch_dims=1)
    return tf.reduce_any(differ, axis=-1) & (a_first < b_first)
