"""
Paper §6.5 / Fig. 5: BayesianGPLVM vs TightBayesianGPLVM (TV-BGPLVM) on the oil flow data.

Runs ``notebooks/gplvm_oil_flow.pct.py`` on the full data (1000 rows; GPFLOW_CI must be unset),
saves its three figures and writes the numbers it computes, beside the paper's claim.

Run from the repository root: ``.venv/bin/python benchmarks/gplvm_oil_flow.py``.
``--latent-dims 5 2`` (default) runs it with Q = 5 (the notebook's value) and Q = 2.
Writes ``benchmarks/results/gplvm_oil_flow.md`` and
``gplvm_oil_flow_{traces,latent,minibatch}_q<Q>.png``.
"""

import argparse
import os
import time
from pathlib import Path

from common import RESULTS_DIR, header, markdown_table, setup, write_result

setup()

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "gplvm_oil_flow.pct.py"
FIGURES = ["traces", "latent", "minibatch"]
PAPER = {"BayesianGPLVM": -5.2, "TightBayesianGPLVM": -5.5}
COLLAPSED = ["BayesianGPLVM", "TightBayesianGPLVM", "TightBayesianGPLVM (warm start)"]


def run_notebook(latent_dim: int) -> tuple[dict, float, list[str]]:
    """
    The notebook's ``results`` with ``LATENT_DIM = latent_dim``, its wall time and the figure
    files its ``plt.show()`` calls wrote.
    """
    saved: list[str] = []

    def show(*args: object, **kwargs: object) -> None:
        figure = plt.gcf()
        stem = FIGURES[len(saved)] if len(saved) < len(FIGURES) else f"extra_{len(saved)}"
        name = f"gplvm_oil_flow_{stem}_q{latent_dim}.png"
        figure.savefig(RESULTS_DIR / name, dpi=100)
        print(f"wrote {RESULTS_DIR / name}")
        saved.append(name)
        plt.close(figure)

    plt.show = show  # type: ignore[assignment]
    source = NOTEBOOK.read_text()
    assert source.count("\nLATENT_DIM = 5\n") == 1, "the notebook no longer sets LATENT_DIM = 5"
    source = source.replace("\nLATENT_DIM = 5\n", f"\nLATENT_DIM = {latent_dim}\n")
    namespace: dict = {"__name__": "__main__", "__file__": str(NOTEBOOK)}
    start = time.perf_counter()
    exec(compile(source, str(NOTEBOOK), "exec"), namespace)
    return namespace["results"], time.perf_counter() - start, saved


def protocol(runs: list[tuple[dict, float, list[str]]]) -> list[str]:
    r = runs[0][0]
    dims = " and ".join(str(run["latent_dim"]) for run, _, _ in runs)
    return [
        f"Data: {r['data']}, Y {r['num_data']} x 12 raw (not standardised), labels = 3 flow "
        "regimes.",
        f"Both collapsed models from the same initial values: Q = {dims} latent dimensions "
        f"(one run each), SE-ARD kernel (variance 1, lengthscales 1), M = {r['num_inducing']} "
        "inducing inputs (a random subset of the initial latent means, seed 0), latent means "
        "= PCA projections scaled to unit variance, latent variances 0.1, noise variance 0.01, "
        "prior N(0, I). All of these are trained. One initialisation per Q (no repeats).",
        "Optimiser: L-BFGS-B (`gpflow.optimizers.Scipy` through `gpflow_tight.training."
        f"fit_scipy`), maxiter = {r['maxiter']}, scipy's default convergence tests; the loss "
        "(-ELBO) is recorded after every iteration.",
        "'warm start': TightBayesianGPLVM started from BayesianGPLVM's final parameters, same "
        "optimiser, to separate the bound from the local optimum the optimiser reaches.",
        "Bounds at the final parameters: BayesianGPLVM's (m_n = 1, computed as "
        "`TightBayesianGPLVM(relaxation='none')`), the analytic TV-BGPLVM bound, and the paper's "
        "m_n(x_n) (`relaxation='sampled'`, one Monte Carlo estimate with 200 samples of each "
        "q(x_n)).",
        "1-NN: leave-one-out nearest-neighbour error of the flow regime from the latent means, "
        "(i) all Q dimensions divided by the kernel's lengthscales, (ii) the two dimensions with "
        "the shortest lengthscales (the ones plotted), unscaled.",
        "MinibatchBayesianGPLVM (tight=True, whiten=True): same initial values, Adam "
        f"(learning rate {r['minibatch_settings']['learning_rate']}) for {r['minibatch_steps']} "
        f"steps on minibatches of {r['minibatch_settings']['batch_size']} rows "
        "(`gpflow_tight.training.fit_adam`); its ELBO is then evaluated on all rows.",
        "Paper claim (spec/tight.md §6; Bui, Ashman & Turner 2025, §6.5, Fig. 5): TV-BGPLVM "
        'reaches a lower final negative ELBO, "roughly -5.5 versus -5.2"; the normalisation is '
        "not stated, nor are Q, M or the initialisation. -ELBO/N (per data point) is the "
        "normalisation that gives numbers of that size here; -ELBO/(NP) is given too.",
        "Times are wall-clock seconds on 2 cores shared with other jobs: compare them only "
        "within a run, and loosely.",
    ]


def section(r: dict, wall: float, figures: list[str]) -> str:
    n = r["num_data"]
    own, bounds, seconds = r["own_elbo"], r["bounds"], r["seconds"]
    main_rows = []
    for name in COLLAPSED:
        paper = f"{PAPER[name]:.1f}" if name in PAPER else "-"
        main_rows.append(
            [
                name,
                f"{own[name]:.1f}",
                f"**{-own[name] / n:.3f}**",
                f"{-own[name] / (12 * n):.4f}",
                paper,
                r["iterations"][name],
                f"{seconds[name]:.0f}",
            ]
        )
    mb = r["minibatch_elbo"]
    main_rows.append(
        [
            "MinibatchBayesianGPLVM (Adam)",
            f"{mb:.1f}",
            f"**{-mb / n:.3f}**",
            f"{-mb / (12 * n):.4f}",
            "-",
            f"{r['minibatch_steps']} Adam steps",
            f"{seconds['MinibatchBayesianGPLVM']:.0f}",
        ]
    )
    main = markdown_table(
        [
            "model (own objective)",
            "final ELBO",
            "-ELBO/N",
            "-ELBO/(NP)",
            "paper Fig. 5 (final -ELBO, normalisation not stated)",
            "iterations",
            "train s",
        ],
        main_rows,
    )
    bound_table = markdown_table(
        [
            "parameters of",
            "BayesianGPLVM bound (m_n = 1)",
            "TV analytic",
            "TV paper's m_n(x_n), MC",
            "standard <= analytic",
        ],
        [
            [
                name,
                f"{bounds[name]['none']:.1f}",
                f"{bounds[name]['analytic']:.1f}",
                f"{bounds[name]['sampled']:.1f}",
                "yes" if bounds[name]["none"] <= bounds[name]["analytic"] else "**NO**",
            ]
            for name in COLLAPSED
        ],
    )
    nn_table = markdown_table(
        ["latent means of", "1-NN error, all Q dims ARD-scaled", "1-NN error, 2 plotted dims"],
        [[name, f"{e[0]:.3f}", f"{e[1]:.3f}"] for name, e in r["nn_errors"].items()],
    )
    fitted_rows = [
        [
            name,
            ", ".join(f"{v:.2f}" for v in r["lengthscales"][name]),
            f"{r['noise_variance'][name]:.5f}",
        ]
        for name in COLLAPSED
    ]
    fitted_rows.append(
        [
            "MinibatchBayesianGPLVM",
            ", ".join(f"{v:.2f}" for v in r["minibatch_lengthscales"]),
            f"{r['minibatch_noise_variance']:.5f}",
        ]
    )
    fitted = markdown_table(["model", "lengthscales", "noise variance"], fitted_rows)
    gap = (own["TightBayesianGPLVM"] - own["BayesianGPLVM"]) / n
    bound_gain = (bounds["BayesianGPLVM"]["analytic"] - bounds["BayesianGPLVM"]["none"]) / n
    cross = bounds["TightBayesianGPLVM"]["none"] - own["BayesianGPLVM"]
    reading = [
        f"- Cold start, same settings: TV-BGPLVM's final ELBO is "
        f"{'higher' if gap > 0 else 'lower'} than BayesianGPLVM's by {abs(gap):.3f} nats per "
        "data point (paper: about 0.3 higher).",
        f"- The bound alone, at fixed parameters: at BayesianGPLVM's final parameters the "
        f"analytic tight bound is {bound_gain:.4f} nats per point above the standard one.",
        "- Where the optimiser ends: TightBayesianGPLVM's final parameters score "
        f"{bounds['TightBayesianGPLVM']['none']:.1f} under BayesianGPLVM's own bound, "
        f"{abs(cross):.1f} {'above' if cross > 0 else 'below'} BayesianGPLVM's final "
        f"{own['BayesianGPLVM']:.1f}: the two runs reached different local optima.",
        "- Warm start from BayesianGPLVM's final parameters: TV-BGPLVM ends at -ELBO/N "
        f"{-own['TightBayesianGPLVM (warm start)'] / n:.3f} after "
        f"{r['iterations']['TightBayesianGPLVM (warm start)']} iterations.",
    ]
    return (
        f"\n## Q = {r['latent_dim']} (notebook run: {wall / 60:.1f} min)\n"
        + "\n### Final bounds, per data point, beside the paper\n\n"
        + main
        + "\n### Every bound at each model's final parameters\n\n"
        + bound_table
        + "\n### Nearest-neighbour classification error in latent space (leave-one-out)\n\n"
        + nn_table
        + "\n### Learned kernel and noise\n\n"
        + fitted
        + "\n### Reading\n\n"
        + "\n".join(reading)
        + "\n\n### Figures\n\n"
        + "\n\n".join(f"![{name}]({name})" for name in figures)
        + "\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--latent-dims", type=int, nargs="+", default=[5, 2], help="one notebook run per Q"
    )
    args = parser.parse_args()
    if os.environ.get("GPFLOW_CI") or "CI" in os.environ:
        raise SystemExit("Unset GPFLOW_CI and CI: this script runs the notebook in full.")
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    runs = [run_notebook(latent_dim) for latent_dim in args.latent_dims]
    title = "Bayesian GPLVM on oil flow: BayesianGPLVM vs TightBayesianGPLVM (paper §6.5)"
    text = header(title, protocol(runs)) + "".join(section(*run) for run in runs)
    write_result("gplvm_oil_flow.md", text)


if __name__ == "__main__":
    main()
