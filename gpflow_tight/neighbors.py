"""
Nearest neighbours for VNNGP (Wu, Pleiss & Cunningham 2022), by Euclidean distance on the raw
inputs, each row nearest first.

- :func:`graph_nearest_neighbors`: the ``k`` nearest inducing inputs of query points in
  TensorFlow ops only, so the same eagerly, under ``tf.function`` and in an exported SavedModel,
  with memory :math:`O(Qk)` plus a fixed-size working block. VNNGP uses it for predictions and
  for data batches that do not carry their neighbours.
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

import numpy as np
import tensorflow as tf
from scipy.spatial import cKDTree

__all__ = [
    "graph_find_rows",
    "graph_nearest_neighbors",
    "lexicographic_order",
    "nearest_neighbors",
    "sequential_nearest_neighbors",
]

_BRUTE_FORCE_BLOCK = 32  # below this block size, distances are cheaper than trees
QUERY_BLOCK = 512  # query rows per block of the graph search
WORKING_ELEMENTS = 2**20  # distances per working block of the graph search (8 MB in float64)
_UNROLLED_DIM = 16  # up to this dimension, distances are summed one coordinate at a time
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
    in blocks of ``point_block``, takes each block's ``k`` nearest with ``tf.math.top_k`` and
    merges them with the running ``k`` nearest (one more ``top_k`` over 2k candidates). Squared
    distances are sums of squared coordinate differences, as in a k-d tree, not
    :math:`\\|x\\|^2 - 2x^Tz + \\|z\\|^2`, whose cancellation can reorder close neighbours. Cost
    :math:`O(QMD)`; memory :math:`O(Qk)` plus a working block of ``query_block × point_block``
    distances (× D above 16 dimensions): by default ``point_block`` makes it
    ``WORKING_ELEMENTS`` = 2²⁰ (8 MB in float64), and it is at least ``k``.

    Ties: ``tf.math.top_k`` puts the lower position first among equal values; the running
    candidates (lower indices, sorted by distance then index) precede each new block's (higher
    indices, sorted likewise), so every merge keeps the ``k`` smallest (distance, index) pairs in
    lexicographic order, on every device.

    Only TensorFlow ops, so it runs inside ``tf.function`` and in a SavedModel alike; an eager
    call runs the same ops as a (cached) ``tf.function``, which fuses them. No gradient flows
    through it.

    :param k: 1 ≤ k ≤ M (a Python int: the output's static width).
    """
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise ValueError(f"`k` must be a positive int, got {k!r}.")
    k = int(k)
    points = tf.stop_gradient(tf.convert_to_tensor(points))
    queries = tf.stop_gradient(tf.cast(queries, points.dtype))
    dim = points.shape[-1]
    if dim is None or points.shape.rank != 2:
        raise ValueError(f"`points` must be [M, D] with a known D, got shape {points.shape}.")
    query_block = max(int(QUERY_BLOCK if query_block is None else query_block), 1)
    if point_block is None:
        point_block = WORKING_ELEMENTS // (query_block * (1 if dim <= _UNROLLED_DIM else dim))
    point_block = max(int(point_block), k)

    if queries.shape.rank != 2 or queries.shape[-1] not in (None, dim):
        raise ValueError(f"`queries` must be [Q, {dim}], got shape {queries.shape}.")
    if points.shape[0] is not None and k > points.shape[0]:
        raise ValueError(f"`k` = {k} exceeds the number of points, {points.shape[0]}.")
    if tf.executing_eagerly():  # the same ops, compiled: fused kernels, no per-op dispatch
        return _compiled_search(points, queries, k, dim, query_block, point_block)
    return _search(points, queries, k, dim, query_block, point_block)


@tf.autograph.experimental.do_not_convert
def _search(
    points: tf.Tensor, queries: tf.Tensor, k: int, dim: int, query_block: int, point_block: int
) -> tf.Tensor:
    """:func:`graph_nearest_neighbors` with checked arguments and the block sizes chosen."""
    # a compiled search traced for several shapes sees [None, None]: restore the static D
    points, queries = tf.ensure_shape(points, [None, dim]), tf.ensure_shape(queries, [None, dim])
    num_points = tf.shape(points, out_type=tf.int64)[0]
    num_point_blocks = (num_points + point_block - 1) // point_block
    block_offsets = tf.range(point_block, dtype=tf.int64)

    def block_top_k(chunk: tf.Tensor, block: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """The k nearest of block ``block`` (padded past M with +inf): distances, indices."""
        index = block * point_block + block_offsets  # [P]
        rows = tf.gather(points, tf.minimum(index, num_points - 1))  # [P, D]
        distances = _squared_distances(chunk, rows)
        distances = tf.where(index[None, :] < num_points, distances, np.inf)  # [C, P]
        nearest = tf.math.top_k(-distances, k=k)
        return -nearest.values, tf.gather(index, nearest.indices)

    def search(chunk: tf.Tensor) -> tf.Tensor:
        """The k nearest points [C, k] of the query rows ``chunk`` [C, D]."""

        def merge(
            block: tf.Tensor, best: tf.Tensor, best_index: tf.Tensor
        ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
            distances, index = block_top_k(chunk, block)
            candidates = tf.concat([best, distances], axis=1)  # [C, 2k], running ones first
            candidate_index = tf.concat([best_index, index], axis=1)
            nearest = tf.math.top_k(-candidates, k=k)
            chosen = tf.gather(candidate_index, nearest.indices, batch_dims=1)
            return block + 1, -nearest.values, chosen

        # The first block holds at least k points (k ≤ M, point_block ≥ k): the running k
        # nearest are real points from the start, even if distances overflow to +inf.
        best, best_index = block_top_k(chunk, tf.constant(0, tf.int64))
        _, _, best_index = tf.while_loop(
            lambda block, *_: block < num_point_blocks,
            merge,
            (tf.constant(1, tf.int64), best, best_index),
            parallel_iterations=1,
        )
        return best_index

    num_queries = tf.shape(queries, out_type=tf.int64)[0]
    num_query_blocks = (num_queries + query_block - 1) // query_block

    def next_query_block(
        block: tf.Tensor, found: tf.TensorArray
    ) -> tuple[tf.Tensor, tf.TensorArray]:
        chunk = queries[block * query_block : (block + 1) * query_block]
        return block + 1, found.write(tf.cast(block, tf.int32), search(chunk))

    # One more slot, holding no rows, so that the concatenation is never empty (Q = 0).
    size = tf.cast(num_query_blocks, tf.int32) + 1
    found = tf.TensorArray(tf.int64, size=size, infer_shape=False, element_shape=[None, k])
    found = found.write(size - 1, tf.zeros([0, k], tf.int64))
    _, found = tf.while_loop(
        lambda block, _: block < num_query_blocks,
        next_query_block,
        (tf.constant(0, tf.int64), found),
        parallel_iterations=1,
    )
    return found.concat()


_compiled_search = tf.function(_search, reduce_retracing=True, autograph=False)


def _squared_distances(queries: tf.Tensor, points: tf.Tensor) -> tf.Tensor:
    """
    [Q, P] sums of squared coordinate differences, accumulated in coordinate order; one [Q, P]
    array at a time for up to ``_UNROLLED_DIM`` dimensions, else via a [Q, P, D] array.
    """
    dim = points.shape[-1]
    if dim > _UNROLLED_DIM:
        return tf.reduce_sum(tf.square(queries[:, None, :] - points[None, :, :]), axis=-1)
    points = tf.transpose(points)  # [D, P]
    distances = tf.square(queries[:, :1] - points[:1])
    for d in range(1, dim):
        distances += tf.square(queries[:, d : d + 1] - points[d : d + 1])
    return distances


def nearest_neighbors(points: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    """
    Indices [Q, k] of the ``k`` nearest ``points`` to each query, nearest first, from a k-d
    tree; ties go to the lower index, as in :func:`graph_nearest_neighbors`. Rows whose
    ``k + 1`` nearest distances come (nearly) tied are re-ranked from the exact squared
    distances of every point within the k-th distance.
    """
    points = np.asarray(points, dtype=float)
    queries = np.asarray(queries, dtype=float)
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
