"""
Paper §6.1: SGPR vs TightSGPR and SVGP vs TightSVGP on Snelson's 1-D data with M=5 inducing
points, all from the same initialisation.

Run from the repository root: ``.venv/bin/python benchmarks/snelson.py``.
Writes ``benchmarks/results/snelson.md`` and ``benchmarks/results/snelson_traces.png``.
"""

import argparse
import time
from dataclasses import dataclass

import numpy as np
from common import RESULTS_DIR, header, markdown_table, setup, write_result

setup()

import gpflow  # noqa: E402
import matplotlib  # noqa: E402
import tensorflow as tf  # noqa: E402
from gpflow.keras import tf_keras  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from gpflow_tight import TightSGPR, TightSVGP  # noqa: E402
from gpflow_tight.datasets import load_snelson  # noqa: E402
from gpflow_tight.training import fit_adam, fit_scipy  # noqa: E402

NUM_INDUCING = 5
INIT = dict(kernel_variance=1.0, lengthscale=1.0, noise_variance=1.0)
# The paper's §6.1 values (noise variance, kernel variance); see spec §7 on their labels.
PAPER = {"TightSGPR": (0.115, 0.107), "SGPR": (0.126, 0.087)}


@dataclass
class Fit:
    name: str
    model: gpflow.models.GPModel
    bounds: np.ndarray  # the bound (negative training loss) after each iteration
    seconds: float


def kernel() -> gpflow.kernels.Kernel:
    return gpflow.kernels.SquaredExponential(
        variance=INIT["kernel_variance"], lengthscales=INIT["lengthscale"]
    )


def full_batch_adam(
    model: gpflow.models.SVGP, X: np.ndarray, Y: np.ndarray, iterations: int, lr: float
) -> list[float]:
    """
    Adam on the whole data set in every step; the loss before each step. (`fit_adam` with
    ``batch_size=None`` is not full batch at the time of writing: its `minibatches` shuffles after
    ``repeat()``, so each "full" batch mixes two epochs and repeats some points.)
    """
    optimizer = tf_keras.optimizers.Adam(lr)
    variables = model.trainable_variables
    data = (tf.constant(X), tf.constant(Y))

    @tf.function
    def step() -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = model.training_loss(data)
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    return [float(step()) for _ in range(iterations)]


def train_all(
    X: np.ndarray,
    Y: np.ndarray,
    Z: np.ndarray,
    maxiter: int,
    adam_iterations: int,
    lr: float,
    package_fit_adam: bool,
) -> list[Fit]:
    fits = []
    for cls in (gpflow.models.SGPR, TightSGPR):
        model = cls((X, Y), kernel(), Z.copy(), noise_variance=INIT["noise_variance"])
        start = time.perf_counter()
        history = fit_scipy(model, maxiter=maxiter, progress=False)
        fits.append(Fit(cls.__name__, model, -np.asarray(history), time.perf_counter() - start))
    for cls in (gpflow.models.SVGP, TightSVGP):
        model = cls(
            kernel(),
            gpflow.likelihoods.Gaussian(variance=INIT["noise_variance"]),
            Z.copy(),
            num_data=len(X),
            whiten=True,
        )
        start = time.perf_counter()
        if package_fit_adam:
            history = fit_adam(
                model, (X, Y), iterations=adam_iterations, learning_rate=lr, progress=False
            )
        else:
            history = full_batch_adam(model, X, Y, adam_iterations, lr)
        fits.append(Fit(cls.__name__, model, -np.asarray(history), time.perf_counter() - start))
    for fit in fits:
        print(f"{fit.name}: {len(fit.bounds)} iterations, final bound {fit.bounds[-1]:.4f}")
    return fits


def final_bound(fit: Fit, X: np.ndarray, Y: np.ndarray) -> float:
    """The bound at the final parameters (the SVGP traces record the loss before each step)."""
    if isinstance(fit.model, gpflow.models.SVGP):
        return float(fit.model.elbo((X, Y)))
    return float(fit.model.elbo())


def hyperparameters(model: gpflow.models.GPModel) -> tuple[float, float, float]:
    """Noise variance, kernel variance, lengthscale."""
    return (
        float(model.likelihood.variance.numpy()),
        float(model.kernel.variance.numpy()),
        float(model.kernel.lengthscales.numpy()),
    )


def gpr_lml(model: gpflow.models.GPModel, X: np.ndarray, Y: np.ndarray) -> float:
    """Exact log marginal likelihood at the model's kernel and noise hyperparameters."""
    noise, variance, lengthscale = hyperparameters(model)
    k = gpflow.kernels.SquaredExponential(variance=variance, lengthscales=lengthscale)
    return float(gpflow.models.GPR((X, Y), k, noise_variance=noise).log_marginal_likelihood())


def collapsed_bounds_at(model: gpflow.models.GPModel, X: np.ndarray, Y: np.ndarray) -> dict:
    """SGPR and TightSGPR bounds and the exact LML at the model's hyperparameters and Z."""
    noise, variance, lengthscale = hyperparameters(model)
    Z = model.inducing_variable.Z.numpy()
    out = {}
    for cls in (gpflow.models.SGPR, TightSGPR):
        k = gpflow.kernels.SquaredExponential(variance=variance, lengthscales=lengthscale)
        out[cls.__name__] = float(cls((X, Y), k, Z.copy(), noise_variance=noise).elbo())
    out["GPR"] = gpr_lml(model, X, Y)
    return out


def plot(fits: list[Fit], X: np.ndarray, Y: np.ndarray, path: str) -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8))
    finals = [final_bound(fit, X, Y) for fit in fits]
    spread = max(max(finals) - min(finals), 2.0)
    styles = [("C0", "-", 1.8), ("C1", "-", 1.8), ("C0", "--", 0.7), ("C1", "--", 0.7)]
    for fit, final, (colour, line, width) in zip(fits, finals, styles, strict=True):
        iterations = np.arange(1, len(fit.bounds) + 1)
        left.plot(
            iterations,
            fit.bounds,
            color=colour,
            linestyle=line,
            linewidth=width,
            label=f"{fit.name} (final {final:.2f})",
        )
    left.set_xscale("log")
    top = max(float(np.max(fit.bounds)) for fit in fits)
    left.set_ylim(min(finals) - 15 * spread, top + 0.5 * spread)
    left.set_xlabel("iteration (L-BFGS for SGPR/TightSGPR, Adam for SVGP/TightSVGP)")
    left.set_ylabel("bound = -training loss (y axis clipped below)")
    left.set_title("Snelson, M=5: bound traces")
    left.legend(loc="lower right")
    left.grid(alpha=0.3)

    grid = np.linspace(X.min() - 1.0, X.max() + 1.0, 400)[:, None]
    right.plot(X, Y, ".", color="0.6", ms=4, label="data")
    for fit, colour in zip(fits[:2], ["C0", "C1"], strict=True):
        mean, var_f = (t.numpy()[:, 0] for t in fit.model.predict_f(grid))
        _, var_y = (t.numpy()[:, 0] for t in fit.model.predict_y(grid))
        x = grid[:, 0]
        right.plot(x, mean, color=colour, label=f"{fit.name} mean")
        right.fill_between(
            x, mean - 2 * np.sqrt(var_y), mean + 2 * np.sqrt(var_y), color=colour, alpha=0.12
        )
        right.fill_between(
            x, mean - 2 * np.sqrt(var_f), mean + 2 * np.sqrt(var_f), color=colour, alpha=0.25
        )
        Z = fit.model.inducing_variable.Z.numpy()[:, 0]
        right.plot(
            Z,
            np.full_like(Z, Y.min() - 0.6),
            "^",
            color=colour,
            ms=8,
            label=f"{fit.name} inducing inputs",
        )
    right.set_title("fits: mean, ±2 sd of f (dark) and of y (light)")
    right.set_xlabel("x")
    right.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def report(
    fits: list[Fit],
    X: np.ndarray,
    Y: np.ndarray,
    Z0: np.ndarray,
    args: argparse.Namespace,
    seconds: float,
) -> str:
    protocol = [
        f"Data: Snelson & Ghahramani 1-D, {len(X)} training points (`load_snelson`), raw scale.",
        f"M={NUM_INDUCING} inducing inputs, initialised evenly spaced over the data range "
        f"({', '.join(f'{z:.3f}' for z in Z0[:, 0])}) and trained, the same for all four models.",
        f"SE kernel initialised at variance {INIT['kernel_variance']}, lengthscale "
        f"{INIT['lengthscale']}; Gaussian noise variance initialised at "
        f"{INIT['noise_variance']}; no mean function.",
        f"SGPR and TightSGPR: `fit_scipy` (L-BFGS-B, `gpflow.optimizers.Scipy`), maxiter "
        f"{args.maxiter}; the trace is the bound after each L-BFGS iteration.",
        f"SVGP and TightSVGP (whiten=True, full q_sqrt, q(u) initialised at the prior; "
        f"TightSVGP relaxation='beta', beta initialised at the noise variance): Adam "
        f"(`tf_keras`), {args.adam_iterations} iterations, learning rate {args.lr}, "
        + (
            "with `gpflow_tight.training.fit_adam(batch_size=None)` (whose batches are not "
            "exactly the full data set, see the notes)"
            if args.package_fit_adam
            else "on the full data set in every step (a 10-line loop in this script, because "
            "`fit_adam(batch_size=None)` does not give exact full batches, see the notes)"
        )
        + "; the trace is the loss at each step (before the update).",
        "'final bound' is the bound evaluated at the final parameters. 'GPR log p(y)' is the "
        "exact log marginal likelihood (`gpflow.models.GPR`) at that model's learned kernel and "
        "noise hyperparameters.",
        f"Total run time {seconds:.0f} s.",
    ]
    rows = []
    for fit in fits:
        noise, variance, lengthscale = hyperparameters(fit.model)
        bound = final_bound(fit, X, Y)
        lml = gpr_lml(fit.model, X, Y)
        extra = ""
        if isinstance(fit.model, TightSVGP):
            extra = f"beta = {float(fit.model.beta.numpy()[0]):.4f}"
        paper = PAPER.get(fit.name)
        rows.append(
            [
                fit.name,
                len(fit.bounds),
                f"{fit.seconds:.1f}",
                f"{bound:.4f}",
                f"{lml:.4f}",
                f"{lml - bound:.4f}",
                f"{noise:.4f}",
                f"{variance:.4f}",
                f"{lengthscale:.4f}",
                f"{paper[0]} / {paper[1]}" if paper else "–",
                extra,
            ]
        )
    table = markdown_table(
        [
            "model",
            "iterations",
            "train s",
            "final bound",
            "GPR log p(y)",
            "gap",
            "noise var",
            "kernel var",
            "lengthscale",
            "paper noise / kernel var",
            "other",
        ],
        rows,
    )
    z_lines = [
        f"- {fit.name}: "
        + ", ".join(f"{z:.3f}" for z in np.sort(fit.model.inducing_variable.Z.numpy()[:, 0]))
        for fit in fits
    ]

    tight = next(fit for fit in fits if fit.name == "TightSGPR")
    at_tight = collapsed_bounds_at(tight.model, X, Y)
    holds = at_tight["SGPR"] <= at_tight["TightSGPR"] <= at_tight["GPR"]
    check = [
        "## Ordering check at TightSGPR's learned hyperparameters and inducing inputs",
        "",
        markdown_table(
            ["SGPR bound", "TightSGPR bound", "GPR log p(y)"],
            [[f"{at_tight['SGPR']:.4f}", f"{at_tight['TightSGPR']:.4f}", f"{at_tight['GPR']:.4f}"]],
        ),
        f"SGPR <= TightSGPR <= GPR: **{'holds' if holds else 'VIOLATED'}**.",
        "",
    ]
    sgpr = next(fit for fit in fits if fit.name == "SGPR")
    at_sgpr = collapsed_bounds_at(sgpr.model, X, Y)
    check += [
        "At SGPR's learned hyperparameters and inducing inputs: "
        f"SGPR {at_sgpr['SGPR']:.4f}, TightSGPR {at_sgpr['TightSGPR']:.4f}, "
        f"GPR {at_sgpr['GPR']:.4f} (ordering "
        f"{'holds' if at_sgpr['SGPR'] <= at_sgpr['TightSGPR'] <= at_sgpr['GPR'] else 'VIOLATED'}).",
        "",
    ]
    agreement, all_agree = [], True
    for fit in fits[:2]:
        noise, variance, _ = hyperparameters(fit.model)
        paper_noise, paper_variance = PAPER[fit.name]
        agree = abs(noise - paper_noise) < 0.0015 and abs(variance - paper_variance) < 0.0015
        all_agree = all_agree and agree
        verdict = "agree to the paper's 3 decimals" if agree else "differ"
        agreement.append(
            f"{fit.name} noise {noise:.4f} vs {paper_noise}, kernel variance {variance:.4f} vs "
            f"{paper_variance}: {verdict}"
        )
    conclusion = (
        "So the paper's values and labels (noise variance, kernel variance; not swapped) are "
        "reproduced with this initialisation."
        if all_agree
        else "The measured values differ from the paper's with this initialisation."
    )
    finals = {fit.name: final_bound(fit, X, Y) for fit in fits}
    uncollapsed_gaps = (
        finals["SVGP"] - finals["SGPR"],
        finals["TightSVGP"] - finals["TightSGPR"],
    )
    notes = [
        "## Notes",
        "",
        "- The paper (§6.1) reports T-SGPR noise 0.115 and kernel variance 0.107, SGPR 0.126 and "
        "0.087, without stating the initialisation or the optimiser; the spec (§7) warns that "
        "these labels may be swapped or mislabelled. Measured here: "
        + "; ".join(agreement)
        + ". "
        + conclusion,
        "- `gpflow_tight.training.fit_adam` with `batch_size=None` is documented as 'the full "
        "data in every step', but `minibatches` applies `shuffle` after `repeat()`, so a batch of "
        "N points straddles two epochs: some points appear twice and others not at all (about "
        "70-77% distinct points per step on these 200 points). Its traces are then noisy "
        "estimates, not the full-batch bound. Pass `--package-fit-adam` to use it anyway.",
        "- The SVGP/TightSVGP rows are Adam runs of fixed length; their final bounds differ from "
        f"the collapsed optima by {uncollapsed_gaps[0]:+.4f} (SVGP - SGPR) and "
        f"{uncollapsed_gaps[1]:+.4f} (TightSVGP - TightSGPR). The collapsed bounds are the "
        "maxima over q(u) (and, for TightSGPR, over beta, whose optimum is the noise variance), "
        "so a gap near 0 means Adam reached the same optimum.",
        "",
        "![traces and fits](snelson_traces.png)",
        "",
    ]
    return (
        header("Snelson 1-D, M=5 (paper §6.1)", protocol)
        + "\n## Results\n\n"
        + table
        + "\nLearned inducing inputs (sorted):\n\n"
        + "\n".join(z_lines)
        + "\n\n"
        + "\n".join(check)
        + "\n".join(notes)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--maxiter", type=int, default=2000, help="L-BFGS iterations")
    parser.add_argument("--adam-iterations", type=int, default=5000)
    parser.add_argument("--lr", type=float, default=0.01, help="Adam learning rate")
    parser.add_argument(
        "--package-fit-adam",
        action="store_true",
        help="train SVGP/TightSVGP with gpflow_tight.training.fit_adam instead of exact full batch",
    )
    args = parser.parse_args()

    start = time.perf_counter()
    X, Y = load_snelson()
    Z0 = np.linspace(X.min(), X.max(), NUM_INDUCING)[:, None]
    fits = train_all(X, Y, Z0, args.maxiter, args.adam_iterations, args.lr, args.package_fit_adam)
    plot(fits, X, Y, str(RESULTS_DIR / "snelson_traces.png"))
    write_result("snelson.md", report(fits, X, Y, Z0, args, time.perf_counter() - start))


if __name__ == "__main__":
    main()
