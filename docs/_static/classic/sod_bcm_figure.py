"""
The figure of docs/classic.md, "Subset of data and the Bayesian committee machine": the exact GP
beside SoD (greedy IVM-entropy selection) and the committees of experts (BCM, robust BCM,
generalised PoE) on the same 1-D data with the same hyperparameters. Run from the repository
root (a few seconds, no data needed):

    .venv/bin/python docs/_static/classic/sod_bcm_figure.py

It writes sod_bcm.png beside this script and prints the numbers the page quotes.
"""

from pathlib import Path

import gpflow
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import gpflow_tight  # noqa: E402

OUT = Path(__file__).with_name("sod_bcm.png")
LENGTHSCALE, NOISE, EXPERTS, ACTIVE = 0.6, 0.04, 4, 16


def kernel() -> gpflow.kernels.Kernel:
    return gpflow.kernels.SquaredExponential(lengthscales=LENGTHSCALE)


def main() -> None:
    rng = np.random.default_rng(5)
    X = np.sort(np.concatenate([rng.uniform(-4, -0.5, 90), rng.uniform(1, 4, 70)]))[:, None]
    Y = np.sin(2 * X) + 0.2 * rng.standard_normal(X.shape)
    Xnew = np.linspace(-6, 6, 481)[:, None]
    exact = gpflow.models.GPR((X, Y), kernel(), noise_variance=NOISE)
    sod = gpflow_tight.SoD(
        (X, Y), kernel(), noise_variance=NOISE, active_set_size=ACTIVE, selection="entropy"
    )
    committees = {
        rule: gpflow_tight.BCM(
            (X, Y), kernel(), partition=EXPERTS, noise_variance=NOISE, combination=rule
        )
        for rule in ("bcm", "rbcm", "gpoe")
    }
    names = {"bcm": "BCM", "rbcm": "robust BCM", "gpoe": "generalised PoE"}
    reference = [t.numpy()[:, 0] for t in exact.predict_f(Xnew)]

    fig, axes = plt.subplots(2, 2, figsize=(10, 6.4), sharex=True, sharey=True)
    panels = [("SoD", sod)] + [(names[rule], model) for rule, model in committees.items()]
    print(f"{len(X)} points, {EXPERTS} k-means experts, SoD on {ACTIVE} rows")
    for ax, (name, model) in zip(axes.flat, panels):
        mean, var = (t.numpy()[:, 0] for t in model.predict_f(Xnew))
        for (m, v), style in ((reference, dict(color="0.4", lw=1.0)), ((mean, var), {})):
            sd = np.sqrt(np.maximum(v, 0.0))
            line = ax.plot(Xnew, m, **style)[0]
            ax.fill_between(Xnew[:, 0], m - 2 * sd, m + 2 * sd, color=line.get_color(), alpha=0.15)
        if name == "SoD":
            rows = sod.active_set
            ax.plot(X, Y, "k.", ms=2)
            ax.plot(X[rows], Y[rows], "o", mfc="none", mec="C3", ms=6, label="active set")
            ax.legend(loc="lower left", fontsize=8)
        else:  # the data coloured by expert
            for k, part in enumerate(model.partition):
                ax.plot(X[part], Y[part], ".", color=f"C{k + 2}", ms=2.5)
        gap = np.abs(Xnew[:, 0] - 0.25) < 0.5
        far = np.abs(Xnew[:, 0]) > 5.5
        print(
            f"{name}: max |mean - exact| {np.max(np.abs(mean - reference[0])):.3f}; variance "
            f"in the gap {np.mean(var[gap]):.3f} (exact {np.mean(reference[1][gap]):.3f}), "
            f"far from the data {np.mean(var[far]):.3f} (prior 1.0)"
        )
        detail = f"{ACTIVE} active rows" if name == "SoD" else f"{EXPERTS} experts (data colours)"
        ax.set_title(f"{name}, {detail} (grey: exact GP)", fontsize=10)
        ax.set_ylim(-3, 3)
    for ax in axes[1]:
        ax.set_xlabel("x")
    for ax in axes[:, 0]:
        ax.set_ylabel("f, mean ± 2 sd")
    fig.tight_layout()
    fig.savefig(OUT, dpi=100)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
