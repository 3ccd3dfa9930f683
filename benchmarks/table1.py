"""
Paper Table 1 (§6.2): TightSGPR predictions with the exact predictive variance of eq. 12 versus
the default that drops its two O(N^3) terms, on wine, solar and pumadyn32nm (uci_wilson splits).
"""

import harness
import numpy as np

NAME = "table1"
VARIANTS = ("exact", "dropped")
# Paper Table 1: RMSE, test log-lik (mean, s.e.) and time s, per (dataset, variant).
PAPER = {
    ("wine", "exact"): ((0.47, 0.01), (-0.66, 0.01), 0.15),
    ("wine", "dropped"): ((0.47, 0.01), (-0.66, 0.01), 0.03),
    ("solar", "exact"): ((0.93, 0.07), (-1.57, 0.20), 0.07),
    ("solar", "dropped"): ((0.93, 0.07), (-1.56, 0.20), 0.03),
    ("pumadyn32nm", "exact"): ((1.00, 0.01), (-1.42, 0.01), 21.12),
    ("pumadyn32nm", "dropped"): ((1.00, 0.01), (-1.42, 0.01), 0.05),
}
SETTINGS = ["maxiter", "num_inducing", "noise", "seed", "adam_lr"]
PRESETS = {"quick": dict(datasets=["solar"], splits=1, maxiter=20, warmup_rerun=[])}


def arguments(parser):
    parser.add_argument("--splits", type=int, default=10, help="splits per dataset (max 10)")
    parser.add_argument("--datasets", nargs="+", default=["wine", "solar", "pumadyn32nm"])
    parser.add_argument("--max-splits", nargs="*", default=[], metavar="NAME=N")
    parser.add_argument("--num-inducing", type=int, default=100)
    parser.add_argument("--maxiter", type=int, default=300, help="L-BFGS iterations")
    parser.add_argument("--noise", type=float, default=0.1, help="initial noise variance")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warmup-rerun", nargs="*", default=["pumadyn32nm"], metavar="NAME")
    parser.add_argument("--adam-warmup", type=int, default=300, help="Adam steps of the rerun")
    parser.add_argument("--adam-lr", type=float, default=0.05)


def plan(args):
    limits = {k: int(v) for k, v in (item.split("=") for item in args.max_splits)}
    runs = [(name, 0) for name in args.datasets]
    runs += [(name, args.adam_warmup) for name in args.warmup_rerun if name in args.datasets]
    return [
        harness.keyed(args, SETTINGS, dataset=name, split=split, warmup=warmup)
        for name, warmup in runs
        for split in range(min(args.splits, limits.get(name, args.splits)))
    ]


def run(key, args):
    import time

    import gpflow

    from gpflow_tight import TightSGPR
    from gpflow_tight.datasets import load_uci_wilson
    from gpflow_tight.training import fit_adam, fit_scipy

    data = load_uci_wilson(key["dataset"], key["split"], standardize=True)
    X, Y = data.X_train, data.Y_train
    rng = np.random.default_rng(key["seed"] + key["split"])
    Z = X[rng.choice(len(X), key["num_inducing"], replace=False)].copy()
    dim = X.shape[1]
    kernel = gpflow.kernels.SquaredExponential(variance=1.0, lengthscales=np.full(dim, dim**0.5))
    model = TightSGPR((X, Y), kernel, Z, noise_variance=key["noise"])
    start = time.perf_counter()
    if key["warmup"]:
        fit_adam(model, iterations=key["warmup"], learning_rate=key["adam_lr"], progress=False)
    result = fit_scipy(model, maxiter=key["maxiter"], progress=False)
    out = dict(
        n_train=len(X), dim=dim, train_seconds=time.perf_counter() - start, loglik={},
        iterations=harness.iterations(result), bound=float(model.elbo()), seconds={},
        noise=float(model.likelihood.variance.numpy()),
        kernel_variance=float(model.kernel.variance.numpy()),
    )  # fmt: skip
    variances, means = {}, {}
    for variant in ("dropped", "exact"):
        model.exact_predictive_variance = variant == "exact"
        start = time.perf_counter()
        mean, var = (t.numpy() for t in model.predict_y(data.X_test))
        out["seconds"][variant] = time.perf_counter() - start
        density = -0.5 * (np.log(2 * np.pi * var) + (data.Y_test - mean) ** 2 / var)
        out["loglik"][variant] = float(np.mean(density))
        if variant == "dropped" or len(X) <= 5000:  # the model's API agrees (to 1e-8)
            api = model.predict_log_density((data.X_test, data.Y_test)).numpy()
            np.testing.assert_allclose(api, density[:, 0], rtol=1e-8, atol=1e-8)
        variances[variant], means[variant] = var, mean
    out["rmse"] = float(np.sqrt(np.mean((means["dropped"] - data.Y_test) ** 2)))
    out["mean_difference"] = float(np.max(np.abs(means["exact"] - means["dropped"])))
    out["loglik_diff"] = float(np.mean(density) - out["loglik"]["dropped"])  # exact - dropped
    out["variance_ratio"] = float(np.mean(variances["exact"] / variances["dropped"]))
    return out


def label(key):
    return key["dataset"] + (" + Adam warm-up" if key["warmup"] else "")


def render(report, records, missing, args):
    key = records[0]["key"] if records else harness.keyed(args, SETTINGS)
    protocol = [
        "Data: `uci_wilson/<name>` (Yang et al. 2015 / Wilson collection, 90/10 splits given by "
        "`test_mask`), `load_uci_wilson(name, split, standardize=True)`: inputs and target "
        "standardised with the training statistics. **RMSE and test log-likelihood are in "
        "standardised target units**; the log-likelihood is the mean over test points of the "
        "Gaussian predictive density of y (noise included). Wine's target in this collection "
        "is alcohol, not quality (data README).",
        f"Model: `TightSGPR`, SE kernel with ARD lengthscales initialised at sqrt(D), kernel "
        f"variance 1, Gaussian noise variance {key['noise']}; M={key['num_inducing']} inducing "
        f"inputs initialised at a random subset of the training inputs (`default_rng(seed + "
        f"split)`, seed {key['seed']}) and trained with the hyperparameters.",
        f"Training: `fit_scipy` (L-BFGS-B), maxiter {key['maxiter']}. Rows marked '+ Adam "
        f"warm-up' first take {args.adam_warmup} full-batch Adam steps (`fit_adam`, learning "
        f"rate {key['adam_lr']}) from the same initialisation, then the same L-BFGS run: a "
        "deviation from the paper's protocol, so that exact and dropped are also compared on a "
        "model that fits the data (see the findings).",
        "Prediction, same trained model, twice: 'dropped' = default (`exact_predictive_variance"
        " = False`, the SGPR-form variance without the two O(N^3) terms of eq. 12); 'exact' = "
        "`exact_predictive_variance = True` (an N x N Cholesky). 'time' = one eager "
        "`predict_y(X_test)` call. The log-likelihood from that call's mean and variance is "
        "checked against `predict_log_density` (to 1e-8) for 'dropped', and for 'exact' when "
        "N_train <= 5000.",
        "Entries are mean ± standard error over splits.",
    ]
    report.head("Paper Table 1: exact vs dropped predictive variance terms (TightSGPR)", records,
                protocol, missing)  # fmt: skip
    groups = {}
    for r in records:
        groups.setdefault(label(r["key"]), []).append(r)
    rows, findings = [], []
    for name, rs in groups.items():
        for variant in VARIANTS:
            rmse, loglik, seconds = PAPER.get((name.split(" ")[0], variant), ("–",) * 3)
            first = variant == "exact"
            cells = [
                harness.pm([r["rmse"] for r in rs], ".2f"),
                "{:.2f} ± {:.2f}".format(*rmse),
                harness.pm([r["loglik"][variant] for r in rs], ".2f"),
                "{:.2f} ± {:.2f}".format(*loglik),
                harness.pm([r["seconds"][variant] for r in rs], ".3f"),
                seconds,
            ]
            size = f"{rs[0]['n_train']} / {rs[0]['dim']}"
            rows.append([name, size, len(rs)] if first else ["", "", ""])
            rows[-1] += [variant, *cells]  # fmt: skip
    report.section("Results")
    report.table(["dataset", "N train / D", "splits", "eq. 12 variance", "RMSE", "paper RMSE",
                  "test log-lik", "paper log-lik", "time s", "paper time s"], rows)  # fmt: skip
    rows = [[label(r["key"]), r["key"]["split"], f"{r['train_seconds']:.1f}", r["iterations"],
             f"{r['bound']:.2f}", f"{r['noise']:.4f}", f"{r['kernel_variance']:.3g}",
             f"{r['rmse']:.4f}", f"{r['loglik']['dropped']:.4f}", f"{r['loglik']['exact']:.4f}",
             f"{r['loglik_diff']:+.2e}", f"{r['variance_ratio']:.6f}",
             f"{r['seconds']['dropped']:.3f}", f"{r['seconds']['exact']:.3f}"]
            for r in records]  # fmt: skip
    report.section("Per split")
    report.table(["dataset", "split", "train s (incl. warm-up)", "L-BFGS it", "final bound",
                  "noise var", "kernel var", "RMSE", "log-lik dropped", "log-lik exact",
                  "exact - dropped", "mean var_y ratio exact/dropped", "time dropped s",
                  "time exact s"], rows)  # fmt: skip
    for name, rs in groups.items():
        collapsed = [r for r in rs if r["kernel_variance"] < 1e-3]
        diffs = [abs(r["loglik_diff"]) for r in rs]
        times = [r["seconds"]["exact"] / r["seconds"]["dropped"] for r in rs]
        text = (
            f"{name}: largest |log-lik exact - dropped| over splits {max(diffs):.1e}; the exact "
            f"variance takes {np.median(times):.0f}x the time of the default (median over "
            f"splits). Training converged to the noise-only solution (kernel variance < 1e-3) "
            f"on {harness.of(len(collapsed), len(rs), 'splits')}"
        )
        if collapsed:
            its = [r["iterations"] for r in collapsed]
            text += (
                f", after {harness.span(its, 'd')} L-BFGS iterations: the predictions are then "
                "the training mean with unit variance (RMSE about 1, log-lik about "
                "-0.5 log(2 pi) - 0.5 = -1.419) whatever the variance formula"
            )
        paper = PAPER.get((name, "exact"))
        if paper and collapsed:
            ours = [(np.mean([r[m] if m == "rmse" else r[m]["exact"] for r in collapsed]),
                     harness.mean_se([r[m] if m == "rmse" else r[m]["exact"] for r in collapsed])
                     [1]) for m in ("rmse", "loglik")]  # fmt: skip
            close = all(abs(o - p[0]) <= 2 * (se + p[1]) for (o, se), p in zip(ours, paper[:2]))
            verdict = "matches" if close else "does not match"
            text += f". The paper's row (RMSE {paper[0][0]:.2f}, log-lik {paper[1][0]:.2f}) "
            text += f"{verdict} this degenerate fit"
        if any("mean_difference" in r for r in rs):
            text += (
                "; the predictive means of the two variants differ by at most "
                f"{max(r.get('mean_difference', 0) for r in rs):.1e}"
            )
        findings.append(text + ".")
    report.section("Findings")
    report.bullets(findings)


if __name__ == "__main__":
    harness.main(__import__(__name__))
