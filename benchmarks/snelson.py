"""
Paper §6.1: SGPR vs TightSGPR (L-BFGS) and SVGP vs TightSVGP (full-batch Adam) on Snelson's 1-D
data with M = 5 inducing points, all from the same initialisation: bound traces, learned
hyperparameters beside the paper's, the exact log p(y) and the bound ordering.
"""

import harness
import numpy as np

NAME = "snelson"
MODELS = ["SGPR", "TightSGPR", "SVGP", "TightSVGP"]
NUM_INDUCING = 5
PAPER = {"TightSGPR": (0.115, 0.107), "SGPR": (0.126, 0.087)}  # (noise, kernel variance)
PRESETS = {"quick": dict(maxiter=50, adam_iterations=200)}


def arguments(parser):
    parser.add_argument("--maxiter", type=int, default=2000, help="L-BFGS iterations")
    parser.add_argument("--adam-iterations", type=int, default=5000)
    parser.add_argument("--lr", type=float, default=0.01, help="Adam learning rate")


def plan(args):
    return [harness.keyed(args, ["maxiter", "adam_iterations", "lr"], model=m) for m in MODELS]


def run(key, args):
    import gpflow

    from gpflow_tight import TightSGPR, TightSVGP
    from gpflow_tight.datasets import load_snelson
    from gpflow_tight.training import fit_adam, fit_scipy

    X, Y = load_snelson()
    Z0 = np.linspace(X.min(), X.max(), NUM_INDUCING)[:, None]

    def kernel(variance=1.0, lengthscale=1.0):
        return gpflow.kernels.SquaredExponential(variance=variance, lengthscales=lengthscale)

    def collapsed(cls, Z, noise=1.0, **k):
        return cls((X, Y), kernel(**k), Z.copy(), noise_variance=noise)

    name = key["model"]
    if name in ("SGPR", "TightSGPR"):
        model = collapsed(gpflow.models.SGPR if name == "SGPR" else TightSGPR, Z0)
        result = fit_scipy(model, maxiter=key["maxiter"], progress=False)
        bound, steps = float(model.elbo()), harness.iterations(result)
        trace = -np.asarray(harness.history(result) or [-bound])
    else:
        cls = gpflow.models.SVGP if name == "SVGP" else TightSVGP
        likelihood = gpflow.likelihoods.Gaussian(variance=1.0)
        model = cls(kernel(), likelihood, Z0.copy(), num_data=len(X), whiten=True)
        losses = fit_adam(
            model, (X, Y), key["adam_iterations"], learning_rate=key["lr"], progress=False
        )
        trace, bound, steps = -np.asarray(losses), float(model.elbo((X, Y))), len(losses)
    noise, variance = float(model.likelihood.variance.numpy()), float(model.kernel.variance.numpy())
    lengthscale, Z = float(model.kernel.lengthscales.numpy()), model.inducing_variable.Z.numpy()

    def bounds_at():  # both collapsed bounds and the exact log p(y) at these parameters
        out = {c.__name__: float(collapsed(c, Z, noise, variance=variance, lengthscale=lengthscale)
                                 .elbo()) for c in (gpflow.models.SGPR, TightSGPR)}  # fmt: skip
        gpr = gpflow.models.GPR((X, Y), kernel(variance, lengthscale), noise_variance=noise)
        return {**out, "GPR": float(gpr.log_marginal_likelihood())}

    grid = np.linspace(X.min() - 1.0, X.max() + 1.0, 400)[:, None]
    mean, var_f = (t.numpy()[:, 0] for t in model.predict_f(grid))
    var_y = model.predict_y(grid)[1].numpy()[:, 0]
    every = max(1, len(trace) // 500)  # at most ~500 points of the trace
    return dict(
        iterations=steps, trainer="fit_scipy" if "SGPR" in name else "fit_adam, full batch",
        bound=bound, noise=noise, kernel_variance=variance, lengthscale=lengthscale,
        Z=np.sort(Z[:, 0]).tolist(), Z_init=Z0[:, 0].tolist(), bounds_at=bounds_at(),
        beta=float(model.beta.numpy()[0]) if name == "TightSVGP" else None,
        trace_every=every, trace=trace[every - 1 :: every].tolist(), num_data=len(X),
        curves=dict(x=grid[:, 0].tolist(), mean=mean.tolist(), var_f=var_f.tolist(),
                    var_y=var_y.tolist(), X=X[:, 0].tolist(), Y=Y[:, 0].tolist()),
    )  # fmt: skip


def plot(fits):
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8))
    finals = [r["bound"] for r in fits.values()]
    spread = max(max(finals) - min(finals), 2.0)
    styles = [("C0", "-", 1.8), ("C1", "-", 1.8), ("C0", "--", 0.7), ("C1", "--", 0.7)]
    for (name, r), (colour, line, width) in zip(fits.items(), styles):
        steps = r["trace_every"] * (np.arange(len(r["trace"])) + 1)
        left.plot(steps, r["trace"], color=colour, linestyle=line, linewidth=width,
                  label=f"{name} (final {r['bound']:.2f})")  # fmt: skip
    top = max(max(r["trace"]) for r in fits.values())
    left.set(xscale="log", ylim=(min(finals) - 15 * spread, top + 0.5 * spread),
             xlabel="iteration (L-BFGS for SGPR/TightSGPR, Adam for SVGP/TightSVGP)",
             ylabel="bound = -training loss (y axis clipped below)",
             title="Snelson, M=5: bound traces")  # fmt: skip
    left.legend(loc="lower right")
    left.grid(alpha=0.3)
    data = fits["SGPR"]["curves"]
    right.plot(data["X"], data["Y"], ".", color="0.6", ms=4, label="data")
    for name, colour in zip(["SGPR", "TightSGPR"], ["C0", "C1"]):
        c = {k: np.asarray(v) for k, v in fits[name]["curves"].items()}
        right.plot(c["x"], c["mean"], color=colour, label=f"{name} mean")
        for var, alpha in (("var_y", 0.12), ("var_f", 0.25)):
            width = 2 * np.sqrt(c[var])
            right.fill_between(c["x"], c["mean"] - width, c["mean"] + width, color=colour,
                               alpha=alpha)  # fmt: skip
        Z = np.asarray(fits[name]["Z"])
        right.plot(Z, np.full_like(Z, min(data["Y"]) - 0.6), "^", color=colour, ms=8,
                   label=f"{name} inducing inputs")  # fmt: skip
    right.set(title="fits: mean, ±2 sd of f (dark) and of y (light)", xlabel="x")
    right.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    return fig


def render(report, records, missing, args):
    fits = {r["key"]["model"]: r for r in records}
    first = records[0] if records else {}
    k = first.get("key", vars(args))
    adam = {r.get("trainer") for r in records if "SVGP" in r["key"]["model"]}
    protocol = [
        f"Data: Snelson & Ghahramani 1-D, {first.get('num_data', 200)} training points "
        "(`load_snelson`), raw scale.",
        f"M={NUM_INDUCING} inducing inputs, initialised evenly spaced over the data range "
        f"({', '.join(f'{z:.3f}' for z in first.get('Z_init', []))}) and trained, the same for "
        "all four models.",
        "SE kernel initialised at variance 1, lengthscale 1; Gaussian noise variance "
        "initialised at 1; no mean function.",
        f"SGPR and TightSGPR: `fit_scipy` (L-BFGS-B), maxiter {k['maxiter']}; the trace is the "
        "bound after each L-BFGS iteration.",
        "SVGP and TightSVGP (whiten=True, full q_sqrt, q(u) initialised at the prior; "
        "TightSVGP relaxation='beta', beta initialised at the noise variance): Adam (`tf_keras`) "
        f"on the full data set in every step, {k['adam_iterations']} iterations, learning rate "
        f"{k['lr']}, trained by: {', '.join(sorted(adam))}; the trace is the loss at each step.",
        "'final bound' is the bound at the final parameters; 'GPR log p(y)' is the exact log "
        "marginal likelihood (`gpflow.models.GPR`) at that model's learned kernel and noise.",
    ]
    report.head("Snelson 1-D, M=5 (paper §6.1)", records, protocol, missing)
    rows = []
    for name, r in fits.items():
        paper = PAPER.get(name)
        rows.append([name, r["iterations"], f"{r.get('seconds', float('nan')):.1f}",
                     f"{r['bound']:.4f}", f"{r['bounds_at']['GPR']:.4f}",
                     f"{r['bounds_at']['GPR'] - r['bound']:.4f}", f"{r['noise']:.4f}",
                     f"{r['kernel_variance']:.4f}", f"{r['lengthscale']:.4f}",
                     f"{paper[0]} / {paper[1]}" if paper else "–",
                     f"beta = {r['beta']:.4f}" if r.get("beta") else ""])  # fmt: skip
    report.section("Results")
    report.table(["model", "iterations", "train s", "final bound", "GPR log p(y)", "gap",
                  "noise var", "kernel var", "lengthscale", "paper noise / kernel var", "other"],
                 rows)  # fmt: skip
    report.add("Learned inducing inputs (sorted):", "")
    report.bullets(f"{n}: " + ", ".join(f"{z:.3f}" for z in r["Z"]) for n, r in fits.items())
    findings = []
    for name in ("TightSGPR", "SGPR"):
        if name in fits:
            b = fits[name]["bounds_at"]
            holds = b["SGPR"] <= b["TightSGPR"] <= b["GPR"]
            findings.append(
                f"At {name}'s learned parameters: SGPR {b['SGPR']:.4f} <= TightSGPR "
                f"{b['TightSGPR']:.4f} <= GPR {b['GPR']:.4f}: the ordering "
                f"**{'holds' if holds else 'is VIOLATED'}**; the tighter bound gains "
                f"{b['TightSGPR'] - b['SGPR']:.2f} nats there."
            )
    agree = []
    for name, (noise, variance) in PAPER.items():
        if name in fits:
            r = fits[name]
            same = (
                abs(r["noise"] - noise) < 0.0015 and abs(r["kernel_variance"] - variance) < 0.0015
            )
            agree.append(same)
            findings.append(
                f"{name}: noise {r['noise']:.4f} vs the paper's {noise}, kernel variance "
                f"{r['kernel_variance']:.4f} vs {variance}: "
                + ("agree to the paper's 3 decimals." if same else "differ.")
            )
    if agree:
        findings.append(
            "So the paper's values and labels (§6.1: noise variance, kernel variance; a kernel "
            "variance as small as the noise variance looked like a possible mislabel) are "
            + ("reproduced" if all(agree) else "not reproduced")
            + " with this initialisation."
        )
    for full, collapsed in (("SVGP", "SGPR"), ("TightSVGP", "TightSGPR")):
        if full in fits and collapsed in fits:
            gap = fits[full]["bound"] - fits[collapsed]["bound"]
            findings.append(
                f"{full}'s final bound is {gap:+.4f} from {collapsed}'s (the collapsed bound is "
                f"the optimum over q(u)): Adam "
                + ("reached the same optimum." if abs(gap) < 0.01 else "stopped short of it.")
            )
    report.section("Findings")
    report.bullets(findings)
    if all("curves" in r for r in records) and len(fits) == len(MODELS):
        report.figure(plot(fits), "snelson_traces.png", "traces and fits")
    else:
        report.old_figure("snelson_traces.png", "traces and fits", "The figure was drawn by the "
                          "run itself; its traces are not in the records.")  # fmt: skip


if __name__ == "__main__":
    harness.main(__import__(__name__))
