"""
A scaled-down version of Tables 1-2 of Wu, Pleiss & Cunningham (2022), *Variational nearest
neighbor Gaussian process*: test RMSE and NLL of ``gpflow_tight.VNNGP`` (M = N, mean-field q)
against ``gpflow.models.SVGP`` and ``gpflow_tight.TightSVGP`` (M inducing inputs, full-rank q)
on the seven UCI sets of the paper that ``uci_wilson`` has, beside the paper's numbers.
"""

import harness
import numpy as np

NAME = "vnngp_uci"
SETS = {"pol": ("PoleTele", "9.6K"), "elevators": ("Elevators", "10.6K"),
        "bike": ("Bike", "11.1K"), "kin40k": ("Kin40K", "25.6K"), "protein": ("Protein", "25.6K"),
        "keggdirected": ("KEGG", "31.2K"), "keggundirected": ("KEGGU", "40.7K")}  # fmt: skip
# Paper Tables 1-3 (Wu, Pleiss & Cunningham 2022, §4.3, App. D.3.2-D.3.3): NLL, RMSE and learned
# noise of ExactGP, SVGP and VNNGP.
PAPER_TABLE = """
pol            −.509±.005 .095±.000 .020  −.708±.003  .113±.000 .015  −1.160±.014 .091±.002 .002
elevators      .464±.011  .360±.006 .166  .417±.017   .366±.006 .132  .463±.020   .373±.004 .067
bike           −.744±.007 .054±.003 .016  −1.849±.016 .028±.001 .002  −1.690±.057 .043±.003 .001
kin40k         −.149±.001 .099±.001 .020  −.399±.003  .145±.001 .031  −1.016±.004 .096±.001 .001
protein        1.044±.003 .533±.002 .182  .967±.005   .633±.003 .417  .671±.009   .565±.003 .018
keggdirected   −.713±.004 .085±.002 .019  −1.000±.011 .089±.001 .008  −1.039±.018 .085±.001 .005
keggundirected −.471±.003 .117±.000 .023  −.680±.002  .122±.000 .015  −.715±.004   .118±.000 .013
"""
PAPER = {row[0]: dict(zip(("ExactGP", "SVGP", "VNNGP"), (row[1:4], row[4:7], row[7:])))
         for row in map(str.split, PAPER_TABLE.strip().splitlines())}  # fmt: skip
MODELS = ["VNNGP", "SVGP", "TightSVGP"]
INIT = float(np.log(2.0))  # 0.6931 = softplus(0): the paper's initial value of every hyperparameter
SETTINGS = ["max_train", "neighbors", "batch_size", "inducing_batch_size", "num_inducing",
            "vnngp_iterations", "svgp_iterations", "vnngp_lr", "svgp_lr", "vnngp_init",
            "vnngp_q_sqrt", "seed"]  # fmt: skip
PRESETS = {"quick": dict(datasets=["pol", "keggdirected"], splits=1, max_train=2000,
                         vnngp_iterations=50, svgp_iterations=50, num_inducing=64)}  # fmt: skip
BUDGET = 45


def arguments(parser):
    parser.add_argument("--datasets", nargs="+", choices=list(SETS), default=list(SETS))
    parser.add_argument("--models", nargs="+", choices=MODELS, default=MODELS)
    parser.add_argument("--splits", type=int, default=3)
    parser.add_argument("--max-train", type=int, default=5000)
    parser.add_argument("--neighbors", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--inducing-batch-size", type=int, default=256)
    parser.add_argument("--num-inducing", type=int, default=256, help="SVGP / TightSVGP M")
    parser.add_argument("--vnngp-iterations", type=int, default=600)
    parser.add_argument("--svgp-iterations", type=int, default=600)
    parser.add_argument("--vnngp-lr", type=float, default=0.02)
    parser.add_argument("--svgp-lr", type=float, default=0.02)
    parser.add_argument("--vnngp-init", choices=["zero", "targets"], default="targets")
    parser.add_argument("--vnngp-q-sqrt", type=float, default=0.1, help="initial q_sqrt")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)


def plan(args):
    return [harness.keyed(args, SETTINGS, dataset=d, split=s, model=m)
            for s in range(args.splits) for d in args.datasets for m in args.models]  # fmt: skip


def run(key, args):
    import time

    import gpflow
    import tensorflow as tf
    from gpflow.keras import tf_keras
    from scipy.cluster.vq import kmeans2

    from gpflow_tight import VNNGP, TightSVGP
    from gpflow_tight.datasets import load_uci_wilson
    from gpflow_tight.training import fit_adam

    data = load_uci_wilson(key["dataset"], key["split"], standardize=True)
    X, Y = data.X_train, data.Y_train
    if len(X) > key["max_train"]:
        rng = np.random.default_rng(1000 + key["split"])
        rows = np.sort(rng.choice(len(X), key["max_train"], replace=False))
        X, Y = X[rows], Y[rows]
    seed = key["seed"] + key["split"]
    tf.random.set_seed(seed)
    start = time.perf_counter()
    kernel = gpflow.kernels.Matern52(variance=INIT, lengthscales=np.full(X.shape[1], INIT))
    likelihood = gpflow.likelihoods.Gaussian(variance=INIT)
    if key["model"] == "VNNGP":  # one inducing input per distinct input (duplicates: singular K)
        Z, inverse = np.unique(X, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        q_mu = None
        if key["vnngp_init"] == "targets":  # the mean target at each distinct input
            counts = np.bincount(inverse, minlength=len(Z))
            q_mu = (np.bincount(inverse, weights=Y[:, 0], minlength=len(Z)) / counts)[:, None]
        model = VNNGP(kernel, likelihood, Z, key["neighbors"], num_data=len(X),
                      inducing_batch_size=key["inducing_batch_size"], q_mu=q_mu,
                      q_sqrt=np.full((len(Z), 1), key["vnngp_q_sqrt"]), ordering="random",
                      seed=seed)  # fmt: skip
        train, steps, lr = model.training_data(X, Y), key["vnngp_iterations"], key["vnngp_lr"]
    else:
        m = min(key["num_inducing"], len(np.unique(X, axis=0)))
        start_Z = X[np.random.default_rng(seed).choice(len(X), m, replace=False)]
        Z, _ = kmeans2(X, start_Z, iter=10, minit="matrix")
        cls = gpflow.models.SVGP if key["model"] == "SVGP" else TightSVGP
        model = cls(kernel, likelihood, Z, num_data=len(X))
        train, steps, lr = (X, Y), key["svgp_iterations"], key["svgp_lr"]
    schedule = tf_keras.optimizers.schedules.PiecewiseConstantDecay(  # the paper's MultiStepLR
        [int(0.75 * steps), int(0.9 * steps)], [lr, lr / 10, lr / 100]
    )
    losses = fit_adam(model, train, iterations=steps, batch_size=key["batch_size"],
                      learning_rate=schedule, progress=False, seed=seed)  # fmt: skip
    train_seconds = time.perf_counter() - start
    start = time.perf_counter()
    mean = model.predict_y(data.X_test)[0].numpy()
    nll = -float(np.mean(model.predict_log_density((data.X_test, data.Y_test)).numpy()))
    return dict(num_train=len(X), num_train_full=len(data.X_train), num_test=len(data.X_test),
                dim=X.shape[1], num_inducing=int(model.inducing_variable.num_inducing),
                iterations=steps, train_seconds=train_seconds,
                predict_seconds=time.perf_counter() - start, nll=nll,
                rmse=float(np.sqrt(np.mean((mean - data.Y_test) ** 2))),
                noise=float(model.likelihood.variance.numpy()),
                final_loss=float(np.mean(losses[-50:])))  # fmt: skip


def number(cell):
    """The mean of a paper cell such as '−1.160±.014'."""
    return float(cell.split("±")[0].replace("−", "-"))


def render(report, records, missing, args):
    k = records[0]["key"] if records else harness.keyed(args, SETTINGS)
    splits = sorted({r["key"]["split"] for r in records})

    def epochs(model):
        return k[f"{model}_iterations"] * k["batch_size"] / k["max_train"]

    protocol = [
        "Paper protocol (Wu, Pleiss & Cunningham 2022, §4, §4.3, App. D.3.1): random 64/16/20 "
        "train/validation/test splits, 3 seeds, VNNGP with M = N, mean-field q, K in "
        "{32, 256}; SVGP with M = 1024, full-rank q, k-means Z; Matérn-5/2 ARD, every "
        "hyperparameter initialised to 0.6931; Adam for {300, 500} epochs (N < 50K) with lr in "
        "{0.005, 0.01}, x0.1 at 75% and 90%; hyperparameters chosen on validation NLL; batch "
        "sizes not stated.",
        f"Here: split(s) {', '.join(map(str, splits))} of the 10 `uci_wilson` 90/10 splits "
        "(test = the split's 10%; no validation set, no tuning: one configuration per model, "
        "fixed in advance). Inputs and targets standardised with the statistics of the full "
        "training split (`load_uci_wilson`); RMSE and NLL (mean negative log predictive density "
        "of y) in standardised units. Mean ± standard error over the splits.",
        f"**Scaled down**: training sets larger than {k['max_train']:,} points are subsampled at "
        f"random to {k['max_train']:,} (per split), against 9.6K-40.7K in the paper; "
        f"{k['vnngp_iterations']} Adam steps (VNNGP) / {k['svgp_iterations']} (SVGP, TightSVGP) "
        f"of batch {k['batch_size']}, i.e. {epochs('vnngp'):.0f} / {epochs('svgp'):.0f} epochs, "
        f"against the paper's 300-500; SVGP and TightSVGP have M = {k['num_inducing']} "
        "inducing inputs against the paper's 1024.",
        "Common to all models: Matérn-5/2 with ARD lengthscales; kernel variance, lengthscales "
        "and Gaussian noise variance initialised to 0.6931 as in the paper; `fit_adam` with the "
        "paper's MultiStep schedule (`PiecewiseConstantDecay`: lr, lr/10 after 75% and lr/100 "
        "after 90% of the steps); float64.",
        f"VNNGP: `gpflow_tight.VNNGP`, inducing inputs = the distinct training inputs (duplicated "
        f"inducing inputs make K_nn singular), K = {k['neighbors']} (prior and prediction), "
        "random ordering (seed = split), mean-field q initialised with q_mu = "
        + ("the training target at each inducing input (mean over duplicates)"
           if k["vnngp_init"] == "targets" else "0")  # fmt: skip
        + f" and q_sqrt = {k['vnngp_q_sqrt']}, data batch {k['batch_size']} with the neighbour "
        f"rows of `model.training_data`, KL on {k['inducing_batch_size']} inducing points per "
        f"step, Adam lr {k['vnngp_lr']}.",
        "SVGP: `gpflow.models.SVGP`; TightSVGP: `gpflow_tight.TightSVGP`; whitened, full-rank q "
        "(q_mu = 0, q_sqrt = I), Z from k-means (`kmeans2`, 10 iterations from a random subset) "
        f"and trained, data batch {k['batch_size']}, Adam lr {k['svgp_lr']}.",
        "Test predictions: `predict_y` (RMSE of the mean) and `predict_log_density` on the whole "
        "test split; VNNGP predicts from the K nearest inducing inputs of each test input.",
        f"Threads: TensorFlow {args.threads} intra-op and inter-op; one process at a time "
        f"(times are indicative only). Training and prediction took "
        f"{sum(r['train_seconds'] + r['predict_seconds'] for r in records) / 60:.1f} min in all.",
    ]  # fmt: skip
    report.head("VNNGP vs SVGP on UCI regression (scaled-down paper Tables 1-2)", records,
                protocol, missing)  # fmt: skip
    by = {}
    for r in records:
        by.setdefault(r["key"]["dataset"], {}).setdefault(r["key"]["model"], []).append(r)
    summary, deltas, worse, tight = [], [], 0, []
    for d, models in by.items():
        first = next(iter(models.values()))[0]
        report.section(f"{SETS[d][0]} (`{d}`)")
        report.add(f"Here N = {first['num_train']:,} of {first['num_train_full']:,} training "
                   f"points, D = {first['dim']}, {first['num_test']:,} test points, "
                   f"{len({r['key']['split'] for rs in models.values() for r in rs})} split(s). "
                   f"Paper: N = {SETS[d][1]}.", "")  # fmt: skip
        rows, cells = [], [SETS[d][0]]
        for m in MODELS:
            mine = models.get(m, [])
            if not mine:
                cells.append("—")
                continue
            paper = PAPER[d].get(m, ("—",) * 3)
            nll, rmse = (np.mean([r[x] for r in mine]) for x in ("nll", "rmse"))
            worse += m in PAPER[d] and nll > number(paper[0])
            rows.append([m, harness.pm([r["nll"] for r in mine]), paper[0],
                         harness.pm([r["rmse"] for r in mine]), paper[1],
                         f"{np.mean([r['noise'] for r in mine]):.4f}", paper[2],
                         f"{int(np.mean([r['num_inducing'] for r in mine])):,}",
                         f"{np.mean([r['train_seconds'] for r in mine]):.0f}",
                         f"{np.mean([r['predict_seconds'] for r in mine]):.1f}"])  # fmt: skip
            cells.append(f"{nll:.3f} / {rmse:.3f}" + (f" ({paper[0]} / {paper[1]})" if m in
                                                       PAPER[d] else ""))  # fmt: skip
        exact = PAPER[d]["ExactGP"]
        rows.append(
            ["ExactGP (paper only)", "—", exact[0], "—", exact[1], "—", exact[2]] + ["—"] * 3
        )
        report.table(["model", "NLL here", "NLL paper", "RMSE here", "RMSE paper", "noise here",
                      "noise paper", "M", "train s", "predict s"], rows)  # fmt: skip
        summary.append(cells)
        if "VNNGP" in models and "SVGP" in models:
            here = [np.mean([r[x] for r in models["VNNGP"]]) - np.mean([r[x] for r in
                    models["SVGP"]]) for x in ("nll", "rmse")]  # fmt: skip
            there = [number(PAPER[d]["VNNGP"][i]) - number(PAPER[d]["SVGP"][i]) for i in (0, 1)]
            deltas.append([SETS[d][0]] + [c for h, t in zip(here, there) for c in
                          (f"{h:+.3f}", f"{t:+.3f}", "yes" if h * t > 0 else "no")])  # fmt: skip
        if "TightSVGP" in models and "SVGP" in models:
            pairs = {r["key"]["split"]: r for r in models["SVGP"]}
            tight += [(r, pairs[r["key"]["split"]]) for r in models["TightSVGP"]
                      if r["key"]["split"] in pairs]  # fmt: skip
    report.section("Summary: NLL / RMSE here (paper)")
    report.table(["dataset", *MODELS], summary)
    report.section("VNNGP against SVGP: better on which sets, here and in the paper")
    report.add("Differences VNNGP − SVGP of the mean test NLL and RMSE (negative: VNNGP "
               "better).", "")  # fmt: skip
    report.table(["dataset", "ΔNLL here", "ΔNLL paper", "same sign", "ΔRMSE here",
                  "ΔRMSE paper", "same sign"], deltas)  # fmt: skip
    count = [sum(x[i] == "yes" or x[i].startswith("-") for x in deltas) for i in range(7)]
    compared = sum(len(set(m) & set(PAPER[d])) for d, m in by.items())
    findings = [
        f"VNNGP − SVGP has the paper's sign on {harness.of(count[3], len(deltas))} sets for the "
        f"NLL and {count[6]} for the RMSE; VNNGP is better here on {count[1]} (NLL) and "
        f"{count[4]} (RMSE) sets, in the paper on {count[2]} and {count[5]}.",
        f"The NLL here is worse than the paper's for {harness.of(worse, compared)} (set, model) "
        "pairs: with the scaled-down protocol, compare the orderings, not the values.",
    ]
    for metric in ("nll", "rmse") if tight else ():
        test = harness.Paired([t[metric] for t, _ in tight], [s[metric] for _, s in tight])
        findings.append(f"TightSVGP vs SVGP, paired over (set, split): lower test {metric.upper()} "
                        f"in {harness.of(test.wins, test.n)} pairs (mean difference "
                        f"{test.mean:+.4f}, {test.sign()}).")  # fmt: skip
    dup = {
        d: np.mean([r["num_inducing"] for r in m["VNNGP"]]) for d, m in by.items() if "VNNGP" in m
    }
    dup = [f"{d} {m:,.0f}" for d, m in dup.items() if m < 0.9 * k["max_train"]]
    if dup:
        findings.append(f"Sets with many repeated inputs, where VNNGP's M (the distinct inputs) is "
                        f"well below N = {k['max_train']:,}: {', '.join(dup)}.")  # fmt: skip
    report.section("Findings")
    report.bullets(findings)


if __name__ == "__main__":
    harness.main(__import__(__name__))
