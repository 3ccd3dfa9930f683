"""
The demo behind ``make demo``: SGPR vs TightSGPR and SVGP vs TightSVGP on Snelson's 1-D data
(or generated data of the same kind), a results table and a plot of the four fits.
"""

import time
from dataclasses import dataclass
from pathlib import Path

import gpflow
import numpy as np

from .datasets import RegressionSplit, snelson_or_generated
from .models import TightSGPR, TightSVGP
from .training import fit_adam, fit_scipy

__all__ = ["DemoResult", "run_demo", "format_table", "plot_fits"]


@dataclass
class DemoResult:
    name: str
    model: gpflow.models.GPModel
    bound: float
    seconds: float
    rmse: float
    nlpd: float


def _kernel() -> gpflow.kernels.Kernel:
    return gpflow.kernels.SquaredExponential(variance=1.0, lengthscales=1.0)


def run_demo(
    split: RegressionSplit,
    num_inducing: int = 6,
    scipy_iterations: int = 500,
    adam_iterations: int = 3000,
    batch_size: int = 64,
    progress: bool = True,
) -> list[DemoResult]:
    """Train the four models from the same initialisation; collapsed ones with L-BFGS."""
    data = (split.X_train, split.Y_train)
    Z = np.linspace(split.X_train.min(), split.X_train.max(), num_inducing)[:, None]
    num_data = len(split.X_train)
    models: dict[str, gpflow.models.GPModel] = {
        "SGPR": gpflow.models.SGPR(data, _kernel(), Z.copy(), noise_variance=0.5),
        "TightSGPR": TightSGPR(data, _kernel(), Z.copy(), noise_variance=0.5),
        "SVGP": gpflow.models.SVGP(
            _kernel(), gpflow.likelihoods.Gaussian(0.5), Z.copy(), num_data=num_data
        ),
        "TightSVGP": TightSVGP(
            _kernel(), gpflow.likelihoods.Gaussian(0.5), Z.copy(), num_data=num_data
        ),
    }
    results = []
    for name, model in models.items():
        start = time.perf_counter()
        if name.endswith("SGPR"):
            fit_scipy(model, maxiter=scipy_iterations, progress=progress)
            bound = float(model.elbo())
        else:
            fit_adam(
                model,
                data,
                iterations=adam_iterations,
                batch_size=batch_size,
                learning_rate=0.02,
                progress=progress,
            )
            bound = float(model.elbo(data))
        seconds = time.perf_counter() - start
        mean, _ = model.predict_y(split.X_test)
        rmse = float(np.sqrt(np.mean((mean.numpy() - split.Y_test) ** 2)))
        nlpd = -float(np.mean(model.predict_log_density((split.X_test, split.Y_test))))
        results.append(DemoResult(name, model, bound, seconds, rmse, nlpd))
    return results


def format_table(results: list[DemoResult]) -> str:
    """A markdown table of the final bound, learned hyperparameters and test metrics."""
    lines = [
        "| model | final bound | noise variance | kernel variance | test RMSE | test NLPD | s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        noise = float(r.model.likelihood.variance.numpy())
        kernel_variance = float(r.model.kernel.variance.numpy())
        lines.append(
            f"| {r.name} | {r.bound:.3f} | {noise:.4f} | {kernel_variance:.4f} | "
            f"{r.rmse:.4f} | {r.nlpd:.4f} | {r.seconds:.1f} |"
        )
    return "\n".join(lines)


def plot_fits(results: list[DemoResult], split: RegressionSplit, path: Path) -> None:
    """A 2 x 2 figure of the four fits with their 95% predictive bands and inducing inputs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lo = min(split.X_train.min(), split.X_test.min())
    hi = max(split.X_train.max(), split.X_test.max())
    grid = np.linspace(lo - 0.5, hi + 0.5, 400)[:, None]
    figure, axes = plt.subplots(2, 2, figsize=(11, 7), sharex=True, sharey=True)
    for axis, r in zip(axes.ravel(), results):
        mean, var = (t.numpy()[:, 0] for t in r.model.predict_y(grid))
        f_mean, f_var = (t.numpy()[:, 0] for t in r.model.predict_f(grid))
        band = 1.96 * np.sqrt(var)
        axis.fill_between(grid[:, 0], mean - band, mean + band, color="C0", alpha=0.2)
        f_band = 1.96 * np.sqrt(f_var)
        axis.fill_between(grid[:, 0], f_mean - f_band, f_mean + f_band, color="C0", alpha=0.3)
        axis.plot(grid[:, 0], mean, "C0")
        axis.plot(split.X_train, split.Y_train, "k.", ms=3, label="train")
        axis.plot(split.X_test, split.Y_test, "rx", ms=4, label="test")
        Z = r.model.inducing_variable.Z.numpy()
        axis.plot(Z[:, 0], np.full(len(Z), axis.get_ylim()[0]), "k^", ms=8, label="Z")
        axis.set_title(f"{r.name}: bound {r.bound:.2f}, test NLPD {r.nlpd:.3f}")
    axes[0, 0].legend(loc="upper right", fontsize=8)
    figure.suptitle(split.name)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(
    output: Path, data_dir: str | None = None, quick: bool = False, progress: bool = True
) -> str:
    split = snelson_or_generated(data_dir)
    scale = 10 if quick else 1
    results = run_demo(
        split,
        scipy_iterations=500 // scale,
        adam_iterations=3000 // scale,
        progress=progress,
    )
    table = format_table(results)
    plot_path = output / "demo_fits.png"
    plot_fits(results, split, plot_path)
    report = (
        f"Data: {split.name}; {len(split.X_train)} training and {len(split.X_test)} test points, "
        f"{results[0].model.inducing_variable.num_inducing} inducing points.\n"
        "Collapsed models: L-BFGS; uncollapsed: Adam with minibatches of 64. Bounds are on the "
        "training data (higher is better); NLPD per test point (lower is better).\n\n"
        f"{table}\n\nPlot written to {plot_path}"
    )
    (output / "demo_results.md").write_text(report + "\n")
    return report
