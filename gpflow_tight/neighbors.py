"""
Nearest-neighbour tables for VNNGP (Wu, Pleiss & Cunningham 2022), computed once with
``scipy.spatial.cKDTree`` outside the TensorFlow graph.
"""

import numpy as np
from scipy.spatial import cKDTree

__all__ = ["nearest_neighbors", "sequential_nearest_neighbors"]

_BRUTE_FORCE_BLOCK = 32  # below this block size, distances are cheaper than trees


def nearest_neighbors(points: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    """Indices [Q, k] of the ``k`` nearest ``points`` to each query, nearest first."""
    _, index = cKDTree(points).query(queries, k=k)
    return np.asarray(index, dtype=np.int64).reshape(len(queries), k)


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
