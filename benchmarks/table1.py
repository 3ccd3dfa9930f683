"""
Paper Table 1 (§6.2): TightSGPR predictions with the exact predictive variance of eq. 12 versus
the default that drops its two O(N^3) terms, on wine, solar and pumadyn32nm.

Run from the repository root: ``.venv/bin/python benchmarks/table1.py [--splits 10]
[--datasets wine solar pumadyn32nm] [--max-splits pumadyn32nm=3]``.
Writes ``benchmarks/results/table1.md``.
"""

import argparse
import time
from dataclasses import dataclass, field

import numpy as np
from common import header, markdown_table, mean_and_stderr, setup, time_call, write_result

setup()

import gpflow  # noqa: E402

from gpflow_tight import TightSGPR  # noqa: E402
from gpflow_tight.datasets import load_uci_wilson  # noqa: E402
from gpflow_tight.training import fit_adam, fit_scipy  # noqa: E402

DATASETS = ["wine", "solar", "pumadyn32nm"]
# Paper Table 1: (RMSE, s.e.), (test log-lik, s.e.), time s; "exact" = with the last term.
PAPER = {
    ("wine", "exact"): ("0.47 ± 0.01", "-0.66 ± 0.01", "0.15"),
    ("wine", "dropped"): ("0.47 ± 0.01", "-0.66 ± 0.01", "0.03"),
    ("solar", "exact"): ("0.93 ± 0.07", "-1.57 ± 0.20", "0.07"),
    ("solar", "dropped"): ("0.93 ± 0.07", "-1.56 ± 0.20", "0.03"),
    ("pumadyn32nm", "exact"): ("1.00 ± 0.01", "-1.42 ± 0.01", "21.12"),
    ("pumadyn32nm", "dropped"): ("1.00 ± 0.01", "-1.42 ± 0.01", "0.05"),
}
VARIANTS = ("exact", "dropped")


@dataclass
class SplitResult:
    split: int
    train_seconds: float
    iterations: int
    bound: float
    noise: float
    kernel_variance: float
    rmse: dict[str, float] = field(default_factory=dict)
    loglik: dict[str, float] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    variance_ratio: float = float("nan")  # mean exact / dropped predictive variance of y


def gaussian_log_density(y: np.ndarray, mean: np.ndarray, var: np.ndarray) -> np.ndarray:
    return -0.5 * (np.log(2 * np.pi * var) + (y - mean) ** 2 / var)


def run_split(name: str, split: int, args: argparse.Namespace, adam_warmup: int) -> SplitResult:
    data = load_uci_wilson(name, split, standardize=True)
    X, Y = data.X_train, data.Y_train
    num_data, dim = X.shape
    rng = np.random.default_rng(args.seed + split)
    Z = X[rng.choice(num_data, args.num_inducing, replace=False)].copy()
    kernel = gpflow.kernels.SquaredExponential(
        variance=1.0, lengthscales=np.full(dim, np.sqrt(dim))
    )
    model = TightSGPR((X, Y), kernel, Z, noise_variance=args.noise)
    warmup_seconds = 0.0
    if adam_warmup:
        warmup_seconds, _ = time_call(
            lambda: fit_adam(
                model, iterations=adam_warmup, learning_rate=args.adam_lr, progress=False
            )
        )
    train_seconds, history = time_call(
        lambda: fit_scipy(model, maxiter=args.maxiter, progress=False)
    )
    train_seconds += warmup_seconds
    result = SplitResult(
        split,
        train_seconds,
        len(history),
        float(model.elbo()),
        float(model.likelihood.variance.numpy()),
        float(model.kernel.variance.numpy()),
    )
    variances = {}
    for variant in ("dropped", "exact"):
        model.exact_predictive_variance = variant == "exact"
        seconds, (mean, var) = time_call(lambda: model.predict_y(data.X_test))
        mean, var = mean.numpy(), var.numpy()
        log_density = gaussian_log_density(data.Y_test, mean, var)[:, 0]
        if variant == "dropped" or num_data <= args.check_log_density_up_to:
            # The same through the model's API (costs a second O(N^3) call for 'exact').
            api = model.predict_log_density((data.X_test, data.Y_test)).numpy()
            np.testing.assert_allclose(api, log_density, rtol=1e-8, atol=1e-8)
        result.seconds[variant] = seconds
        result.rmse[variant] = float(np.sqrt(np.mean((mean - data.Y_test) ** 2)))
        result.loglik[variant] = float(np.mean(log_density))
        variances[variant] = var
    model.exact_predictive_variance = False
    result.variance_ratio = float(np.mean(variances["exact"] / variances["dropped"]))
    print(
        f"{name} split {split}: N={num_data}, D={dim}, train {train_seconds:.1f} s "
        f"({len(history)} it), noise {result.noise:.4f}, "
        + ", ".join(
            f"{v}: rmse {result.rmse[v]:.4f} ll {result.loglik[v]:.4f} t {result.seconds[v]:.3f}s"
            for v in VARIANTS
        ),
        flush=True,
    )
    return result


def fmt(values: list[float], digits: int = 2) -> str:
    mean, stderr = mean_and_stderr(values)
    return f"{mean:.{digits}f} ± {stderr:.{digits}f}"


def report(
    results: dict[str, list[SplitResult]],
    sizes: dict[str, str],
    args: argparse.Namespace,
    seconds: float,
) -> str:
    protocol = [
        "Data: `uci_wilson/<name>` (Yang et al. 2015 / Wilson collection, 90/10 splits given by "
        "`test_mask`), loaded with `load_uci_wilson(name, split, standardize=True)`: inputs and "
        "target standardised with the training statistics. **RMSE and test log-likelihood are in "
        "standardised target units**; the log-likelihood is the mean over test points of "
        "the Gaussian predictive density of y (noise included). Note wine's target in this "
        "collection is alcohol, not quality (data README).",
        f"Model: `TightSGPR`, SE kernel with ARD lengthscales initialised at sqrt(D) (so the "
        f"typical scaled squared distance of standardised inputs is about 2), kernel variance "
        f"1, Gaussian noise variance {args.noise}; M={args.num_inducing} inducing inputs "
        f"initialised at a random subset of the training inputs (numpy `default_rng(seed + "
        f"split)`, seed {args.seed}) and trained with the hyperparameters.",
        f"Training: `fit_scipy` (L-BFGS-B), maxiter {args.maxiter}, on the T-SGPR bound. Rows "
        f"marked '+ Adam warm-up' ({', '.join(args.warmup_rerun) or 'none'}) first take "
        f"{args.adam_warmup} full-batch Adam steps (`fit_adam`, learning rate {args.adam_lr}) "
        "from the same initialisation, then the same L-BFGS run (see the notes).",
        "Prediction, same trained model, twice: 'dropped' = default (`exact_predictive_variance"
        " = False`, the SGPR-form variance that drops the two O(N^3) terms of eq. 12); 'exact' = "
        "`model.exact_predictive_variance = True` (eq. 12 with S_f = M^1/2 D_ff M^1/2, an "
        "N x N Cholesky). 'time' is the wall time of one eager `predict_y(X_test)` call (mean "
        "and variance for all test points). The test log-likelihood is computed from that "
        "call's mean and variance; "
        "`predict_log_density` is also called and checked to agree (to 1e-8) for 'dropped', "
        f"and for 'exact' when N_train <= {args.check_log_density_up_to} (to save a second "
        "O(N^3) call on pumadyn32nm).",
        "Entries are mean ± standard error over splits. The number of splits used per dataset "
        "is in the table.",
        f"Total run time {seconds / 60:.1f} min.",
    ]
    rows = []
    for name, splits in results.items():
        for variant in VARIANTS:
            paper = PAPER.get((name.split(" ")[0], variant), ("–", "–", "–"))
            rows.append(
                [
                    name if variant == "exact" else "",
                    sizes[name] if variant == "exact" else "",
                    len(splits) if variant == "exact" else "",
                    variant,
                    fmt([r.rmse[variant] for r in splits]),
                    paper[0],
                    fmt([r.loglik[variant] for r in splits]),
                    paper[1],
                    fmt([r.seconds[variant] for r in splits], 3),
                    paper[2],
                ]
            )
    table = markdown_table(
        [
            "dataset",
            "N train / D",
            "splits",
            "eq. 12 variance",
            "RMSE",
            "paper RMSE",
            "test log-lik",
            "paper log-lik",
            "time s",
            "paper time s",
        ],
        rows,
    )
    detail_rows = []
    for name, splits in results.items():
        for r in splits:
            detail_rows.append(
                [
                    name,
                    r.split,
                    f"{r.train_seconds:.1f}",
                    r.iterations,
                    f"{r.bound:.2f}",
                    f"{r.noise:.4f}",
                    f"{r.kernel_variance:.3g}",
                    f"{r.rmse['dropped']:.4f}",
                    f"{r.loglik['dropped']:.4f}",
                    f"{r.loglik['exact']:.4f}",
                    f"{r.loglik['exact'] - r.loglik['dropped']:+.2e}",
                    f"{r.variance_ratio:.6f}",
                    f"{r.seconds['dropped']:.3f}",
                    f"{r.seconds['exact']:.3f}",
                ]
            )
    details = markdown_table(
        [
            "dataset",
            "split",
            "train s (incl. warm-up)",
            "L-BFGS it",
            "final bound",
            "noise var",
            "kernel var",
            "RMSE",
            "log-lik dropped",
            "log-lik exact",
            "exact - dropped",
            "mean var_y ratio exact/dropped",
            "time dropped s",
            "time exact s",
        ],
        detail_rows,
    )
    return (
        header("Paper Table 1: exact vs dropped predictive variance terms (TightSGPR)", protocol)
        + "\n## Results\n\n"
        + table
        + "\nThe predictive means of the two variants are identical (eq. 12 changes only the "
        "variance), so their RMSEs agree exactly.\n\n## Per split\n\n" + details + notes(results)
    )


def notes(results: dict[str, list[SplitResult]]) -> str:
    """Flag fits that collapsed to the noise-only model (kernel variance ~ 0)."""
    lines = ["", "## Notes", ""]
    for label, splits in results.items():
        collapsed = [r.split for r in splits if r.kernel_variance < 1e-3]
        if collapsed:
            lines.append(
                f"- {label}: on split(s) {collapsed} training converged to the noise-only "
                "solution (kernel variance < 1e-3, noise variance ~ 1): the predictions are the "
                "training mean with unit variance, so RMSE ~ 1 and log-lik ~ "
                "-0.5 log(2 pi) - 0.5 = -1.419 in standardised units, whatever the variance "
                "formula. The paper's pumadyn32nm row (1.00 ± 0.01, -1.42 ± 0.01) matches this "
                "degenerate fit."
            )
    if len(lines) == 3:
        lines.append("- No split converged to the noise-only solution.")
    for label, splits in results.items():
        differences = [abs(r.loglik["exact"] - r.loglik["dropped"]) for r in splits]
        speedups = [r.seconds["exact"] / r.seconds["dropped"] for r in splits]
        lines.append(
            f"- {label}: largest |log-lik exact - dropped| over splits {max(differences):.1e}; "
            f"the exact variance takes {np.median(speedups):.0f}x the time of the default "
            "(median over splits)."
        )
    for label in [label for label in results if label.endswith(" + Adam warm-up")]:
        name = label.removesuffix(" + Adam warm-up")
        iterations = [r.iterations for r in results.get(name, []) if r.kernel_variance < 1e-3]
        if not iterations:
            continue
        lines.append(
            "- '+ Adam warm-up' rows: from the same initialisation, L-BFGS alone converges in "
            f"{min(iterations)}-{max(iterations)} iterations to the noise-only solution on {name} "
            "(the kernel variance "
            "goes to ~0 and the gradients vanish); a few hundred Adam steps first let the ARD "
            "lengthscales of the relevant inputs shrink before that happens. This is a "
            "deviation from the L-BFGS-only protocol above, added so that the exact vs "
            "dropped comparison is made on a model that fits the data."
        )
    return "\n".join(lines) + "\n"


def parse_max_splits(items: list[str]) -> dict[str, int]:
    out = {}
    for item in items:
        name, _, count = item.partition("=")
        out[name] = int(count)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--splits", type=int, default=10, help="splits per dataset (max 10)")
    parser.add_argument("--datasets", nargs="+", default=DATASETS, help="uci_wilson names")
    parser.add_argument(
        "--max-splits",
        nargs="*",
        default=[],
        metavar="NAME=N",
        help="fewer splits for some datasets, e.g. pumadyn32nm=3",
    )
    parser.add_argument("--num-inducing", type=int, default=100)
    parser.add_argument("--maxiter", type=int, default=300, help="L-BFGS iterations")
    parser.add_argument("--noise", type=float, default=0.1, help="initial noise variance")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--warmup-rerun",
        nargs="*",
        default=["pumadyn32nm"],
        metavar="NAME",
        help="datasets to run a second time with Adam steps before L-BFGS",
    )
    parser.add_argument("--adam-warmup", type=int, default=300, help="Adam steps of the rerun")
    parser.add_argument("--adam-lr", type=float, default=0.05, help="Adam learning rate")
    parser.add_argument(
        "--check-log-density-up-to",
        type=int,
        default=5000,
        help="also call predict_log_density with the exact variance when N_train <= this",
    )
    args = parser.parse_args()
    max_splits = parse_max_splits(args.max_splits)

    start = time.perf_counter()
    results: dict[str, list[SplitResult]] = {}
    sizes: dict[str, str] = {}
    runs = [(name, 0) for name in args.datasets]
    runs += [(name, args.adam_warmup) for name in args.warmup_rerun if name in args.datasets]
    for name, adam_warmup in runs:
        num_splits = min(args.splits, max_splits.get(name, args.splits))
        label = f"{name} + Adam warm-up" if adam_warmup else name
        first = load_uci_wilson(name, 0)
        sizes[label] = f"{len(first.X_train)} / {first.X_train.shape[1]}"
        results[label] = []
        for split in range(num_splits):
            results[label].append(run_split(name, split, args, adam_warmup))
        # Rewrite after every dataset so that a partial run still leaves its results.
        write_result("table1.md", report(results, sizes, args, time.perf_counter() - start))


if __name__ == "__main__":
    main()
