"""
Cost of VNNGP's prediction-time neighbour search on the paper's data sets at full size: the
K nearest inducing inputs (the distinct training inputs, as ``VNNGP.from_data`` takes them) of
every test input. Timed in the same rounds: ``graph_nearest_neighbors`` (TensorFlow ops only: a
matrix-product screen, exact re-ranking, the exact search for rows it cannot certify), the exact
search alone (its fallback, which was the whole search before the screen) and scipy's k-d tree
(``nearest_neighbors``, host only); beside them one ``predict_y`` of the model, which searches
once. The screen must return the exact search's indices on every row.
"""

import harness
import numpy as np

NAME = "vnngp_search_cost"
SEARCHES = ("graph search", "exact search", "k-d tree")
SETTINGS = ["neighbors", "rounds", "threads"]
PRESETS = {"quick": dict(datasets=["pol"], rounds=1, max_queries=200)}
BUDGET = None


def arguments(parser):
    parser.add_argument(
        "--datasets",
        nargs="+",
        default=["pol", "elevators", "bike", "kin40k", "protein", "keggdirected", "keggundirected"],
    )
    parser.add_argument("--dtypes", nargs="+", default=["float64", "float32"])
    parser.add_argument("--neighbors", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--max-queries", type=int, default=0, help="0: the whole test split")
    parser.add_argument("--threads", type=int, default=1)


def plan(args):
    return [
        dict(
            harness.keyed(args, SETTINGS, dataset=d, split=0, dtype=t), max_queries=args.max_queries
        )
        for d in args.datasets
        for t in args.dtypes
    ]


def exact_rows(points, queries, k):
    """How many query rows a traced search hands to the exact search (its screen's failures)."""
    import tensorflow as tf

    from gpflow_tight import neighbors

    rows = []
    exact_search = neighbors._exact_search

    def recording(points, queries, *args):
        tf.py_function(lambda n: rows.append(int(n)), [tf.shape(queries)[0]], [])
        return exact_search(points, queries, *args)

    neighbors._exact_search = recording
    try:
        tf.function(lambda P, Q: neighbors.graph_nearest_neighbors(P, Q, k))(points, queries)
    finally:
        neighbors._exact_search = exact_search
    return rows[0]


def run(key, args):
    import gpflow
    import tensorflow as tf

    from gpflow_tight import VNNGP, neighbors
    from gpflow_tight.datasets import load_uci_wilson

    data = load_uci_wilson(key["dataset"], key["split"])
    dtype, k = np.dtype(key["dtype"]), key["neighbors"]
    queries = data.X_test[: key["max_queries"] or None].astype(dtype)
    config = gpflow.config.Config(float=dtype)  # GPflow's models use one float throughout
    with gpflow.config.as_context(config):
        model = VNNGP.from_data(
            (data.X_train.astype(dtype), data.Y_train.astype(dtype)),
            gpflow.kernels.Matern52(lengthscales=np.ones(data.X_train.shape[1])),
            gpflow.likelihoods.Gaussian(0.1),
            k,
        )

    def predict():
        with gpflow.config.as_context(config):
            model.predict_y(Q)[0].numpy()

    points = model.inducing_variable.Z.numpy()
    P, Q = tf.constant(points), tf.constant(queries)
    blocks = (neighbors.QUERY_BLOCK, neighbors.WORKING_ELEMENTS // neighbors.QUERY_BLOCK)
    dim = points.shape[1]
    exact_block = blocks[1] // (1 if dim <= neighbors._UNROLLED_DIM else dim)
    exact = tf.function(lambda P, Q: neighbors._exact_search(P, Q, k, dim, blocks[0], exact_block))
    found = {}

    def timed(name, search):
        def call():
            found[name] = np.asarray(search())

        return call

    times = harness.interleaved(
        {
            SEARCHES[0]: timed(SEARCHES[0], lambda: neighbors.graph_nearest_neighbors(P, Q, k)),
            SEARCHES[1]: timed(SEARCHES[1], lambda: exact(P, Q)),
            SEARCHES[2]: timed(
                SEARCHES[2], lambda: neighbors.nearest_neighbors(points, queries, k)
            ),
            "predict_y": predict,
        },
        key["rounds"],
        warmup=1,
    )
    reference = found[SEARCHES[1]]
    return dict(
        num_points=len(points),
        num_queries=len(queries),
        dim=dim,
        times=times,
        exact_rows=exact_rows(P, Q, k),
        equal_rows={n: int(np.sum(np.all(found[n] == reference, axis=1))) for n in found},
    )


def render(report, records, missing, args):
    ok = [r for r in records if "error" not in r]
    k0 = ok[0]["key"] if ok else plan(args)[0]
    report.head(
        "VNNGP: cost of the prediction-time neighbour search",
        records,
        [
            "The K nearest inducing inputs of every test input: inducing inputs = the distinct "
            "training inputs (`VNNGP.from_data`), queries = the test inputs of split 0 of the "
            f"`uci_wilson` sets (`load_uci_wilson`, standardised), K = {k0['neighbors']}, in the "
            "inputs' dtype.",
            "'graph search' is `gpflow_tight.neighbors.graph_nearest_neighbors` (TensorFlow ops "
            "only, as in a SavedModel or on a GPU): a screen ranks the points by a float64 lower "
            "bound on their distance from one matrix product per block, keeps 2K candidates, "
            "re-ranks them by exact squared distance and hands the rows its bound cannot certify "
            "to the exact search. 'exact search' is that fallback alone, the whole search before "
            "the screen (blocks of the same working size; above 16 dimensions its distances use "
            "a [query, point, D] block, hence fewer points per block). 'k-d tree' is "
            "`nearest_neighbors` (scipy's `cKDTree`, built on every call; host only). "
            "'predict_y' is one `model.predict_y` of the test inputs, which searches once.",
            f"Median seconds over {k0['rounds']} interleaved rounds (order reversing between "
            "rounds) after one untimed call; the 'same' columns count rows whose K indices equal "
            "the exact search's in the same order.",
        ],
        missing,
    )
    for r in records:
        if "error" in r:
            report.add(f"- Failed: {harness.short(r['key'])}: {r['error']}")
    rows, findings = [], []
    for r in ok:
        median = {name: float(np.median(t)) for name, t in r["times"].items()}
        rows.append(
            [r["key"]["dataset"], r["key"]["dtype"], f"{r['num_points']:,}",
             f"{r['num_queries']:,}", r["dim"]]
            + [f"{median[n]:.2f}" for n in (*SEARCHES, "predict_y")]
            + [f"{median[SEARCHES[1]] / median[SEARCHES[0]]:.1f}",
               f"{median[SEARCHES[0]] / median[SEARCHES[2]]:.2f}",
               f"{r['exact_rows']:,}",
               f"{r['equal_rows'][SEARCHES[0]]:,}", f"{r['equal_rows'][SEARCHES[2]]:,}"]
        )  # fmt: skip
    report.table(
        ["dataset", "dtype", "M", "Q", "D", "graph s", "exact s", "k-d tree s", "predict_y s",
         "exact / graph", "graph / k-d tree", "rows searched exactly", "same (graph)",
         "same (k-d tree)"],
        rows,
    )  # fmt: skip
    if ok:
        speedups = [
            np.median(r["times"][SEARCHES[1]]) / np.median(r["times"][SEARCHES[0]]) for r in ok
        ]
        against_tree = [
            np.median(r["times"][SEARCHES[0]]) / np.median(r["times"][SEARCHES[2]]) for r in ok
        ]
        share = [
            np.median(r["times"][SEARCHES[0]]) / np.median(r["times"]["predict_y"]) for r in ok
        ]
        exact_everywhere = sum(r["equal_rows"][SEARCHES[0]] == r["num_queries"] for r in ok)
        fallback = sum(r["exact_rows"] for r in ok)
        findings += [
            f"The graph search returned the exact search's neighbours on every row in "
            f"{harness.of(exact_everywhere, len(ok))} runs; its screen handed "
            f"{fallback:,} of {sum(r['num_queries'] for r in ok):,} rows to the exact search.",
            f"It took {harness.span(speedups, '.1f')} times less than the exact search alone "
            f"(median {np.median(speedups):.1f}), and {harness.span(against_tree)} times the k-d "
            f"tree's time (median {np.median(against_tree):.2f}).",
            f"One search is {harness.span([100 * s for s in share], '.0f')}% of a `predict_y`.",
        ]
        report.section("Findings")
        report.bullets(findings)


if __name__ == "__main__":
    harness.main(__import__(__name__))
