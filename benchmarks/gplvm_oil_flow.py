"""
Paper §6.5 / Fig. 5: BayesianGPLVM vs TightBayesianGPLVM (TV-BGPLVM) on the oil flow data. Runs
``notebooks/gplvm_oil_flow.pct.py`` on the full data (GPFLOW_CI unset) once per latent dimension
Q, saves its three figures and records the numbers it computes, beside the paper's claim.
"""

import harness

NAME = "gplvm_oil_flow"
NOTEBOOK = harness.HERE.parent / "notebooks" / "gplvm_oil_flow.pct.py"
FIGURES = ["traces", "latent", "minibatch"]
PAPER = {"BayesianGPLVM": -5.2, "TightBayesianGPLVM": -5.5}
COLLAPSED = ["BayesianGPLVM", "TightBayesianGPLVM", "TightBayesianGPLVM (warm start)"]


def arguments(parser):
    parser.add_argument("--latent-dims", type=int, nargs="+", default=[5, 2], help="one run per Q")


def plan(args):
    return [{"Q": q} for q in args.latent_dims]


def run(key, args):
    """The notebook's ``results`` with ``LATENT_DIM = Q``; its ``plt.show()`` saves the figures."""
    import os
    import time

    import matplotlib.pyplot as plt

    if os.environ.get("GPFLOW_CI") or "CI" in os.environ:
        raise SystemExit("Unset GPFLOW_CI and CI: this study runs the notebook in full.")
    saved = []

    def show(*_, **__):
        name = f"{NAME}_{FIGURES[len(saved)] if len(saved) < 3 else len(saved)}_q{key['Q']}.png"
        plt.gcf().savefig((args.out or harness.RESULTS) / name, dpi=100)
        plt.close(plt.gcf())
        saved.append(name)

    plt.show = show
    source = NOTEBOOK.read_text()
    assert source.count("\nLATENT_DIM = 5\n") == 1, "the notebook no longer sets LATENT_DIM = 5"
    source = source.replace("\nLATENT_DIM = 5\n", f"\nLATENT_DIM = {key['Q']}\n")
    namespace = {"__name__": "__main__", "__file__": str(NOTEBOOK)}
    start = time.perf_counter()
    exec(compile(source, str(NOTEBOOK), "exec"), namespace)
    return dict(namespace["results"], wall=time.perf_counter() - start, figures=saved)


def render(report, records, missing, args):
    r = records[0] if records else {}
    protocol = [
        f"Data: {r.get('data', 'oil flow')}, Y {r.get('num_data')} x 12 raw (not standardised), "
        "labels = 3 flow regimes.",
        f"Both collapsed models from the same initial values: Q = "
        f"{' and '.join(str(x['latent_dim']) for x in records)} latent dimensions (one run "
        f"each), SE-ARD kernel (variance 1, lengthscales 1), M = {r.get('num_inducing')} "
        "inducing inputs (a random subset of the initial latent means, seed 0), latent means = "
        "PCA projections scaled to unit variance, latent variances 0.1, noise variance 0.01, "
        "prior N(0, I), all trained. One initialisation per Q (no repeats).",
        f"Optimiser: L-BFGS-B (`fit_scipy`), maxiter = {r.get('maxiter')}, scipy's default "
        "convergence tests. 'warm start': TightBayesianGPLVM started from BayesianGPLVM's final "
        "parameters, to separate the bound from the local optimum the optimiser reaches.",
        "Bounds at the final parameters: BayesianGPLVM's (m_n = 1, computed as "
        "`TightBayesianGPLVM(relaxation='none')`), the analytic TV-BGPLVM bound, and the "
        "paper's m_n(x_n) (`relaxation='sampled'`, 200 Monte Carlo samples of each q(x_n)).",
        "1-NN: leave-one-out nearest-neighbour error of the flow regime from the latent means, "
        "(i) all Q dimensions divided by the kernel's lengthscales, (ii) the two dimensions with "
        "the shortest lengthscales (the ones plotted), unscaled.",
        "MinibatchBayesianGPLVM (tight=True, whiten=True): same initial values, Adam (learning "
        f"rate {r.get('minibatch_settings', {}).get('learning_rate')}) for "
        f"{r.get('minibatch_steps')} steps on minibatches of "
        f"{r.get('minibatch_settings', {}).get('batch_size')} rows (`fit_adam`); its ELBO is "
        "then evaluated on all rows.",
        "Paper claim (Bui, Ashman & Turner 2025, §6.5, Fig. 5): TV-BGPLVM "
        'reaches a lower final negative ELBO, "roughly -5.5 versus -5.2"; the normalisation is '
        "not stated, nor are Q, M or the initialisation. -ELBO/N is the normalisation that "
        "gives numbers of that size here; -ELBO/(NP) is given too.",
        "Times are wall-clock seconds on 2 cores shared with other jobs.",
    ]
    title = "Bayesian GPLVM on oil flow: BayesianGPLVM vs TightBayesianGPLVM (paper §6.5)"
    report.head(title, records, protocol, missing)
    for r in records:
        section(report, r)


def compare_gap(gain, gap):
    """How the bound's own gain compares with the cold-start gap (both >= 0), in words."""
    if gain <= 0 or gap <= 0:
        return f"against a cold-start gap of {gap:.4f}."
    if gap / gain > 1.5:
        return f"{gap / gain:.0f} times less than the cold-start gap."
    if gain / gap > 1.5:
        return f"{gain / gap:.0f} times more than the cold-start gap."
    return "about as large as the cold-start gap."


def section(report, r):
    n, own, bounds, seconds = r["num_data"], r["own_elbo"], r["bounds"], r["seconds"]
    rows = [[name, f"{own[name]:.1f}", f"**{-own[name] / n:.3f}**", f"{-own[name] / (12 * n):.4f}",
             PAPER.get(name, "-"), r["iterations"][name], f"{seconds[name]:.0f}"]
            for name in COLLAPSED]  # fmt: skip
    mb = r["minibatch_elbo"]
    rows.append(["MinibatchBayesianGPLVM (Adam)", f"{mb:.1f}", f"**{-mb / n:.3f}**",
                 f"{-mb / (12 * n):.4f}", "-", f"{r['minibatch_steps']} Adam steps",
                 f"{seconds['MinibatchBayesianGPLVM']:.0f}"])  # fmt: skip
    report.section(f"Q = {r['latent_dim']} (notebook run: {r['wall'] / 60:.1f} min)")
    report.section("Final bounds, per data point, beside the paper", 3)
    report.table(
        [
            "model (own objective)",
            "final ELBO",
            "-ELBO/N",
            "-ELBO/(NP)",
            "paper Fig. 5 (final -ELBO, normalisation not stated)",
            "iterations",
            "train s",
        ],
        rows,
    )
    report.section("Every bound at each model's final parameters", 3)
    report.table(["parameters of", "BayesianGPLVM bound (m_n = 1)", "TV analytic",
                  "TV paper's m_n(x_n), MC", "standard <= analytic <= sampled"],
                 [[name, f"{b['none']:.1f}", f"{b['analytic']:.1f}", f"{b['sampled']:.1f}",
                   "yes" if b["none"] <= b["analytic"] <= b["sampled"] else "**NO**"]
                  for name, b in ((x, bounds[x]) for x in COLLAPSED)])  # fmt: skip
    report.section("Nearest-neighbour classification error in latent space (leave-one-out)", 3)
    report.table(
        ["latent means of", "1-NN error, all Q dims ARD-scaled", "1-NN error, 2 plotted dims"],
        [[k, f"{e[0]:.3f}", f"{e[1]:.3f}"] for k, e in r["nn_errors"].items()],
    )
    fitted = [[x, ", ".join(f"{v:.2f}" for v in r["lengthscales"][x]),
               f"{r['noise_variance'][x]:.5f}"] for x in COLLAPSED]  # fmt: skip
    fitted.append(
        [
            "MinibatchBayesianGPLVM",
            ", ".join(f"{v:.2f}" for v in r["minibatch_lengthscales"]),
            f"{r['minibatch_noise_variance']:.5f}",
        ]
    )
    report.section("Learned kernel and noise", 3)
    report.table(["model", "lengthscales", "noise variance"], fitted)
    gap = (own["TightBayesianGPLVM"] - own["BayesianGPLVM"]) / n
    gain = (bounds["BayesianGPLVM"]["analytic"] - bounds["BayesianGPLVM"]["none"]) / n
    cross = (bounds["TightBayesianGPLVM"]["none"] - own["BayesianGPLVM"]) / n
    warm = own["TightBayesianGPLVM (warm start)"] / n
    report.section("Reading", 3)
    report.bullets([
        f"Cold start, same settings: TV-BGPLVM's final ELBO is {'higher' if gap > 0 else 'lower'} "
        f"than BayesianGPLVM's by {abs(gap):.3f} nats per data point: "
        + ("the direction of the paper's (about 0.3 higher)." if gap > 0 else
           "the opposite of the paper's direction (about 0.3 higher)."),
        f"The bound alone, at fixed parameters: at BayesianGPLVM's final parameters the analytic "
        f"tight bound is {gain:.4f} nats per point above the standard one, "
        + compare_gap(gain, abs(gap)),
        f"Where the optimiser ends: TightBayesianGPLVM's final parameters score "
        f"{bounds['TightBayesianGPLVM']['none']:.1f} under BayesianGPLVM's own bound, "
        f"{abs(cross):.3f} per point {'above' if cross > 0 else 'below'} BayesianGPLVM's final "
        f"{own['BayesianGPLVM']:.1f}: "
        + ("the two runs ended in different local optima." if abs(cross) > gain else
           "the runs reached about the same optimum."),
        f"Warm start from BayesianGPLVM's final parameters: TV-BGPLVM ends at -ELBO/N "
        f"{-warm:.3f} after {r['iterations']['TightBayesianGPLVM (warm start)']} iterations, "
        f"{warm - own['BayesianGPLVM'] / n:+.3f} per point from where it started.",
    ])  # fmt: skip
    report.section("Figures", 3)
    for name in r["figures"]:
        report.add(f"![{name}]({name})", "")


if __name__ == "__main__":
    harness.main(__import__(__name__))
