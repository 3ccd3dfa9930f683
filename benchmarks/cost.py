"""
Cost of one training step (loss and its gradient) of the tighter models against their GPflow
peers: TightSGPR vs SGPR and TightSVGP vs SVGP (Gaussian and Bernoulli likelihoods).

Run from the repository root: ``.venv/bin/python benchmarks/cost.py [--rounds 15]``.
Writes ``benchmarks/results/cost.md``.
"""

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from common import header, interleaved_times, markdown_table, setup, write_result

setup()

import gpflow  # noqa: E402
import tensorflow as tf  # noqa: E402

from gpflow_tight import TightSGPR, TightSVGP  # noqa: E402


@dataclass
class Result:
    setting: str
    peer: str
    tight: str
    peer_times: list[float]
    tight_times: list[float]


def step_function(model: gpflow.models.BayesianModel, batch: tuple | None) -> Callable[[], float]:
    """A compiled loss-and-gradient step; the returned callable blocks until it is done."""
    variables = model.trainable_variables

    @tf.function
    def step() -> tuple[tf.Tensor, list[tf.Tensor]]:
        with tf.GradientTape() as tape:
            loss = model.training_loss() if batch is None else model.training_loss(batch)
        return loss, tape.gradient(loss, variables)

    def run() -> float:
        loss, grads = step()
        for grad in grads:
            grad.numpy()
        return float(loss.numpy())

    return run


def synthetic_inputs(rng: np.random.Generator, num_data: int, dim: int) -> np.ndarray:
    return rng.uniform(0.0, 10.0, size=(num_data, dim))


def latent(X: np.ndarray) -> np.ndarray:
    return np.sin(X).sum(axis=1, keepdims=True)


def compare(
    setting: str,
    peer: gpflow.models.BayesianModel,
    tight: gpflow.models.BayesianModel,
    batch: tuple | None,
    rounds: int,
) -> Result:
    peer_step, tight_step = step_function(peer, batch), step_function(tight, batch)
    start = time.perf_counter()
    times = interleaved_times({"peer": peer_step, "tight": tight_step}, rounds=rounds, warmup=2)
    print(f"{setting}: {time.perf_counter() - start:.1f} s (incl. compilation)")
    return Result(setting, type(peer).__name__, type(tight).__name__, times["peer"], times["tight"])


def collapsed(rounds: int, seed: int) -> Result:
    rng = np.random.default_rng(seed)
    X = synthetic_inputs(rng, 10_000, 3)
    Y = latent(X) + 0.1 * rng.standard_normal((len(X), 1))
    Z = X[rng.choice(len(X), 500, replace=False)].copy()

    def kwargs() -> dict:
        return dict(kernel=gpflow.kernels.SquaredExponential(), inducing_variable=Z.copy())

    return compare(
        "(a) collapsed, Gaussian: N=10000, D=3, M=500",
        gpflow.models.SGPR((X, Y), noise_variance=0.1, **kwargs()),
        TightSGPR((X, Y), noise_variance=0.1, **kwargs()),
        None,
        rounds,
    )


def uncollapsed(rounds: int, seed: int, classification: bool) -> Result:
    num_data, batch_size, num_inducing = 100_000, 1024, 1000
    rng = np.random.default_rng(seed)
    X = synthetic_inputs(rng, num_data, 3)
    f = latent(X)
    if classification:
        Y = (f + 0.3 * rng.standard_normal(f.shape) > 0).astype(np.float64)
    else:
        Y = f + 0.1 * rng.standard_normal(f.shape)
    Z = X[rng.choice(num_data, num_inducing, replace=False)].copy()
    rows = rng.choice(num_data, batch_size, replace=False)
    batch = (tf.constant(X[rows]), tf.constant(Y[rows]))

    def kwargs() -> dict:
        likelihood = (
            gpflow.likelihoods.Bernoulli()
            if classification
            else gpflow.likelihoods.Gaussian(variance=0.1)
        )
        return dict(
            kernel=gpflow.kernels.SquaredExponential(),
            likelihood=likelihood,
            inducing_variable=Z.copy(),
            num_data=num_data,
        )

    name = "Bernoulli" if classification else "Gaussian"
    return compare(
        f"({'c' if classification else 'b'}) uncollapsed, {name}: N=100000, B=1024, M=1000",
        gpflow.models.SVGP(**kwargs()),
        TightSVGP(**kwargs()),
        batch,
        rounds,
    )


def report(results: list[Result], rounds: int) -> str:
    protocol = [
        "Quantity timed: one call of a `tf.function` that evaluates `model.training_loss` and "
        "its gradient w.r.t. all trainable variables (GradientTape), results fetched with "
        "`.numpy()`.",
        f"Each pair is warmed up (traced and compiled) with 2 untimed calls each, then timed for "
        f"{rounds} rounds; each round calls both models once, the order alternating between "
        "rounds, so machine noise affects both alike. Reported: median (and minimum) over the "
        "rounds; ratio = tight median / peer median; 'median of per-round ratios' pairs the "
        "two calls of each round.",
        "Data: synthetic, inputs uniform on [0, 10]^3, targets sum_d sin(x_d) + noise (classes: "
        "its sign). SE kernel (variance 1, lengthscale 1), inducing inputs a random subset of "
        "the inputs, no mean function.",
        "(a) `gpflow.models.SGPR` vs `TightSGPR`, N=10000, M=500, noise variance 0.1.",
        "(b) `gpflow.models.SVGP` vs `TightSVGP` (relaxation='beta'), num_data=100000, one fixed "
        "minibatch of B=1024 points, M=1000, whiten=True, full-covariance q_sqrt, Gaussian "
        "likelihood (variance 0.1).",
        "(c) as (b) with a Bernoulli likelihood (Gauss-Hermite variational expectations).",
        "Goal stated in the issue: ratio <= 1.05.",
    ]
    rows = []
    for r in results:
        peer, tight = np.median(r.peer_times), np.median(r.tight_times)
        paired = np.median(np.asarray(r.tight_times) / np.asarray(r.peer_times))
        rows.append(
            [
                r.setting,
                f"{r.peer} / {r.tight}",
                f"{peer:.4f}",
                f"{tight:.4f}",
                f"**{tight / peer:.3f}**",
                f"{paired:.3f}",
                f"{min(r.peer_times):.4f}",
                f"{min(r.tight_times):.4f}",
            ]
        )
    table = markdown_table(
        [
            "setting",
            "models (peer / tight)",
            "peer median s",
            "tight median s",
            "ratio",
            "median of per-round ratios",
            "peer min s",
            "tight min s",
        ],
        rows,
    )
    raw = ["", "## Raw times (s, in round order)", ""]
    for r in results:
        raw.append(f"- {r.setting}")
        raw.append(f"  - {r.peer}: " + ", ".join(f"{t:.4f}" for t in r.peer_times))
        raw.append(f"  - {r.tight}: " + ", ".join(f"{t:.4f}" for t in r.tight_times))
    return (
        header("Cost of one ELBO + gradient step: tight models vs GPflow peers", protocol)
        + "\n## Results\n\n"
        + table
        + "\n".join(raw)
        + "\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=15, help="timed rounds per pair")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--no-classification", action="store_true", help="skip (c), the Bernoulli case"
    )
    args = parser.parse_args()

    results = [
        collapsed(args.rounds, args.seed),
        uncollapsed(args.rounds, args.seed, classification=False),
    ]
    if not args.no_classification:
        results.append(uncollapsed(args.rounds, args.seed, classification=True))
    for r in results:
        ratio = np.median(r.tight_times) / np.median(r.peer_times)
        print(f"{r.setting}: ratio {ratio:.3f}")
    write_result("cost.md", report(results, args.rounds))


if __name__ == "__main__":
    main()
