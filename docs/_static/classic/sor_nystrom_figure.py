"""
The figure of docs/classic.md, "SoR and the Nyström GP": DTC, SoR, the Nyström GP and the exact
GP on the same 1-D data with the same hyperparameters and inducing inputs, away from the
inducing inputs. Run from the repository root (a few seconds, no data needed):

    .venv/bin/python docs/_static/classic/sor_nystrom_figure.py

It writes sor_nystrom.png beside this script and prints the numbers the page quotes.
"""

import warnings
from pathlib import Path

import gpflow
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import gpflow_tight  # noqa: E402

OUT = Path(__file__).with_name("sor_nystrom.png")
VARIANCE, LENGTHSCALE, NOISE = 1.0, 0.8, 0.01


def main() -> None:
    rng = np.random.default_rng(3)
    X = np.sort(rng.uniform(-3, 3, (50, 1)), axis=0)
    Y = np.sin(2 * X) + 0.1 * rng.standard_normal(X.shape)
    Z = X[3::6].copy()  # 8 of the data points, as Williams & Seeger choose them
    Xnew = np.linspace(-7, 7, 561)[:, None]

    def kernel() -> gpflow.kernels.Kernel:
        return gpflow.kernels.SquaredExponential(variance=VARIANCE, lengthscales=LENGTHSCALE)

    models = {
        "DTC": gpflow_tight.DTC((X, Y), kernel(), Z, noise_variance=NOISE),
        "SoR": gpflow_tight.SoR((X, Y), kernel(), Z, noise_variance=NOISE),
        "Nyström": gpflow_tight.Nystrom((X, Y), kernel(), Z, noise_variance=NOISE),
        "exact GP": gpflow.models.GPR((X, Y), kernel(), noise_variance=NOISE),
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gpflow_tight.NegativeVarianceWarning)  # shown below
        predictions = {name: m.predict_f(Xnew) for name, m in models.items()}
    colours = {"DTC": "C0", "SoR": "C3", "Nyström": "C2", "exact GP": "0.3"}

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6.2), sharex=True)
    for name in ("exact GP", "DTC", "SoR"):
        mean, var = (t.numpy()[:, 0] for t in predictions[name])
        sd = np.sqrt(np.maximum(var, 0.0))
        style = dict(color=colours[name], lw=1.2 if name != "exact GP" else 1.0)
        top.plot(Xnew, mean, **style, label=f"{name} mean ± 2 sd")
        top.fill_between(Xnew[:, 0], mean - 2 * sd, mean + 2 * sd, color=colours[name], alpha=0.15)
    top.plot(X, Y, "k.", ms=3, label="data")
    top.plot(Z, np.full(len(Z), -2.6), "k^", ms=6, label="inducing inputs")
    top.set_ylim(-2.8, 2.8)
    top.set_ylabel("f")
    top.legend(loc="upper left", fontsize=8, ncol=3)
    top.set_title("Same objective, same q(u): DTC's and SoR's predictive differ by K** − Q**")

    for name in ("exact GP", "DTC", "SoR", "Nyström"):
        var = predictions[name][1].numpy()[:, 0]
        bottom.plot(Xnew, var, color=colours[name], lw=1.2, label=name)
    bottom.axhline(0.0, color="k", lw=0.6)
    bottom.axhline(VARIANCE, color="k", lw=0.6, ls=":", label="prior variance")
    bottom.plot(Z, np.full(len(Z), -0.45), "k^", ms=6)
    bottom.set_ylim(-0.55, 1.15)
    lowest = predictions["Nyström"][1].numpy().min()
    bottom.annotate(
        f"Nyström: negative at {np.sum(predictions['Nyström'][1].numpy() < 0)} of {len(Xnew)}"
        f" inputs, down to {lowest:.3g}",
        (0.99, 0.45),
        xycoords="axes fraction",
        ha="right",
        fontsize=8,
        color=colours["Nyström"],
    )
    bottom.set_xlabel("x")
    bottom.set_ylabel("predictive variance of f")
    bottom.legend(loc="upper left", fontsize=8, ncol=5)
    fig.tight_layout()
    fig.savefig(OUT, dpi=110)

    far = np.abs(Xnew[:, 0]) > 5
    for name in ("DTC", "SoR", "Nyström", "exact GP"):
        var = predictions[name][1].numpy()[:, 0]
        print(
            f"{name:9s} variance at |x| > 5: max {var[far].max():.2e}, min {var[far].min():.2e};"
            f" smallest over [-7, 7]: {var.min():.3g}; negative at {np.sum(var < 0)} of"
            f" {len(var)} inputs"
        )
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
