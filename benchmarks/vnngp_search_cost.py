"""
Cost of VNNGP's prediction-time neighbour search on the paper's data sets at full size: the
K nearest inducing inputs (the distinct training inputs, as ``VNNGP.from_data`` takes them) of
every test input. Timed in the same rounds: ``graph_nearest_neighbors`` (TensorFlow ops only)
both ways it can search, with its screen (a matrix-product lower bound, exact re-ranking of 2K
candidates, the exact search for rows it cannot certify) and by exact distances alone, forced
either way at every dimension; scipy's k-d tree (``nearest_neighbors``, host only, where eager
float64 searches of at most 16 dimensions on the CPU go); and one eager ``predict_y`` of the
model, which searches once the way ``graph_nearest_neighbors`` chooses. The screen must return
the exact search's indices on every row.
"""

import harness
import numpy as np

NAME = "vnngp_search_cost"
SCREEN, EXACT, TREE = "screen", "exact", "k-d tree"
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


def searching(screen_from, search):
    """``search()`` with the graph search screening from dimension ``screen_from`` and never
    handing eager calls to the k-d tree."""
    from gpflow_tight import neighbors

    chosen = neighbors.SCREEN_FROM_DIM, neighbors.HOST_SEARCH
    neighbors.SCREEN_FROM_DIM, neighbors.HOST_SEARCH = screen_from, False
    try:
        return search()
    finally:
        neighbors.SCREEN_FROM_DIM, neighbors.HOST_SEARCH = chosen


def exact_rows(points, queries, k):
    """How many query rows the screen hands to the exact search (those it cannot certify)."""
    import tensorflow as tf

    from gpflow_tight import neighbors

    rows = []
    exact_search = neighbors._exact_search

    def recording(points, queries, k, dim, query_block, point_block, found, order, count):
        tf.py_function(lambda n: rows.append(int(n)), [count], [])
        return exact_search(points, queries, k, dim, query_block, point_block, found, order, count)

    neighbors._exact_search = recording
    try:
        search = tf.function(lambda P, Q: neighbors.graph_nearest_neighbors(P, Q, k))
        searching(1, lambda: search(points, queries))
    finally:
        neighbors._exact_search = exact_search
    return rows[0]


def eager_choice(neighbors, P, Q):
    """How ``graph_nearest_neighbors`` searches when called eagerly with these inputs."""
    dim = int(P.shape[1])
    if neighbors._on_host(P, Q, dim):
        return TREE
    return SCREEN if dim >= neighbors.SCREEN_FROM_DIM else EXACT


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
    points = model.inducing_variable.Z.numpy()
    P, Q = tf.constant(points), tf.constant(queries)
    found = {}

    def timed(name, screen_from=None):
        def call():
            if name == TREE:
                found[name] = neighbors.nearest_neighbors(points, queries, k)
            else:
                search = lambda: neighbors.graph_nearest_neighbors(P, Q, k)  # noqa: E731
                found[name] = searching(screen_from, search).numpy()

        return call

    def predict():
        with gpflow.config.as_context(config):
            model.predict_y(Q)[0].numpy()

    times = harness.interleaved(
        {SCREEN: timed(SCREEN, 1), EXACT: timed(EXACT, np.inf), TREE: timed(TREE),
         "predict_y": predict},
        key["rounds"],
        warmup=1,
    )  # fmt: skip
    return dict(
        num_points=len(points),
        num_queries=len(queries),
        dim=points.shape[1],
        chosen=eager_choice(neighbors, P, Q),
        times=times,
        exact_rows=exact_rows(P, Q, k),
        equal_rows={n: int(np.sum(np.all(found[n] == found[EXACT], axis=1))) for n in found},
    )


def runs(count):
    return f"{count} run" + ("" if count == 1 else "s")


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
            "'screen' and 'exact' are `gpflow_tight.neighbors.graph_nearest_neighbors` "
            "(TensorFlow ops only, as in a SavedModel or on a GPU), forced to search one way "
            "at every dimension: 'screen' ranks the points by a float64 lower bound on their "
            "distance from one matrix product per block, keeps 2K candidates, re-ranks them by "
            "exact squared distance and hands the rows its bound cannot certify on to the exact "
            "search; 'exact' ranks by exact squared distances alone (above 16 dimensions from a "
            "[query, point, D] block, hence fewer points per block). As released, the search "
            "screens from 17 dimensions, and eager calls on the CPU with float64 inputs of at most "
            "16 dimensions go to 'k-d tree', `nearest_neighbors` (scipy's `cKDTree`, built on "
            "every call; host only), which returns the same indices ('eager search'). "
            "'predict_y' is one eager `model.predict_y` of the test inputs, which searches once.",
            f"Median seconds over {k0['rounds']} interleaved rounds (order reversing between "
            "rounds) after one untimed call; the 'same' columns count rows whose K indices equal "
            "the exact search's in the same order.",
        ],
        missing,
    )
    report.failures(records)
    rows, findings = [], []
    for r in ok:
        median = {name: float(np.median(t)) for name, t in r["times"].items()}
        chosen = r["chosen"]
        rows.append(
            [r["key"]["dataset"], r["key"]["dtype"], f"{r['num_points']:,}",
             f"{r['num_queries']:,}", r["dim"]]
            + [f"{median[n]:.2f}" for n in (SCREEN, EXACT, TREE, "predict_y")]
            + [f"{median[EXACT] / median[SCREEN]:.1f}", chosen,
               f"{median[chosen] / median[TREE]:.1f}" if chosen != TREE else "—",
               f"{r['exact_rows']:,}", f"{r['equal_rows'][SCREEN]:,}",
               f"{r['equal_rows'][TREE]:,}"]
        )  # fmt: skip
    report.table(
        ["dataset", "dtype", "M", "Q", "D", "screen s", "exact s", "k-d tree s", "predict_y s",
         "exact / screen", "eager search", "eager / k-d tree", "rows the screen hands on",
         "same (screen)", "same (k-d tree)"],
        rows,
    )  # fmt: skip
    if ok:

        def ratio(r, a, b):
            return float(np.median(r["times"][a]) / np.median(r["times"][b]))

        agree = sum(r["equal_rows"][SCREEN] == r["num_queries"] for r in ok)
        handed = sum(r["exact_rows"] for r in ok)
        findings.append(
            f"The screen returned the exact search's neighbours on every row in "
            f"{harness.of(agree, len(ok))} runs, handing {handed:,} of "
            f"{sum(r['num_queries'] for r in ok):,} rows on to the exact search."
        )
        high = [r for r in ok if r["dim"] >= 17]
        low = [r for r in ok if r["dim"] < 17]
        for group, where in ((high, "from 17 dimensions (where the graph search screens)"),
                             (low, "below 17 dimensions (where it does not)")):  # fmt: skip
            if group:
                speedups = [ratio(r, EXACT, SCREEN) for r in group]
                findings.append(
                    f"{where.capitalize()}: exact distances alone took "
                    f"{harness.span(speedups, '.1f')} times the screen's time (median "
                    f"{np.median(speedups):.1f}) in {harness.of(len(group), len(ok))} runs."
                )
        graph = [r for r in ok if r["chosen"] != TREE]
        if graph:
            trees = [ratio(r, r["chosen"], TREE) for r in graph]
            findings.append(
                f"Where eager calls keep to the graph search ({runs(len(graph))}: float32, or "
                f"17 dimensions and more), it took {harness.span(trees, '.1f')} times the k-d "
                f"tree's time (median {np.median(trees):.1f})."
            )
        hosted = [r for r in ok if r["chosen"] == TREE]
        if hosted:
            findings.append(
                f"Where they go to the k-d tree ({runs(len(hosted))}: float64, at most 16 "
                f"dimensions), its neighbours equalled the exact search's on "
                f"{sum(r['equal_rows'][TREE] for r in hosted):,} of "
                f"{sum(r['num_queries'] for r in hosted):,} rows."
            )
        share = [ratio(r, r["chosen"], "predict_y") for r in ok]
        findings.append(
            f"The eager search is {harness.span([100 * s for s in share], '.0f')}% of a "
            "`predict_y`'s time."
        )
        report.section("Findings")
        report.bullets(findings)


if __name__ == "__main__":
    harness.main(__import__(__name__))
