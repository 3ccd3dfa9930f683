"""
Cost of the Bayesian GPLVMs of gpflow_tight against GPflow's BayesianGPLVM.

(a) One ELBO + gradient step of TightBayesianGPLVM (analytic relaxation) against
    gpflow.models.BayesianGPLVM on the same data and parameters, for N in {1000, 5000}, P = 12,
    Q in {2, 5}, M in {32, 128}.
(b) One step of MinibatchBayesianGPLVM (tight=True; batch 256, M = 64, Q = 5, P = 12) for
    N = 1000 ... 50000, beside the collapsed models' step where N is small enough.

Run from the repository root: ``.venv/bin/python benchmarks/gplvm_cost.py [--rounds 15]``.
Writes ``benchmarks/results/gplvm_cost.md`` and ``benchmarks/results/gplvm_cost.png``.
"""

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from common import RESULTS_DIR, header, interleaved_times, markdown_table, setup, write_result

setup()

import gpflow  # noqa: E402
import matplotlib  # noqa: E402
import tensorflow as tf  # noqa: E402
from gpflow.keras import tf_keras  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from gpflow_tight import MinibatchBayesianGPLVM, TightBayesianGPLVM  # noqa: E402

NUM_OUTPUTS = 12
NOISE_VARIANCE = 0.1


def synthetic(num_data: int, latent_dim: int, num_inducing: int, seed: int) -> dict:
    """Latent points from the prior, 12 smooth outputs of them plus noise, and initial values."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((num_data, latent_dim))
    W = rng.standard_normal((latent_dim, NUM_OUTPUTS))
    Y = np.sin(X @ W) + np.sqrt(NOISE_VARIANCE) * rng.standard_normal((num_data, NUM_OUTPUTS))
    X_mean = X + 0.3 * rng.standard_normal(X.shape)
    return dict(
        Y=Y,
        X_mean=X_mean,
        X_var=np.full(X.shape, 0.1),
        Z=X_mean[rng.choice(num_data, num_inducing, replace=False)].copy(),
    )


def kernel(latent_dim: int) -> gpflow.kernels.Kernel:
    return gpflow.kernels.SquaredExponential(lengthscales=np.linspace(1.0, 2.0, latent_dim))


def collapsed(model_class: type, problem: dict, **kwargs: object) -> gpflow.models.BayesianGPLVM:
    model = model_class(
        problem["Y"],
        problem["X_mean"].copy(),
        problem["X_var"].copy(),
        kernel(problem["X_mean"].shape[1]),
        inducing_variable=problem["Z"].copy(),
        **kwargs,
    )
    model.likelihood.variance.assign(NOISE_VARIANCE)
    return model


def fetch(value: object) -> None:
    """Block until a tensor (or the values of IndexedSlices) has been computed."""
    if isinstance(value, tf.IndexedSlices):
        value.values.numpy()
    else:
        value.numpy()


def gradient_step(model: gpflow.models.BayesianModel, batch: tuple | None) -> Callable[[], None]:
    """Compiled loss and gradient w.r.t. all trainable variables; the callable blocks."""
    variables = model.trainable_variables

    @tf.function
    def step() -> tuple[tf.Tensor, list]:
        with tf.GradientTape() as tape:
            loss = model.training_loss() if batch is None else model.training_loss(batch)
        return loss, tape.gradient(loss, variables)

    def run() -> None:
        loss, grads = step()
        loss.numpy()
        for grad in grads:
            fetch(grad)

    return run


def adam_step(model: MinibatchBayesianGPLVM, batch: tuple) -> Callable[[], None]:
    """One compiled Adam update on ``batch``, as in ``gpflow_tight.training.fit_adam``."""
    variables = model.trainable_variables
    optimizer = tf_keras.optimizers.Adam(1e-4)

    @tf.function
    def step() -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = model.training_loss(batch)
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    return lambda: step().numpy()


@dataclass
class Pair:
    setting: dict
    peer_times: list[float]
    tight_times: list[float]
    peer_elbo: float
    tight_elbo: float


def part_a(rounds: int, seed: int, sizes: list[int]) -> list[Pair]:
    pairs = []
    for num_data in sizes:
        for latent_dim in (2, 5):
            for num_inducing in (32, 128):
                problem = synthetic(num_data, latent_dim, num_inducing, seed)
                peer = collapsed(gpflow.models.BayesianGPLVM, problem)
                tight = collapsed(TightBayesianGPLVM, problem, relaxation="analytic")
                start = time.perf_counter()
                times = interleaved_times(
                    {"peer": gradient_step(peer, None), "tight": gradient_step(tight, None)},
                    rounds=rounds,
                )
                pair = Pair(
                    dict(N=num_data, Q=latent_dim, M=num_inducing),
                    times["peer"],
                    times["tight"],
                    float(peer.elbo().numpy()),
                    float(tight.elbo().numpy()),
                )
                ratio = np.median(pair.tight_times) / np.median(pair.peer_times)
                print(
                    f"(a) N={num_data} Q={latent_dim} M={num_inducing}: ratio {ratio:.3f} "
                    f"({time.perf_counter() - start:.0f} s)",
                    flush=True,
                )
                pairs.append(pair)
    return pairs


def part_b(
    rounds: int, seed: int, sizes: list[int], max_collapsed: int, batch_size: int
) -> dict[int, dict[str, list[float]]]:
    latent_dim, num_inducing = 5, 64
    results = {}
    for num_data in sizes:
        problem = synthetic(num_data, latent_dim, num_inducing, seed)
        minibatch = MinibatchBayesianGPLVM(
            num_data,
            NUM_OUTPUTS,
            problem["X_mean"].copy(),
            problem["X_var"].copy(),
            kernel(latent_dim),
            problem["Z"].copy(),
            noise_variance=NOISE_VARIANCE,
            tight=True,
        )
        rows = np.random.default_rng(seed).choice(num_data, batch_size, replace=False)
        batch = (tf.constant(rows[:, None]), tf.constant(problem["Y"][rows]))
        fns = {
            "MinibatchBayesianGPLVM loss+grad": gradient_step(minibatch, batch),
            "MinibatchBayesianGPLVM Adam step": adam_step(minibatch, batch),
        }
        if num_data <= max_collapsed:
            fns["BayesianGPLVM loss+grad"] = gradient_step(
                collapsed(gpflow.models.BayesianGPLVM, problem), None
            )
            fns["TightBayesianGPLVM loss+grad"] = gradient_step(
                collapsed(TightBayesianGPLVM, problem), None
            )
        start = time.perf_counter()
        results[num_data] = interleaved_times(fns, rounds=rounds)
        medians = ", ".join(f"{k} {np.median(v):.4f}" for k, v in results[num_data].items())
        print(f"(b) N={num_data}: {medians} ({time.perf_counter() - start:.0f} s)", flush=True)
    return results


def plot(results: dict[int, dict[str, list[float]]], batch_size: int) -> str:
    name = "gplvm_cost.png"
    fig, ax = plt.subplots(figsize=(7, 4.5))
    labels = sorted({label for times in results.values() for label in times})
    for label, marker in zip(labels, "osd^v"):
        sizes = [n for n in results if label in results[n]]
        medians = [np.median(results[n][label]) for n in sizes]
        ax.plot(sizes, medians, marker=marker, label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("N (rows)")
    ax.set_ylabel("median step time (s)")
    ax.set_title(f"Bayesian GPLVM step time, P=12, Q=5, M=64 (minibatch B={batch_size})")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(RESULTS_DIR / name, dpi=100)
    plt.close(fig)
    print(f"wrote {RESULTS_DIR / name}")
    return name


def report(
    pairs: list[Pair],
    scaling: dict[int, dict[str, list[float]]],
    figure: str,
    args: argparse.Namespace,
) -> str:
    protocol = [
        "Quantity timed: one call of a `tf.function` that evaluates `model.training_loss` "
        "(-ELBO) and its gradient w.r.t. all trainable variables (GradientTape; latent means "
        "and variances, inducing inputs, kernel, noise; for the minibatch model also q(u)), "
        "results fetched with `.numpy()`. 'Adam step' adds the update of all variables "
        "(`tf_keras.optimizers.Adam`) in the same `tf.function`, as `fit_adam` runs it.",
        f"Timing: `common.interleaved_times`: 2 untimed warm-up calls per function (tracing), "
        f"then {args.rounds} rounds; each round calls every function once, in an order that "
        "alternates between rounds. Reported: medians over the rounds; ratio = tight median / "
        "peer median; 'per-round' = median of the ratios of the two calls of each round.",
        "Data: synthetic, latent X ~ N(0, I_Q), Y = sin(X W) + noise (W standard normal "
        f"[Q, 12], noise variance {NOISE_VARIANCE}); q(X) means = X + N(0, 0.3^2), variances "
        "0.1; inducing inputs a random subset of the means; SE-ARD kernel, variance 1, "
        "lengthscales evenly spaced on [1, 2]; noise variance 0.1. float64.",
        "(a) `gpflow.models.BayesianGPLVM` (peer) vs `gpflow_tight.TightBayesianGPLVM` "
        "(relaxation='analytic') built with identical parameters; the two bounds at those "
        "parameters are also given (tight must be >= peer).",
        f"(b) `MinibatchBayesianGPLVM` (tight=True, whiten=True), one fixed minibatch of "
        f"B={args.batch_size} rows (row indices and Y rows as constant tensors), M=64, Q=5, "
        f"P=12, for N in {args.minibatch_sizes}; the collapsed models (full data per step) "
        f"for N <= {args.max_collapsed} only: GPflow's SE psi statistics materialise [N, M, M] "
        "tensors (and larger intermediates) in both the loss and its gradient, and their step "
        "time grows linearly in N.",
        "Goal for (a): ratio <= 1.10.",
    ]
    rows_a = []
    for p in pairs:
        peer, tight = np.median(p.peer_times), np.median(p.tight_times)
        paired = np.median(np.asarray(p.tight_times) / np.asarray(p.peer_times))
        rows_a.append(
            [
                p.setting["N"],
                p.setting["Q"],
                p.setting["M"],
                f"{peer:.4f}",
                f"{tight:.4f}",
                f"**{tight / peer:.3f}**",
                f"{paired:.3f}",
                f"{p.peer_elbo:.1f}",
                f"{p.tight_elbo:.1f}",
                "yes" if p.tight_elbo >= p.peer_elbo else "**NO**",
            ]
        )
    table_a = markdown_table(
        [
            "N",
            "Q",
            "M",
            "BayesianGPLVM median s",
            "TightBayesianGPLVM median s",
            "ratio",
            "per-round",
            "ELBO peer",
            "ELBO tight",
            "tight >= peer",
        ],
        rows_a,
    )
    labels = sorted({label for times in scaling.values() for label in times})
    rows_b = []
    for num_data, times in scaling.items():
        rows_b.append(
            [num_data]
            + [f"{np.median(times[label]):.4f}" if label in times else "-" for label in labels]
        )
    table_b = markdown_table(["N", *[f"{label} (median s)" for label in labels]], rows_b)
    first, last = min(scaling), max(scaling)
    grad = "MinibatchBayesianGPLVM loss+grad"
    growth = np.median(scaling[last][grad]) / np.median(scaling[first][grad])
    raw = ["", "## Raw times (s, in round order)", ""]
    for p in pairs:
        raw.append(f"- (a) N={p.setting['N']} Q={p.setting['Q']} M={p.setting['M']}")
        raw.append("  - BayesianGPLVM: " + ", ".join(f"{t:.4f}" for t in p.peer_times))
        raw.append("  - TightBayesianGPLVM: " + ", ".join(f"{t:.4f}" for t in p.tight_times))
    for num_data, times in scaling.items():
        raw.append(f"- (b) N={num_data}")
        for label, values in times.items():
            raw.append(f"  - {label}: " + ", ".join(f"{t:.4f}" for t in values))
    return (
        header(
            "Cost of the Bayesian GPLVMs: TightBayesianGPLVM and MinibatchBayesianGPLVM", protocol
        )
        + "\n## (a) Collapsed: TightBayesianGPLVM vs BayesianGPLVM, one ELBO + gradient step\n\n"
        + table_a
        + "\n## (b) MinibatchBayesianGPLVM step time against N\n\n"
        + table_b
        + f"\nMinibatch loss+grad, N={last} over N={first}: x{growth:.2f} "
        f"(N grew x{last / first:.0f}).\n\n"
        + f"![step time vs N]({figure})\n"
        + "\n".join(raw)
        + "\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=15, help="timed rounds per comparison")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--collapsed-sizes", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument(
        "--minibatch-sizes", type=int, nargs="+", default=[1000, 5000, 10_000, 50_000]
    )
    parser.add_argument(
        "--max-collapsed", type=int, default=10_000, help="largest N for collapsed models in (b)"
    )
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--skip-a", action="store_true", help="only run (b)")
    args = parser.parse_args()

    start = time.perf_counter()
    pairs = [] if args.skip_a else part_a(args.rounds, args.seed, args.collapsed_sizes)
    scaling = part_b(
        args.rounds, args.seed, args.minibatch_sizes, args.max_collapsed, args.batch_size
    )
    figure = plot(scaling, args.batch_size)
    print(f"total {time.perf_counter() - start:.0f} s")
    write_result("gplvm_cost.md", report(pairs, scaling, figure, args))


if __name__ == "__main__":
    main()
