"""
Cost of one training step (loss and its gradient) of the orthogonally decoupled models against
GPflow's peers with the same total number of inducing points:

(a) uncollapsed: ``gpflow_tight.SOLVEGP`` and ``TightSOLVEGP`` with M_u = M_v = M/2 against
    ``gpflow.models.SVGP`` and ``gpflow_tight.TightSVGP`` with M inducing points, and SVGP with
    M/2 (what the orthogonal half adds), on one fixed minibatch;
(b) collapsed: ``gpflow_tight.SOLVEGPR`` (``bound="solve"`` and ``"thesis"``) against
    ``gpflow.models.SGPR`` on the union Z_u ∪ Z_v.

Run from the repository root: ``.venv/bin/python benchmarks/solve_cost.py [--rounds 15]``.
Writes ``benchmarks/results/solve_cost.md``, ``benchmarks/results/solve_cost.png`` and the raw
timings ``benchmarks/results/solve_cost_raw.json`` (``--report-only`` rebuilds the report and
the plot from them).
"""

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
from common import RESULTS_DIR, header, interleaved_times, markdown_table, setup, write_result

setup()

import gpflow  # noqa: E402
import tensorflow as tf  # noqa: E402
from cost import step_function  # noqa: E402

from gpflow_tight import SOLVEGP, SOLVEGPR, TightSOLVEGP, TightSVGP  # noqa: E402

# model labels; "SVGP" is the reference of every uncollapsed row, "SGPR" of every collapsed one
SVGP, SOLVE, TSVGP, TSOLVE, SVGP_HALF = "SVGP", "SOLVEGP", "TightSVGP", "TightSOLVEGP", "SVGP M/2"
UNCOLLAPSED = [SVGP, SOLVE, TSVGP, TSOLVE, SVGP_HALF]
SGPR, SOLVE_R, THESIS_R = "SGPR (union)", "SOLVEGPR solve", "SOLVEGPR thesis"
COLLAPSED = [SGPR, SOLVE_R, THESIS_R]


@dataclass
class Setting:
    part: str  # "a" or "b"
    num_inducing: int  # total M
    whiten: bool
    times: dict[str, list[float]]
    losses: dict[str, float]
    num_parameters: dict[str, int]
    seconds: float  # wall time of the setting, compilation included


def make_data(num_data: int, dim: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Standard normal inputs (like standardised data); targets a smooth function plus noise."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((num_data, dim))
    f = np.sin(X).sum(axis=1, keepdims=True) / np.sqrt(dim)
    return X, f + 0.3 * rng.standard_normal(f.shape)


def kernel(dim: int, lengthscale: float) -> gpflow.kernels.Kernel:
    return gpflow.kernels.Matern32(variance=1.0, lengthscales=np.full(dim, lengthscale))


def num_parameters(model: gpflow.models.BayesianModel) -> int:
    return int(sum(np.prod(v.shape) for v in model.trainable_variables))


def time_models(
    part: str,
    num_inducing: int,
    whiten: bool,
    models: dict[str, gpflow.models.BayesianModel],
    batch: tuple | None,
    rounds: int,
) -> Setting:
    start = time.perf_counter()
    fns = {name: step_function(model, batch) for name, model in models.items()}
    losses = {name: fn() for name, fn in fns.items()}  # traces and compiles; one warm-up call
    times = interleaved_times(fns, rounds=rounds, warmup=1)
    seconds = time.perf_counter() - start
    setting = Setting(
        part,
        num_inducing,
        whiten,
        times,
        losses,
        {name: num_parameters(model) for name, model in models.items()},
        seconds,
    )
    reference = times[SVGP if part == "a" else SGPR]
    print(
        f"({part}) M={num_inducing} whiten={whiten}: {seconds:.0f} s; "
        + ", ".join(
            f"{name} {1e3 * np.median(t):.1f} ms ({np.median(t) / np.median(reference):.2f})"
            for name, t in times.items()
        ),
        flush=True,
    )
    return setting


def uncollapsed(num_inducing: int, whiten: bool, args: argparse.Namespace) -> Setting:
    X, Y = make_data(args.num_data, args.dim, args.seed)
    rng = np.random.default_rng(args.seed + 1)
    Z = X[rng.choice(len(X), num_inducing, replace=False)]  # Z_u, Z_v: disjoint halves
    half = num_inducing // 2
    Z_u, Z_v = Z[:half], Z[half:]
    rows = rng.choice(len(X), args.batch_size, replace=False)
    batch = (tf.constant(X[rows]), tf.constant(Y[rows]))

    def kwargs(Z_regular: np.ndarray) -> dict:
        return dict(
            kernel=kernel(args.dim, args.lengthscale),
            likelihood=gpflow.likelihoods.Gaussian(variance=args.noise),
            inducing_variable=Z_regular.copy(),
            num_data=args.num_data,
            whiten=whiten,
        )

    models = {
        SVGP: gpflow.models.SVGP(**kwargs(Z)),
        SOLVE: SOLVEGP(**kwargs(Z_u), orthogonal_inducing_variable=Z_v.copy()),
        TSVGP: TightSVGP(**kwargs(Z)),
        TSOLVE: TightSOLVEGP(**kwargs(Z_u), orthogonal_inducing_variable=Z_v.copy()),
    }
    if args.half:
        models[SVGP_HALF] = gpflow.models.SVGP(**kwargs(Z_u))
    return time_models("a", num_inducing, whiten, models, batch, args.rounds)


def collapsed(num_inducing: int, args: argparse.Namespace) -> Setting:
    X, Y = make_data(args.collapsed_num_data, args.dim, args.seed)
    rng = np.random.default_rng(args.seed + 1)
    Z = X[rng.choice(len(X), num_inducing, replace=False)]
    half = num_inducing // 2
    Z_u, Z_v = Z[:half], Z[half:]

    def kwargs() -> dict:
        return dict(kernel=kernel(args.dim, args.lengthscale), noise_variance=args.noise)

    models = {
        SGPR: gpflow.models.SGPR((X, Y), inducing_variable=Z.copy(), **kwargs()),
        SOLVE_R: SOLVEGPR((X, Y), **kwargs(), inducing_variable=Z_u.copy(),
                          orthogonal_inducing_variable=Z_v.copy(), bound="solve"),
        THESIS_R: SOLVEGPR((X, Y), **kwargs(), inducing_variable=Z_u.copy(),
                           orthogonal_inducing_variable=Z_v.copy(), bound="thesis"),
    }  # fmt: skip
    return time_models("b", num_inducing, True, models, None, args.rounds)


def op_step(fn: Callable[[tf.Tensor], tf.Tensor], x: np.ndarray, grad: bool) -> Callable[[], float]:
    """A compiled call of one linear-algebra op (and the gradient of a linear functional of it)."""
    variable = tf.Variable(x)
    weights = tf.constant(np.random.default_rng(1).standard_normal(fn(tf.constant(x)).shape))

    @tf.function
    def step() -> tuple[tf.Tensor, tf.Tensor]:
        with tf.GradientTape() as tape:
            y = fn(variable)
            loss = tf.reduce_sum(y * weights)
        return loss, tape.gradient(loss, variable) if grad else loss

    def run() -> float:
        loss, g = step()
        g.numpy()
        return float(loss.numpy())

    return run


def linear_algebra(args: argparse.Namespace) -> Setting:
    """(c) Cholesky and GEMM (forward, and forward + gradient) at the sizes the models factorise."""
    rng = np.random.default_rng(args.seed)
    fns = {}
    for n in args.op_sizes:
        G = rng.standard_normal((n, n))
        K = G @ G.T / n + np.eye(n)
        for grad in (False, True):
            suffix = " + grad" if grad else ""
            fns[f"Cholesky n={n}{suffix}"] = op_step(tf.linalg.cholesky, K, grad)
            fns[f"GEMM n={n}{suffix}"] = op_step(lambda x: tf.linalg.matmul(x, x), G, grad)
    start = time.perf_counter()
    losses = {name: fn() for name, fn in fns.items()}
    times = interleaved_times(fns, rounds=args.rounds, warmup=1)
    seconds = time.perf_counter() - start
    print(
        "(c) " + ", ".join(f"{name} {1e3 * np.median(t):.1f} ms" for name, t in times.items()),
        flush=True,
    )
    return Setting("c", 0, True, times, losses, {name: 0 for name in fns}, seconds)


def quartiles(values: np.ndarray) -> str:
    q1, q2, q3 = np.percentile(values, [25, 50, 75])
    return f"{q2:.2f} [{q1:.2f}, {q3:.2f}]"


def ratio_cells(times: dict[str, list[float]], name: str, reference: str) -> list[str]:
    """Ratio of medians and median [quartiles] of the per-round ratios."""
    t, r = np.asarray(times[name]), np.asarray(times[reference])
    return [f"**{np.median(t) / np.median(r):.2f}**", quartiles(t / r)]


def paired(s: Setting, name: str, reference: str) -> float:
    return float(np.median(np.asarray(s.times[name]) / np.asarray(s.times[reference])))


def span(values: list[float]) -> str:
    return f"{min(values):.2f}" if len(values) == 1 else f"{min(values):.2f}-{max(values):.2f}"


def findings(settings: list[Setting]) -> list[str]:
    """Notes on the measured numbers (per-round ratio medians); interpretation in plain text."""
    lines = ["## Findings", ""]
    white = [s for s in settings if s.part == "a" and s.whiten]
    black = [s for s in settings if s.part == "a" and not s.whiten]
    part_b = [s for s in settings if s.part == "b"]
    part_c = [s for s in settings if s.part == "c"]
    if white:
        by_m = ", ".join(f"{paired(s, SOLVE, SVGP):.2f} at M = {s.num_inducing}" for s in white)
        lines.append(
            f"- (a) SOLVEGP with M/2 + M/2 points costs {by_m} of SVGP with M points "
            "(whitened)"
            + (
                f", and {span([paired(s, SOLVE, SVGP) for s in black])} unwhitened at M = "
                f"{', '.join(str(s.num_inducing) for s in black)}"
                if black
                else ""
            )
            + ". So for the same total M the orthogonal split is cheaper per step here, and "
            "the saving grows with M, as the thesis and Shi et al. argue. It is larger than a "
            "flop count predicts: the cubic work of SOLVEGP (two Cholesky factorisations of "
            "M/2, the M/2 x M/2 triangular solve D_v = L_u^-1 K_uv and the GEMM D_v^T D_v for "
            "C_vv) is about 0.46 M^3 flops against SVGP's M^3/3 for one Cholesky of M, and the "
            "batch term about 2 M^2 B against 3 M^2 B. The saving comes from how slowly "
            "TensorFlow's Cholesky and its gradient run (part (c))."
        )
        if SVGP_HALF in white[0].times:
            lines.append(
                "- Adding the orthogonal half is not free: SOLVEGP costs "
                f"{span([paired(s, SOLVE, SVGP_HALF) for s in white + black])} times SVGP with "
                "its M/2 regular points alone (the C_vv factorisation, the M/2 x M/2 solve and "
                "GEMM, and the projections of the batch on both sets)."
            )
        lines.append(
            "- The tighter bounds cost the same as their base models: TightSVGP / SVGP "
            f"{span([paired(s, TSVGP, SVGP) for s in white + black])} and TightSOLVEGP / "
            f"SOLVEGP {span([paired(s, TSOLVE, SOLVE) for s in white + black])} (per-round "
            "medians; the quartiles above show the run-to-run noise of a few per cent). This "
            "agrees with the paper's 'almost identical run time'."
        )
        if black:
            s = black[0]
            same = [w for w in white if w.num_inducing == s.num_inducing]
            if same:
                lines.append(
                    f"- whiten=False at M = {s.num_inducing} makes SVGP's step "
                    f"{np.median(s.times[SVGP]) / np.median(same[0].times[SVGP]):.1f} times "
                    f"longer ({1e3 * np.median(s.times[SVGP]):.0f} ms against "
                    f"{1e3 * np.median(same[0].times[SVGP]):.0f} ms whitened): the KL then "
                    "needs solves with the M x M Cholesky factor of K_uu for q_sqrt. SOLVEGP "
                    "whitened or not does the same solves with M/2 x M/2 factors."
                )
    if part_b:
        lines.append(
            "- (b) Collapsed: SOLVEGPR with bound='thesis' costs "
            f"{span([paired(s, THESIS_R, SGPR) for s in part_b])} of SGPR on the union and "
            f"bound='solve' {span([paired(s, SOLVE_R, SGPR) for s in part_b])} (M = "
            f"{', '.join(str(s.num_inducing) for s in part_b)}). There is no 25-50 % saving: "
            "as spec §2.7 predicts, the like-for-like costs are about the same. The "
            "N-dependent work (O(N M^2), N = 5,000) dominates, the package builds the full "
            "M x M inner matrix B = I + A A^T of the union and factorises it as SGPR does, and "
            "only K_uu's factorisation is split into halves; the 'solve' bound's extra "
            "M/2 x M/2 Cholesky of B_v is lost in the noise. The losses at initialisation "
            "confirm that 'thesis' is SGPR on the union and that 'solve' is lower by Δ > 0."
        )
    if part_c:
        t = {name: float(np.median(v)) for name, v in part_c[0].times.items()}
        sizes = sorted({int(name.split(" n=")[1].split()[0]) for name in t})
        big, small = sizes[-1], sizes[0]
        key = f"Cholesky n={big} + grad"
        svgp_big = [s for s in white if s.num_inducing == big]
        share = (
            f", {100 * t[key] / np.median(svgp_big[0].times[SVGP]):.0f} % of SVGP's whole step "
            f"at M = {big} in (a)"
            if svgp_big
            else ""
        )
        lines.append(
            f"- (c) A Cholesky factorisation with its gradient costs {1e3 * t[key]:.0f} ms at "
            f"n = {big}{share}, against {1e3 * t[f'Cholesky n={small} + grad']:.0f} ms at "
            f"n = {small}. TensorFlow's Cholesky runs at a fraction of GEMM's flop rate (see "
            "the GFLOP/s column) and its gradient costs several times its forward pass, so "
            "replacing one Cholesky of M by two of M/2 saves far more time than the flops "
            "it saves. On hardware or libraries with a faster Cholesky the uncollapsed "
            "saving would be smaller."
        )
    lines += [
        "- Absolute times depend on the load of other jobs (the same script measured SVGP at "
        "M = 1024 between about 0.3 and 0.6 s per step in earlier runs on this machine); the "
        "ratios within a setting are the load-robust numbers.",
        "",
    ]
    return lines


def setting_label(s: Setting) -> str:
    return f"M = {s.num_inducing}" + ("" if s.whiten else ", whiten=False")


def report(settings: list[Setting], args: argparse.Namespace, seconds: float) -> str:
    protocol = [
        "Quantity timed (as in `cost.py`): one call of a `tf.function` that evaluates "
        "`model.training_loss` and its gradient w.r.t. all trainable variables (GradientTape), "
        "the loss and every gradient fetched with `.numpy()`.",
        f"Every model of one setting (row group) is traced and called once untimed, called "
        f"once more as warm-up, then timed for {args.rounds} rounds; each round calls every "
        "model once, in an order that reverses between rounds, so drifting load affects all "
        "alike. Reported: median over the rounds (ms), minimum, ratio of medians against the "
        "reference model of the same setting (bold), and the median [quartiles] of the "
        "per-round ratios (each model's time over the reference's time in the same round).",
        f"Data: synthetic, inputs standard normal in D = {args.dim} (like standardised UCI "
        f"inputs), targets sum_d sin(x_d)/sqrt(D) + N(0, 0.3^2). Kernel `gpflow.kernels."
        f"Matern32` with ARD lengthscales (variance 1, lengthscales {args.lengthscale}); "
        f"Gaussian likelihood, noise variance {args.noise}; float64; no mean function.",
        "Inducing inputs: a random subset Z of M training inputs; Z_u = its first M/2 rows and "
        "Z_v = the other M/2 (disjoint). SVGP/TightSVGP/SGPR use all of Z, the SOLVE models "
        "(Z_u, Z_v). All inducing inputs are trainable (they are in the gradient).",
        f"(a) uncollapsed: N = {args.num_data:,} (only the batch enters a step), one fixed "
        f"minibatch of B = {args.batch_size}, `num_data = N`, full-rank q (q_sqrt = I, q_mu = "
        "0), whiten=True (GPflow's default) unless the row says whiten=False. Reference: "
        "`gpflow.models.SVGP` with M inducing points. `SOLVEGP` / `TightSOLVEGP`: "
        "`gpflow_tight.SOLVEGP(kernel, likelihood, Z_u, Z_v, num_data=N, whiten=...)`, "
        "M_u = M_v = M/2, each set with its own full-rank q. `TightSVGP`, `TightSOLVEGP`: "
        "default relaxation='beta', beta initialised at the noise variance (one extra "
        "trainable scalar). 'SVGP M/2': `gpflow.models.SVGP` with Z_u only, so SOLVEGP / "
        "(SVGP M/2) is the cost of adding the orthogonal half.",
        f"(b) collapsed: N = {args.collapsed_num_data:,}, D = {args.dim}, full data in every "
        "step. Reference: `gpflow.models.SGPR` with Z = Z_u ∪ Z_v (M points). `SOLVEGPR((X, "
        "Y), kernel, Z_u, Z_v, bound=...)` with bound='solve' (the exact collapsed SOLVE-GP "
        "bound, one more M/2 x M/2 Cholesky for Δ) and bound='thesis' (numerically SGPR on "
        "the union, via the block factorisation).",
        "TensorFlow threads: "
        + ("TensorFlow's defaults" if not args.threads else f"{args.threads} intra-op")
        + "; one Python process; the 2 cores may be shared with other jobs (load average "
        "above).",
    ]
    lines = [header("SOLVE-GP: cost of one ELBO + gradient step against SVGP / SGPR", protocol)]
    part_a = [s for s in settings if s.part == "a"]
    part_b = [s for s in settings if s.part == "b"]
    if part_a:
        lines += [
            "## (a) Uncollapsed: SOLVEGP (M/2 + M/2) vs SVGP (M), one minibatch step",
            "",
            "Ratios against SVGP with M inducing points in the same rounds.",
            "",
        ]
        rows = []
        for s in part_a:
            for name in UNCOLLAPSED:
                if name not in s.times:
                    continue
                t = np.asarray(s.times[name])
                inducing = {SOLVE: "M/2 + M/2", TSOLVE: "M/2 + M/2", SVGP_HALF: "M/2"}
                rows.append(
                    [
                        setting_label(s),
                        name,
                        inducing.get(name, "M"),
                        f"{1e3 * np.median(t):.1f}",
                        f"{1e3 * t.min():.1f}",
                        *ratio_cells(s.times, name, SVGP),
                        f"{s.num_parameters[name]:,}",
                        f"{s.losses[name]:.1f}",
                    ]
                )
        lines.append(
            markdown_table(
                [
                    "setting",
                    "model",
                    "inducing",
                    "median ms",
                    "min ms",
                    "/ SVGP(M)",
                    "per-round / SVGP(M): median [q1, q3]",
                    "trainable numbers",
                    "loss at init",
                ],
                rows,
            )
        )
        summary = []
        for s in part_a:
            cells = [setting_label(s)]
            for name, reference in [
                (SOLVE, SVGP),
                (TSOLVE, SVGP),
                (TSVGP, SVGP),
                (TSOLVE, SOLVE),
                (SOLVE, SVGP_HALF),
            ]:
                if name in s.times and reference in s.times:
                    cells.append(ratio_cells(s.times, name, reference)[1])
                else:
                    cells.append("—")
            summary.append(cells)
        lines += [
            "Summary: median [quartiles] of the per-round ratios.",
            "",
            markdown_table(
                [
                    "setting",
                    "SOLVEGP / SVGP(M)",
                    "TightSOLVEGP / SVGP(M)",
                    "TightSVGP / SVGP(M)",
                    "TightSOLVEGP / SOLVEGP",
                    "SOLVEGP / SVGP(M/2)",
                ],
                summary,
            ),
        ]
    if part_b:
        lines += [
            "## (b) Collapsed: SOLVEGPR (M/2 + M/2) vs SGPR on the union (M), full data",
            "",
            "Ratios against SGPR on Z_u ∪ Z_v in the same rounds. 'loss at init' checks that "
            "bound='thesis' is SGPR on the union (equal losses) and that bound='solve' is "
            "lower by Δ (higher loss).",
            "",
        ]
        rows = []
        for s in part_b:
            for name in COLLAPSED:
                t = np.asarray(s.times[name])
                rows.append(
                    [
                        setting_label(s),
                        name,
                        f"{1e3 * np.median(t):.1f}",
                        f"{1e3 * t.min():.1f}",
                        *ratio_cells(s.times, name, SGPR),
                        f"{s.losses[name]:.4f}",
                    ]
                )
        lines.append(
            markdown_table(
                [
                    "setting",
                    "model",
                    "median ms",
                    "min ms",
                    "/ SGPR",
                    "per-round / SGPR: median [q1, q3]",
                    "loss at init",
                ],
                rows,
            )
        )
    part_c = [s for s in settings if s.part == "c"]
    if part_c:
        times = part_c[0].times
        rows = []
        for name, t in times.items():
            op, size = name.split(" n=")
            n = int(size.split()[0])
            flops = (n**3 / 3 if op == "Cholesky" else 2 * n**3) / 1e9
            forward = "+ grad" not in name
            rows.append(
                [
                    op + (" + gradient" if not forward else ""),
                    n,
                    f"{1e3 * np.median(t):.1f}",
                    f"{flops:.3f}" if forward else "—",
                    f"{flops / np.median(t):.1f}" if forward else "—",
                ]
            )
        lines += [
            "## (c) Where the cubic time goes: Cholesky vs GEMM in TensorFlow",
            "",
            "One compiled call of `tf.linalg.cholesky` of an n x n SPD matrix, or of "
            "`tf.linalg.matmul` of two n x n matrices, with or without the gradient of a random "
            "linear functional of the result (as a training step needs), same rounds and "
            "threads as above. Flop counts: Cholesky n^3/3, GEMM 2n^3 (forward only).",
            "",
            markdown_table(["op", "n", "median ms", "forward GFLOP", "GFLOP/s"], rows),
        ]
    lines += ["![step time against M](solve_cost.png)", ""]
    lines += findings(settings)
    lines += [f"Total run time of this script: {seconds / 60:.1f} min.", ""]
    return "\n".join(lines)


def plot(settings: list[Setting]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 5))
    panels = [
        (axes[0], "a", UNCOLLAPSED, "(a) uncollapsed, one step on B = 256"),
        (axes[1], "b", COLLAPSED, "(b) collapsed, one full-data step"),
    ]
    styles = ["-o", "-s", "--o", "--s", ":x"]
    for ax, part, names, title in panels:
        for whiten in (True, False):
            selected = sorted(
                (s for s in settings if s.part == part and s.whiten == whiten),
                key=lambda s: s.num_inducing,
            )
            if not selected:
                continue
            for i, name in enumerate(names):
                points = [
                    (s.num_inducing, 1e3 * np.median(s.times[name]))
                    for s in selected
                    if name in s.times
                ]
                if not points:
                    continue
                m, t = zip(*points)
                label = name + ("" if whiten else ", whiten=False")
                ax.plot(
                    m,
                    t,
                    styles[i],
                    color=f"C{i}",
                    label=label,
                    alpha=1.0 if whiten else 0.5,
                    markersize=7 if whiten else 10,
                )
        ax.set(
            xscale="log",
            yscale="log",
            xlabel="total inducing points M (SOLVE: M/2 + M/2; 'SVGP M/2': M/2)",
            ylabel="ms per step (median)",
            title=title,
        )
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    path = RESULTS_DIR / "solve_cost.png"
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--sizes", type=int, nargs="*", default=[256, 512, 1024])
    parser.add_argument(
        "--unwhitened-sizes",
        type=int,
        nargs="*",
        default=[1024],
        help="total M of the extra whiten=False settings of (a)",
    )
    parser.add_argument("--collapsed-sizes", type=int, nargs="*", default=[128, 256, 512])
    parser.add_argument(
        "--op-sizes", type=int, nargs="*", default=[512, 1024], help="n of (c); none: skip (c)"
    )
    parser.add_argument("--num-data", type=int, default=10_000, help="N of (a)")
    parser.add_argument("--collapsed-num-data", type=int, default=5000, help="N of (b)")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--dim", type=int, default=8)
    parser.add_argument("--lengthscale", type=float, default=2.0)
    parser.add_argument("--noise", type=float, default=0.1)
    parser.add_argument(
        "--no-half", dest="half", action="store_false", help="skip SVGP with M/2 points"
    )
    parser.add_argument("--threads", type=int, default=0, help="0: TensorFlow's default")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--report-only", action="store_true", help="rebuild from the raw JSON")
    args = parser.parse_args()
    raw = RESULTS_DIR / "solve_cost_raw.json"
    if args.report_only:
        stored = json.loads(raw.read_text())
        settings = [Setting(**s) for s in stored["settings"]]
        write_result("solve_cost.md", report(settings, args, stored["seconds"]))
        plot(settings)
        return
    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    start = time.perf_counter()
    settings: list[Setting] = []
    jobs: list[Callable[[], Setting]] = [
        *[lambda m=m: uncollapsed(m, True, args) for m in args.sizes],
        *[lambda m=m: uncollapsed(m, False, args) for m in args.unwhitened_sizes],
        *[lambda m=m: collapsed(m, args) for m in args.collapsed_sizes],
    ]
    if args.op_sizes:
        jobs.append(lambda: linear_algebra(args))
    for job in jobs:
        settings.append(job())
        seconds = time.perf_counter() - start  # raw timings after every setting: a crash keeps them
        raw.write_text(json.dumps({"settings": [asdict(s) for s in settings], "seconds": seconds}))
    write_result("solve_cost.md", report(settings, args, time.perf_counter() - start))
    plot(settings)


if __name__ == "__main__":
    main()
