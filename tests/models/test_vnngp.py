"""
VNNGP against dense numpy formulas written from Wu, Pleiss & Cunningham 2022 (the Vecchia prior
as an explicit M x M precision, brute-force neighbours), against gpflow.models.SVGP at full
conditioning, and the closed-form optimum for a Gaussian likelihood (docs/vnngp.md). The graph
neighbour search against brute force and the k-d tree; VNNGPPosterior's caches in the style of
GPflow's tests/gpflow/posteriors. Equation numbers are Wu, Pleiss & Cunningham 2022's.

Property ids used in this file's comments and docstrings:
P1  the factorised KL (eqs. 14-16, 28) equals the dense KL against the Vecchia prior
    ((I - B)^T F^-1 (I - B))^-1 (eq. 9), for any K and ordering.
P2  with K = M - 1 the Vecchia prior is exact, so the KL is SVGP's for a diagonal q(u), in any
    ordering.
P3  with also all M inducing points for the data term, the ELBO and the predictions are
    SVGP's with q_diag=True, whiten=False.
P6  with Z = X and a Gaussian likelihood, the optimal mean-field q(u) and ELBO are closed form
    (derived in docs/vnngp.md, "Exactness and what the tests check").
P8  the doubly minibatched estimate (eq. 19) is unbiased: averaged over a partition into equal
    blocks it is exact.
P10 with Z = X and a tiny jitter, q(f_i) (eq. 25) is q(u_i).
P11 predictions: at an inducing input they are q(u_j), far from Z the prior; shapes [N*, L].
P12 neighbours: (a) n(j) holds the min(K, j - 1) nearest earlier points, (b) as brute force
    finds them, (c) a test point's are its K nearest in Z, (d) every search agrees, up to ties.
"""

import copy
import subprocess
import sys

import gpflow
import numpy as np
import pytest
import tensorflow as tf
from gpflow.posteriors import PrecomputeCacheType

import gpflow_tight
from gpflow_tight import VNNGP, neighbors
from gpflow_tight.neighbors import (
    graph_find_rows,
    graph_nearest_neighbors,
    lexicographic_order,
    nearest_neighbors,
    sequential_nearest_neighbors,
)
from gpflow_tight.posteriors import VNNGPPosterior
from gpflow_tight.serving import export_predictions
from tests.reference import gauss_kl, se_kernel

VARIANCE, LENGTHSCALE, NOISE, JITTER = 1.3, 0.8, 0.1, 1e-6


def kernel():
    return gpflow.kernels.SquaredExponential(variance=VARIANCE, lengthscales=LENGTHSCALE)


def make_problem(rng, num_data=30, num_inducing=12, num_latent=1):
    X = rng.uniform(-3, 3, (num_data, 2))
    Y = np.sin(X[:, :1]) * np.cos(X[:, 1:]) + 0.2 * rng.standard_normal((num_data, num_latent))
    Z = rng.uniform(-3, 3, (num_inducing, 2))
    q_mu = rng.standard_normal((num_inducing, num_latent))
    q_sqrt = rng.uniform(0.2, 1.0, (num_inducing, num_latent))
    return X, Y, Z, q_mu, q_sqrt


def brute_force_prior_neighbors(Z, order, k):
    """n(j): the k nearest rows of Z among those earlier in `order`."""
    position = np.empty(len(Z), int)
    position[order] = np.arange(len(Z))
    sets = []
    for j in range(len(Z)):
        earlier = np.flatnonzero(position < position[j])
        distances = np.sum((Z[earlier] - Z[j]) ** 2, axis=1)
        sets.append(earlier[np.argsort(distances)[:k]])
    return sets


def dense_nn_precision(Z, neighbor_sets, jitter=JITTER):
    """(I - B)ᵀ F⁻¹ (I - B): the precision of the nearest-neighbour prior of K_ZZ + εI (§1.2)."""
    K = se_kernel(Z, Z, VARIANCE, LENGTHSCALE) + jitter * np.eye(len(Z))
    B, F = np.zeros_like(K), np.zeros(len(Z))
    for j, n in enumerate(neighbor_sets):
        b = np.linalg.solve(K[np.ix_(n, n)], K[n, j]) if len(n) else np.zeros(0)
        B[j, n] = b
        F[j] = K[j, j] - K[n, j] @ b
    I_B = np.eye(len(Z)) - B
    return I_B.T @ np.diag(1 / F) @ I_B


def dense_vecchia_covariance(Z, neighbor_sets, jitter=JITTER):
    """K̃ = ((I - B)ᵀ F⁻¹ (I - B))⁻¹: the Vecchia prior (Wu et al. 2022, eq. 9) of K_ZZ + εI."""
    return np.linalg.inv(dense_nn_precision(Z, neighbor_sets, jitter))


def dense_q_f(X, Z, q_mu, q_sqrt, k, mean=0.0, jitter=JITTER):
    """Eq. 25 with brute-force neighbours: the marginals of q(f) at X."""
    means, variances = [], []
    for x in X:
        n = np.argsort(np.sum((Z - x) ** 2, axis=1))[:k]
        K_nn = se_kernel(Z[n], Z[n], VARIANCE, LENGTHSCALE) + jitter * np.eye(len(n))
        k_nx = se_kernel(Z[n], x[None], VARIANCE, LENGTHSCALE)[:, 0]
        a = np.linalg.solve(K_nn, k_nx)
        means.append(mean + a @ (q_mu[n] - mean))
        variances.append(VARIANCE - k_nx @ a + (a**2) @ q_sqrt[n] ** 2)
    return np.array(means), np.array(variances)


def gaussian_expectation(Y, mean, var, noise=NOISE):
    return np.sum(-0.5 * np.log(2 * np.pi * noise) - 0.5 * ((Y - mean) ** 2 + var) / noise)


def model_for(Z, q_mu, q_sqrt, k, likelihood=None, **kwargs):
    return VNNGP(
        kernel(),
        likelihood or gpflow.likelihoods.Gaussian(NOISE),
        Z,
        num_neighbors=k,
        q_mu=q_mu,
        q_sqrt=q_sqrt,
        num_latent_gps=q_mu.shape[1],
        **kwargs,
    )


# --- neighbours (P12) ---------------------------------------------------------------------


@pytest.mark.parametrize("ordering", ["random", "given"])
def test_prior_neighbors_match_brute_force(rng, ordering):
    Z = rng.standard_normal((70, 3))
    model = model_for(Z, np.zeros((70, 1)), np.ones((70, 1)), 6, ordering=ordering, seed=3)
    reference = brute_force_prior_neighbors(Z, model.ordering, 6)
    table = model._prior_table.numpy()
    mask = table >= 0
    for j, expected in enumerate(reference):
        np.testing.assert_array_equal(table[j][mask[j]], expected)


def test_sequential_neighbors_on_larger_sets(rng):
    """The blockwise k-d tree search equals brute force, in both of its regimes."""
    points = rng.standard_normal((300, 2))
    index, mask = sequential_nearest_neighbors(points, 40)
    reference = brute_force_prior_neighbors(points, np.arange(300), 40)
    for j, expected in enumerate(reference):
        np.testing.assert_array_equal(index[j][mask[j]], expected)


def test_test_point_neighbors_and_update_after_moving_z(rng):
    X, _, Z, q_mu, q_sqrt = make_problem(rng)
    model = model_for(Z, q_mu, q_sqrt, 4)
    expected = np.argsort(np.sum((X[:, None] - Z[None]) ** 2, -1), axis=1)[:, :4]
    np.testing.assert_array_equal(model.neighbors(X), expected)
    moved = Z + rng.normal(0, 0.5, Z.shape)
    model.inducing_variable.Z.assign(moved)
    model.update_neighbors()
    reference = brute_force_prior_neighbors(moved, model.ordering, 4)
    table = model._prior_table.numpy()
    mask = table >= 0
    for j, want in enumerate(reference):
        np.testing.assert_array_equal(table[j][mask[j]], want)
    # the moved inputs are found as inducing inputs: their data term is q(u)'s
    Y = rng.standard_normal((len(Z), 1))
    expected = gaussian_expectation(Y, q_mu, q_sqrt**2) - model.prior_kl().numpy()
    np.testing.assert_allclose(model.elbo((moved, Y)).numpy(), expected, rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_graph_find_rows_equals_brute_force(rng, dtype):
    """Exact row lookup: every row of Z is found at its own index, other points are not; on a
    grid (many ties in each column) and on continuous inputs; compiled and eager."""
    grid = np.stack(np.meshgrid(*[np.arange(4.0)] * 3), -1).reshape(-1, 3)
    for Z in (grid[rng.permutation(len(grid))], rng.uniform(-3, 3, (50, 2)), grid[:1]):
        Z = Z.astype(dtype)
        queries = np.vstack([Z[rng.permutation(len(Z))], Z[:3] + dtype(0.5), Z[:2]])
        expected = np.array([np.flatnonzero((Z == q).all(1)) for q in queries], dtype=object)
        for search in (graph_find_rows, tf.function(graph_find_rows)):
            rows, found = search(tf.constant(Z), lexicographic_order(Z), tf.constant(queries))
            np.testing.assert_array_equal(found, [len(e) == 1 for e in expected])
            np.testing.assert_array_equal(rows.numpy()[found], [e[0] for e in expected if len(e)])
    rows, found = graph_find_rows(tf.constant(Z), lexicographic_order(Z), tf.zeros([0, 3], dtype))
    assert rows.shape == (0,) and found.shape == (0,)


def brute_force_neighbors(points, queries, k):
    """The k nearest points of each query, nearest first, ties to the lower index."""
    distances = np.sum((queries[:, None, :] - points[None, :, :]) ** 2, axis=-1)
    index = np.arange(len(points))
    rows = [np.lexsort((index, row))[:k] for row in distances]
    return np.array(rows, dtype=np.int64).reshape(len(queries), k)


def graph_search_both_ways(points, queries, k, **blocks):
    """The graph search eagerly and compiled for any number of queries; checks they agree."""
    eager = graph_nearest_neighbors(points, queries, k, **blocks).numpy()
    compiled = tf.function(
        lambda P, Q: graph_nearest_neighbors(P, Q, k, **blocks),
        input_signature=[
            tf.TensorSpec([None, points.shape[1]], tf.float64),
            tf.TensorSpec([None, points.shape[1]], tf.float64),
        ],
    )(points, queries).numpy()
    np.testing.assert_array_equal(compiled, eager)
    assert eager.dtype == np.int64 and eager.shape == (len(queries), k)
    return eager


@pytest.fixture(params=["as chosen", "screened"])
def search_path(request, monkeypatch):
    """The graph search as it chooses (exact distances alone below 17 dimensions, the screen
    from there), or screening at every dimension."""
    if request.param == "screened":
        monkeypatch.setattr(neighbors, "SCREEN_FROM_DIM", 1)
    return request.param


@pytest.mark.parametrize(
    "num_points, num_queries, dim, k, query_block, point_block",
    [
        (60, 37, 2, 5, 8, 7),  # several blocks each way, M not a multiple of the block
        (60, 37, 3, 5, None, None),  # the model's default blocks
        (10, 4, 1, 10, 3, None),  # k = M
        (200, 50, 2, 1, 1, 16),  # one query per block, k = 1
        (40, 9, 20, 4, 4, 6),  # D > 16: distances summed by reduce_sum
        (13, 0, 2, 3, 4, 4),  # no queries
    ],
)
def test_graph_search_equals_the_kd_tree_and_brute_force(
    rng, search_path, num_points, num_queries, dim, k, query_block, point_block
):
    """P12(c, d): on continuous random data (no ties) the graph search returns the k-d tree's
    neighbours, in the same order, eagerly and compiled."""
    points = rng.standard_normal((num_points, dim))
    queries = rng.standard_normal((num_queries, dim))
    found = graph_search_both_ways(
        points, queries, k, query_block=query_block, point_block=point_block
    )
    np.testing.assert_array_equal(found, brute_force_neighbors(points, queries, k))
    np.testing.assert_array_equal(found, nearest_neighbors(points, queries, k))


def test_eager_search_after_other_shapes(rng, monkeypatch):
    """Eager calls share one compiled search, whose traces generalise the shapes; each call
    still gets its own dimension and size."""
    monkeypatch.setattr(neighbors, "HOST_SEARCH", False)
    for dim in (1, 3, 2, 3):
        for num_points in (7, 9):
            points = rng.standard_normal((num_points, dim))
            queries = rng.standard_normal((num_points + 1, dim))
            np.testing.assert_array_equal(
                graph_nearest_neighbors(points, queries, 2).numpy(),
                brute_force_neighbors(points, queries, 2),
            )


@pytest.mark.parametrize("point_block", [3, 7, None])
def test_ties_go_to_the_lower_index(rng, search_path, point_block):
    """On a grid, many distances tie: both searches keep the lower rows of Z, in order."""
    grid = np.array([[i, j] for i in range(7) for j in range(7)], dtype=float)
    points = grid[rng.permutation(len(grid))]
    queries = rng.integers(0, 7, (40, 2)) + rng.choice([0.0, 0.5], (40, 2))
    expected = brute_force_neighbors(points, queries, 9)
    found = graph_search_both_ways(points, queries, 9, query_block=6, point_block=point_block)
    np.testing.assert_array_equal(found, expected)
    np.testing.assert_array_equal(nearest_neighbors(points, queries, 9), expected)


@pytest.fixture
def exact_search_rows(monkeypatch):
    """The number of query rows each traced search hands to the exact search and its rows per
    block, in call order; the search screens at every dimension."""
    monkeypatch.setattr(neighbors, "SCREEN_FROM_DIM", 1)
    rows = []
    exact_search = neighbors._exact_search

    def recording(points, queries, k, dim, query_block, point_block, found, order, count):
        tf.py_function(lambda n: rows.append((int(n), query_block)), [count], [])
        return exact_search(points, queries, k, dim, query_block, point_block, found, order, count)

    monkeypatch.setattr(neighbors, "_exact_search", recording)
    return rows


def traced_search(points, queries, k):
    """The graph search in a new ``tf.function`` (so traced with the module as it is now)."""
    return tf.function(lambda P, Q: graph_nearest_neighbors(P, Q, k))(points, queries).numpy()


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("offset", [0.0, 1e6])
def test_the_screen_certifies_data_without_ties(rng, exact_search_rows, dtype, offset):
    """On continuous data the screen's bound proves every row (even far from the origin: the
    screen centres the inputs), so nothing is searched twice; the answer is brute force's."""
    if dtype == np.float32 and offset:
        offset = 1e3  # float32 resolves 1e6 + N(0, 1) to 0.06 only: near-ties everywhere
    points = (offset + rng.standard_normal((300, 3))).astype(dtype)
    queries = (offset + rng.standard_normal((50, 3))).astype(dtype)
    found = traced_search(points, queries, 5)
    np.testing.assert_array_equal(found, brute_force_neighbors(points, queries, 5))
    assert exact_search_rows == [(0, neighbors.FALLBACK_QUERY_BLOCK)]


def test_the_screen_hands_ties_to_the_exact_search(rng, exact_search_rows):
    """Rows whose k-th and 2k-th nearest points tie (more tied points than the screen keeps
    candidates) cannot be certified: the exact search answers them, with the lowest indices
    among the ties; the other rows it does not see."""
    points = rng.standard_normal((60, 2))
    points[rng.choice(60, 30, replace=False)] = points[7]  # 31 copies of one point
    queries = np.concatenate([points[[7, 7, 7]], rng.standard_normal((20, 2))])
    found = traced_search(points, queries, 4)
    np.testing.assert_array_equal(found, brute_force_neighbors(points, queries, 4))
    distances = np.sort(np.sum((queries[:, None] - points[None]) ** 2, axis=-1), axis=1)
    tied = np.sum(distances[:, 7] == distances[:, 3])
    assert 3 <= tied < len(queries) and exact_search_rows == [
        (tied, neighbors.FALLBACK_QUERY_BLOCK)
    ]


def test_overflowing_distances_go_to_the_exact_search(rng, exact_search_rows):
    """Where squared distances overflow to +inf the screen's bounds are not numbers; the exact
    search then ranks every point as infinitely far, so the lowest indices win."""
    points = 1e200 * rng.standard_normal((20, 2))
    queries = 1e200 * rng.standard_normal((6, 2))
    found = traced_search(points, queries, 3)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(found, brute_force_neighbors(points, queries, 3))
    np.testing.assert_array_equal(found, np.tile([0, 1, 2], (6, 1)))
    assert exact_search_rows == [(6, neighbors.FALLBACK_QUERY_BLOCK)]


def test_rows_the_screen_leaves_cost_one_small_block(rng, exact_search_rows):
    """One tied query among many goes to the exact search alone in a block of
    ``FALLBACK_QUERY_BLOCK`` rows, not a whole query block of the screen."""
    points = rng.standard_normal((300, 3))
    points[:20] = 50.0  # 20 copies, far from the other points and queries
    queries = np.concatenate([rng.standard_normal((700, 3)), points[:1]])
    found = traced_search(points, queries, 4)
    np.testing.assert_array_equal(found, brute_force_neighbors(points, queries, 4))
    assert exact_search_rows == [(1, neighbors.FALLBACK_QUERY_BLOCK)]


@pytest.mark.parametrize("k, dim", [(256, 100), (256, 1024), (4, 3)])
def test_the_screen_holds_a_bounded_working_block(rng, monkeypatch, k, dim):
    """The screen's blocks of bounds [rows, points], of gathered points [points, D] and of
    re-ranked candidates [rows, 2k, D] hold at most ``WORKING_ELEMENTS`` values (fewer rows per
    block for large kD, the point blocks as before); with a tiny budget the screen runs a
    row or two per block and still returns brute force's neighbours."""
    blocks = neighbors._block_sizes(k, dim, neighbors.QUERY_BLOCK, None)
    width = 2 * k
    assert blocks.screen_queries * blocks.screen_points <= neighbors.WORKING_ELEMENTS
    assert blocks.screen_points * dim <= neighbors.WORKING_ELEMENTS
    assert blocks.screen_queries * width * dim <= neighbors.WORKING_ELEMENTS
    if dim <= 512:  # the point blocks do not grow as the row blocks shrink
        assert blocks.screen_points == neighbors.WORKING_ELEMENTS // neighbors.QUERY_BLOCK
    monkeypatch.setattr(neighbors, "SCREEN_FROM_DIM", 1)
    monkeypatch.setattr(neighbors, "WORKING_ELEMENTS", 2 * 5 * 3 * 2)  # 2 rows of 10 candidates
    row_blocks = []
    over_row_blocks = neighbors.over_row_blocks
    monkeypatch.setattr(
        neighbors,
        "over_row_blocks",
        lambda inputs, size, *args: row_blocks.append(size) or over_row_blocks(inputs, size, *args),
    )
    points, queries = rng.standard_normal((50, 3)), rng.standard_normal((9, 3))
    found = traced_search(points, queries, 5)
    np.testing.assert_array_equal(found, brute_force_neighbors(points, queries, 5))
    assert row_blocks == [2, neighbors.FALLBACK_QUERY_BLOCK]  # the screen, then its fallback


def test_k_beyond_the_points_is_refused_when_m_is_known_only_at_run_time(rng):
    search = tf.function(
        lambda P, Q: graph_nearest_neighbors(P, Q, 5),
        input_signature=[tf.TensorSpec([None, 2], tf.float64)] * 2,
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match="`k` = 5 exceeds the number"):
        search(rng.standard_normal((3, 2)), rng.standard_normal((4, 2)))


def test_the_search_and_predictions_compile_under_xla(rng, search_path):
    """XLA compiles the graph search (its exact fallback included) and VNNGP's chunked
    predictions, and gives their answers: every loop runs blocks of one size (the last block
    overlapping the one before)."""
    points = rng.standard_normal((60, 2))
    points[rng.choice(60, 30, replace=False)] = points[7]  # ties: rows for the exact search
    queries = np.concatenate([points[[7, 7]], rng.standard_normal((37, 2))])
    search = tf.function(
        lambda P, Q: graph_nearest_neighbors(P, Q, 4, query_block=8, point_block=9),
        jit_compile=True,
    )
    np.testing.assert_array_equal(
        search(points, queries).numpy(), brute_force_neighbors(points, queries, 4)
    )
    X, Y, Z, q_mu, q_sqrt = make_problem(rng, num_inducing=40, num_latent=2)
    model = model_for(Z, q_mu, q_sqrt, 4, num_neighbors_predict=6, prediction_batch_size=7)
    Xnew = rng.uniform(-3.5, 3.5, (23, 2))
    compiled = tf.function(model.predict_f, jit_compile=True)(tf.constant(Xnew))
    for value, reference in zip(compiled, model.predict_f(Xnew)):  # XLA fuses and reorders
        np.testing.assert_allclose(value.numpy(), reference.numpy(), rtol=1e-10)  # round-off


@pytest.mark.parametrize(
    "dim, dtype, num_queries, on_host",
    [
        (3, np.float64, 40, True),
        (16, np.float64, 40, True),
        (17, np.float64, 40, False),
        (3, np.float32, 40, False),
        (3, np.float64, 31, False),  # fewer queries than HOST_MIN_QUERIES
    ],
)
def test_eager_float64_searches_up_to_16_dimensions_use_the_kd_tree(
    rng, monkeypatch, dim, dtype, num_queries, on_host
):
    """Eagerly on the CPU, at least 32 float64 queries of at most 16 dimensions go to the k-d
    tree (the same indices, faster); other inputs, and every compiled call, to the graph."""
    calls = []
    kd_tree = neighbors.nearest_neighbors
    monkeypatch.setattr(
        neighbors, "nearest_neighbors", lambda *args: calls.append(1) or kd_tree(*args)
    )
    points = rng.standard_normal((50, dim)).astype(dtype)
    queries = rng.standard_normal((num_queries, dim)).astype(dtype)
    eager = graph_nearest_neighbors(points, queries, 4).numpy()
    assert len(calls) == on_host
    compiled = traced_search(points, queries, 4)
    assert len(calls) == on_host
    np.testing.assert_array_equal(eager, compiled)
    np.testing.assert_array_equal(eager, brute_force_neighbors(points, queries, 4))


@pytest.mark.parametrize("scale", [1e-160, 1e200])
@pytest.mark.parametrize("bad", [None, np.nan, np.inf])
def test_extreme_inputs_stay_in_the_graph_eagerly(rng, monkeypatch, scale, bad):
    """Non-finite inputs, and magnitudes where numpy and TensorFlow round differently
    (subnormal or overflowing squares), are searched in the graph also eagerly: eager and
    compiled calls agree."""
    monkeypatch.setattr(neighbors, "nearest_neighbors", None)  # the k-d tree must not be called
    points = scale * rng.standard_normal((20, 2))
    queries = scale * rng.standard_normal((40, 2))
    if bad is not None:
        points[3, 1] = bad
    np.testing.assert_array_equal(
        graph_nearest_neighbors(points, queries, 3).numpy(), traced_search(points, queries, 3)
    )


def test_the_screen_allows_for_flushed_subnormals(rng, monkeypatch):
    """Squared differences below float32's smallest normal number are flushed to zero: the
    certificate allows for it, so at 1e-19 the screen still returns the exact search's
    neighbours."""
    points = (1e-19 * rng.standard_normal((200, 17))).astype(np.float32)
    queries = (1e-19 * rng.standard_normal((20, 17))).astype(np.float32)
    screened = traced_search(points, queries, 4)
    monkeypatch.setattr(neighbors, "SCREEN_FROM_DIM", np.inf)
    np.testing.assert_array_equal(screened, traced_search(points, queries, 4))


def test_the_search_takes_every_float_dtype_and_refuses_integers(rng):
    points = rng.standard_normal((40, 17))
    expected = brute_force_neighbors(points, points[:5], 3)
    for dtype in (tf.bfloat16, tf.float16, tf.float32):
        found = graph_nearest_neighbors(tf.cast(points, dtype), tf.cast(points[:5], dtype), 3)
        np.testing.assert_array_equal(found.numpy()[:, 0], expected[:, 0])  # each point itself
    with pytest.raises(TypeError, match="cast the inputs to a float dtype"):
        graph_nearest_neighbors(np.arange(12).reshape(6, 2), np.zeros((1, 2), int), 2)
    with pytest.raises(ValueError, match="`block_size` must be at least 1"):
        neighbors.over_row_blocks(tf.zeros([3, 2]), 0, lambda x: (x,), [tf.zeros([3, 2])])


def test_graph_search_rejects_bad_arguments(rng):
    points = rng.standard_normal((5, 2))
    with pytest.raises(ValueError, match="exceeds"):
        graph_nearest_neighbors(points, points, 6)
    with pytest.raises(ValueError, match="`k` must be at least 1"):
        graph_nearest_neighbors(points, points, 0)
    with pytest.raises(ValueError, match=r"\[Q, 2\]"):
        graph_nearest_neighbors(points, points[:, :1], 2)


def test_graph_search_holds_no_query_by_inducing_matrix(rng, search_path):
    """Memory O(Q K): no tensor of the traced search (loop bodies included) has M in its shape,
    except the inducing inputs themselves."""
    num_points = 5003
    search = tf.function(
        lambda P, Q: graph_nearest_neighbors(P, Q, 16),
        input_signature=[
            tf.TensorSpec([num_points, 2], tf.float64),
            tf.TensorSpec([None, 2], tf.float64),
        ],
    ).get_concrete_function()
    graphs, shapes, visited = [search.graph], [], 0
    while graphs:
        graph = graphs.pop()
        visited += 1
        for op in graph.get_operations():
            shapes += [tuple(t.shape.as_list()) for t in op.outputs if t.shape.rank]
            if op.type in ("While", "StatelessWhile"):
                graphs += [graph._functions[op.get_attr(a).name].graph for a in ("body", "cond")]
    # the function, and the bodies and conditions of the loops over query blocks and over point
    # blocks: the exact search's, and the screen's too
    assert visited == (5 if search_path == "as chosen" else 9)
    assert {s for s in shapes if num_points in s} == {(num_points, 2)}


# --- the KL (P1, P2) ------------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 2, 5])
def test_kl_equals_dense_kl_against_the_vecchia_prior(rng, k):
    _, _, Z, q_mu, q_sqrt = make_problem(rng, num_latent=2)
    model = model_for(Z, q_mu, q_sqrt, k, mean_function=gpflow.mean_functions.Constant(0.3))
    Ktilde = dense_vecchia_covariance(Z, brute_force_prior_neighbors(Z, model.ordering, k))
    reference = sum(
        gauss_kl(q_mu[:, l] - 0.3, np.diag(q_sqrt[:, l] ** 2), Ktilde) for l in range(2)
    )
    np.testing.assert_allclose(model.prior_kl().numpy(), reference, rtol=1e-9)


def test_full_conditioning_equals_svgp(rng):
    """P2, P3: K = M - 1 gives SVGP's KL in any ordering; with all M neighbours for the data
    term the ELBO and the predictions are SVGP's (q_diag=True, whiten=False)."""
    X, Y, Z, q_mu, q_sqrt = make_problem(rng)
    Xnew = rng.uniform(-3, 3, (6, 2))
    for likelihood in (gpflow.likelihoods.Gaussian(NOISE), gpflow.likelihoods.Bernoulli()):
        labels = Y if isinstance(likelihood, gpflow.likelihoods.Gaussian) else (Y > 0) * 1.0
        svgp = gpflow.models.SVGP(
            kernel(), likelihood, Z, q_diag=True, whiten=False, q_mu=q_mu, q_sqrt=q_sqrt
        )
        for seed in (0, 1):
            model = model_for(
                Z, q_mu, q_sqrt, len(Z) - 1, likelihood, num_neighbors_predict=len(Z), seed=seed
            )
            assert_equals_svgp(model, svgp, (X, labels), Xnew)


def assert_equals_svgp(model, svgp, data, Xnew):
    """KL and ELBO to 1e-9, predictive marginals to 1e-8 (the joints differ by design)."""
    np.testing.assert_allclose(model.prior_kl().numpy(), svgp.prior_kl().numpy(), rtol=1e-9)
    np.testing.assert_allclose(model.elbo(data).numpy(), svgp.elbo(data).numpy(), rtol=1e-9)
    for ours, theirs in zip(model.predict_f(Xnew), svgp.predict_f(Xnew)):
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-8, atol=1e-12)


# --- the ELBO -----------------------------------------------------------------------------


def test_elbo_and_predictions_equal_dense_formula(rng):
    X, Y, Z, q_mu, q_sqrt = make_problem(rng)
    model = model_for(Z, q_mu, q_sqrt, 3, num_data=len(X))
    Ktilde = dense_vecchia_covariance(Z, brute_force_prior_neighbors(Z, model.ordering, 3))
    mean, var = dense_q_f(X, Z, q_mu, q_sqrt, 3)
    reference = gaussian_expectation(Y, mean, var) - gauss_kl(
        q_mu[:, 0], np.diag(q_sqrt[:, 0] ** 2), Ktilde
    )
    np.testing.assert_allclose(model.elbo((X, Y)).numpy(), reference, rtol=1e-9)
    np.testing.assert_allclose(model.elbo(model.training_data(X, Y)).numpy(), reference, rtol=1e-9)
    f_mean, f_var = model.predict_f(X)
    np.testing.assert_allclose(f_mean.numpy(), mean, rtol=1e-9)
    np.testing.assert_allclose(f_var.numpy(), var, rtol=1e-9)
    y_mean, y_var = model.predict_y(X)
    np.testing.assert_allclose(y_var.numpy(), var + NOISE, rtol=1e-9)


def test_jitter_argument_is_the_epsilon_of_every_formula(rng):
    """``jitter`` is the ε of the Vecchia prior of K_ZZ + εI (KL) and of eq. 25 (data term and
    predictions), against the dense formulas at that ε, whatever GPflow's default jitter is
    when they are computed; without it (None) the model reads GPflow's default then, as GPflow's
    models do."""
    X, Y, Z, q_mu, q_sqrt = make_problem(rng)
    epsilon = 1e-2
    model = model_for(Z, q_mu, q_sqrt, 3, num_data=len(X), jitter=epsilon)
    assert model.jitter == epsilon and model.posterior().jitter == epsilon
    sets = brute_force_prior_neighbors(Z, model.ordering, 3)
    kl = gauss_kl(
        q_mu[:, 0], np.diag(q_sqrt[:, 0] ** 2), dense_vecchia_covariance(Z, sets, epsilon)
    )
    mean, var = dense_q_f(X, Z, q_mu, q_sqrt, 3, jitter=epsilon)
    reference = gaussian_expectation(Y, mean, var) - kl
    with gpflow.config.as_context(gpflow.config.Config(jitter=0.5)):  # not read: ε is given
        np.testing.assert_allclose(model.prior_kl().numpy(), kl, rtol=1e-9)
        np.testing.assert_allclose(model.elbo((X, Y)).numpy(), reference, rtol=1e-9)
        elbo = tf.function(model.elbo)
        np.testing.assert_allclose(elbo(model.training_data(X, Y)).numpy(), reference, rtol=1e-9)
        f_mean, f_var = model.predict_f(X)
    np.testing.assert_allclose(f_mean.numpy(), mean, rtol=1e-9)
    np.testing.assert_allclose(f_var.numpy(), var, rtol=1e-9)
    # the default ε gives measurably different numbers, so the checks above have teeth
    default = model_for(Z, q_mu, q_sqrt, 3, num_data=len(X))
    assert default.jitter is None and default.posterior().jitter is None
    assert abs(default.elbo((X, Y)).numpy() - reference) > 1e-3
    with gpflow.config.as_context(gpflow.config.Config(jitter=epsilon)):  # GPflow's, read now
        np.testing.assert_allclose(default.elbo((X, Y)).numpy(), reference, rtol=1e-9)
        f_mean, f_var = default.predict_f(X)
    np.testing.assert_allclose(f_var.numpy(), var, rtol=1e-9)


def test_full_covariance_equals_dense_formula(rng):
    """
    Each test value is conditioned on its own K nearest inducing variables, independently given
    them: Cov = A S Aᵀ + diag(c), with the rows a_* of A from eq. 25 (written densely here).
    """
    X, _, Z, q_mu, q_sqrt = make_problem(rng, num_latent=2)
    k = 3
    model = model_for(Z, q_mu, q_sqrt, k)
    A = np.zeros((len(X), len(Z)))
    c = np.zeros(len(X))
    for i, x in enumerate(X):
        n = np.argsort(np.sum((Z - x) ** 2, axis=1))[:k]
        K_nn = se_kernel(Z[n], Z[n], VARIANCE, LENGTHSCALE) + JITTER * np.eye(k)
        k_nx = se_kernel(Z[n], x[None], VARIANCE, LENGTHSCALE)[:, 0]
        A[i, n] = np.linalg.solve(K_nn, k_nx)
        c[i] = VARIANCE - k_nx @ A[i, n]
    mean, cov = model.predict_f(X, full_cov=True)
    assert cov.shape == (2, len(X), len(X))
    np.testing.assert_allclose(mean.numpy(), A @ q_mu, rtol=1e-9)
    for latent in range(2):
        expected = A @ np.diag(q_sqrt[:, latent] ** 2) @ A.T + np.diag(c)
        np.testing.assert_allclose(cov[latent].numpy(), expected, rtol=1e-9, atol=1e-12)
    _, marginal = model.predict_f(X)  # the diagonal is the chunked marginals'
    np.testing.assert_allclose(np.diagonal(cov, axis1=1, axis2=2).T, marginal, rtol=1e-9)
    _, output_cov = model.predict_f(X, full_cov=True, full_output_cov=True)
    assert output_cov.shape == (len(X), 2, len(X), 2)
    np.testing.assert_allclose(output_cov[:, 1, :, 1], cov[1], rtol=1e-12)
    np.testing.assert_array_equal(output_cov[:, 0, :, 1], 0.0)


def test_doubly_minibatched_estimate_is_unbiased(rng):
    """P8: averaged over a partition into equal data blocks and equal inducing blocks, the
    scaled estimates equal the full ELBO."""
    X, Y, Z, q_mu, q_sqrt = make_problem(rng, num_data=24, num_inducing=12)
    model = model_for(Z, q_mu, q_sqrt, 3, num_data=24)
    data = model.training_data(X, Y)
    data_blocks = rng.permutation(24).reshape(4, 6)
    inducing_blocks = rng.permutation(12).reshape(4, 3)
    estimates = [
        model.elbo(tuple(part[rows] for part in data), tf.constant(inducing)).numpy()
        for rows, inducing in zip(data_blocks, inducing_blocks)
    ]
    np.testing.assert_allclose(np.mean(estimates), model.elbo(data).numpy(), rtol=1e-12)


def test_sampled_inducing_batches_average_to_the_full_kl(rng):
    X, Y, Z, q_mu, q_sqrt = make_problem(rng)
    model = model_for(Z, q_mu, q_sqrt, 3, inducing_batch_size=4, seed=7)
    data = model.training_data(X, Y)
    loss = model.training_loss_closure(data, compile=True)
    draws = np.array([loss().numpy() for _ in range(400)])
    full = -model_for(Z, q_mu, q_sqrt, 3, seed=7).elbo(data).numpy()
    standard_error = draws.std() / np.sqrt(len(draws))
    assert draws.std() > 0
    assert abs(draws.mean() - full) < 4 * standard_error


def test_training_inputs_as_inducing_points_give_q_u(rng):
    """P10: with Z = X and a tiny jitter, q(f_i) is q(u_i)."""
    X, Y, _, _, _ = make_problem(rng)
    q_mu, q_sqrt = rng.standard_normal((len(X), 1)), rng.uniform(0.2, 1, (len(X), 1))
    with gpflow.config.as_context(gpflow.config.Config(jitter=1e-10)):
        model = model_for(X, q_mu, q_sqrt, 5)
        mean, var = model.predict_f(X)
    np.testing.assert_allclose(mean.numpy(), q_mu, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(var.numpy(), q_sqrt**2, rtol=1e-5, atol=1e-7)


def test_data_term_at_inducing_inputs_is_q_u_exactly(rng):
    """
    Issue 15: a data point that is an inducing input reads q(f_i) = q(u_i) (GPyTorch's data
    term), not eq. 25 through K_nn + εI, at the default jitter, for every way a batch arrives:
    plain (X, Y) (graph search), with neighbour rows, compiled, a shuffled subset, and a batch
    mixing inducing inputs with other points (those keep eq. 25).
    """
    X, Y, _, _, _ = make_problem(rng, num_data=25)
    q_mu, q_sqrt = rng.standard_normal((25, 2)), rng.uniform(0.2, 1, (25, 2))
    Y = np.hstack([Y, -Y])
    mean_function = gpflow.mean_functions.Constant(0.3)
    model = model_for(X, q_mu, q_sqrt, 4, num_data=25, mean_function=mean_function)
    Ktilde = dense_vecchia_covariance(X, brute_force_prior_neighbors(X, model.ordering, 4))
    kl = sum(gauss_kl(q_mu[:, l] - 0.3, np.diag(q_sqrt[:, l] ** 2), Ktilde) for l in range(2))
    reference = gaussian_expectation(Y, q_mu, q_sqrt**2) - kl
    compiled = tf.function(model.elbo)
    triple = model.training_data(X, Y)
    reversed_neighbors = (*triple[:2], triple[2][:, ::-1])  # the match is not the first column
    for data in ((X, Y), triple, reversed_neighbors):
        np.testing.assert_allclose(model.elbo(data).numpy(), reference, rtol=1e-10)
        np.testing.assert_allclose(compiled(data).numpy(), reference, rtol=1e-10)
    # eq. 25 at the default jitter is measurably different, so the check above has teeth
    eq25_mean, eq25_var = dense_q_f(X, X, q_mu, q_sqrt, 4, mean=0.3)
    assert abs(gaussian_expectation(Y, eq25_mean, eq25_var) - kl - reference) > 1e-6
    rows = rng.permutation(25)[:7]
    expected = 25 / 7 * gaussian_expectation(Y[rows], q_mu[rows], q_sqrt[rows] ** 2) - kl
    np.testing.assert_allclose(model.elbo((X[rows], Y[rows])).numpy(), expected, rtol=1e-10)
    Xnew = rng.uniform(-3, 3, (4, 2))
    mixed = np.vstack([X[rows], Xnew])
    new_mean, new_var = dense_q_f(Xnew, X, q_mu, q_sqrt, 4, mean=0.3)
    data_term = gaussian_expectation(Y[rows], q_mu[rows], q_sqrt[rows] ** 2)
    data_term += gaussian_expectation(Y[:4], new_mean, new_var)
    expected = 25 / 11 * data_term - kl
    mixed_Y = np.vstack([Y[rows], Y[:4]])
    np.testing.assert_allclose(model.elbo((mixed, mixed_Y)).numpy(), expected, rtol=1e-10)
    np.testing.assert_allclose(compiled((mixed, mixed_Y)).numpy(), expected, rtol=1e-10)


def test_data_term_at_inducing_inputs_evaluates_no_kernel(rng):
    """A batch of inducing inputs has gradients for q(u) only: the kernel is not evaluated."""
    X, Y, _, q_mu, q_sqrt = make_problem(rng, num_inducing=30)
    model = model_for(X, q_mu, q_sqrt, 4, num_data=30)
    with tf.GradientTape() as tape:
        expected = tf.reduce_sum(
            model.likelihood.variational_expectations(X, *model._q_f(X, model.neighbors(X)), Y)
        )
    kernel_gradients = tape.gradient(expected, model.kernel.trainable_variables)
    assert all(gradient is None for gradient in kernel_gradients)
    np.testing.assert_allclose(
        expected.numpy(), gaussian_expectation(Y, q_mu, q_sqrt**2), rtol=1e-12
    )


def test_closed_form_optimum_for_gaussian_likelihood(rng):
    """P6: with Z = X the optimal mean-field q and the optimal ELBO are closed form, and the
    optimiser reaches them."""
    X, Y, _, _, _ = make_problem(rng, num_data=20)
    k = 4
    start = model_for(X, np.zeros((20, 1)), np.ones((20, 1)), k, ordering="given")
    Ktilde = dense_vecchia_covariance(X, brute_force_prior_neighbors(X, np.arange(20), k))
    # At Z = X the data term reads q(f_i) = q(u_i) exactly: A = I and no conditional variance.
    A, C = np.eye(20), np.zeros(20)
    Lambda = np.linalg.inv(Ktilde) + A.T @ A / NOISE
    m_star = np.linalg.solve(Lambda, A.T @ Y / NOISE)
    s_star = 1 / np.diag(Lambda)
    optimum = model_for(X, m_star, np.sqrt(s_star)[:, None], k, ordering="given")
    reference = gaussian_expectation(Y, A @ m_star, (C + (A**2) @ s_star)[:, None]) - gauss_kl(
        m_star[:, 0], np.diag(s_star), Ktilde
    )
    np.testing.assert_allclose(optimum.elbo((X, Y)).numpy(), reference, rtol=1e-9)
    gpflow.set_trainable(start.kernel, False)
    gpflow.set_trainable(start.likelihood, False)
    gpflow.optimizers.Scipy().minimize(
        start.training_loss_closure((X, Y)),
        start.trainable_variables,
        options=dict(maxiter=3000, gtol=1e-10),
    )
    np.testing.assert_allclose(start.elbo((X, Y)).numpy(), reference, rtol=1e-7)
    np.testing.assert_allclose(start.q_mu.numpy(), m_star, rtol=1e-4, atol=1e-5)


# --- predictions (P11) --------------------------------------------------------------------


def test_predictions_far_away_are_the_prior_and_chunking_is_exact(rng):
    X, Y, Z, q_mu, q_sqrt = make_problem(rng)
    model = model_for(Z, q_mu, q_sqrt, 3, mean_function=gpflow.mean_functions.Constant(0.5))
    far = np.array([[100.0, 100.0], [-80.0, 90.0]])
    mean, var = model.predict_f(far)
    np.testing.assert_allclose(mean.numpy(), 0.5, atol=1e-12)
    np.testing.assert_allclose(var.numpy(), VARIANCE, rtol=1e-12)
    Xnew = rng.uniform(-3, 3, (23, 2))
    whole = model.predict_f(Xnew)
    in_chunks = model_for(
        Z, q_mu, q_sqrt, 3, mean_function=model.mean_function, prediction_batch_size=5
    )
    for chunked, single in zip(in_chunks.predict_f(Xnew), whole):
        np.testing.assert_allclose(chunked.numpy(), single.numpy(), rtol=1e-13)
    cached = model.posterior().predict_f(Xnew)
    for posterior, direct in zip(cached, whole):
        np.testing.assert_allclose(posterior.numpy(), direct.numpy(), rtol=1e-13)
    compiled = tf.function(lambda x: model.predict_f(x))(tf.constant(Xnew))
    for graph, eager in zip(compiled, whole):
        np.testing.assert_allclose(graph.numpy(), eager.numpy(), rtol=1e-12)
    assert whole[0].shape == (23, 1)


def test_graph_neighbours_give_the_kd_tree_numbers(rng, monkeypatch):
    """Predictions and the ELBO from the graph search (eagerly and compiled, over several query
    and inducing blocks and prediction chunks) equal those from the k-d tree's neighbours."""
    monkeypatch.setattr(neighbors, "QUERY_BLOCK", 4)
    monkeypatch.setattr(neighbors, "WORKING_ELEMENTS", 4 * 9)  # blocks of 9 inducing points
    X, Y, Z, q_mu, q_sqrt = make_problem(rng, num_data=30, num_inducing=40, num_latent=2)
    linear = gpflow.mean_functions.Linear(rng.standard_normal((2, 2)), rng.standard_normal(2))
    model = model_for(
        Z, q_mu, q_sqrt, 4, mean_function=linear, num_neighbors_predict=6, prediction_batch_size=7
    )
    Xnew = rng.uniform(-3.5, 3.5, (33, 2))
    expected = model._q_f(tf.constant(Xnew), model.neighbors(Xnew))
    spec = tf.TensorSpec([None, 2], tf.float64)
    compiled = tf.function(model.predict_f, input_signature=[spec])
    for got in (model.predict_f(Xnew), compiled(tf.constant(Xnew))):
        for value, reference in zip(got, expected):
            np.testing.assert_allclose(value.numpy(), reference.numpy(), rtol=1e-12)
    reference = model.elbo(model.training_data(X, Y)).numpy()
    elbo = tf.function(lambda X, Y: model.elbo((X, Y)), input_signature=[spec, spec])
    np.testing.assert_allclose(model.elbo((X, Y)).numpy(), reference, rtol=1e-12)
    np.testing.assert_allclose(elbo(tf.constant(X), tf.constant(Y)).numpy(), reference, rtol=1e-12)


@pytest.mark.parametrize(
    "name",
    [
        "num_neighbors",
        "num_neighbors_predict",
        "inducing_batch_size",
        "prediction_batch_size",
        "num_data",
        "ordering",
        "jitter",
        "kl_estimate",
        "data_multiplicity",
    ],
)
def test_settings_read_when_tracing_are_fixed_at_construction(rng, name):
    _, _, Z, q_mu, q_sqrt = make_problem(rng)
    model = model_for(Z, q_mu, q_sqrt, 3, inducing_batch_size=4, num_data=30)
    with pytest.raises(AttributeError, match="build a new model"):
        setattr(model, name, getattr(model, name))
    posterior = model.posterior()
    for setting in ("num_neighbors", "prediction_batch_size", "jitter"):
        with pytest.raises(AttributeError):
            setattr(posterior, setting, 1)


def test_num_neighbors_cannot_change_after_construction_on_copies_either(rng):
    """A refused assignment leaves the model as it was; copies keep the guard; the ordering
    cannot be changed in place."""
    _, _, Z, q_mu, q_sqrt = make_problem(rng)
    model = model_for(Z, q_mu, q_sqrt, 3)
    kl = model.prior_kl().numpy()
    for target in (model, copy.deepcopy(model), gpflow.utilities.freeze(model)):
        with pytest.raises(AttributeError, match="`num_neighbors` of VNNGP is fixed"):
            target.num_neighbors = 5
        assert target.num_neighbors == 3
        assert target._prior_table.shape == (12, 3)
        np.testing.assert_array_equal(target.prior_kl().numpy(), kl)
    for target in (model, copy.deepcopy(model), gpflow.utilities.freeze(model)):
        with pytest.raises(ValueError, match="read-only"):
            target.ordering[:2] = target.ordering[1::-1]


def test_frozen_model_is_the_model_with_constants(rng):
    """
    ``gpflow.utilities.freeze`` turns ``q_sqrt`` into its constrained values and the neighbour
    table into a constant: the ELBO (sampled KL included) is unchanged, and ``update_neighbors``
    explains that a frozen model's table cannot move. An untransformed ``q_sqrt`` parameter
    holding the same values gives the same ELBO too.
    """
    X, Y, Z, q_mu, q_sqrt = make_problem(rng)
    model = model_for(Z, q_mu, q_sqrt, 3, num_data=30, inducing_batch_size=5)
    data = model.training_data(X, Y)
    indices = tf.constant([0, 4, 4, 11], tf.int64)
    expected = model.elbo(data, inducing_indices=indices).numpy()
    frozen = gpflow.utilities.freeze(model)
    assert not isinstance(frozen.q_sqrt, tf.Variable)
    assert frozen.trainable_variables == ()
    np.testing.assert_array_equal(frozen.elbo(data, inducing_indices=indices).numpy(), expected)
    # the sampler is copied in its current state: both draw the same inducing batch next
    np.testing.assert_array_equal(frozen.elbo(data).numpy(), model.elbo(data).numpy())
    with pytest.raises(TypeError, match="freeze"):
        frozen.update_neighbors()

    model.q_sqrt = gpflow.Parameter(model.q_sqrt.numpy(), transform=None)
    np.testing.assert_allclose(
        model.elbo(data, inducing_indices=indices).numpy(), expected, rtol=1e-14
    )


# --- the posterior object (GPflow's posterior contract) -------------------------------------


def posterior_problem(rng, prediction_batch_size=5):
    _, _, Z, q_mu, q_sqrt = make_problem(rng, num_inducing=15, num_latent=2)
    linear = gpflow.mean_functions.Linear(rng.standard_normal((2, 2)), rng.standard_normal(2))
    model = model_for(
        Z,
        q_mu,
        q_sqrt,
        3,
        mean_function=linear,
        num_neighbors_predict=4,
        prediction_batch_size=prediction_batch_size,
    )
    return model, rng.uniform(-3.5, 3.5, (13, 2))


def assert_predictions_equal(got, expected, rtol=1e-14):
    for value, reference in zip(got, expected):
        np.testing.assert_allclose(np.asarray(value), np.asarray(reference), rtol=rtol)


@pytest.mark.parametrize("cache", [PrecomputeCacheType.TENSOR, PrecomputeCacheType.VARIABLE])
def test_posterior_fused_equals_cached(rng, cache):
    model, Xnew = posterior_problem(rng)
    posterior = model.posterior(cache)
    fused = posterior.fused_predict_f(Xnew)
    assert_predictions_equal(posterior.predict_f(Xnew), fused)
    assert_predictions_equal(model.predict_f(Xnew), fused)
    assert fused[0].shape == fused[1].shape == (13, 2)
    # built from the parts (plain tensors), not from the model
    from_parts = VNNGPPosterior(
        model.kernel,
        gpflow.inducing_variables.InducingPoints(model.inducing_variable.Z.numpy()),
        tf.constant(model.q_mu.numpy()),
        tf.constant(model.q_sqrt.numpy()),
        model.mean_function,
        num_neighbors=4,
        precompute_cache=cache,
    )
    assert_predictions_equal(from_parts.predict_f(Xnew), fused)
    assert_predictions_equal(from_parts.fused_predict_f(Xnew), fused)
    assert_predictions_equal(
        posterior.predict_f(Xnew, full_cov=True), posterior.fused_predict_f(Xnew, full_cov=True)
    )


def test_posterior_without_cache(rng):
    model, Xnew = posterior_problem(rng)
    posterior = model.posterior(PrecomputeCacheType.NOCACHE)
    assert posterior.cache is None
    with pytest.raises(ValueError, match="Cache has not been precomputed"):
        posterior.predict_f(Xnew)
    assert_predictions_equal(posterior.fused_predict_f(Xnew), model.predict_f(Xnew))
    with pytest.raises(ValueError, match=r"at most 15 \(M\)"):
        VNNGPPosterior(
            model.kernel,
            model.inducing_variable,
            model.q_mu,
            model.q_sqrt,
            num_neighbors=16,
            precompute_cache=None,
        )


def move_parameters(model, rng):
    """New q(u) and inducing inputs; returns a fresh model holding the new values."""
    model.q_mu.assign(rng.standard_normal(model.q_mu.shape))
    model.q_sqrt.assign(rng.uniform(0.2, 1.0, model.q_sqrt.shape))
    model.inducing_variable.Z.assign(model.inducing_variable.Z + rng.normal(0, 0.3, (15, 2)))
    fresh, _ = posterior_problem(rng)
    gpflow.utilities.multiple_assign(fresh, gpflow.utilities.parameter_dict(model))
    return fresh


def test_tensor_cache_holds_the_values_at_creation(rng):
    model, Xnew = posterior_problem(rng)
    posterior = model.posterior(PrecomputeCacheType.TENSOR)
    before = posterior.predict_f(Xnew)
    moved = move_parameters(model, rng)
    assert_predictions_equal(posterior.predict_f(Xnew), before)
    assert_predictions_equal(posterior.fused_predict_f(Xnew), moved.predict_f(Xnew))
    posterior.update_cache(PrecomputeCacheType.TENSOR)
    assert_predictions_equal(posterior.predict_f(Xnew), moved.predict_f(Xnew))


def test_variable_cache_changes_only_on_update_cache(rng):
    """GPflow's VARIABLE cache: compiled predictions keep the cached q(u) and Z until
    update_cache(), which also works inside tf.function, without retracing."""
    model, Xnew = posterior_problem(rng)
    posterior = model.posterior(PrecomputeCacheType.VARIABLE)
    assert all(isinstance(value, tf.Variable) for value in posterior.cache)
    spec = [tf.TensorSpec([None, 2], tf.float64)]
    predict = tf.function(posterior.predict_f, input_signature=spec)
    fused = tf.function(posterior.fused_predict_f, input_signature=spec)
    before = predict(Xnew)
    assert_predictions_equal(before, model.predict_f(Xnew))

    moved = move_parameters(model, rng)
    assert_predictions_equal(predict(Xnew), before)
    assert_predictions_equal(posterior.predict_f(Xnew), before)
    assert_predictions_equal(fused(Xnew), moved.predict_f(Xnew))
    assert not np.allclose(fused(Xnew)[0], before[0])
    posterior.update_cache()
    assert_predictions_equal(predict(Xnew), moved.predict_f(Xnew))

    moved = move_parameters(model, rng)
    tf.function(lambda: posterior.update_cache(PrecomputeCacheType.VARIABLE))()
    assert_predictions_equal(predict(Xnew), moved.predict_f(Xnew))
    assert predict.experimental_get_tracing_count() == 1


def test_predictions_are_differentiable(rng):
    """The chunked graph predictions give the gradients of the k-d tree path."""
    model, Xnew = posterior_problem(rng, prediction_batch_size=4)
    variables = model.trainable_variables

    def gradients(predict):
        with tf.GradientTape() as tape:
            mean, var = predict()
            loss = tf.reduce_sum(tf.sin(mean)) + tf.reduce_sum(tf.sqrt(var))
        return tape.gradient(loss, variables)

    expected = gradients(lambda: model._q_f(tf.constant(Xnew), model.neighbors(Xnew)))
    assert sum(g is not None for g in expected) == 6  # all but the likelihood variance
    for predict in (lambda: model.predict_f(Xnew), lambda: model.posterior().predict_f(Xnew)):
        for got, reference in zip(gradients(predict), expected):
            if reference is None:  # the likelihood's variance
                assert got is None
                continue
            got, reference = tf.convert_to_tensor(got), tf.convert_to_tensor(reference)
            np.testing.assert_allclose(got.numpy(), reference.numpy(), rtol=1e-11, atol=1e-14)


LOAD_WITHOUT_GPFLOW = """
import sys, numpy as np, tensorflow as tf
X = np.load(sys.argv[2])
outputs = {}
for name in ("model", "posterior"):
    loaded = tf.saved_model.load(sys.argv[1] + "/" + name)
    for rows, key in ((X, name), (X[:0], name + "_empty")):
        mean, var = loaded.predict_f(rows)
        outputs[key + "_mean"], outputs[key + "_var"] = mean.numpy(), var.numpy()
np.savez(sys.argv[3], **outputs)
assert "gpflow" not in sys.modules and "gpflow_tight" not in sys.modules
"""


def test_exported_predictions_and_posterior_load_without_gpflow(rng, tmp_path):
    """The graph search and the chunked predictions export: the model (export_predictions) and
    a VARIABLE-cache posterior reload in a process that imports TensorFlow only."""
    model, _ = posterior_problem(rng, prediction_batch_size=4)
    Xnew = rng.uniform(-3.5, 3.5, (11, 2))
    export_predictions(model, str(tmp_path / "model"), input_dim=2)
    posterior = model.posterior(PrecomputeCacheType.VARIABLE)
    module = tf.Module()
    module.posterior = posterior
    module.predict_f = tf.function(
        posterior.predict_f, input_signature=[tf.TensorSpec([None, 2], tf.float64)]
    )
    tf.saved_model.save(module, str(tmp_path / "posterior"))
    expected = model.predict_f(Xnew)
    move_parameters(model, rng)  # the exports hold the values at export time

    np.save(tmp_path / "X.npy", Xnew)
    script = tmp_path / "load.py"
    script.write_text(LOAD_WITHOUT_GPFLOW)
    out = tmp_path / "out.npz"
    subprocess.run(
        [sys.executable, str(script), str(tmp_path), str(tmp_path / "X.npy"), str(out)],
        check=True,
    )
    got = np.load(out)
    for name in ("model", "posterior"):
        assert_predictions_equal((got[f"{name}_mean"], got[f"{name}_var"]), expected)
        assert got[f"{name}_empty_mean"].shape == got[f"{name}_empty_var"].shape == (0, 2)


# --- training, precision, saving -----------------------------------------------------------


@pytest.mark.parametrize(
    "kl", [dict(inducing_batch_size=32), dict(kl_estimate="data_batch")], ids=["uniform", "data"]
)
def test_minibatch_training_with_tf_data_and_adam(rng, kl):
    X, Y, _, _, _ = make_problem(rng, num_data=200)
    model = VNNGP(
        kernel(), gpflow.likelihoods.Gaussian(0.5), X, num_neighbors=8, num_data=200, **kl
    )
    data = model.training_data(X, Y)
    history = gpflow_tight.training.fit_adam(
        model, data, iterations=300, batch_size=32, learning_rate=0.05, progress=False
    )
    assert np.mean(history[-20:]) < np.mean(history[:20])
    mean, _ = model.predict_f(X)
    assert np.sqrt(np.mean((mean.numpy() - Y) ** 2)) < 0.5


def test_float32(rng):
    X, Y, Z, q_mu, q_sqrt = make_problem(rng)
    reference = model_for(Z, q_mu, q_sqrt, 3).elbo((X, Y)).numpy()
    gpflow.config.set_default_float(np.float32)
    model = model_for(Z.astype(np.float32), q_mu, q_sqrt, 3)
    value = model.elbo((X.astype(np.float32), Y.astype(np.float32)))
    assert value.dtype == tf.float32
    np.testing.assert_allclose(value.numpy(), reference, rtol=1e-4)


def test_checkpoint_round_trip(rng, tmp_path):
    X, Y, Z, q_mu, q_sqrt = make_problem(rng)
    model = model_for(Z, q_mu, q_sqrt, 3)
    gpflow_tight.training.fit_adam(model, (X, Y), iterations=5, progress=False)
    path = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    restored = model_for(Z, np.zeros_like(q_mu), np.ones_like(q_sqrt), 3)
    tf.train.Checkpoint(model=restored).read(path).assert_consumed()
    np.testing.assert_allclose(restored.elbo((X, Y)).numpy(), model.elbo((X, Y)).numpy())


# --- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(num_neighbors=12), ValueError, "at most 11"),
        (dict(num_neighbors=0), ValueError, "at least 1"),
        (dict(num_neighbors=2.0), TypeError, "int"),
        (dict(num_neighbors_predict=13), ValueError, "at most 12"),
        (dict(ordering="sorted"), ValueError, "ordering"),
        (dict(q_mu=np.zeros((11, 1))), ValueError, "q_mu"),
        (dict(q_sqrt=-np.ones((12, 1))), ValueError, "strictly positive"),
        (dict(inducing_batch_size=0), ValueError, "inducing_batch_size"),
        (dict(jitter=-1e-6), ValueError, "`jitter` must be finite and non-negative"),
        (dict(jitter=np.nan), ValueError, "`jitter` must be finite and non-negative"),
        (dict(jitter="1e-3"), TypeError, "`jitter` must be a float or None"),
    ],
)
def test_bad_settings_raise_clear_errors(rng, kwargs, error, match):
    _, _, Z, _, _ = make_problem(rng)
    settings = dict(num_neighbors=3, **kwargs) if "num_neighbors" not in kwargs else kwargs
    with pytest.raises(error, match=match):
        VNNGP(kernel(), gpflow.likelihoods.Gaussian(), Z, **settings)


def test_bad_inducing_inputs_and_data(rng):
    X, Y, Z, _, _ = make_problem(rng)
    with pytest.raises(ValueError, match="duplicated"):
        VNNGP(kernel(), gpflow.likelihoods.Gaussian(), np.vstack([Z, Z[:2]]), num_neighbors=3)
    nearly = np.vstack([Z, Z[:1] * (1 + 1e-12)])  # distinct in float64, equal in float32
    VNNGP(kernel(), gpflow.likelihoods.Gaussian(), nearly, num_neighbors=3)
    with gpflow.config.as_context(gpflow.config.Config(float=np.float32)):
        with pytest.raises(ValueError, match="1 duplicated"):
            VNNGP(kernel(), gpflow.likelihoods.Gaussian(), nearly, num_neighbors=3)
    with pytest.raises(ValueError, match="NaN"):
        VNNGP(
            kernel(), gpflow.likelihoods.Gaussian(), np.vstack([Z, [[np.nan, 0]]]), num_neighbors=3
        )
    with pytest.raises(ValueError, match=r"\[M, D\]"):
        VNNGP(kernel(), gpflow.likelihoods.Gaussian(), Z[:, 0], num_neighbors=3)
    model = VNNGP(kernel(), gpflow.likelihoods.Gaussian(), Z, num_neighbors=3)
    with pytest.raises(ValueError, match="2 columns"):
        model.elbo((X[:, :1], Y))
    with pytest.raises(ValueError, match="rows"):
        model.elbo((X, Y[:5]))
    with pytest.raises(ValueError, match="2 columns"):
        model.predict_f(X[:, :1])
    with pytest.raises(ValueError, match=r"K >= 1"):
        model.elbo((X, Y, np.zeros((len(X), 0), dtype=np.int64)))
    with pytest.raises(ValueError, match="integer rows"):
        model.elbo((X, Y, np.zeros((len(X), 3))))


# --- the neighbour conditionals: centring and float32 (docs/float32.md) -----------------------


def dense_conditional(kernel_matrix, Z, X, neighbors, mask, jitter):
    """
    a = (K_nn + εI)⁻¹ k_nx and c = k_xx - k_nxᵀ a per row, on the unmasked neighbours only (a is
    0 on padding), with ``kernel_matrix(A, B)`` a numpy kernel; c is not clipped here.
    """
    a, c = np.zeros(neighbors.shape), np.zeros(len(X))
    for row, (x, n, valid) in enumerate(zip(X, neighbors, mask)):
        n = n[valid]
        K_nn = kernel_matrix(Z[n], Z[n]) + jitter * np.eye(len(n))
        k_nx = kernel_matrix(Z[n], x[None])[:, 0]
        a[row, valid] = np.linalg.solve(K_nn, k_nx) if len(n) else np.zeros(0)
        c[row] = kernel_matrix(x[None], x[None])[0, 0] - k_nx @ a[row, valid]
    return a, c


def uncentred_conditional(kernel, Z, X, neighbors, mask=None):
    """``conditional_on_neighbors`` as it was before centring: the kernel on the inputs as given."""
    joint = kernel(tf.concat([tf.gather(Z, neighbors), X[:, None, :]], axis=1))
    K_nn, k_nx, k_xx = joint[:, :-1, :-1], joint[:, :-1, -1], joint[:, -1, -1]
    eye = tf.eye(tf.shape(K_nn)[-1], dtype=K_nn.dtype)
    if mask is not None:
        m = tf.cast(mask, K_nn.dtype)
        K_nn = K_nn * m[:, :, None] * m[:, None, :] + eye * (1 - m[:, :, None])
        k_nx = k_nx * m
    L = tf.linalg.cholesky(K_nn + gpflow.config.default_jitter() * eye)
    a = tf.linalg.cholesky_solve(L, k_nx[..., None])[..., 0]
    return a, k_xx - tf.reduce_sum(k_nx * a, axis=-1)


def padded_neighborhoods(rng, offset):
    """
    12 inducing inputs and 6 points in 2-D around ``offset``, each point with its 4 nearest
    inducing inputs; row 1 keeps 2 of them, row 3 one, row 5 none (padding points at row 0 of Z,
    as VNNGP's prior table does).
    """
    Z = rng.uniform(-3, 3, (12, 2)) + offset
    X = rng.uniform(-4, 4, (6, 2)) + offset
    neighbors = np.argsort(np.sum((X[:, None] - Z[None]) ** 2, axis=-1), axis=1)[:, :4]
    mask = np.ones(neighbors.shape, bool)
    mask[1, 2:] = mask[3, 1:] = mask[5, :] = False
    return Z, X, np.where(mask, neighbors, 0), mask


@pytest.mark.parametrize("offset", [0.0, 50.0])
def test_centred_conditional_equals_dense_formula(rng, offset):
    """
    For the SE kernel the conditional is evaluated on each neighbourhood translated by its
    neighbours' mean (x itself for row 5, which has none): in float64 it is the dense formula,
    padding and all, eagerly and compiled with unknown shapes.
    """
    Z, X, neighbors, mask = padded_neighborhoods(rng, offset)
    a_ref, c_ref = dense_conditional(
        lambda A, B: se_kernel(A, B, VARIANCE, LENGTHSCALE), Z, X, neighbors, mask, JITTER
    )
    assert c_ref[5] == VARIANCE and np.all(a_ref[5] == 0.0)  # no neighbour: the prior
    se = kernel()
    compiled = tf.function(
        lambda *args: VNNGPPosterior.conditional_on_neighbors(se, *args),
        input_signature=[
            tf.TensorSpec([None, None], tf.float64),
            tf.TensorSpec([None, None], tf.float64),
            tf.TensorSpec([None, None], tf.int64),
            tf.TensorSpec([None, None], tf.bool),
        ],
    )
    for conditional in (
        lambda *args: VNNGPPosterior.conditional_on_neighbors(se, *args),
        compiled,
    ):
        a, c = conditional(Z, X, neighbors, mask)
        np.testing.assert_allclose(a.numpy(), a_ref, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(c.numpy(), c_ref, rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(a.numpy()[~mask], 0.0)


def test_non_stationary_kernel_is_not_translated(rng):
    """
    A polynomial kernel is not a function of x - x', so its inputs are used as they are: the
    dense formula, and bit for bit the computation without centring.
    """
    Z, X, neighbors, mask = padded_neighborhoods(rng, offset=1.0)
    poly = gpflow.kernels.Polynomial(degree=2.0, variance=0.7, offset=0.5)
    a_ref, c_ref = dense_conditional(
        lambda A, B: (0.7 * A @ B.T + 0.5) ** 2, Z, X, neighbors, mask, JITTER
    )
    a, c = VNNGPPosterior.conditional_on_neighbors(poly, Z, X, neighbors, mask)
    np.testing.assert_allclose(a.numpy(), a_ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(c.numpy(), c_ref, rtol=1e-10)
    a_before, c_before = uncentred_conditional(poly, Z, X, neighbors, mask)
    np.testing.assert_array_equal(a.numpy(), a_before.numpy())
    np.testing.assert_array_equal(c.numpy(), c_before.numpy())


class HalvedDiagonalLinear(gpflow.kernels.Kernel):
    """x x'ᵀ - I/2 (not a covariance: it makes k_xx - k_nxᵀ a negative)."""

    def K(self, X, X2=None):
        return tf.matmul(X, X, transpose_b=True) - 0.5 * tf.eye(tf.shape(X)[-2], dtype=X.dtype)

    def K_diag(self, X):
        return tf.reduce_sum(tf.square(X), axis=-1) - 0.5


def test_conditional_variance_is_clipped_at_zero():
    """c = max(k_xx - k_nxᵀ a, 0): here k_xx - k_nxᵀ a = 0.5 - 4 / (3.5 + ε) < 0."""
    Z, X, neighbors = np.array([[2.0]]), np.array([[1.0]]), np.array([[0]])
    a, c = VNNGPPosterior.conditional_on_neighbors(HalvedDiagonalLinear(), Z, X, neighbors)
    np.testing.assert_allclose(a.numpy(), [[2.0 / (3.5 + JITTER)]], rtol=1e-15)
    np.testing.assert_array_equal(c.numpy(), [0.0])


def test_conditional_gradient_equals_differentiating_the_factorisation(rng, monkeypatch):
    """
    The neighbour conditional's hand-written gradient (``_gaussian_conditional_weights``)
    equals TensorFlow's gradient through the Cholesky factorisation and solves, for the
    kernel's hyperparameters and the inputs, with padded (masked) neighbour rows as in the KL.
    """
    Z = rng.uniform(0.0, 3.0, size=(12, 2))
    X = rng.uniform(0.0, 3.0, size=(6, 2))
    neighbors = np.stack([rng.choice(12, 4, replace=False) for _ in range(6)])
    mask = np.ones((6, 4), dtype=bool)
    mask[0, 1:], mask[1, 2:] = False, False  # rows with fewer predecessors than K
    kernel = gpflow.kernels.Matern32(variance=1.3, lengthscales=[0.7, 1.1])
    weights = rng.standard_normal((6, 4)), rng.standard_normal(6)

    def through_the_factorisation(K_nn, k_nx, k_xx):
        L = tf.linalg.cholesky(K_nn)
        a = tf.linalg.cholesky_solve(L, k_nx[..., None])[..., 0]
        return a, k_xx - tf.reduce_sum(k_nx * a, axis=-1)

    def gradients():
        Zt, Xt = tf.constant(Z), tf.constant(X)
        with tf.GradientTape() as tape:
            tape.watch([Zt, Xt])
            a, c = VNNGPPosterior.conditional_on_neighbors(kernel, Zt, Xt, neighbors, mask)
            loss = tf.reduce_sum(weights[0] * a) + tf.reduce_sum(weights[1] * c + a[:, 0] * c)
        return tape.gradient(loss, [Zt, Xt, *kernel.trainable_variables])

    got = gradients()
    monkeypatch.setattr(
        gpflow_tight.posteriors, "_gaussian_conditional_weights", through_the_factorisation
    )
    expected = gradients()
    for g, e in zip(got, expected):
        g, e = tf.convert_to_tensor(g), tf.convert_to_tensor(e)
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-10, atol=1e-13)


F32_JITTER, F32_LENGTHSCALE = 1e-4, 0.3
F32_TOLERANCE_A, F32_TOLERANCE_F = 8e-3, 3e-3


@pytest.mark.parametrize("offset", [0.0, 1000.0])
def test_float32_conditional_is_close_to_float64(rng, offset):
    """
    docs/float32.md, "Why VNNGP is worse": 40 inducing inputs on [0, 6] + ``offset`` (spacing
    about half the lengthscale 0.3), 30 points on [-1, 7] + ``offset``, K = 4 nearest, jitter
    1e-4. The reference is the dense formula in float64 on the same (float32-rounded) inputs.

    Measured (this draw; the largest over 30 other draws in brackets), centred float32: max
    |a32 - a64| 1.3e-3 at offset 0 and 3.6e-3 at offset 1000 (9.7e-3), and max |c32 - c64| /
    (c64 + ε), the relative error of the KL's F = c + ε, 1.0e-3 and 6.1e-4 (1.8e-3). That is
    float32 round-off through the solve: cond(K_nn + εI) is up to about Kσ²/ε = 4e4, and
    |a| here reaches 13. The tolerances are this draw's values doubled and rounded up. Without
    centring each kernel value carries the error of GPflow's squared distance ||x||² + ||z||² -
    2xᵀz, about 6e-8 (||x||² + ||z||²) / ℓ²: at offset 0 the errors are 0.50 (a) and 0.13 (F),
    at offset 1000 K_nn + εI is not even positive definite (a failed Cholesky factor, NaN, or
    its error: an infinite error).
    """
    Z = (np.sort(rng.uniform(0.0, 6.0, (40, 1)), axis=0) + offset).astype(np.float32)
    X = (rng.uniform(-1.0, 7.0, (30, 1)) + offset).astype(np.float32)
    neighbors = np.argsort(np.abs(X - Z.T), axis=1, kind="stable")[:, :4]
    mask = np.ones(neighbors.shape, bool)
    a_ref, c_ref = dense_conditional(
        lambda A, B: se_kernel(A, B, 1.0, F32_LENGTHSCALE),
        Z.astype(np.float64),
        X.astype(np.float64),
        neighbors,
        mask,
        F32_JITTER,
    )

    def errors(a, c):
        a, c = np.asarray(a, np.float64), np.asarray(c, np.float64)
        a_error = np.where(np.isfinite(a), np.abs(a - a_ref), np.inf)
        f_error = np.where(np.isfinite(c), np.abs(c - c_ref) / (c_ref + F32_JITTER), np.inf)
        return np.max(a_error), np.max(f_error)

    config = gpflow.config.Config(float=np.float32, jitter=F32_JITTER)
    with gpflow.config.as_context(config):
        se = gpflow.kernels.SquaredExponential(lengthscales=F32_LENGTHSCALE)
        a, c = VNNGPPosterior.conditional_on_neighbors(se, Z, X, neighbors)
        try:
            before = errors(*uncentred_conditional(se, tf.constant(Z), tf.constant(X), neighbors))
        except tf.errors.InvalidArgumentError:  # K_nn + εI did not factorise
            before = (np.inf, np.inf)
    assert a.dtype == c.dtype == tf.float32
    assert np.all(c.numpy() >= 0.0)
    a_error, f_error = errors(a, c)
    assert a_error < F32_TOLERANCE_A and f_error < F32_TOLERANCE_F, (a_error, f_error)
    a_error_before, f_error_before = before
    assert a_error_before > 10 * F32_TOLERANCE_A, a_error_before
    assert f_error_before > 10 * F32_TOLERANCE_F, f_error_before


def test_from_data_starts_q_at_the_targets(rng):
    """Z = the distinct rows of X; q_mu = the mean target over each row's repeats (a loop
    here), q_sqrt = q_sqrt_scale x each target column's standard deviation; num_data = N; the
    model is the constructor's with these values and jitter 1e-3 (equal ELBO), unless another
    jitter is given. Other likelihoods keep the constructor's start; q(u) arguments and bad data
    are refused."""
    X = rng.uniform(-3, 3, (20, 2))
    X = np.concatenate([X, X[:6], X[:2]])  # repeated inputs
    Y = np.concatenate([np.sin(X[:, :1]), np.cos(X[:, 1:])], 1) + 0.1 * rng.standard_normal(
        (len(X), 2)
    )
    likelihood = gpflow.likelihoods.Gaussian(NOISE)
    model = VNNGP.from_data((X, Y), kernel(), likelihood, 4, q_sqrt_scale=0.2, seed=3)
    Z = model.inducing_variable.Z.numpy()
    assert len(Z) == 20 and len(np.unique(Z, axis=0)) == 20
    assert model.num_data == len(X) and model.num_latent_gps == 2
    for z, mean in zip(Z, model.q_mu.numpy()):
        same = np.all(X == z, axis=1)
        np.testing.assert_allclose(mean, Y[same].mean(0), rtol=1e-12)
    np.testing.assert_allclose(model.q_sqrt.numpy(), np.tile(0.2 * Y.std(0), (20, 1)))
    assert model.jitter == 1e-3
    # the KL on each batch's own inducing points, each distinct input counted as often as it occurs
    assert model.kl_estimate == "data_batch"
    np.testing.assert_array_equal(model.data_multiplicity, [np.sum(np.all(X == z, 1)) for z in Z])
    uniform = VNNGP.from_data((X, Y), kernel(), likelihood, 4, inducing_batch_size=5)
    assert uniform.kl_estimate == "inducing_batch" and uniform.data_multiplicity is None
    reference = VNNGP(kernel(), gpflow.likelihoods.Gaussian(NOISE), Z, 4, num_latent_gps=2,
                      q_mu=model.q_mu.numpy(), q_sqrt=model.q_sqrt.numpy(), num_data=len(X),
                      seed=3, jitter=1e-3)  # fmt: skip
    data = model.training_data(X, Y)
    np.testing.assert_allclose(model.elbo(data), reference.elbo(data), rtol=1e-12)
    assert VNNGP.from_data((X, Y), kernel(), likelihood, 4, jitter=1e-6).jitter == 1e-6

    bernoulli = VNNGP.from_data((X, (Y[:, :1] > 0).astype(float)), kernel(),
                                gpflow.likelihoods.Bernoulli(), 4)  # fmt: skip
    np.testing.assert_array_equal(bernoulli.q_mu.numpy(), 0.0)
    np.testing.assert_allclose(bernoulli.q_sqrt.numpy(), 1.0, rtol=1e-12)
    with pytest.raises(TypeError, match="sets `q_mu` from the data"):
        VNNGP.from_data((X, Y), kernel(), likelihood, 4, q_mu=np.zeros((20, 2)))
    with pytest.raises(TypeError, match="sets `data_multiplicity` from the data"):
        VNNGP.from_data((X, Y), kernel(), likelihood, 4, data_multiplicity=np.ones(20, int))
    with pytest.raises(ValueError, match="`q_sqrt_scale` must be finite and positive"):
        VNNGP.from_data((X, Y), kernel(), likelihood, 4, q_sqrt_scale=0.0)
    with pytest.raises(ValueError, match="data"):
        VNNGP.from_data((X, np.where(Y > 0.5, np.nan, Y)), kernel(), likelihood, 4)


# --- the KL on the data batch's own inducing points (kl_estimate="data_batch") ----------------


def repeated_inputs(rng):
    """24 training rows at 16 distinct inputs (five of them repeated), shuffled, and targets."""
    X = rng.uniform(-3, 3, (16, 2))
    X = np.concatenate([X, X[[0, 0, 1, 2, 2, 2, 5, 9]]])[rng.permutation(24)]
    return X, np.sin(X[:, :1]) * np.cos(X[:, 1:]) + 0.2 * rng.standard_normal((24, 1))


@pytest.mark.parametrize("q", ["mean_field", "nearest_neighbor"])
def test_data_batch_kl_is_exact_on_the_training_set_and_unbiased(rng, q):
    """
    With each distinct input weighted by 1/(its number of rows), the KL on the data batch's own
    inducing points is exact on the whole training set (the dense ELBO; the exact-KL model for
    the structured q) for plain, neighbour-row and compiled batches, and its average over a
    partition into equal blocks (what an epoch of shuffled minibatches averages) is exact too,
    while single blocks differ. Without the weights the repeated inputs would count twice.
    """
    X, Y = repeated_inputs(rng)
    Z, rows = np.unique(X, axis=0, return_inverse=True)
    rows, counts = rows.reshape(-1), np.bincount(rows.reshape(-1))
    q_mu, q_sqrt = rng.standard_normal((16, 1)), rng.uniform(0.2, 1, (16, 1))
    structured = dict(q=q, q_sqrt_offdiag=0.3 * rng.standard_normal((16, 4, 1)))
    extra = structured if q == "nearest_neighbor" else {}
    model = model_for(Z, q_mu, q_sqrt, 4, num_data=24, kl_estimate="data_batch",
                      data_multiplicity=counts, **extra)  # fmt: skip
    exact = model_for(Z, q_mu, q_sqrt, 4, num_data=24, **extra).elbo((X, Y)).numpy()
    if q == "mean_field":
        Ktilde = dense_vecchia_covariance(Z, brute_force_prior_neighbors(Z, model.ordering, 4))
        kl = gauss_kl(q_mu[:, 0], np.diag(q_sqrt[:, 0] ** 2), Ktilde)
        reference = gaussian_expectation(Y, q_mu[rows], q_sqrt[rows] ** 2) - kl
        np.testing.assert_allclose(exact, reference, rtol=1e-10)
    compiled = tf.function(model.elbo)
    for data in ((X, Y), model.training_data(X, Y)):
        np.testing.assert_allclose(model.elbo(data).numpy(), exact, rtol=1e-12)
        np.testing.assert_allclose(compiled(data).numpy(), exact, rtol=1e-12)
    blocks = rng.permutation(24).reshape(4, 6)
    estimates = [compiled((X[b], Y[b])).numpy() for b in blocks]
    np.testing.assert_allclose(np.mean(estimates), exact, rtol=1e-12)
    assert np.ptp(estimates) > 1e-2
    np.testing.assert_allclose(model.data_batch_kl(X).numpy(), model.prior_kl(), rtol=1e-12)
    # neighbour rows without the row's own inducing point: the KL still finds it in Z
    others = (X, Y, model.neighbors(X, 5)[:, 1:])
    exact_kl = model_for(Z, q_mu, q_sqrt, 4, num_data=24, **extra)
    np.testing.assert_allclose(model.elbo(others), exact_kl.elbo(others), rtol=1e-12)
    # without num_data the whole set is the one batch, with the same weights
    whole = model_for(Z, q_mu, q_sqrt, 4, kl_estimate="data_batch", data_multiplicity=counts,
                      **extra)  # fmt: skip
    np.testing.assert_allclose(whole.elbo((X, Y)).numpy(), exact, rtol=1e-12)


def test_one_inducing_point_per_row_keeps_repeats_apart(rng):
    """
    ``inducing_inputs="rows"``: Z = X with its repeats, each row's data term reads its own
    q(u_i) (also where more repeats than K tie at distance 0, so the k-d tree's neighbours
    leave the row out) and the KL is against the Vecchia prior of K_ZZ + εI on the repeated
    inputs (the dense ELBO with the model's neighbour sets), eagerly, compiled and on
    minibatches (their average over a partition is exact). Inputs that cannot say which repeat
    they are, repeats without jitter and unknown settings are refused.
    """
    distinct = rng.uniform(-3, 3, (16, 2))
    X = np.concatenate([distinct, distinct[[0, 0, 0, 0, 0, 1, 1, 2]]])[rng.permutation(24)]
    Y = np.sin(X[:, :1]) * np.cos(X[:, 1:]) + 0.2 * rng.standard_normal((24, 1))
    likelihood = gpflow.likelihoods.Gaussian(NOISE)
    model = VNNGP.from_data((X, Y), kernel(), likelihood, 4, inducing_inputs="rows", seed=3)
    np.testing.assert_array_equal(model.inducing_variable.Z.numpy(), X)
    np.testing.assert_array_equal(model.q_mu.numpy(), Y)
    np.testing.assert_array_equal(model.data_multiplicity, np.ones(24))
    assert model.num_data == 24 and model.jitter == 1e-3
    q_mu, q_sqrt = rng.standard_normal((24, 1)), rng.uniform(0.2, 1, (24, 1))
    model.q_mu.assign(q_mu)
    model.q_sqrt.assign(q_sqrt)
    data = model.training_data(X, Y)
    np.testing.assert_array_equal(data[2], model.neighbors(X))
    np.testing.assert_array_equal(data[2][:, 0], np.arange(24))  # its own inducing point first
    kd_tree = nearest_neighbors(X, X, 4)
    assert np.any(np.all(kd_tree != np.arange(24)[:, None], axis=1))  # some rows not their own
    distances = np.sum((X[:, None] - X[data[2]]) ** 2, axis=-1)
    np.testing.assert_array_equal(distances, np.sum((X[:, None] - X[kd_tree]) ** 2, axis=-1))
    sets = [row[row >= 0] for row in model.prior_neighbors]
    Ktilde = dense_vecchia_covariance(X, sets, jitter=1e-3)
    kl = gauss_kl(q_mu[:, 0], np.diag(q_sqrt[:, 0] ** 2), Ktilde)
    reference = gaussian_expectation(Y, q_mu, q_sqrt**2) - kl
    compiled = tf.function(model.elbo)
    np.testing.assert_allclose(model.elbo(data).numpy(), reference, rtol=1e-10)
    np.testing.assert_allclose(compiled(data).numpy(), reference, rtol=1e-10)
    blocks = rng.permutation(24).reshape(4, 6)
    estimates = [compiled(tuple(part[b] for part in data)).numpy() for b in blocks]
    np.testing.assert_allclose(np.mean(estimates), reference, rtol=1e-10)

    for refused in (lambda: model.elbo((X, Y)), lambda: model.data_batch_kl(X)):
        with pytest.raises(ValueError, match="cannot say which of them a row is"):
            refused()
    repeated = np.flatnonzero(np.all(X == distinct[0], axis=1))
    for batch in (X[::-1], X[repeated[:2]]):
        with pytest.raises(ValueError, match="which repeat a row is cannot be told"):
            model.training_data(batch, Y[: len(batch)])
    new = rng.uniform(-3, 3, (5, 2))
    np.testing.assert_array_equal(model.neighbors(new), nearest_neighbors(X, new, 4))
    with pytest.raises(ValueError, match="build the model with `jitter` > 0"):
        VNNGP.from_data((X, Y), kernel(), likelihood, 4, inducing_inputs="rows", jitter=None)
    with pytest.raises(ValueError, match="`inducing_inputs` must be 'distinct' or 'rows'"):
        VNNGP.from_data((X, Y), kernel(), likelihood, 4, inducing_inputs="all")


def test_one_inducing_point_per_row_is_the_benchmarks_moved_repeats(rng):
    """The paper-size runs gave each repeat its own inducing point by moving the k-th repeat
    by k × 1e-7 (``benchmarks/vnngp_uci.py --vnngp-z rows``): the same model as exact repeats
    up to the moves' first-order change of the kernel values (δ = 1e-7 times the kernel's
    slope, amplified by (K + εI)⁻¹ with ε = 1e-3), in the ELBO and in predictions, where
    neighbour sets hold no ties (here K = M - 1 and every inducing point predicts; with fewer,
    which of two tied repeats fills the K-th place may differ)."""
    X, Y = repeated_inputs(rng)
    likelihood = gpflow.likelihoods.Gaussian(NOISE)
    every = dict(inducing_inputs="rows", seed=3, num_neighbors_predict=24)
    exact = VNNGP.from_data((X, Y), kernel(), likelihood, 23, **every)
    _, inverse = np.unique(X, axis=0, return_inverse=True)
    repeat = np.array([np.sum(inverse[:i] == inverse[i]) for i in range(24)])
    moved = X + np.outer(1e-7 * repeat, [1.0, 0.0])
    apart = VNNGP.from_data((moved, Y), kernel(), likelihood, 23, **every)
    assert not apart._repeated_inputs  # distinct rows, in the same order (the same ordering)
    np.testing.assert_allclose(
        exact.elbo(exact.training_data(X, Y)).numpy(),
        apart.elbo(apart.training_data(moved, Y)).numpy(),
        rtol=2e-7,  # measured 8e-9 here, up to 5e-8 on other draws
    )
    Xnew = rng.uniform(-3, 3, (15, 2))
    for a, b in zip(exact.predict_f(Xnew), apart.predict_f(Xnew)):  # weights on repeats move
        np.testing.assert_allclose(
            a.numpy(), b.numpy(), atol=1e-4
        )  # by O(δ/ε): 3e-6 here, ≤ 4e-5 on others


def test_plain_batches_are_located_in_z_once(rng, monkeypatch):
    """A plain (X, Y) batch's rows are found in Z once per ELBO, for its q(f) and its KL."""
    X, Y = repeated_inputs(rng)
    Z, rows = np.unique(X, axis=0, return_inverse=True)
    counts = np.bincount(rows.reshape(-1))
    model = VNNGP(kernel(), gpflow.likelihoods.Gaussian(NOISE), Z, 3, num_data=24,
                  kl_estimate="data_batch", data_multiplicity=counts)  # fmt: skip
    calls = []
    find_rows = gpflow_tight.models.vnngp.graph_find_rows
    monkeypatch.setattr(
        gpflow_tight.models.vnngp,
        "graph_find_rows",
        lambda *args: calls.append(1) or find_rows(*args),
    )
    model.elbo((X, Y))
    assert len(calls) == 1


def test_data_batch_kl_settings_and_batches_are_checked(rng):
    """
    Settings the estimate cannot honour are refused; a batch row that is not an inducing input
    is a ValueError eagerly and a graph assertion compiled, with the same message; explicit
    inducing indices still override; without ``data_multiplicity`` every input counts once;
    ``freeze`` keeps the setting.
    """
    X, Y = repeated_inputs(rng)
    Z, rows = np.unique(X, axis=0, return_inverse=True)
    counts = np.bincount(rows.reshape(-1))
    likelihood = gpflow.likelihoods.Gaussian(NOISE)
    refused = [
        (dict(kl_estimate="uniform"), "`kl_estimate` must be one of"),
        (dict(kl_estimate="data_batch", inducing_batch_size=4, data_multiplicity=counts),
         "Give one or the other"),
        (dict(data_multiplicity=counts), "needs `kl_estimate='data_batch'`"),
        (dict(kl_estimate="data_batch", data_multiplicity=counts[:-1]), r"integers \[M\]"),
        (dict(kl_estimate="data_batch", data_multiplicity=counts * 1.0), "dtype float64"),
        (dict(kl_estimate="data_batch", data_multiplicity=counts - 1), "each ≥ 1"),
        (dict(kl_estimate="data_batch"), "counts 16 training rows but `num_data` is 24"),
    ]  # fmt: skip
    for kwargs, match in refused:
        with pytest.raises(ValueError, match=match):
            VNNGP(kernel(), likelihood, Z, 3, num_data=24, **kwargs)
    model = VNNGP(kernel(), likelihood, Z, 3, num_data=24, kl_estimate="data_batch",
                  data_multiplicity=counts)  # fmt: skip
    with pytest.raises(ValueError, match="read-only"):
        model.data_multiplicity[0] = 2
    mixed = (np.vstack([X[:5], [[0.123, 0.456]]]), Y[:6])
    match = "every row of X must be an inducing input"
    with pytest.raises(ValueError, match=match):
        model.elbo(mixed)
    with pytest.raises(tf.errors.InvalidArgumentError, match=match):
        tf.function(model.elbo)(mixed)
    twin = VNNGP(kernel(), likelihood, Z, 3, num_data=24)
    everything = tf.range(16, dtype=tf.int64)
    np.testing.assert_allclose(
        model.elbo(mixed, everything).numpy(), twin.elbo(mixed).numpy(), rtol=1e-12
    )
    frozen = gpflow.utilities.freeze(model)
    np.testing.assert_allclose(frozen.elbo((X, Y)).numpy(), twin.elbo((X, Y)).numpy(), rtol=1e-12)
    copied = copy.deepcopy(model)
    for array in (copied.data_multiplicity, frozen.data_multiplicity):
        with pytest.raises(ValueError, match="read-only"):
            array[0] = 2
    with pytest.raises(ValueError, match="`num_data` \\(30\\) must be N = 24"):
        VNNGP.from_data((X, Y), kernel(), likelihood, 3, num_data=30)
    once = VNNGP(kernel(), likelihood, Z, 3, kl_estimate="data_batch")
    np.testing.assert_array_equal(once.data_multiplicity, 1)
    # without num_data the batch must be the whole set: the 16 rows one per input counts
    match = "without `num_data` the batch must be the whole training set, the 16 rows"
    with pytest.raises(ValueError, match=match):
        once.elbo((X, Y))
    with pytest.raises(tf.errors.InvalidArgumentError, match=match):
        tf.function(once.elbo)((X, Y))
    distinct_Y = Y[: len(Z)]
    np.testing.assert_allclose(
        once.elbo((Z, distinct_Y)).numpy(),
        VNNGP(kernel(), likelihood, Z, 3).elbo((Z, distinct_Y)).numpy(),
        rtol=1e-12,
    )


def test_plain_search_refuses_bad_k_and_non_finite_inputs(rng):
    """The k-d tree search (the graph search takes non-finite rows: see the test above)."""
    points = rng.standard_normal((3, 2))
    for k in (0, 4):
        with pytest.raises(ValueError, match=r"`k` must be at least 1 and at most 3"):
            nearest_neighbors(points, points, k)
    with pytest.raises(TypeError, match="`k` must be an int"):
        nearest_neighbors(points, points, 1.5)
    nan_row = np.array([[np.nan, 0.0]])
    with pytest.raises(ValueError, match="`queries` must be finite"):
        nearest_neighbors(points, nan_row, 2)
    with pytest.raises(ValueError, match="`points` must be finite"):
        nearest_neighbors(np.vstack([points, nan_row]), points, 2)


@pytest.mark.parametrize(
    "make",
    [
        lambda Z: gpflow.inducing_variables.Multiscale(Z, np.full_like(Z, 0.2)),
        lambda Z: gpflow_tight.FrequencyInducingFeatures(Z, np.full_like(Z, 0.2)),
        lambda Z: gpflow_tight.LatentInducingPoints(Z),
    ],
)
def test_inducing_variables_other_than_points_are_refused(make):
    Z = np.linspace(-2, 2, 6)[:, None]
    with pytest.raises(TypeError, match="`inducing_variable` of VNNGP must be inducing points"):
        VNNGP(gpflow.kernels.SquaredExponential(), gpflow.likelihoods.Gaussian(0.1), make(Z), 3)


def test_a_gpflow_parameter_is_taken_as_inducing_inputs(rng):
    X, Y, Z, q_mu, q_sqrt = make_problem(rng)
    from_array = model_for(Z, q_mu, q_sqrt, 3)
    from_parameter = model_for(gpflow.Parameter(Z), q_mu, q_sqrt, 3)
    np.testing.assert_array_equal(from_parameter.elbo((X, Y)), from_array.elbo((X, Y)))


def test_neighbor_rows_and_kl_indices_out_of_range_are_refused(rng):
    """Out-of-range rows would read zeros on a GPU (a gather there does not fail)."""
    X, Y, Z, q_mu, q_sqrt = make_problem(rng)
    model = model_for(Z, q_mu, q_sqrt, 3, num_data=len(X))
    neighbors = model.neighbors(X)
    bad = np.array(neighbors)
    bad[4, 1] = len(Z)
    message = r"`data` neighbors must be row indices in \[0, M = 12\)"
    with pytest.raises(ValueError, match=message):
        model.elbo((X, Y, bad))
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        model.training_loss_closure((X, Y, bad), compile=True)()
    for indices in ([0, 12], [-1], []):
        with pytest.raises(ValueError, match=r"`inducing_indices` must be row indices in \[0, M"):
            model.elbo((X, Y), inducing_indices=tf.constant(indices, tf.int64))
    good = tf.constant([0, 5, 11], tf.int64)
    np.testing.assert_allclose(
        tf.function(model.elbo)((X, Y, neighbors), good).numpy(),
        model.elbo((X, Y, neighbors), inducing_indices=good).numpy(),
        rtol=1e-12,
    )
