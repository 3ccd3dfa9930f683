"""
The figure of docs/solve.md, "ODVGP and ODGPR": Fernlund's (2022) Fig. 6.1 reproduced, SGPR vs
ODGPR vs SOLVE-GPR on Snelson's data with an SE kernel, M = 4, 6, 8 inducing points split as
(M_u, M_v) = (2, 2), (3, 3), (4, 4).

Protocol (thesis §6.1): the inducing inputs are drawn uniformly at random along the input
domain (the same draw for the three models of a row: SGPR takes the union, the orthogonal models
the first M_u points as Z_u and the rest as Z_v), then L-BFGS-B (``gpflow.optimizers.Scipy``)
maximises each model's collapsed bound over the inducing inputs, the kernel's variance and
lengthscale and the noise variance (the thesis does not say whether the noise was trained).
Each model trains on its own exact bound: SGPR's, ODGPR's L_OD and SOLVEGPR's L_SOLVE (the
package's defaults). With ``bound="thesis"`` (what the thesis trained) both orthogonal models
optimise exactly SGPR's objective on the union, so from the same start they end at SGPR's
inducing inputs and hyperparameters; the script evaluates that case too, from SGPR's optimum
split into (Z_u, Z_v), and prints its numbers (the figure shows the models' own bounds).

Run from the repository root (about a minute; needs Snelson's data, see gpflow_tight.datasets):

    .venv/bin/python docs/_static/solve/decoupled_snelson_figure.py [--seeds 5]

It writes decoupled_snelson.png beside this script and prints the numbers docs/solve.md quotes:
per row and model the final bound, the RMSE of the mean against the exact GP's (GPR with its own
maximum-likelihood hyperparameters), the mean ratio of the predictive standard deviation to the
exact GP's inside the data range, the number of local minima of the predictive standard
deviation inside the data range (where the bands "pinch"), and the learnt noise variance and
lengthscale, averaged over --seeds random starts (the figure shows the first).
"""

import argparse
from pathlib import Path

import gpflow
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import gpflow_tight  # noqa: E402
from gpflow_tight.datasets import load_snelson  # noqa: E402

OUT = Path(__file__).with_name("decoupled_snelson.png")
SPLITS = [(2, 2), (3, 3), (4, 4)]
MODELS = ["SGPR", "ODGPR", "SOLVE-GPR"]
MAXITER = 1000
STATISTICS = ("bound", "rmse_mean", "sd_ratio", "pinches", "noise", "lengthscale")


def kernel() -> gpflow.kernels.Kernel:
    return gpflow.kernels.SquaredExponential(variance=1.0, lengthscales=1.0)


def build(name: str, data, Z_u: np.ndarray, Z_v: np.ndarray, bound: str | None = None):
    if name == "SGPR":
        return gpflow.models.SGPR(data, kernel(), np.vstack([Z_u, Z_v]), noise_variance=0.1)
    cls = gpflow_tight.ODGPR if name == "ODGPR" else gpflow_tight.SOLVEGPR
    bound = bound or ("od" if name == "ODGPR" else "solve")
    return cls(data, kernel(), Z_u, Z_v, noise_variance=0.1, bound=bound)


def train(model) -> None:
    gpflow.optimizers.Scipy().minimize(
        model.training_loss,
        model.trainable_variables,
        compile=False,  # eager: nine small models, no tracing
        options={"maxiter": MAXITER},
    )


def thesis_protocol(name: str, data, sgpr, num_regular: int):
    """bound="thesis" from SGPR's optimum: the same objective, so the same end point."""
    Z = sgpr.inducing_variable.Z.numpy()
    model = build(name, data, Z[:num_regular], Z[num_regular:], bound="thesis")
    gpflow.utilities.multiple_assign(model.kernel, gpflow.utilities.parameter_dict(sgpr.kernel))
    model.likelihood.variance.assign(sgpr.likelihood.variance)
    return model


def summary(model, exact_mean, exact_sd, Xnew, inside) -> dict[str, float]:
    mean, var = (t.numpy()[:, 0] for t in model.predict_f(Xnew))
    sd = np.sqrt(np.maximum(var, 0.0))
    s = sd[inside]
    pinches = int(np.sum((s[1:-1] < s[:-2]) & (s[1:-1] < s[2:])))
    return {
        "bound": float(model.elbo().numpy()),
        "rmse_mean": float(np.sqrt(np.mean((mean - exact_mean)[inside] ** 2))),
        "sd_ratio": float(np.mean(s / exact_sd[inside])),
        "pinches": pinches,
        "noise": float(model.likelihood.variance.numpy()),
        "lengthscale": float(model.kernel.lengthscales.numpy()),
        "mean": mean,
        "sd": sd,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=1, help="random starts (figure: first)")
    args = parser.parse_args()

    X, Y = load_snelson()
    data = (X, Y)
    Xnew = np.linspace(X.min() - 1.0, X.max() + 1.0, 400)[:, None]
    inside = (Xnew[:, 0] >= X.min()) & (Xnew[:, 0] <= X.max())
    exact = gpflow.models.GPR(data, kernel(), noise_variance=0.1)
    train(exact)
    exact_mean, exact_var = (t.numpy()[:, 0] for t in exact.predict_f(Xnew))
    exact_sd = np.sqrt(exact_var)
    print(
        f"Snelson: N = {len(X)}; exact GP log p(y) = {exact.log_marginal_likelihood().numpy():.2f}"
    )

    fig, axes = plt.subplots(3, 3, figsize=(12, 8.4), sharex=True, sharey=True)
    results: dict[tuple, list[dict]] = {}
    for seed in range(args.seeds):
        rng = np.random.default_rng(seed)
        for row, (num_u, num_v) in enumerate(SPLITS):
            Z = rng.uniform(X.min(), X.max(), (num_u + num_v, 1))
            Z_u, Z_v = Z[:num_u], Z[num_u:]
            trained = {}
            for name in MODELS:
                model = build(name, data, Z_u, Z_v)
                train(model)
                trained[name] = model
                results.setdefault((row, name, "own"), []).append(
                    summary(model, exact_mean, exact_sd, Xnew, inside)
                )
            for name in MODELS[1:]:
                model = thesis_protocol(name, data, trained["SGPR"], num_u)
                results.setdefault((row, name, "thesis"), []).append(
                    summary(model, exact_mean, exact_sd, Xnew, inside)
                )
            if seed == 0:
                for col, name in enumerate(MODELS):
                    draw(axes[row, col], trained[name], name, X, Y, Xnew, exact_mean, exact_sd,
                         results[(row, name, "own")][0], num_u)  # fmt: skip

    for row, (num_u, num_v) in enumerate(SPLITS):
        print(f"\nM = {num_u + num_v}, (M_u, M_v) = ({num_u}, {num_v}); {args.seeds} start(s)")
        for protocol in ("own", "thesis"):
            for name in MODELS:
                runs = results.get((row, name, protocol))
                if not runs:
                    continue
                label = f"{name} ({'own bound' if protocol == 'own' else 'bound=thesis'})"
                stats = {k: np.mean([r[k] for r in runs]) for k in STATISTICS}
                print(
                    f"  {label:26s} bound {stats['bound']:8.2f}  mean RMSE vs exact "
                    f"{stats['rmse_mean']:.3f}  sd/exact sd {stats['sd_ratio']:.2f}  "
                    f"sd minima {stats['pinches']:.1f}  noise {stats['noise']:.3f}  "
                    f"lengthscale {stats['lengthscale']:.2f}"
                )
    for ax in axes[-1]:
        ax.set_xlabel("x")
    for ax in axes[:, 0]:
        ax.set_ylabel("f, mean ± 2 sd")
    fig.tight_layout()
    fig.savefig(OUT, dpi=90)
    print(f"wrote {OUT}")


def draw(ax, model, name, X, Y, Xnew, exact_mean, exact_sd, result, num_u) -> None:
    ax.plot(X, Y, "k.", ms=2, alpha=0.5)
    x = Xnew[:, 0]
    for mean, sd, style in ((exact_mean, exact_sd, dict(color="0.5", lw=0.8)),
                            (result["mean"], result["sd"], dict(color="C0", lw=1.2))):  # fmt: skip
        line = ax.plot(x, mean, **style)[0]
        ax.fill_between(x, mean - 2 * sd, mean + 2 * sd, color=line.get_color(), alpha=0.15)
    if name == "SGPR":
        Z = model.inducing_variable.Z.numpy()[:, 0]
        ax.plot(Z, np.full_like(Z, -2.9), "k+", ms=9, mew=1.5)
    else:
        sets = model.orthogonal_inducing_variable
        Z_u, Z_v = sets.regular.Z.numpy()[:, 0], sets.orthogonal.Z.numpy()[:, 0]
        ax.plot(Z_u, np.full_like(Z_u, -2.9), "k+", ms=9, mew=1.5)
        ax.plot(Z_v, np.full_like(Z_v, -2.9), "k^", ms=6)
    bound = {"SGPR": "SGPR", "ODGPR": "L_OD", "SOLVE-GPR": "L_SOLVE"}[name]
    ax.set_title(
        f"{name} (M_u = {num_u}): {bound} = {result['bound']:.1f}, {result['pinches']} sd minima",
        fontsize=9,
    )
    ax.set_ylim(-3.2, 3)


if __name__ == "__main__":
    main()
