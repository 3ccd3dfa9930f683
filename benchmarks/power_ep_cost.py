"""
Cost of one training step (objective and its gradient) of `PowerEPSGP` against its GPflow peers
`GPRFITC` and `SGPR` on the same data and parameters: alpha = 0.5, alpha = 1 (FITC) and
alpha = 0 (VFE) for several M, plus PITC blocks (block_size = M), reported separately. Optionally
(on by default) an op-level TensorFlow profile of one step of each model shows where the time
goes.

Run from the repository root: ``.venv/bin/python benchmarks/power_ep_cost.py [--rounds 15]``.
Writes ``benchmarks/results/power_ep_cost.md``.
"""

import argparse
import collections
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from common import (
    RESULTS_DIR,
    header,
    interleaved_times,
    markdown_table,
    setup,
    write_result,
)

setup()

import gpflow  # noqa: E402
import tensorflow as tf  # noqa: E402
from cost import latent, step_function, synthetic_inputs  # noqa: E402

from gpflow_tight import PowerEPSGP  # noqa: E402

FITC, SGPR = "GPRFITC", "SGPR"
PEP_HALF, PEP_ONE, PEP_ZERO, PITC = "PEP α=0.5", "PEP α=1", "PEP α=0", "PITC (PEP α=1, blocks)"
# (model, peer): the rows of the main table; the first peer of each model is its own limit.
COMPARISONS = [
    (PEP_HALF, FITC),
    (PEP_HALF, SGPR),
    (PEP_ONE, FITC),
    (PEP_ZERO, SGPR),
    (SGPR, FITC),
]
OP_EVENT = re.compile(r"^(?P<name>[^:\s]+):(?P<type>[A-Za-z_][A-Za-z0-9_]*)$")


@dataclass
class Setting:
    num_inducing: int
    times: dict[str, list[float]]
    losses: dict[str, float]
    gradients: dict[str, dict[str, np.ndarray]]
    block_sizes: list[int] = field(default_factory=list)
    seconds: float = 0.0


def build_models(
    X: np.ndarray, Y: np.ndarray, Z: np.ndarray, noise: float, pitc: bool
) -> dict[str, gpflow.models.GPModel]:
    """Every model with the same data, kernel parameters, noise and pseudo-inputs."""

    def kwargs() -> dict:
        kernel = gpflow.kernels.SquaredExponential(lengthscales=np.ones(X.shape[1]))
        return dict(kernel=kernel, inducing_variable=Z.copy(), noise_variance=noise)

    models: dict[str, gpflow.models.GPModel] = {
        FITC: gpflow.models.GPRFITC((X, Y), **kwargs()),
        SGPR: gpflow.models.SGPR((X, Y), **kwargs()),
        PEP_HALF: PowerEPSGP((X, Y), alpha=0.5, **kwargs()),
        PEP_ONE: PowerEPSGP((X, Y), alpha=1.0, **kwargs()),
        PEP_ZERO: PowerEPSGP((X, Y), alpha=0.0, **kwargs()),
    }
    if pitc:
        models[PITC] = PowerEPSGP((X, Y), alpha=1.0, block_size=len(Z), **kwargs())
    return models


def named_gradients(model: gpflow.models.GPModel) -> tuple[float, dict[str, np.ndarray]]:
    """Loss and its gradient w.r.t. each trainable parameter, keyed by parameter path."""
    parameters = {
        path: p
        for path, p in gpflow.utilities.parameter_dict(model).items()
        if p.trainable and not path.startswith(".likelihood.variance_lower")
    }
    variables = [p.unconstrained_variable for p in parameters.values()]
    with tf.GradientTape() as tape:
        loss = model.training_loss()
    grads = tape.gradient(loss, variables)
    return float(loss.numpy()), {path: g.numpy() for path, g in zip(parameters, grads)}


def run_setting(
    num_inducing: int, args: argparse.Namespace, X: np.ndarray, Y: np.ndarray
) -> Setting:
    rng = np.random.default_rng(args.seed + num_inducing)
    Z = X[rng.choice(len(X), num_inducing, replace=False)].copy()
    models = build_models(X, Y, Z, args.noise, pitc=not args.no_pitc)
    losses, gradients = {}, {}
    for name, model in models.items():
        losses[name], gradients[name] = named_gradients(model)
    start = time.perf_counter()
    times = interleaved_times(
        {name: step_function(model, None) for name, model in models.items()},
        rounds=args.rounds,
        warmup=2,
    )
    setting = Setting(num_inducing, times, losses, gradients, seconds=time.perf_counter() - start)
    if PITC in models:
        setting.block_sizes = [len(block) for block in models[PITC].blocks]  # type: ignore
    print(
        f"M={num_inducing}: {setting.seconds:.1f} s; "
        + ", ".join(f"{n} {np.median(t):.4f}" for n, t in times.items()),
        flush=True,
    )
    return setting


def profile_steps(
    models: dict[str, gpflow.models.GPModel], steps: int
) -> dict[str, tuple[float, collections.Counter, collections.Counter]]:
    """
    Per model: wall seconds per step, and seconds per step by TensorFlow op type and by op name,
    from the TensorFlow profiler's trace (``tensorflow.tsl`` xplane protobuf).
    """
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    out = {}
    for name, model in models.items():
        step = step_function(model, None)
        step(), step()
        folder = Path(tempfile.mkdtemp(prefix="power_ep_cost_profile_"))
        try:
            tf.profiler.experimental.start(str(folder))
            start = time.perf_counter()
            for _ in range(steps):
                step()
            wall = (time.perf_counter() - start) / steps
            tf.profiler.experimental.stop()
            space = xplane_pb2.XSpace()
            space.ParseFromString(next(folder.rglob("*.xplane.pb")).read_bytes())
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        by_type: collections.Counter = collections.Counter()
        by_name: collections.Counter = collections.Counter()
        for plane in space.planes:
            for line in plane.lines:
                for event in line.events:
                    match = OP_EVENT.match(plane.event_metadata[event.metadata_id].name)
                    if match:
                        seconds = event.duration_ps / 1e12 / steps
                        by_type[match["type"]] += seconds
                        by_name[match["name"] + " (" + match["type"] + ")"] += seconds
        out[name] = (wall, by_type, by_name)
        print(f"profiled {name}: {wall:.4f} s per step", flush=True)
    return out


def relative_difference(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-300)


def gradient_difference(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    """Largest |g_a - g_b| / max|g_b| over the parameters (common paths)."""
    return max(
        float(np.max(np.abs(a[k] - b[k])) / max(np.max(np.abs(b[k])), 1e-300)) for k in b if k in a
    )


def report(
    settings: list[Setting],
    profile: dict[str, tuple[float, collections.Counter, collections.Counter]] | None,
    args: argparse.Namespace,
) -> str:
    protocol = [
        "Quantity timed: one call of a `tf.function` that evaluates `model.training_loss` and "
        "its gradient w.r.t. all trainable variables (kernel variance and lengthscales, noise "
        "variance, pseudo-inputs Z), results fetched with `.numpy()` (the step of "
        "`benchmarks/cost.py`).",
        f"Data: synthetic, N={args.num_data}, D={args.dim}, inputs uniform on [0, 10]^{args.dim}"
        f", targets sum_d sin(x_d) + N(0, 0.1^2) noise. SE-ARD kernel (variance 1, "
        f"lengthscales 1), noise variance {args.noise}, pseudo-inputs a random subset of the "
        "inputs, no mean function; every model of a setting gets the same data and parameters.",
        f"M in {{{', '.join(str(s.num_inducing) for s in settings)}}}. Models per M: "
        "`gpflow.models.GPRFITC`, `gpflow.models.SGPR`, `PowerEPSGP` with alpha 0.5, 1 and 0, "
        + (
            ""
            if args.no_pitc
            else "and `PowerEPSGP(alpha=1, block_size=M)` (PITC: k-means blocks of about M "
            "points, extra O(sum_b n_b^3) work; reported separately)"
        )
        + ".",
        f"All models of one M are warmed up (traced) with 2 untimed calls each, then timed "
        f"for {args.rounds} rounds; each round calls every model once, the order reversing "
        "between rounds, so machine noise affects all alike. Reported: median and minimum over "
        "the rounds; ratio = median / median of the peer in the same rounds; 'paired' = "
        "median of the per-round ratios.",
        f"TensorFlow threads: {args.threads} intra-op, {args.threads} inter-op (the 2 cores are "
        "shared with other jobs). Goal: ratio <= 1.05 against the GPflow peer.",
    ]
    rows = []
    for s in settings:
        for model, peer in COMPARISONS:
            t, p = np.asarray(s.times[model]), np.asarray(s.times[peer])
            rows.append(
                [
                    s.num_inducing,
                    f"{model} / {peer}",
                    f"{np.median(t):.4f}",
                    f"{np.median(p):.4f}",
                    f"**{np.median(t) / np.median(p):.3f}**",
                    f"{np.median(t / p):.3f}",
                    f"{t.min():.4f}",
                    f"{p.min():.4f}",
                ]
            )
    text = [
        header("Cost of one objective + gradient step: PowerEPSGP vs GPRFITC and SGPR", protocol),
        "## Results",
        "",
        markdown_table(
            [
                "M",
                "model / peer",
                "model median s",
                "peer median s",
                "ratio",
                "paired",
                "model min s",
                "peer min s",
            ],
            rows,
        ),
        "`SGPR / GPRFITC` is a reference row: the two GPflow models differ in cost too.",
        "",
    ]
    if not args.no_pitc:
        rows = []
        for s in settings:
            t, p = np.asarray(s.times[PITC]), np.asarray(s.times[FITC])
            sizes = np.asarray(s.block_sizes)
            rows.append(
                [
                    s.num_inducing,
                    f"{len(sizes)} blocks, sizes {sizes.min()}-{sizes.max()} "
                    f"(mean {sizes.mean():.0f}), padded to {sizes.max()}",
                    f"{np.median(t):.4f}",
                    f"{np.median(p):.4f}",
                    f"{np.median(t) / np.median(p):.2f}",
                ]
            )
        text += [
            "## PITC (block factors, block_size = M)",
            "",
            "No GPflow peer exists; the ratio is against GPRFITC (the same model with singleton "
            "blocks) and is expected to exceed 1 by the block work O(sum_b n_b^3 + N S M), S "
            "= padded block size.",
            "",
            markdown_table(
                ["M", "blocks (k-means)", "PITC median s", "GPRFITC median s", "ratio"], rows
            ),
        ]
    rows = []
    for s in settings:
        for model, peer in ((PEP_ONE, FITC), (PEP_ZERO, SGPR)):
            rows.append(
                [
                    s.num_inducing,
                    f"{model} vs {peer}",
                    f"{s.losses[model]:.6f}",
                    f"{s.losses[peer]:.6f}",
                    f"{relative_difference(s.losses[model], s.losses[peer]):.1e}",
                    f"{gradient_difference(s.gradients[model], s.gradients[peer]):.1e}",
                ]
            )
    text += [
        "## Same numbers",
        "",
        "The limits compute the same objective and gradient as their peers, so the timings "
        "compare equal work (gradient difference: max over parameters of max |g - g_peer| / "
        "max |g_peer|).",
        "",
        markdown_table(
            ["M", "models", "loss", "peer loss", "rel. difference", "gradient difference"], rows
        ),
    ]
    if profile:
        text += profile_section(profile, args.profile_m, args.profile_steps)
    text += ["## Raw times (s, in round order)", ""]
    for s in settings:
        text.append(f"- M={s.num_inducing}")
        text += [f"  - {n}: " + ", ".join(f"{x:.4f}" for x in t) for n, t in s.times.items()]
    return "\n".join(text) + "\n"


def profile_section(
    profile: dict[str, tuple[float, collections.Counter, collections.Counter]],
    num_inducing: int,
    steps: int,
) -> list[str]:
    names = list(profile)
    total: collections.Counter = collections.Counter()
    for _, by_type, _ in profile.values():
        total.update(by_type)
    top = [op for op, _ in total.most_common(12)]
    rows = [[op] + [f"{profile[n][1].get(op, 0.0):.4f}" for n in names] for op in top]
    rows.append(
        ["other op types"]
        + [f"{sum(v for k, v in profile[n][1].items() if k not in top):.4f}" for n in names]
    )
    rows.append(["**sum of op times**"] + [f"{sum(profile[n][1].values()):.4f}" for n in names])
    rows.append(["**wall time per step**"] + [f"{profile[n][0]:.4f}" for n in names])
    lines = [
        f"## Where the time goes (TensorFlow profiler, M={num_inducing})",
        "",
        f"Seconds per step by op type, mean of {steps} profiled steps after warm-up "
        "(`tf.profiler.experimental`, one thread: op times add up to about the wall time). "
        "Forward and gradient ops are counted together.",
        "",
        markdown_table(["op type", *names], rows),
    ]
    for name in names:
        if name in (PEP_HALF, PITC):
            by_name = profile[name][2]
            lines += [
                f"Most expensive ops of {name} (s per step; `gradient_tape/...` = backward pass):",
                "",
                markdown_table(
                    ["op (type)", "s"], [[op, f"{s:.4f}"] for op, s in by_name.most_common(12)]
                ),
            ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=15, help="timed rounds per M")
    parser.add_argument("--num-inducing", type=int, nargs="+", default=[100, 300, 500])
    parser.add_argument("--num-data", type=int, default=10_000)
    parser.add_argument("--dim", type=int, default=4)
    parser.add_argument("--noise", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="TensorFlow threads")
    parser.add_argument("--no-pitc", action="store_true", help="skip the PITC variant")
    parser.add_argument("--no-profile", action="store_true", help="skip the op profile")
    parser.add_argument("--profile-m", type=int, default=300, help="M of the op profile")
    parser.add_argument("--profile-steps", type=int, default=3)
    args = parser.parse_args()
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)

    rng = np.random.default_rng(args.seed)
    X = synthetic_inputs(rng, args.num_data, args.dim)
    Y = latent(X) + 0.1 * rng.standard_normal((args.num_data, 1))
    settings = [run_setting(m, args, X, Y) for m in args.num_inducing]
    for s in settings:
        for model, peer in COMPARISONS:
            ratio = np.median(s.times[model]) / np.median(s.times[peer])
            print(f"M={s.num_inducing}: {model} / {peer} = {ratio:.3f}")
    profile = None
    if not args.no_profile:
        rng = np.random.default_rng(args.seed + args.profile_m)
        Z = X[rng.choice(len(X), args.profile_m, replace=False)].copy()
        models = build_models(X, Y, Z, args.noise, pitc=not args.no_pitc)
        profile = profile_steps(
            {n: models[n] for n in (FITC, SGPR, PEP_HALF, PITC) if n in models},
            args.profile_steps,
        )
    text = report(settings, profile, args)
    notes = RESULTS_DIR / "power_ep_cost_notes.md"
    if notes.exists():  # discussion written after a run, kept across re-runs
        text += "\n" + notes.read_text()
    write_result("power_ep_cost.md", text)


if __name__ == "__main__":
    main()
