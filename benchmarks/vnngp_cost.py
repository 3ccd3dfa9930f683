"""
Cost of one VNNGP training step as M = N grows: ``gpflow_tight.VNNGP`` (K neighbours, data batch
B, inducing batch B_u) should cost O((B + B_u) K^3) per step whatever M. Beside it, in the same
rounds, SVGP with M = 1024, the one-off neighbour tables, and optionally (``--gpytorch-python``)
GPyTorch's ``NNVariationalStrategy`` through ``vnngp_gpytorch.py`` in a separate process.
"""

import harness
import numpy as np

NAME = "vnngp_cost"
VNN, VNN_PLAIN, VNN_ADAM, SVGP = "VNNGP", "VNNGP (X, Y)", "VNNGP + Adam", "SVGP"
GOAL_RATIO, GOAL_FLAT = 0.5, 1.05  # issue 16: ≤ 0.5x GPyTorch's fastest mode, flat within 5 %
TORCH = {"mode1": "GPyTorch mode 1", "mode2": "GPyTorch mode 2", "mode1_adam": "GPyTorch 1 + Adam"}
SETTINGS = ["rounds", "batch_size", "inducing_batch_size", "svgp_inducing", "dim", "lengthscale",
            "noise", "threads", "seed"]  # fmt: skip
PRESETS = {"quick": dict(sizes=[1000, 3000], neighbors=[32], rounds=5)}


def arguments(parser):
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 100_000, 1_000_000])
    parser.add_argument("--neighbors", type=int, nargs="+", default=[32])
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--inducing-batch-size", type=int, default=256)
    parser.add_argument("--svgp-inducing", type=int, default=1024)
    parser.add_argument("--dim", type=int, default=3)
    parser.add_argument("--lengthscale", type=float, default=1.0)
    parser.add_argument("--noise", type=float, default=0.1)
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--threads", type=int, default=1, help="TensorFlow (and torch) threads")
    parser.add_argument("--gpytorch-python", help="python of a virtualenv with torch + gpytorch")
    parser.add_argument(
        "--gpytorch-own-table-max",
        type=int,
        default=100_000,
        help="above this M, GPyTorch gets the sequential neighbour table",
    )
    parser.add_argument("--seed", type=int, default=0)


def plan(args):
    keys = []
    for k in args.neighbors:
        keys += [harness.keyed(args, SETTINGS, M=m, K=k) for m in args.sizes]
        if len(args.sizes) > 1:
            keys.append(harness.keyed(args, SETTINGS, direct=[args.sizes[0], args.sizes[-1]], K=k))
    return keys


def data(num_data, key):
    rng = np.random.default_rng(key["seed"])
    X = rng.uniform(0.0, 10.0, size=(num_data, key["dim"]))
    return X, np.sin(X).sum(1, keepdims=True) + 0.1 * rng.standard_normal((num_data, 1))


def vnngp(X, key):
    import gpflow

    from gpflow_tight import VNNGP

    kernel = gpflow.kernels.Matern52(lengthscales=np.full(key["dim"], key["lengthscale"]))
    return VNNGP(kernel, gpflow.likelihoods.Gaussian(key["noise"]), X, key["K"], num_data=len(X),
                 inducing_batch_size=key["inducing_batch_size"], q_sqrt=np.full((len(X), 1), 0.1),
                 seed=key["seed"])  # fmt: skip


def batches(model, X, Y, key, rng):
    import tensorflow as tf

    table = model.training_data(X, Y)
    rows = [rng.choice(len(X), key["batch_size"], replace=False) for _ in range(16)]
    return [tuple(tf.constant(a[r]) for a in table) for r in rows]


def run(key, args):
    import time

    import gpflow

    if "direct" in key:  # the smallest and the largest M interleaved in the same rounds
        fns = {}
        for m in key["direct"]:
            X, Y = data(m, key)
            model = vnngp(X, key)
            rng = np.random.default_rng(key["seed"] + 1)
            cycle = batches(model, X, Y, key, rng)
            fns[str(m)] = harness.step_function(model, cycle)
            fns[f"{m} (X, Y)"] = harness.step_function(model, [b[:2] for b in cycle])
        return dict(times=harness.interleaved(fns, key["rounds"]))
    if not hasattr(run, "warm"):  # TensorFlow's one-off start-up, untimed
        run.warm = vnngp(data(100, key)[0], {**key, "K": 8}).training_data(*data(100, key))
    X, Y = data(key["M"], key)
    start = time.perf_counter()
    model = vnngp(X, key)
    construct = time.perf_counter() - start
    start = time.perf_counter()
    model.training_data(X, Y)
    table = time.perf_counter() - start
    rng = np.random.default_rng(key["seed"] + 1)
    cycle = batches(model, X, Y, key, rng)
    Z = rng.uniform(0.0, 10.0, size=(key["svgp_inducing"], key["dim"]))
    kernel = gpflow.kernels.Matern52(lengthscales=np.full(key["dim"], key["lengthscale"]))
    svgp = gpflow.models.SVGP(kernel, gpflow.likelihoods.Gaussian(key["noise"]), Z, num_data=len(X))
    step = harness.step_function
    fns = {
        VNN: step(model, cycle),
        VNN_PLAIN: step(model, [b[:2] for b in cycle]),
        VNN_ADAM: step(model, cycle, 1e-3),
        SVGP: step(svgp, [b[:2] for b in cycle]),
    }
    out = dict(construct=construct, data_table=table, times=harness.interleaved(fns, key["rounds"]))
    if args.gpytorch_python:
        out["torch"] = gpytorch(args.gpytorch_python, X, Y, key, args.gpytorch_own_table_max)
    return out


def gpytorch(python, X, Y, key, own_table_max):
    import json
    import subprocess
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as folder:
        np.savez(Path(folder) / "data.npz", X=X, Y=Y)
        command = [python, str(harness.HERE / "vnngp_gpytorch.py"), f"--data={folder}/data.npz",
                   f"--k={key['K']}", f"--batch-size={key['batch_size']}",
                   f"--rounds={key['rounds']}", f"--threads={key['threads']}",
                   f"--lengthscale={key['lengthscale']}", f"--noise={key['noise']}"]  # fmt: skip
        if len(X) > own_table_max:  # GPyTorch's own O(M^2) table would take hours
            from gpflow_tight.neighbors import sequential_nearest_neighbors

            table, _ = sequential_nearest_neighbors(X, key["K"])
            np.save(Path(folder) / "table.npy", table)
            command.append(f"--neighbor-table={folder}/table.npy")
        result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode:
        return {"error": (result.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(result.stdout.strip().splitlines()[-1])


def setup_cell(torch):
    if "setup_seconds" not in torch:
        return "—"
    seconds = f"{torch['setup_seconds']:.2f}"
    return f"{seconds} (table given)" if torch.get("given_table") else seconds


def fastest(torch_medians):
    """GPyTorch's fastest step mode (loss and gradient; the Adam mode excluded)."""
    return min(v for m, v in torch_medians.items() if m != "mode1_adam")


def series(rows):
    """name -> [(M, median seconds)] over the rows of one K, GPyTorch's modes included."""
    out = {}
    for r in rows:
        medians = {n: np.median(t) for n, t in r["times"].items()}
        medians.update(
            {TORCH[m]: np.median(t) for m, t in r.get("torch", {}).get("times", {}).items()}
        )
        for name, value in medians.items():
            out.setdefault(name, []).append((r["key"]["M"], float(value)))
    return out


def render(report, records, missing, args):
    rows = [r for r in records if "M" in r["key"]]
    direct = [r for r in records if "direct" in r["key"]]
    k = (rows or direct)[0]["key"] if records else harness.keyed(args, SETTINGS)
    torch = next((r["torch"] for r in rows if "versions" in r.get("torch", {})), None)
    sizes = sorted({r["key"]["M"] for r in rows})
    protocol = [
        f"Data: synthetic, M = N in {{{', '.join(f'{m:,}' for m in sizes)}}}, D = {k['dim']}, "
        f"inputs uniform on [0, 10]^{k['dim']} (a fixed domain, so the density grows with N), "
        "targets sum_d sin(x_d) + N(0, 0.1^2). Inducing inputs = all training inputs (Z = X).",
        f"Kernel Matérn-5/2 ARD (variance 1, lengthscales {k['lengthscale']}), Gaussian "
        f"likelihood (variance {k['noise']}), float64.",
        f"`gpflow_tight.VNNGP(kernel, likelihood, X, K, num_data=N, inducing_batch_size="
        f"{k['inducing_batch_size']}, q_sqrt=0.1, seed={k['seed']})`, random ordering; data "
        f"batches (B = {k['batch_size']}) carry the neighbour rows of `model.training_data(X, "
        "Y)`; 'VNNGP (X, Y)' is the same step on plain `(X_batch, Y_batch)` batches, as GPflow "
        "users train SVGP (each row is found in Z in the graph by a lexicographic binary "
        "search, O(B D log M)). Every data row is an inducing input, so the data term is read "
        "off q(u) (no kernel work), and the KL is computed on B_u inducing points drawn "
        "uniformly with replacement (B_u batched K x K Cholesky solves).",
        f"Reference: `gpflow.models.SVGP` with M = {k['svgp_inducing']} inducing inputs "
        "(uniform on the input domain), full-rank whitened q(u), the same kernel, likelihood "
        "and data batches.",
        "Timed: one compiled call returning the loss and its gradient w.r.t. all trainable "
        "variables, fetched as dense arrays; 'VNNGP + Adam' also applies a `tf_keras` Adam update "
        "(dense over all M q_mu and q_sqrt entries). The batches cycle through 16 pre-drawn "
        f"random batches. Warm-up: 2 untimed calls; then {k['rounds']} rounds, each calling "
        "every model once, the order reversing between rounds; medians (ms); ratio = median / "
        "median of SVGP in the same rounds.",
        "One-off costs: 'construct' = the `VNNGP` constructor (the prior neighbour table, "
        "`gpflow_tight.neighbors.sequential_nearest_neighbors`, exact); 'data table' = "
        "`model.training_data(X, Y)` (the K nearest inducing inputs of every training input).",
        f"TensorFlow threads: {k['threads']} intra-op and inter-op.",
    ]
    if torch:
        protocol += [
            f"GPyTorch (torch {torch['versions']['torch']}, gpytorch "
            f"{torch['versions']['gpytorch']}, {torch['nnlib']}) ran **as a separate process**, "
            "right after the TensorFlow rounds of the same row, on the same data, through "
            "`benchmarks/vnngp_gpytorch.py`: `NNVariationalStrategy(k=K, training_batch_size=B)` "
            "with a mean-field q, `ScaleKernel(MaternKernel(nu=2.5))` with the same "
            "hyperparameters, `VariationalELBO(num_data=N)`, float64, the same thread count. "
            "Mode 1: the data batch and the KL batch are the same B indices and the "
            "data term is read off q(u), so it solves B (not 2B) K x K systems per step. Mode 2: "
            "a separate random data batch, located in Z by a faiss 1-NN search, and the next KL "
            "block. '+ Adam' adds `torch.optim.Adam.step()`. Steps on the first-k block of an "
            "epoch or a short last block are excluded. 'GPyTorch setup' = the "
            "`NNVariationalStrategy` constructor. Above M = "
            f"{args.gpytorch_own_table_max:,} GPyTorch is given the sequential neighbour table "
            "(`gpflow_tight.neighbors.sequential_nearest_neighbors`, in GPyTorch's order), "
            "because its own setup searches a flat faiss index once per inducing point, O(M^2) "
            "(its times below extrapolate to over an hour at 10^6); its setup is then marked "
            "'table given'. Ratios between GPyTorch and TensorFlow columns compare different "
            "processes run one after the other.",
        ]
    report.head("VNNGP: cost per training step as M = N grows", records, protocol, missing)
    findings = []
    for K in sorted({r["key"]["K"] for r in rows}):
        mine = [r for r in rows if r["key"]["K"] == K]
        modes = [m for m in TORCH if any(m in r.get("torch", {}).get("times", {}) for r in mine)]
        body = []
        for r in mine:
            t = {n: np.median(v) for n, v in r["times"].items()}
            tt = {m: np.median(v) for m, v in r.get("torch", {}).get("times", {}).items()}
            body.append(
                [f"{r['key']['M']:,}"]
                + [f"{1e3 * t[n]:.1f}" if n in t else "—" for n in (VNN, VNN_PLAIN, VNN_ADAM, SVGP)]
                + [f"{t[VNN] / t[SVGP]:.2f}"]
                + [f"{1e3 * tt[m]:.1f}" if m in tt else "—" for m in modes]
                + ([f"{t[VNN] / fastest(tt):.2f}" if tt else "—"] if modes else [])
                + [f"{r['construct']:.2f}", f"{r['data_table']:.2f}"]
                + ([setup_cell(r.get("torch", {}))] if modes else [])
            )
        report.section(f"K = {K}")
        report.table(["M = N", *(f"{n} (ms)" for n in (VNN, VNN_PLAIN, VNN_ADAM, SVGP)),
                      "VNNGP / SVGP", *(f"{TORCH[m]} (ms)" for m in modes)]
                     + (["VNNGP / fastest GPyTorch"] if modes
                     else []) + ["construct (s)", "data table (s)"] + (["GPyTorch setup (s)"] if
                     modes else []), body)  # fmt: skip
        ends = series(mine)
        ratio = [dict(ends[VNN])[m] / dict(ends[SVGP])[m] for m in (sizes[0], sizes[-1])]
        growth = {n: p[-1][1] / p[0][1] for n, p in ends.items() if len(p) > 1}
        findings.append(
            f"K = {K}, M from {sizes[0]:,} to {sizes[-1]:,}: the VNNGP / SVGP ratio of the same "
            f"rounds changes by x{ratio[1] / ratio[0]:.2f}; medians change by "
            + ", ".join(f"x{g:.2f} ({n})" for n, g in growth.items())
            + "."
        )
        for name in (VNN, VNN_PLAIN):
            ratios = {}
            for r in mine:
                tt = {m: np.median(v) for m, v in r.get("torch", {}).get("times", {}).items()}
                if tt and name in r["times"]:
                    ratios[r["key"]["M"]] = np.median(r["times"][name]) / fastest(tt)
            if not ratios:
                continue
            worst = max(ratios.values())
            verdict = (
                "meets the goal"
                if worst <= GOAL_RATIO
                else f"misses the goal (≤ {GOAL_RATIO}) by x{worst / GOAL_RATIO:.2f}"
            )
            findings.append(
                f"K = {K}: '{name}' / GPyTorch's fastest step mode (mode 1 or 2, loss and "
                "gradient, median) = " + ", ".join(f"{v:.2f} at M = {m:,}" for m, v in
                ratios.items()) + f": worst {worst:.2f}, which {verdict}."
            )  # fmt: skip
    svgp = [np.median(r["times"][SVGP]) for r in rows]
    if svgp:
        findings.append(
            f"SVGP's step, which does not depend on M, varied by x{max(svgp) / min(svgp):.2f} "
            "across the rows: absolute times move with the load of other jobs, so the ratios of "
            "the same rounds and the direct check are the measures of growth with M."
        )
    if direct:
        body = []
        for r in direct:
            small, large = (str(m) for m in r["key"]["direct"])
            value, per_round, paired = harness.ratio(r["times"], large, small)
            body.append([r["key"]["K"], f"{1e3 * np.median(r['times'][small]):.1f}",
                         f"{1e3 * np.median(r['times'][large]):.1f}", f"{value:.2f}",
                         f"{np.median(per_round):.2f}", f"{paired.losses}/{paired.n} "
                         f"(p = {paired.p_sign:.2g})"])  # fmt: skip
            flat = ("within" if value <= GOAL_FLAT else "outside") + " the 5 % goal"
            findings.append(
                f"Direct check, K = {r['key']['K']}: a step at M = {int(large):,} takes "
                f"x{value:.2f} the time at M = {int(small):,} ({flat}), slower in "
                f"{harness.of(paired.losses, paired.n, 'rounds')} ({paired.sign()}): "
                + ("a measurable M-dependence." if paired.significant() else "no clear growth.")
            )
            plain = [f"{m} (X, Y)" for m in r["key"]["direct"]]
            if all(p in r["times"] for p in plain):
                value, _, paired = harness.ratio(r["times"], plain[1], plain[0])
                body.append(
                    [
                        f"{r['key']['K']} (X, Y)",
                        f"{1e3 * np.median(r['times'][plain[0]]):.1f}",
                        f"{1e3 * np.median(r['times'][plain[1]]):.1f}",
                        f"{value:.2f}",
                        "",
                        f"{paired.losses}/{paired.n} (p = {paired.p_sign:.2g})",
                    ]
                )
                findings.append(
                    f"Direct check, K = {r['key']['K']}, plain (X, Y) batches: x{value:.2f} "
                    f"from M = {int(small):,} to {int(large):,} ("
                    + ("within" if value <= GOAL_FLAT else "outside") + " the 5 % goal), slower "
                    f"in {harness.of(paired.losses, paired.n, 'rounds')} ({paired.sign()})."
                )  # fmt: skip
        small, large = (int(m) for m in direct[0]["key"]["direct"])
        report.section("Direct check: the smallest and the largest M in the same rounds")
        report.add(f"A fresh VNNGP at M = {small:,} and one at M = {large:,} (same K, batches and "
                   "settings), their steps interleaved in one process.", "")  # fmt: skip
        report.table(["K", f"M = {small:,} (ms)", f"M = {large:,} (ms)", "ratio",
                      "median of per-round ratios", "larger M slower in"], body)  # fmt: skip
    if rows:
        report.figure(plot(rows), "vnngp_cost.png", "time per step against M")
    report.section("Findings")
    report.bullets(findings)


def plot(rows):
    import matplotlib.pyplot as plt

    fig, (ax, ax_nn) = plt.subplots(1, 2, figsize=(12, 6))
    for K, colour in zip(sorted({r["key"]["K"] for r in rows}), ["C0", "C1", "C2"]):
        mine = [r for r in rows if r["key"]["K"] == K]
        for name, points in series(mine).items():
            if name == SVGP and colour != "C0":
                continue
            style = {VNN: "-o", VNN_PLAIN: "-D", VNN_ADAM: "-s", SVGP: ":x"}.get(
                name, "--^" if name == TORCH["mode1"] else "--v"
            )
            ax.plot(*zip(*[(m, 1e3 * t) for m, t in points]), style, color="k" if name == SVGP else
                    colour, alpha=1.0 if name in (VNN, SVGP, TORCH["mode1"]) else 0.55,
                    label=name if name == SVGP else f"{name}, K={K}")  # fmt: skip
        m = [r["key"]["M"] for r in mine]
        ax_nn.plot(
            m, [r["construct"] for r in mine], "-o", color=colour, label=f"VNNGP constructor, K={K}"
        )
        ax_nn.plot(m, [r["data_table"] for r in mine], "-s", color=colour, alpha=0.55,
                   label=f"VNNGP training_data, K={K}")  # fmt: skip
        setup = [(r["key"]["M"], r["torch"]["setup_seconds"]) for r in mine
                 if "setup_seconds" in r.get("torch", {})
                 and not r["torch"].get("given_table")]  # fmt: skip
        if setup:
            ax_nn.plot(*zip(*setup), "--^", color=colour, label=f"GPyTorch setup, K={K}")
    ax.set(xscale="log", yscale="log", xlabel="M = N", ylabel="ms per step (median)",
           title="Training step")  # fmt: skip
    ax_nn.set(xscale="log", yscale="log", xlabel="M = N", ylabel="seconds (once)",
              title="One-off neighbour tables")  # fmt: skip
    for a in (ax, ax_nn):
        a.grid(True, which="both", alpha=0.3)
        a.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.15))
    fig.tight_layout()
    return fig


if __name__ == "__main__":
    harness.main(__import__(__name__))
