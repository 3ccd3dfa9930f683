"""
Cost of one VNNGP training step with the nearest-neighbour q(u) (``q="nearest_neighbor"``, the
paper's Appendix B) against the mean-field q, as M = N and K grow: both should cost
O((B + B_u) K^3) per step whatever M; the structured q adds a sparse quadratic form over K + 1
rows of its factor per data point and per inducing point (O(K^2) each).
"""

import harness
import numpy as np

NAME = "vnngp_structured_cost"
MF, NN = "mean-field", "nearest-neighbour"
SETTINGS = ["rounds", "batch_size", "inducing_batch_size", "dim", "lengthscale", "noise",
            "threads", "seed"]  # fmt: skip
PRESETS = {"quick": dict(sizes=[500, 1000], neighbors=[8], rounds=3)}


def arguments(parser):
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 30_000])
    parser.add_argument("--neighbors", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--inducing-batch-size", type=int, default=256)
    parser.add_argument("--dim", type=int, default=3)
    parser.add_argument("--lengthscale", type=float, default=1.0)
    parser.add_argument("--noise", type=float, default=0.1)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1, help="TensorFlow threads")
    parser.add_argument("--seed", type=int, default=0)


def plan(args):
    return [harness.keyed(args, SETTINGS, M=m, K=k) for k in args.neighbors for m in args.sizes]


def model(X, key, q):
    import gpflow

    from gpflow_tight import VNNGP

    kernel = gpflow.kernels.Matern52(lengthscales=np.full(key["dim"], key["lengthscale"]))
    return VNNGP(kernel, gpflow.likelihoods.Gaussian(key["noise"]), X, key["K"], num_data=len(X),
                 inducing_batch_size=key["inducing_batch_size"], q_sqrt=np.full((len(X), 1), 0.1),
                 seed=key["seed"], q=q)  # fmt: skip


def run(key, args):
    import time

    import tensorflow as tf

    rng = np.random.default_rng(key["seed"])
    X = rng.uniform(0.0, 10.0, size=(key["M"], key["dim"]))
    Y = np.sin(X).sum(1, keepdims=True) + 0.1 * rng.standard_normal((key["M"], 1))
    construct, models = {}, {}
    for name, q in ((MF, "mean_field"), (NN, "nearest_neighbor")):
        start = time.perf_counter()
        models[name] = model(X, key, q)
        construct[name] = time.perf_counter() - start
    table = models[MF].training_data(X, Y)
    rows = [rng.choice(len(X), key["batch_size"], replace=False) for _ in range(16)]
    cycle = [tuple(tf.constant(a[r]) for a in table) for r in rows]
    # off-diagonal entries away from 0, so that no step is the mean-field one
    off = models[NN].q_sqrt_offdiag
    off.assign(0.01 * rng.standard_normal(off.shape) * (models[NN].prior_neighbors >= 0)[..., None])
    fns = {name: harness.step_function(m, cycle) for name, m in models.items()}
    return dict(construct=construct, times=harness.interleaved(fns, key["rounds"]))


def render(report, records, missing, args):
    k = records[0]["key"] if records else harness.keyed(args, SETTINGS)
    protocol = [
        f"Data: synthetic, M = N, D = {k['dim']}, inputs uniform on [0, 10]^{k['dim']}, targets "
        "sum_d sin(x_d) + N(0, 0.1^2); inducing inputs = all training inputs (Z = X).",
        f"Kernel Matérn-5/2 ARD (variance 1, lengthscales {k['lengthscale']}), Gaussian "
        f"likelihood (variance {k['noise']}), float64.",
        f"`gpflow_tight.VNNGP(kernel, likelihood, X, K, num_data=N, inducing_batch_size="
        f"{k['inducing_batch_size']}, q_sqrt=0.1, seed={k['seed']}, q=...)` with `q='mean_field'` "
        "and `q='nearest_neighbor'` (its off-diagonal factor entries set to N(0, 0.01^2)); data "
        f"batches of B = {k['batch_size']} rows carry their neighbour rows "
        "(`model.training_data`), every row an inducing input, so the data term reads q(u_j) "
        "(for the structured q: S_jj, the squared norm of row j of the factor); the KL is "
        "estimated from B_u inducing points drawn uniformly with replacement.",
        "Timed: one compiled call returning the loss and its gradient w.r.t. all trainable "
        "variables (`harness.step_function`, no optimiser update); the batches cycle through "
        f"16 pre-drawn random batches. Warm-up: 2 untimed calls; then {k['rounds']} rounds, each "
        "calling both models once, the order reversing between rounds; medians (ms). Ratio = "
        "median of the per-round ratios nearest-neighbour / mean-field.",
        "'construct' = the constructor (the prior neighbour table, exact, and the parameters).",
        f"TensorFlow threads: {k['threads']} intra-op and inter-op. The machine is shared "
        "(2 cores, other jobs running): absolute times move with the load, ratios of the same "
        "rounds less so.",
    ]
    report.head("VNNGP: nearest-neighbour q against mean-field q, cost per step", records,
                protocol, missing)  # fmt: skip
    findings = []
    for K in sorted({r["key"]["K"] for r in records}):
        body = []
        ratios = []
        for r in [r for r in records if r["key"]["K"] == K]:
            t = r["times"]
            value, per_round, paired = harness.ratio(t, NN, MF)
            ratios.append((r["key"]["M"], float(np.median(per_round))))
            body.append([f"{r['key']['M']:,}", f"{1e3 * np.median(t[MF]):.1f}",
                         f"{1e3 * np.median(t[NN]):.1f}", f"{np.median(per_round):.2f}",
                         f"{paired.losses}/{paired.n}", f"{r['construct'][MF]:.2f}",
                         f"{r['construct'][NN]:.2f}"])  # fmt: skip
        report.section(f"K = {K}")
        report.table(["M = N", f"{MF} (ms)", f"{NN} (ms)", "ratio", "NN slower in (rounds)",
                      f"construct {MF} (s)", f"construct {NN} (s)"], body)  # fmt: skip
        findings.append(
            f"K = {K}: the nearest-neighbour q's step takes x"
            + ", x".join(f"{v:.2f} at M = {m:,}" for m, v in ratios)
            + " the mean-field step's (median of per-round ratios)."
        )
    report.section("Findings")
    report.bullets(findings)


if __name__ == "__main__":
    harness.main(__import__(__name__))
