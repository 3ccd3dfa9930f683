"""
Power EP paper (Bui, Yan & Turner 2017) §4.2, UCI regression, scaled down to a 2-core machine:
`PowerEPSGP` with alpha in {0 (VFE), 0.1, 0.25, 0.5, 0.75, 1 (FITC)} on eight UCI sets, several
numbers of pseudo-points M and train/test splits; SMSE, SMLL and the final objective, the paper's
pairwise "A beats B" fractions and the average rank of each alpha.

Run from the repository root: ``.venv/bin/python benchmarks/power_ep_regression.py``
(``--quick`` for a smoke run). Every finished fit is appended to a JSON-lines file next to the
report, so an interrupted run resumes where it stopped; ``--time-budget`` stops starting new
(dataset, split, M) groups after that many minutes. Writes
``benchmarks/results/power_ep_regression.md`` and ``power_ep_regression_ranks.png``.
"""

import os

# One BLAS thread: the cores are shared, and OpenBLAS's idle threads spin inside scipy's
# L-BFGS-B on a loaded machine (measured: 4 ms per L-BFGS-B step with 2 threads, 0.05 ms with 1).
for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from collections.abc import Iterable, Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
from common import (  # noqa: E402
    RESULTS_DIR,
    header,
    markdown_table,
    mean_and_stderr,
    setup,
    write_result,
)

setup()

import gpflow  # noqa: E402
import tensorflow as tf  # noqa: E402
from scipy.cluster.vq import kmeans2  # noqa: E402

from gpflow_tight import PowerEPSGP  # noqa: E402
from gpflow_tight.datasets import RegressionSplit, load_uci_gal  # noqa: E402

ALPHAS = (0.0, 0.1, 0.25, 0.5, 0.75, 1.0)
# name in the report -> (uci_gal folder, pseudo-point numbers M); order: smallest first
DATASETS: dict[str, tuple[str, tuple[int, ...]]] = {
    "yacht": ("yacht", (10, 50, 100)),
    "boston": ("bostonHousing", (10, 50, 100)),
    "energy": ("energy", (10, 50, 100)),
    "concrete": ("concrete", (10, 50, 100)),
    "wine-red": ("wine-quality-red", (10, 50, 100)),
    "kin8nm": ("kin8nm", (10, 50)),
    "naval": ("naval-propulsion-plant", (10, 50)),
    "power": ("power-plant", (10, 50)),
}
QUICK_DATASETS = ("yacht", "boston")
# Bui et al. (2017) §4.2, all datasets x splits x M: fraction of settings where A beats B.
PAPER_PAIRS = [
    ("SMSE", 0.5, 0.0, 0.67),
    ("SMSE", 0.5, 1.0, 0.78),
    ("SMSE", 0.0, 1.0, 0.64),
    ("SMLL", 1.0, 0.0, 0.93),
    ("SMLL", 1.0, 0.5, 0.71),
    ("SMLL", 0.5, 0.0, 0.93),
]
METRICS = ("SMSE", "SMLL")


def alpha_name(alpha: float) -> str:
    return {0.0: "0 (VFE)", 1.0: "1 (FITC)"}.get(alpha, f"{alpha:g}")


def short_name(alpha: float) -> str:
    return {0.0: "VFE", 1.0: "FITC/EP"}.get(alpha, f"PEP {alpha:g}")


def log_normal(y: np.ndarray, mean: np.ndarray | float, var: np.ndarray | float) -> np.ndarray:
    return -0.5 * (np.log(2 * np.pi * var) + (y - mean) ** 2 / var)


def training_subset(num_data: int, max_train: int, split: int) -> np.ndarray:
    if num_data <= max_train:
        return np.arange(num_data)
    rng = np.random.default_rng(1000 + split)
    return np.sort(rng.choice(num_data, max_train, replace=False))


def initial_inducing(X: np.ndarray, num_inducing: int, split: int) -> np.ndarray:
    """k-means++ centres of the training inputs (the same for every alpha)."""
    centres, _ = kmeans2(X, num_inducing, minit="++", seed=split)
    # k-means can leave coinciding centres on sets with repeated inputs; nudge them apart.
    jitter = np.random.default_rng(split).standard_normal(centres.shape)
    return centres + 1e-3 * jitter


def group_data(
    dataset: str, split: int, num_inducing: int, max_train: int
) -> tuple[RegressionSplit, np.ndarray]:
    """The (subsampled) split and the initial pseudo-inputs of a (dataset, split, M) group."""
    data = load_uci_gal(DATASETS[dataset][0], split)
    rows = training_subset(len(data.X_train), max_train, split)
    data = RegressionSplit(
        data.X_train[rows], data.Y_train[rows], data.X_test, data.Y_test, data.name
    )
    return data, initial_inducing(data.X_train, num_inducing, split)


def fit(
    data: RegressionSplit, Z: np.ndarray, alpha: float, args: argparse.Namespace, **info: Any
) -> dict[str, Any]:
    """Train PowerEPSGP(alpha) from ``Z`` and evaluate it on the test set."""
    X, Y = data.X_train, data.Y_train
    dim = X.shape[1]
    kernel = gpflow.kernels.SquaredExponential(variance=1.0, lengthscales=np.ones(dim))
    model = PowerEPSGP((X, Y), kernel, Z.copy(), alpha=alpha, noise_variance=args.noise)
    record: dict[str, Any] = dict(
        **info,
        M=len(Z),
        alpha=alpha,
        maxiter=args.maxiter,
        max_train=args.max_train,
        noise_init=args.noise,
        N=len(X),
        N_test=len(data.X_test),
        D=dim,
    )
    start = time.perf_counter()
    try:
        result = gpflow.optimizers.Scipy().minimize(
            model.training_loss,
            model.trainable_variables,
            options=dict(maxiter=args.maxiter),
            tf_fun_args=dict(autograph=False),  # the model code needs no autograph
        )
        mean, var = (t.numpy() for t in model.predict_y(data.X_test))
        objective = float(model.training_loss().numpy())
    except (tf.errors.InvalidArgumentError, ValueError) as error:
        record.update(seconds=time.perf_counter() - start, error=str(error).splitlines()[0])
        print(f"  FAILED {record}", flush=True)
        return record
    y = data.Y_test
    # Targets are standardised with the training statistics: mean 0, variance 1.
    smll = -log_normal(y, mean, var) + log_normal(y, data.Y_train.mean(), data.Y_train.var())
    record.update(
        seconds=time.perf_counter() - start,
        iterations=int(result.nit),
        evaluations=int(result.nfev),
        converged=bool(result.success),
        message=str(result.message),
        objective=objective,
        SMSE=float(np.mean((y - mean) ** 2) / np.var(y)),
        SMLL=float(np.mean(smll)),
        noise=float(model.likelihood.variance.numpy()),
        finite=bool(np.all(np.isfinite(mean)) and np.all(np.isfinite(var))),
    )
    return record


def cache_key(record: dict[str, Any]) -> tuple:
    fields = ("dataset", "split", "M", "alpha", "maxiter", "max_train")
    return (*(record[k] for k in fields), record.get("noise_init", 0.1))


def load_cache(path: Path) -> dict[tuple, dict[str, Any]]:
    cache: dict[tuple, dict[str, Any]] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                record = json.loads(line)
                cache[cache_key(record)] = record
    return cache


def groups(args: argparse.Namespace) -> Iterable[tuple[str, int, int]]:
    """(dataset, split, M), split-major so that a budget-limited run covers every dataset."""
    for split in range(args.splits):
        for dataset in args.datasets:
            for num_inducing in args.num_inducing or DATASETS[dataset][1]:
                yield dataset, split, num_inducing


# ---------------------------------------------------------------------------------------------
# analysis


def complete_settings(records: Sequence[dict[str, Any]]) -> dict[tuple, dict[float, dict]]:
    """(dataset, split, M) -> {alpha: record}, only settings where every alpha succeeded."""
    settings: dict[tuple, dict[float, dict]] = {}
    for r in records:
        settings.setdefault((r["dataset"], r["split"], r["M"]), {})[r["alpha"]] = r
    return {
        key: value
        for key, value in settings.items()
        if all(a in value and "error" not in value[a] and value[a]["finite"] for a in ALPHAS)
    }


def beats_fraction(
    settings: dict[tuple, dict[float, dict]], metric: str, a: float, b: float
) -> float:
    """Fraction of settings where alpha ``a`` has a lower ``metric`` than ``b`` (ties: 1/2)."""
    wins = [
        1.0 if s[a][metric] < s[b][metric] else 0.5 if s[a][metric] == s[b][metric] else 0.0
        for s in settings.values()
    ]
    return float(np.mean(wins)) if wins else float("nan")


def ranks(settings: dict[tuple, dict[float, dict]], metric: str) -> dict[tuple, np.ndarray]:
    """Rank (1 = best, ties averaged) of each alpha in each setting."""
    out = {}
    for key, s in settings.items():
        values = np.array([s[a][metric] for a in ALPHAS])
        order = values.argsort().argsort().astype(float) + 1
        for v in np.unique(values):  # average ties
            order[values == v] = order[values == v].mean()
        out[key] = order
    return out


def fmt(values: Sequence[float]) -> str:
    """Mean ± standard error, 4 significant digits (SMSE spans 1e-4 to 1 across sets)."""
    if not values:
        return "–"
    mean, stderr = mean_and_stderr(values)
    return f"{mean:.4g} ± {stderr:.2g}"


def dataset_tables(records: list[dict[str, Any]], datasets: Sequence[str]) -> list[str]:
    lines = []
    for dataset in datasets:
        mine = [r for r in records if r["dataset"] == dataset and "error" not in r]
        if not mine:
            continue
        Ms = sorted({r["M"] for r in mine})
        splits = sorted({r["split"] for r in mine})
        first = mine[0]
        lines += [
            f"### {dataset}",
            "",
            f"N train {first['N']}"
            + (" (subsampled)" if first["N"] == first["max_train"] else "")
            + f", N test {first['N_test']}, D {first['D']}; splits {splits}; mean ± standard "
            "error over splits. Objective = -log Z_PEP / N at the end of training (the "
            "training loss per point; lower is a larger approximate marginal likelihood).",
            "",
        ]
        headers = ["alpha"]
        headers += [f"SMSE M={m}" for m in Ms] + [f"SMLL M={m}" for m in Ms]
        headers += [f"objective M={m}" for m in Ms]
        rows = []
        for alpha in ALPHAS:
            row = [alpha_name(alpha)]
            for key in ("SMSE", "SMLL", "objective"):
                for m in Ms:
                    values = [
                        r[key] / (r["N"] if key == "objective" else 1)
                        for r in mine
                        if r["M"] == m and r["alpha"] == alpha
                    ]
                    row.append(fmt(values))
            rows.append(row)
        lines += [markdown_table(headers, rows), ""]
    return lines


def per_dataset_wins(
    settings: dict[tuple, dict[float, dict]],
    datasets: Sequence[str],
    metric: str,
    a: float,
    b: float,
) -> tuple[int, int]:
    """Datasets on which ``a`` has the lower mean ``metric`` (over splits and M) than ``b``."""
    wins = total = 0
    for dataset in datasets:
        mine = [s for key, s in settings.items() if key[0] == dataset]
        if not mine:
            continue
        total += 1
        wins += np.mean([s[a][metric] for s in mine]) < np.mean([s[b][metric] for s in mine])
    return int(wins), total


def plot(settings: dict[tuple, dict[float, dict]], datasets: Sequence[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, metric in zip(axes, METRICS):
        metric_ranks = ranks(settings, metric)
        for dataset in datasets:
            mine = [r for key, r in metric_ranks.items() if key[0] == dataset]
            if mine:
                ax.plot(ALPHAS, np.mean(mine, axis=0), lw=0.8, alpha=0.45, label=dataset)
        everything = np.array(list(metric_ranks.values()))
        mean = everything.mean(axis=0)
        stderr = everything.std(axis=0, ddof=1) / np.sqrt(len(everything))
        ax.errorbar(ALPHAS, mean, yerr=stderr, color="k", lw=2.2, marker="o", label="all")
        ax.set_xlabel("alpha  (0 = VFE, 1 = FITC/EP)")
        ax.set_title(f"{metric}: average rank over {len(everything)} settings")
        ax.set_xticks(ALPHAS)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("average rank (1 = best of 6)")
    axes[1].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"wrote {path}")


def report(
    records: list[dict[str, Any]], args: argparse.Namespace, elapsed: float, plot_name: str
) -> str:
    settings = complete_settings(records)
    datasets = [d for d in args.datasets if any(k[0] == d for k in settings)]
    failed = [r for r in records if "error" in r or not r.get("finite", True)]
    fits = [r for r in records if "error" not in r]
    seconds = sum(r["seconds"] for r in records)
    converged = np.mean([r["converged"] for r in fits]) if fits else float("nan")
    big = [d for d in args.datasets if DATASETS[d][1] != DATASETS["yacht"][1]]
    protocol = [
        "Paper: Bui, Yan & Turner (JMLR 2017) §4.2 / App. I.2 (spec §5 E2): 8 UCI sets, 20 "
        "splits, alpha between 0 and 1 (8 values), M between 5 and 200, L-BFGS on the PEP "
        "energy with up to 2000 function evaluations.",
        "Here (scaled to a shared 2-core machine, one process, one TensorFlow and one BLAS "
        "thread): `gpflow_tight.PowerEPSGP` with alpha in "
        f"{{{', '.join(alpha_name(a) for a in ALPHAS)}}}; alpha=0 is the exact VFE limit "
        "(= `gpflow.models.SGPR`), alpha=1 is FITC (= `gpflow.models.GPRFITC`), the "
        "regression fixed point of EP.",
        f"Data: `gpflow_tight.datasets.load_uci_gal` (the standard 20-split 90/10 partitions "
        f"of Hernández-Lobato & Adams 2015, `../shared/data/uci_gal`), splits 0..{args.splits - 1}"
        f" of each set, inputs and targets standardised with the training statistics. "
        f"Training sets larger than {args.max_train} points "
        f"({', '.join(big) or 'none'}) are subsampled at random to {args.max_train} points "
        "(a fixed subset per split, the same for every alpha and M); the full test sets are "
        "used.",
        "Pseudo-point numbers M: "
        + "; ".join(
            f"{d}: {', '.join(map(str, args.num_inducing or DATASETS[d][1]))}"
            for d in args.datasets
        )
        + " (fewer for the larger sets, for time).",
        "Model: SE-ARD kernel (initial variance 1, lengthscales 1), Gaussian likelihood "
        f"(initial noise variance {args.noise}), zero mean. Pseudo-inputs initialised at "
        "k-means++ centres of the training inputs (`scipy.cluster.vq.kmeans2`, seed = split, "
        "+1e-3 jitter), the same for every alpha; then kernel hyperparameters, noise and "
        "pseudo-inputs are optimised jointly.",
        f"Optimiser: L-BFGS-B (`gpflow.optimizers.Scipy`, compiled loss and gradient, "
        f"autograph off) on `model.training_loss` = -log Z_PEP, at most {args.maxiter} "
        f"iterations (the paper: up to 2000 function evaluations). "
        f"{100 * converged:.0f}% of the fits stopped on scipy's convergence test before the "
        "iteration limit.",
        "Metrics (spec §5, Rasmussen & Williams 2006 p. 23; lower is better): SMSE = mean "
        "squared error / variance of the test targets; SMLL = mean over test points of "
        "[-log N(y*; mu*, var* + noise) + log N(y*; mean_train, var_train)]; objective = "
        "-log Z_PEP / N at the end of training.",
        "Summary devices as in the paper (figs 4-5): fraction of (dataset, split, M) settings "
        "where method A beats method B (ties count 1/2), and the average rank (1 = best of "
        "the 6 alphas) per setting. Only settings where all six fits succeeded are counted.",
        f"Size of this run: {len(records)} fits ({len(failed)} failed or non-finite), "
        f"{len(settings)} complete settings; fitting time {seconds / 60:.1f} min summed over "
        "the fits (median "
        f"{np.median([r['seconds'] for r in records]) if records else float('nan'):.1f} s per "
        "fit, including tracing and prediction)"
        + (
            "; this report was rewritten from the cached fits"
            if args.report_only
            else f"; wall time of the last invocation {elapsed / 60:.1f} min"
        )
        + f". Every fit is cached in `{args.cache.name}`; a rerun resumes from it.",
    ]
    text = [header("Power EP on UCI regression: alpha from VFE (0) to FITC/EP (1)", protocol)]
    if not settings:
        return text[0] + "\nNo complete settings yet.\n"

    # pairwise table beside the paper
    rows = []
    for metric, a, b, paper in PAPER_PAIRS:
        ours = beats_fraction(settings, metric, a, b)
        rows.append(
            [
                metric,
                f"{short_name(a)} beats {short_name(b)}",
                f"**{100 * ours:.0f}%**",
                f"{100 * paper:.0f}%",
            ]
        )
    text += [
        "## Pairwise comparisons beside the paper",
        "",
        f"Fraction of the {len(settings)} (dataset, split, M) settings where A has the lower "
        "(better) metric than B. Paper: Bui et al. 2017 §4.2 (fig. 4A), over 8 sets x 20 "
        "splits x their M grid.",
        "",
        markdown_table(["metric", "A beats B", "this run", "paper"], rows),
    ]

    # ranks
    rank_rows = []
    mean_ranks = {}
    for metric in METRICS:
        everything = np.array(list(ranks(settings, metric).values()))
        mean_ranks[metric] = everything.mean(axis=0)
        stderr = everything.std(axis=0, ddof=1) / np.sqrt(len(everything))
        rank_rows.append(
            [metric] + [f"{m:.2f} ± {s:.2f}" for m, s in zip(mean_ranks[metric], stderr)]
        )
    text += [
        "## Average rank of each alpha",
        "",
        "Rank 1 = best of the six in a setting; mean ± standard error over settings. Paper "
        "(8 alphas, fig. 4B/5): SMSE - alpha = 0.5 best, EP and VFE the two worst; SMLL - "
        "alpha = 0.8 best, EP and 0.6 close.",
        "",
        markdown_table(["metric", *(alpha_name(a) for a in ALPHAS)], rank_rows),
        f"![average rank vs alpha]({plot_name})",
        "",
    ]

    # full pairwise matrices
    for metric in METRICS:
        matrix_rows = [
            [alpha_name(a)]
            + [
                "–" if a == b else f"{100 * beats_fraction(settings, metric, a, b):.0f}%"
                for b in ALPHAS
            ]
            for a in ALPHAS
        ]
        text += [
            f"### {metric}: fraction of settings where the row alpha beats the column alpha",
            "",
            markdown_table(["row beats column", *(alpha_name(a) for a in ALPHAS)], matrix_rows),
        ]

    # per-dataset comparisons (paper: "per dataset" counts)
    per_dataset_pairs = [
        ("SMSE", 0.5, 0.0, "6/8"),
        ("SMSE", 0.5, 1.0, "8/8"),
        ("SMSE", 0.0, 1.0, "3/8"),
        ("SMLL", 1.0, 0.5, "5/8"),
        ("SMLL", 1.0, 0.0, "7/8"),
        ("SMLL", 0.5, 0.0, "8/8"),
    ]
    rows = []
    for metric, a, b, paper in per_dataset_pairs:
        wins, total = per_dataset_wins(settings, datasets, metric, a, b)
        rows.append(
            [metric, f"{short_name(a)} better than {short_name(b)}", f"{wins}/{total}", paper]
        )
    text += [
        "### Per dataset (mean over splits and M)",
        "",
        "Number of datasets on which A has the lower mean metric. Paper: §4.2, per-dataset "
        "figures (MSE/NLL).",
        "",
        markdown_table(["metric", "comparison", "this run", "paper"], rows),
    ]

    # objective monotonicity in alpha (log Z_PEP is non-decreasing in alpha at fixed theta)
    monotone = [
        all(
            s[a]["objective"] >= s[b]["objective"] - 1e-6 * abs(s[b]["objective"])
            for a, b in zip(ALPHAS, ALPHAS[1:])
        )
        for s in settings.values()
    ]
    text += [
        "### Optimised objective vs alpha",
        "",
        "At fixed hyperparameters log Z_PEP is non-decreasing in alpha (power-mean inequality, "
        "spec §1.3), so the optimised -log Z_PEP should fall as alpha grows if L-BFGS reaches "
        f"the global optimum. It does in {sum(monotone)}/{len(monotone)} settings "
        "(violations come from local optima or the iteration limit).",
        "",
    ]

    # findings
    def order(metric: str) -> str:
        ranked = sorted(zip(mean_ranks[metric], ALPHAS))
        return ", ".join(f"{alpha_name(a)} ({r:.2f})" for r, a in ranked)

    def position(metric: str, alpha: float) -> int:
        return 1 + int(np.sum(mean_ranks[metric] < mean_ranks[metric][ALPHAS.index(alpha)]))

    smse_worst = {a for _, a in sorted(zip(mean_ranks["SMSE"], ALPHAS))[-2:]}

    def best(metric: str) -> list[float]:
        ranks_ = mean_ranks[metric]
        return [a for a, r in zip(ALPHAS, ranks_) if np.isclose(r, ranks_.min())]

    def names(alphas: Iterable[float]) -> str:
        return " and ".join(alpha_name(a) for a in alphas)

    smll_best = best("SMLL")[-1]
    fitc_beats = {b: beats_fraction(settings, "SMLL", 1.0, b) for b in (0.0, 0.5)}
    if position("SMLL", 1.0) == 1 and fitc_beats[0.0] > 0.8:
        smll_verdict = "Consistent with the paper."
    elif smll_best >= 0.75:
        smll_verdict = (
            "Large alpha is best on SMLL, as in the paper's rank plot, but EP/FITC itself is "
            "not the clear SMLL winner here."
        )
    else:
        smll_verdict = "Not the paper's pattern."
    text += [
        "## Findings",
        "",
        f"- Average rank, best first. SMSE: {order('SMSE')}. SMLL: {order('SMLL')}.",
        f"- SMSE (paper: alpha = 0.5 best, EP and VFE the two worst): best here alpha = "
        f"{names(best('SMSE'))}{' (tied)' if len(best('SMSE')) > 1 else ''}, alpha = 0.5 is "
        f"number {position('SMSE', 0.5)} of 6, the two worst are {names(sorted(smse_worst))}. "
        + (
            "Consistent with the paper."
            if smse_worst == {0.0, 1.0} and position("SMSE", 0.5) <= 2
            else "Not the paper's pattern."
        ),
        f"- SMLL (paper: EP the clear winner pairwise, beating VFE in 93% and alpha = 0.5 in "
        f"71% of settings; by average rank alpha = 0.8 best with EP close): best here alpha = "
        f"{names(best('SMLL'))}; FITC/EP is number {position('SMLL', 1.0)} of 6 and beats "
        f"VFE in {100 * fitc_beats[0.0]:.0f}% and alpha = 0.5 in {100 * fitc_beats[0.5]:.0f}% "
        f"of settings. {smll_verdict}",
        "",
    ]
    text += ["## Per-dataset results", "", *dataset_tables(records, datasets)]
    if failed:
        text += ["## Failed fits", ""]
        text += [
            f"- {r['dataset']} split {r['split']} M={r['M']} alpha={r['alpha']}: "
            f"{r.get('error', 'non-finite predictions')}"
            for r in failed
        ]
        text.append("")
    return "\n".join(text) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 sets, 1 split")
    parser.add_argument("--datasets", nargs="+", choices=list(DATASETS), default=None)
    parser.add_argument("--splits", type=int, default=None, help="splits 0..S-1 (default 3)")
    parser.add_argument(
        "--num-inducing", type=int, nargs="+", default=None, help="override the M grid"
    )
    parser.add_argument("--maxiter", type=int, default=None, help="L-BFGS iterations (default 300)")
    parser.add_argument("--max-train", type=int, default=2000, help="subsample larger sets")
    parser.add_argument("--noise", type=float, default=0.1, help="initial noise variance")
    parser.add_argument(
        "--time-budget", type=float, default=None, help="minutes; no new group after it"
    )
    parser.add_argument("--report-only", action="store_true", help="rewrite the report")
    parser.add_argument(
        "--tag", default="", help="suffix of the report files, e.g. for a sensitivity run"
    )
    args = parser.parse_args()
    if args.quick:
        args.datasets = args.datasets or list(QUICK_DATASETS)
        args.splits = args.splits or 1
        args.num_inducing = args.num_inducing or [10]
        args.maxiter = args.maxiter or 50
    args.datasets = args.datasets or list(DATASETS)
    args.splits = args.splits or 3
    args.maxiter = args.maxiter or 300
    stem = (
        "power_ep_regression"
        + ("_quick" if args.quick else "")
        + (f"_{args.tag}" if args.tag else "")
    )
    # One cache for all tags: a fit's key holds everything that changes its result.
    args.cache = RESULTS_DIR / f"power_ep_regression{'_quick' if args.quick else ''}_runs.jsonl"

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    cache = load_cache(args.cache)
    start = time.perf_counter()
    wanted = []
    for dataset, split, num_inducing in groups(args):
        keys = [
            (dataset, split, num_inducing, a, args.maxiter, args.max_train, args.noise)
            for a in ALPHAS
        ]
        wanted += keys
        if args.report_only or all(k in cache for k in keys):
            continue
        elapsed = time.perf_counter() - start
        if args.time_budget is not None and elapsed > 60 * args.time_budget:
            print(f"time budget reached after {elapsed / 60:.1f} min; stopping", flush=True)
            break
        data, Z = group_data(dataset, split, num_inducing, args.max_train)
        for alpha, key in zip(ALPHAS, keys):
            if key in cache:
                continue
            record = fit(data, Z, alpha, args, dataset=dataset, split=split)
            cache[key] = record
            with args.cache.open("a") as handle:
                handle.write(json.dumps(record) + "\n")
            print(
                f"{dataset} split {split} M={num_inducing} alpha={alpha}: "
                + (
                    f"SMSE {record['SMSE']:.4f} SMLL {record['SMLL']:.4f} "
                    f"obj/N {record['objective'] / record['N']:.4f} it {record['iterations']} "
                    if "error" not in record
                    else "failed "
                )
                + f"({record['seconds']:.1f} s, "
                f"total {(time.perf_counter() - start) / 60:.1f} min)",
                flush=True,
            )
    records = [cache[k] for k in wanted if k in cache]
    plot_name = f"{stem}_ranks.png"
    settings = complete_settings(records)
    if settings:
        plot(
            settings,
            [d for d in args.datasets if any(k[0] == d for k in settings)],
            RESULTS_DIR / plot_name,
        )
    notes_path = RESULTS_DIR / f"{stem}_notes.md"
    text = report(records, args, time.perf_counter() - start, plot_name)
    if notes_path.exists():  # discussion written after the run, kept across re-runs
        text += "\n" + notes_path.read_text()
    write_result(f"{stem}.md", text)


if __name__ == "__main__":
    main()
