"""
Cost of the classic approximations against their GPflow peers: (a) SoR, the Nyström GP, DTC and
FITC against SGPR (and GPflow's GPRFITC) at the same inducing inputs: one training step (loss and
gradient) and one compiled prediction; (b) SoD and the BCM against exact GPR on the same data:
the step, the prediction, and SoD's greedy selection.
"""

import time

import harness
import numpy as np

NAME = "classic_cost"
SGPR, GPRFITC, GPR = "SGPR", "GPRFITC", "GPR"
SPARSE = [SGPR, "DTC", "SoR", "Nystrom", "FITC", GPRFITC]
SETTINGS = ["rounds", "num_test", "dim", "lengthscale", "noise", "threads", "seed"]
PRESETS = {"quick": dict(rounds=3, sparse_sizes=[50], sparse_num_data=500, exact_sizes=[400],
                         expert_size=100, active_fraction=0.25)}  # fmt: skip


def arguments(parser):
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--sparse-sizes", type=int, nargs="*", default=[100, 300], help="M of (a)")
    parser.add_argument("--sparse-num-data", type=int, default=5000, help="N of (a)")
    parser.add_argument("--exact-sizes", type=int, nargs="*", default=[1000, 2000])
    parser.add_argument("--expert-size", type=int, default=500, help="(b): N / p rows per expert")
    parser.add_argument("--active-fraction", type=float, default=0.25, help="(b): SoD's M / N")
    parser.add_argument("--num-test", type=int, default=1000, help="prediction inputs")
    parser.add_argument("--dim", type=int, default=4)
    parser.add_argument("--lengthscale", type=float, default=1.0)
    parser.add_argument("--noise", type=float, default=0.1)
    parser.add_argument("--threads", type=int, default=0, help="0: TensorFlow's default")
    parser.add_argument("--seed", type=int, default=0)


def plan(args):
    sparse = [harness.keyed(args, SETTINGS + ["sparse_num_data"], part="a", M=m)
              for m in args.sparse_sizes]  # fmt: skip
    exact = [harness.keyed(args, SETTINGS + ["expert_size", "active_fraction"], part="b", N=n)
             for n in args.exact_sizes]  # fmt: skip
    return sparse + exact


def problem(key, num_data):
    rng = np.random.default_rng(key["seed"])
    X = rng.standard_normal((num_data, key["dim"]))
    Y = np.sin(X).sum(1, keepdims=True) / key["dim"] ** 0.5 + 0.3 * rng.standard_normal(
        (num_data, 1)
    )
    Xnew = rng.standard_normal((key["num_test"], key["dim"]))
    return rng, X, Y, Xnew


def run(key, args):
    import warnings

    import gpflow

    import gpflow_tight as gt

    warnings.simplefilter("ignore", gt.posteriors.NegativeVarianceWarning)  # traced: not checked
    N = key["sparse_num_data"] if key["part"] == "a" else key["N"]
    rng, X, Y, Xnew = problem(key, N)

    def kernel():
        return gpflow.kernels.SquaredExponential(
            lengthscales=np.full(key["dim"], key["lengthscale"])
        )

    noise, selection = key["noise"], {}
    if key["part"] == "a":
        Z = X[rng.choice(N, key["M"], replace=False)]
        models = {
            SGPR: gpflow.models.SGPR((X, Y), kernel(), Z.copy(), noise_variance=noise),
            **{
                name: getattr(gt, name)((X, Y), kernel(), Z.copy(), noise_variance=noise)
                for name in ("DTC", "SoR", "Nystrom", "FITC")
            },
            GPRFITC: gpflow.models.GPRFITC((X, Y), kernel(), Z.copy(), noise_variance=noise),
        }
    else:
        active = int(key["active_fraction"] * N)
        models = {GPR: gpflow.models.GPR((X, Y), kernel(), noise_variance=noise)}
        for name, rule in (("SoD random", "random"), ("SoD entropy", "entropy")):
            start = time.perf_counter()
            models[name] = gt.SoD(
                (X, Y), kernel(), noise_variance=noise, active_set_size=active, selection=rule
            )
            selection[name] = time.perf_counter() - start
        experts = max(1, N // key["expert_size"])
        for rule in ("bcm", "rbcm"):
            models[f"BCM {rule}"] = gt.BCM(
                (X, Y), kernel(), partition=experts, noise_variance=noise, combination=rule
            )
    return {**harness.steps_and_predictions(models, Xnew, key["rounds"]), "selection": selection}


def render(report, records, missing, args):
    k = records[0]["key"] if records else harness.keyed(args, SETTINGS)
    a = [r for r in records if r["key"]["part"] == "a"]
    b = [r for r in records if r["key"]["part"] == "b"]
    protocol = [
        "Quantities timed: (step) one compiled call of `model.training_loss` and its gradient "
        "w.r.t. all trainable variables, everything fetched with `.numpy()`; (predict) one "
        f"compiled `model.predict_f` at {k['num_test']:,} new inputs, mean and variance fetched.",
        f"Every model of one setting is traced and called once untimed, once more as warm-up, "
        f"then timed for {k['rounds']} rounds; each round calls every model once, in an order that "
        "reverses between rounds. Reported: median (ms) and the median [quartiles] of the "
        "per-round ratios against the reference (SGPR in (a), GPR in (b)).",
        f"Data: synthetic, inputs standard normal in D = {k['dim']}, targets sum_d sin(x_d)/sqrt(D)"
        f" + N(0, 0.3^2). Kernel squared exponential ARD (variance 1, lengthscales "
        f"{k['lengthscale']}); Gaussian noise variance {k['noise']}; float64.",
        "(a) N = "
        + f"{(a[0]['key'] if a else vars(args))['sparse_num_data']:,}"
        + ", Z a random subset of M training inputs, the same for every model; all trainable. "
        "DTC, SoR and the Nyström GP share one objective (DTC's), so their steps are one graph; "
        "they differ in the prediction.",
        "(b) SoD on M = "
        + f"{(b[0]['key'] if b else vars(args))['active_fraction']:.2f} N rows (random, or "
        "greedy by the IVM entropy score: the selection time is measured once, at "
        "construction); BCM and robust BCM with p = N / "
        + f"{(b[0]['key'] if b else vars(args))['expert_size']} k-means experts, marginal "
        "predictions (`full_cov=False`).",
        "TensorFlow threads: "
        + (f"{k['threads']} intra-op" if k["threads"] else "TensorFlow's default")
        + "; one Python process.",
    ]
    report.head("Classic approximations: cost against SGPR and GPR", records, protocol, missing)

    def rows(part, label, reference):
        out = []
        for r in part:
            for name in r["step"]:
                cells = [label(r), name]
                for quantity in ("step", "predict"):
                    t = 1e3 * np.median(r[quantity][name])
                    _, ratios, _ = harness.ratio(r[quantity], name, reference)
                    cells += [f"{t:.1f}", harness.quartiles(ratios)]
                seconds = r["selection"].get(name)
                selection = "—" if seconds is None else f"{seconds:.2f}"
                out.append(cells + ([selection] if part is b else []))
        return out

    def median_ratio(r, quantity, name, reference):
        return float(np.median(harness.ratio(r[quantity], name, reference)[1]))

    findings = []
    headers = ["setting", "model", "step ms", "step / ref", "predict ms", "predict / ref"]
    if a:
        report.section("(a) SoR, Nyström, DTC and FITC against SGPR, same Z")
        report.table(headers, rows(a, lambda r: f"M = {r['key']['M']}", SGPR))
        for name in ("SoR", "Nystrom", "FITC"):
            step = [median_ratio(r, "step", name, SGPR) for r in a]
            predict = [median_ratio(r, "predict", name, SGPR) for r in a]
            findings.append(
                f"(a) {name}: step {harness.span(step)} of SGPR's, prediction "
                f"{harness.span(predict)} of SGPR's (M = "
                + ", ".join(str(r["key"]["M"]) for r in a)
                + ")."
            )
        nystrom = [median_ratio(r, "predict", "Nystrom", "SoR") for r in a]
        findings.append(
            f"The Nyström prediction reads K(X, X*) (O(N N* M)) where SoR's reads only "
            f"K(Z, X*): it costs {harness.span(nystrom)} of SoR's prediction here."
        )
        fitc = [median_ratio(r, "step", "FITC", GPRFITC) for r in a]
        findings.append(f"FITC's step costs {harness.span(fitc)} of GPflow's GPRFITC's.")
    if b:
        report.section("(b) SoD and the BCM against exact GPR, same data")
        report.table([*headers, "selection s"], rows(b, lambda r: f"N = {r['key']['N']:,}", GPR))
        for name in ("SoD random", "BCM bcm"):
            step = [median_ratio(r, "step", name, GPR) for r in b]
            findings.append(
                f"(b) {name}: step {harness.span(step)} of GPR's at N = "
                + ", ".join(f"{r['key']['N']:,}" for r in b)
                + ("; the ratio falls as N grows" if step == sorted(step, reverse=True) else "")
                + "."
            )
        greedy = [r["selection"]["SoD entropy"] for r in b]
        findings.append(
            "SoD's greedy entropy selection took "
            + ", ".join(f"{s:.2f} s at N = {r['key']['N']:,}" for s, r in zip(greedy, b))
            + " (O(N M²) with M a fixed fraction of N, so O(N³) here; one pass per selection)."
        )
    report.section("Findings")
    report.bullets(findings)


if __name__ == "__main__":
    harness.main(__import__(__name__))
