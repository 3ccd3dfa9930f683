"""
Paper §6.5 / Fig. 5 over several initialisations: BayesianGPLVM against TightBayesianGPLVM with
the analytic m_n and with the paper's m_n(x_n), each trained by L-BFGS from the same initial
values, for 5 initialisations and Q = 2 and 5 latent dimensions on the 1000 oil flow rows.
"""

import harness
import numpy as np

NAME = "gplvm_oil_flow_inits"
MODELS = ["BayesianGPLVM", "TV analytic m_n", "TV paper m_n(x)"]
BOUNDS = {"none": "m_n = 1", "analytic": "analytic m_n", "sampled": "paper m_n(x), MC"}
PAPER = {"BayesianGPLVM": -5.2, "TV": -5.5}  # Fig. 5: final negative ELBO, "roughly"
SETTINGS = ["num_inducing", "maxiter", "num_samples", "perturbation", "score_samples"]
PRESETS = {"quick": dict(latent_dims=[2], inits=2, maxiter=5, num_samples=2, score_samples=5)}
BUDGET = None
REPEATS = ("init",)  # the time budget expects a run to take what its repeats took


def arguments(parser):
    parser.add_argument("--latent-dims", type=int, nargs="+", default=[5, 2])
    parser.add_argument("--inits", type=int, default=5, help="initialisations 0, 1, ...")
    parser.add_argument("--models", nargs="+", choices=MODELS, default=MODELS)
    parser.add_argument("--num-inducing", type=int, default=20)
    parser.add_argument("--maxiter", type=int, default=3000, help="L-BFGS-B iterations at most")
    parser.add_argument(
        "--num-samples", type=int, default=10, help="fixed draws per q(x_n) of m_n(x) training"
    )
    parser.add_argument(
        "--perturbation", type=float, default=0.5, help="std of the noise on the PCA means"
    )
    parser.add_argument("--score-samples", type=int, default=200, help="fresh MC draws to score")
    parser.add_argument("--threads", type=int, default=1)


def plan(args):
    """Initialisation-major: every Q and model of initialisation 0 first."""
    return [harness.keyed(args, SETTINGS, init=i, Q=q, model=m)
            for i in range(args.inits) for q in args.latent_dims for m in args.models]  # fmt: skip


def data():
    from gpflow_tight.datasets import find_data_dir

    folder = find_data_dir() / "oil_flow"
    return np.loadtxt(folder / "DataTrn.txt"), np.loadtxt(folder / "DataTrnLbls.txt").argmax(1)


def initial_values(Y, latent_dim, num_inducing, init, perturbation):
    """
    Initialisation 0 is the notebook's (PCA means scaled to unit variance, a random subset of
    them as Z with seed 0); initialisation i > 0 adds N(0, perturbation²) noise to the means and
    draws another subset, both with seed i.
    """
    import gpflow

    rng = np.random.default_rng(init)
    mean = gpflow.utilities.ops.pca_reduce(Y, latent_dim).numpy()[:, ::-1]
    mean = mean / mean.std(0)
    subset = rng.permutation(len(Y))[:num_inducing]
    if init > 0:
        mean = mean + perturbation * rng.standard_normal(mean.shape)
    return mean, np.full(mean.shape, 0.1), mean[subset].copy()


def nearest_neighbour_error(points, labels):
    """Leave-one-out 1-NN classification error."""
    from scipy.spatial import cKDTree

    _, index = cKDTree(points).query(points, k=2)
    return float(np.mean(labels[index[:, 1]] != labels))


def run(key, args):
    import time

    import gpflow
    import tensorflow as tf

    from gpflow_tight import TightBayesianGPLVM
    from gpflow_tight.relaxation import SampledOptimalRelaxation
    from gpflow_tight.training import fit_scipy

    Y, labels = data()
    q = key["Q"]
    start = initial_values(Y, q, key["num_inducing"], key["init"], key["perturbation"])

    def build(relaxation):
        kernel = gpflow.kernels.SquaredExponential(lengthscales=np.ones(q))
        mean, var, Z = (a.copy() for a in start)
        model = TightBayesianGPLVM(Y, mean, var, kernel, inducing_variable=Z, relaxation=relaxation)
        model.likelihood.variance.assign(0.01)
        return model

    if key["model"] == "BayesianGPLVM":
        kernel = gpflow.kernels.SquaredExponential(lengthscales=np.ones(q))
        mean, var, Z = (a.copy() for a in start)
        model = gpflow.models.BayesianGPLVM(Y, mean, var, kernel, inducing_variable=Z)
        model.likelihood.variance.assign(0.01)
    elif key["model"] == "TV analytic m_n":
        model = build("analytic")
    else:  # fixed draws (seeded by the initialisation): a deterministic objective for L-BFGS
        model = build(SampledOptimalRelaxation(key["num_samples"], seed=1000 + key["init"]))
    clock = time.perf_counter()
    try:
        result = fit_scipy(model, maxiter=key["maxiter"], progress=False)
    except Exception as error:  # a failed fit is a result too
        return {"failed": f"{type(error).__name__}: {error}"[:300]}
    seconds = time.perf_counter() - clock

    parameters = gpflow.utilities.parameter_dict(model)
    scores = {}
    for name in BOUNDS:
        relaxation = SampledOptimalRelaxation(key["score_samples"]) if name == "sampled" else name
        scorer = build(relaxation)
        gpflow.utilities.multiple_assign(scorer, parameters)
        tf.random.set_seed(key["init"])
        scores[name] = float(scorer.elbo().numpy())
    lengthscales = model.kernel.lengthscales.numpy()
    X_mean = model.X_data_mean.numpy()
    return {
        "own_elbo": -float(result.fun),
        "scores": scores,
        "num_data": len(Y),
        "iterations": harness.iterations(result),
        "converged": bool(result.success),
        "message": str(result.message)[:200],
        "seconds": seconds,
        "nn_error_scaled": nearest_neighbour_error(X_mean / lengthscales, labels),
        "nn_error_two": nearest_neighbour_error(X_mean[:, np.argsort(lengthscales)[:2]], labels),
        "lengthscales": lengthscales.tolist(),
        "noise_variance": float(model.likelihood.variance.numpy()),
    }


def render(report, records, missing, args):
    ok = [r for r in records if "failed" not in r]
    r0 = ok[0] if ok else {}
    k0 = records[0]["key"] if records else vars(args)
    report.head(
        "Bayesian GPLVM on oil flow over initialisations: BayesianGPLVM vs TightBayesianGPLVM "
        "(paper §6.5, Fig. 5)",
        records,
        [
            f"Data: oil flow, the {r0.get('num_data', 1000)} training rows (DataTrn.txt), 12 raw "
            "columns (not standardised); labels = the 3 flow regimes (for the 1-NN error only).",
            f"Initialisations: 0 is the notebook's (`notebooks/gplvm_oil_flow.pct.py`): latent "
            "means = PCA projections scaled to unit variance, Z = a random subset of them (seed "
            f"0); initialisation i > 0 adds N(0, {k0['perturbation']}²) noise to those means and "
            "draws another subset (seed i). Latent variances 0.1, SE-ARD kernel (variance 1, "
            f"lengthscales 1), noise variance 0.01, M = {k0['num_inducing']}, prior N(0, I); "
            "every parameter trained. All models of one initialisation start from the same values.",
            f"Models: `gpflow.models.BayesianGPLVM` (m_n = 1); `TightBayesianGPLVM` with the "
            "analytic m_n = σ²/(σ² + ⟨d_n⟩) (default); `TightBayesianGPLVM` with the paper's "
            f"m_n(x_n) = σ²/(σ² + d_n(x_n)), trained on {k0['num_samples']} fixed draws of each "
            "q(x_n) (`SampledOptimalRelaxation(seed=...)`: a deterministic sample average of the "
            "bound, so that L-BFGS applies; the paper used stochastic gradients).",
            f"Optimiser: L-BFGS-B (`fit_scipy`), at most {k0['maxiter']} iterations, scipy's "
            "default convergence tests; whether each fit converged is recorded.",
            "Scores: every model's final parameters under the three bounds — m_n = 1 "
            "(BayesianGPLVM's), analytic m_n, and the paper's m_n(x_n) estimated with "
            f"{k0['score_samples']} fresh draws of each q(x_n). 'Own' is the objective the "
            "model maximised (for the paper's m_n(x): its fresh-draw estimate, since the fixed "
            "draws it was trained on flatter it). ELBO/N = per data point, the normalisation "
            "that gives numbers of the size of the paper's Fig. 5 (which does not state its "
            "normalisation).",
            "1-NN: leave-one-out nearest-neighbour error of the flow regime from the latent means "
            "divided by the lengthscales (all Q dimensions).",
            "Paper claim (Bui, Ashman & Turner 2025, §6.5, Fig. 5; one run, Q, M and "
            "initialisation not stated): TV-BGPLVM reaches a lower final negative ELBO, roughly "
            "−5.5 against −5.2 for V-BGPLVM.",
        ],
        missing,
    )
    report.failures(records, "failed")
    for q in sorted({r["key"]["Q"] for r in ok}, reverse=True):
        section(report, [r for r in ok if r["key"]["Q"] == q], q)
    if ok:
        report.section("Conclusion")
        report.bullets(conclusions(ok))


def own(r):
    """The bound a model maximised; for m_n(x), its fresh-draw estimate, not the fixed draws'."""
    return r["scores"]["sampled"] if r["key"]["model"] == "TV paper m_n(x)" else r["own_elbo"]


def by_init(records, model):
    return {r["key"]["init"]: r for r in records if r["key"]["model"] == model}


def section(report, records, q):
    report.section(f"Q = {q}")
    models = [m for m in MODELS if by_init(records, m)]
    rows = []
    for m in models:
        runs = list(by_init(records, m).values())
        per_point = [-own(r) / r["num_data"] for r in runs]
        rows.append([
            m, len(runs), harness.pm(per_point, spread="std"),
            f"{min(per_point):.3f} / {max(per_point):.3f}",
            harness.pm([-r["scores"]["sampled"] / r["num_data"] for r in runs], spread="std"),
            harness.pm([r["nn_error_scaled"] for r in runs], spread="std"),
            f"{sum(r['converged'] for r in runs)} / {len(runs)}",
            f"{np.median([r['iterations'] for r in runs]):.0f}",
            f"{np.median([r['seconds'] for r in runs]):.0f}",
        ])  # fmt: skip
    report.add("Mean ± standard deviation over initialisations.", "")
    report.table(
        ["model", "inits", "own −ELBO/N", "best / worst", "−ELBO/N under paper m_n(x)",
         "1-NN error", "converged", "median iterations", "median s"], rows)  # fmt: skip
    report.add(
        "Paper Fig. 5 (final −ELBO, normalisation not stated): V-BGPLVM about −5.2, TV-BGPLVM "
        "about −5.5.",
        "",
    )
    inits = sorted({r["key"]["init"] for r in records})
    report.add("Per initialisation, own −ELBO/N (1-NN error):", "")
    report.table(
        ["init", *models],
        [[i, *(cell(by_init(records, m).get(i)) for m in models)] for i in inits],
    )
    report.add("Pairs from the same initialisation (higher ELBO is better):", "")
    report.table(
        ["comparison", "higher in", "mean difference of ELBO/N", "one-sided sign test p"],
        [pair_row(records, a, b, bound) for a, b, bound in comparisons(models)],
    )


def cell(r):
    if r is None:
        return "—"
    return f"{-own(r) / r['num_data']:.3f} ({r['nn_error_scaled']:.3f})"


def comparisons(models):
    pairs = [("TV analytic m_n", "BayesianGPLVM", "own"),
             ("TV paper m_n(x)", "BayesianGPLVM", "own"),
             ("TV paper m_n(x)", "TV analytic m_n", "own"),
             ("TV analytic m_n", "BayesianGPLVM", "sampled")]  # fmt: skip
    return [p for p in pairs if p[0] in models and p[1] in models]


def paired(records, a, b, bound):
    """ELBO/N differences a - b over the initialisations both have, and a one-sided p."""
    from scipy import stats

    first, second = by_init(records, a), by_init(records, b)
    common = sorted(set(first) & set(second))

    def value(r):
        return (own(r) if bound == "own" else r["scores"][bound]) / r["num_data"]

    diffs = np.array([value(first[i]) - value(second[i]) for i in common])
    wins = int(np.sum(diffs > 0))
    p = stats.binomtest(wins, len(diffs), alternative="greater").pvalue if len(diffs) else 1.0
    return diffs, wins, p


def pair_row(records, a, b, bound):
    diffs, wins, p = paired(records, a, b, bound)
    label = f"{a} vs {b}" + (
        " (own objectives)" if bound == "own" else f", both under {BOUNDS[bound]}"
    )
    return [label, f"{wins} of {len(diffs)}", harness.pm(diffs, ".3f", "std"), f"{p:.3g}"]


def verdict(wins, total, p):
    if total == 0:
        return "not measured"
    if wins == total:
        return "reproduces" if p < 0.05 else "holds every time, too few runs to be significant"
    return "partly reproduces" if wins > total / 2 else "does not reproduce"


def conclusions(records):
    lines = []
    for q in sorted({r["key"]["Q"] for r in records}, reverse=True):
        rows = [r for r in records if r["key"]["Q"] == q]
        for tight in ("TV analytic m_n", "TV paper m_n(x)"):
            diffs, wins, p = paired(rows, tight, "BayesianGPLVM", "own")
            if not len(diffs):
                continue
            lines.append(
                f"Q = {q}, {tight} against BayesianGPLVM: a higher final bound (lower −ELBO/N) in "
                f"{wins} of {len(diffs)} initialisations, by {diffs.mean():+.3f} nats per point on "
                f"average (one-sided sign test p = {p:.3g}). The paper's direction: "
                f"{verdict(wins, len(diffs), p)} (its gap is about 0.3 per point)."
            )
        diffs, wins, p = paired(rows, "TV analytic m_n", "BayesianGPLVM", "sampled")
        if len(diffs):
            lines.append(
                f"Q = {q}, the same two parameter sets both scored under the paper's m_n(x) bound: "
                f"TV analytic m_n's higher in {wins} of {len(diffs)} (mean {diffs.mean():+.3f} per "
                "point): this separates the fit from the bound it was scored with."
            )
        diffs, wins, p = paired(rows, "TV paper m_n(x)", "TV analytic m_n", "own")
        if len(diffs):
            lines.append(
                f"Q = {q}, the paper's m_n(x) against the analytic m_n (own objectives): higher in "
                f"{wins} of {len(diffs)}, by {diffs.mean():+.3f} per point on average."
            )
    return lines


if __name__ == "__main__":
    harness.main(__import__(__name__))
