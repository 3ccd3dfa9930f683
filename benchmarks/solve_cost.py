"""
Cost of one training step (loss and gradient) of the orthogonally decoupled models against
GPflow's peers with the same total number of inducing points: (a) SOLVEGP and TightSOLVEGP with
M/2 + M/2 against SVGP and TightSVGP with M (and SVGP with M/2) on one minibatch; (b) SOLVEGPR
('solve' and 'thesis' bounds) against SGPR on the union Z_u ∪ Z_v; (c) TensorFlow's Cholesky
against GEMM, with and without gradients.
"""

import harness
import numpy as np

NAME = "solve_cost"
SVGP, SOLVE, TSVGP, TSOLVE, HALF = "SVGP", "SOLVEGP", "TightSVGP", "TightSOLVEGP", "SVGP M/2"
SGPR, SOLVE_R, THESIS_R = "SGPR (union)", "SOLVEGPR solve", "SOLVEGPR thesis"
SETTINGS = ["rounds", "batch_size", "dim", "lengthscale", "noise", "threads", "seed"]
PRESETS = {"quick": dict(rounds=3, sizes=[64], unwhitened_sizes=[], collapsed_sizes=[64],
                         op_sizes=[128], num_data=2000, collapsed_num_data=1000)}  # fmt: skip


def arguments(parser):
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--sizes", type=int, nargs="*", default=[256, 512, 1024])
    parser.add_argument("--unwhitened-sizes", type=int, nargs="*", default=[1024])
    parser.add_argument("--collapsed-sizes", type=int, nargs="*", default=[128, 256, 512])
    parser.add_argument("--op-sizes", type=int, nargs="*", default=[512, 1024], help="n of (c)")
    parser.add_argument("--num-data", type=int, default=10_000, help="N of (a)")
    parser.add_argument("--collapsed-num-data", type=int, default=5000, help="N of (b)")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--dim", type=int, default=8)
    parser.add_argument("--lengthscale", type=float, default=2.0)
    parser.add_argument("--noise", type=float, default=0.1)
    parser.add_argument("--no-half", dest="half", action="store_false", help="no SVGP with M/2")
    parser.add_argument("--threads", type=int, default=0, help="0: TensorFlow's default")
    parser.add_argument("--seed", type=int, default=0)


def plan(args):
    a = SETTINGS + ["num_data", "half"]
    keys = [harness.keyed(args, a, part="a", M=m, whiten=True) for m in args.sizes]
    keys += [harness.keyed(args, a, part="a", M=m, whiten=False) for m in args.unwhitened_sizes]
    keys += [harness.keyed(args, SETTINGS + ["collapsed_num_data"], part="b", M=m, whiten=True)
             for m in args.collapsed_sizes]  # fmt: skip
    return keys + (
        [harness.keyed(args, SETTINGS, part="c", n=args.op_sizes)] if args.op_sizes else []
    )


def run(key, args):
    import gpflow

    from gpflow_tight import SOLVEGP, SOLVEGPR, TightSOLVEGP, TightSVGP

    if key["part"] == "c":
        return linear_algebra(key)
    X, Y, Z, Zu, Zv, kernel, batch, uncollapsed = decoupled_problem(key)
    if key["part"] == "a":

        def kw(Zr):
            return uncollapsed(Zr, whiten=key["whiten"])

        models = {
            SVGP: gpflow.models.SVGP(**kw(Z)),
            SOLVE: SOLVEGP(**kw(Zu), orthogonal_inducing_variable=Zv.copy()),
            TSVGP: TightSVGP(**kw(Z)),
            TSOLVE: TightSOLVEGP(**kw(Zu), orthogonal_inducing_variable=Zv.copy()),
        }
        if key["half"]:
            models[HALF] = gpflow.models.SVGP(**kw(Zu))
    else:
        noise = key["noise"]
        models = {SGPR: gpflow.models.SGPR((X, Y), kernel(), Z.copy(), noise_variance=noise)}
        for name, bound in ((SOLVE_R, "solve"), (THESIS_R, "thesis")):
            models[name] = SOLVEGPR(
                (X, Y),
                kernel(),
                Zu.copy(),
                orthogonal_inducing_variable=Zv.copy(),
                noise_variance=noise,
                bound=bound,
            )
    return timed_steps(models, batch, key["rounds"])


def decoupled_problem(key):
    """
    The synthetic problem of parts (a) and (b) (also decoupled_cost.py's): data, M random
    training inputs Z split into halves Z_u and Z_v, a kernel factory, the fixed minibatch of (a)
    (None for (b)), and the keywords of an SVGP-family model on given inducing inputs.
    """
    import gpflow
    import tensorflow as tf

    N = key["num_data"] if key["part"] == "a" else key["collapsed_num_data"]
    rng = np.random.default_rng(key["seed"])
    X = rng.standard_normal((N, key["dim"]))
    Y = np.sin(X).sum(1, keepdims=True) / key["dim"] ** 0.5 + 0.3 * rng.standard_normal((N, 1))
    rng = np.random.default_rng(key["seed"] + 1)
    Z = X[rng.choice(N, key["M"], replace=False)]  # Z_u, Z_v: its disjoint halves
    Zu, Zv = Z[: key["M"] // 2], Z[key["M"] // 2 :]

    def kernel():
        return gpflow.kernels.Matern32(lengthscales=np.full(key["dim"], key["lengthscale"]))

    batch = None
    if key["part"] == "a":
        rows = rng.choice(N, key["batch_size"], replace=False)
        batch = (tf.constant(X[rows]), tf.constant(Y[rows]))

    def uncollapsed(Zr, **options):
        likelihood = gpflow.likelihoods.Gaussian(variance=key["noise"])
        return dict(kernel=kernel(), likelihood=likelihood, inducing_variable=Zr.copy(),
                    num_data=N, **options)  # fmt: skip

    return X, Y, Z, Zu, Zv, kernel, batch, uncollapsed


def timed_steps(models, batch, rounds):
    """Each model's compiled step traced and called once untimed, then interleaved rounds."""
    fns = {name: harness.step_function(model, batch) for name, model in models.items()}
    losses = {name: fn() for name, fn in fns.items()}  # traces and compiles: one untimed call
    return dict(times=harness.interleaved(fns, rounds, warmup=1), losses=losses,
                parameters={n: int(sum(np.prod(v.shape) for v in m.trainable_variables))
                            for n, m in models.items()})  # fmt: skip


def linear_algebra(key):
    """(c) One compiled Cholesky or GEMM, with or without the gradient of a linear functional."""
    import tensorflow as tf

    rng, fns = np.random.default_rng(key["seed"]), {}
    for n in key["n"]:
        G = rng.standard_normal((n, n))
        K = G @ G.T / n + np.eye(n)
        for grad in (False, True):
            for op, x, fn in (("Cholesky", K, tf.linalg.cholesky),
                              ("GEMM", G, lambda x: tf.linalg.matmul(x, x))):  # fmt: skip
                variable = tf.Variable(x)
                weights = tf.constant(np.random.default_rng(1).standard_normal(x.shape))

                @tf.function
                def step(fn=fn, variable=variable, weights=weights, grad=grad):
                    with tf.GradientTape() as tape:
                        loss = tf.reduce_sum(fn(variable) * weights)
                    return tape.gradient(loss, variable) if grad else loss

                fns[f"{op} n={n}" + (" + grad" if grad else "")] = lambda s=step: s().numpy()
    for fn in fns.values():
        fn()
    return dict(times=harness.interleaved(fns, key["rounds"], warmup=1))


def render(report, records, missing, args):
    k = records[0]["key"] if records else harness.keyed(args, SETTINGS)
    a = [r for r in records if r["key"]["part"] == "a"]
    b = [r for r in records if r["key"]["part"] == "b"]
    c = next((r for r in records if r["key"]["part"] == "c"), None)
    protocol = [
        "Quantity timed: one compiled call that evaluates `model.training_loss` and its "
        "gradient w.r.t. all trainable variables, the loss and every gradient fetched with "
        "`.numpy()`.",
        f"Every model of one setting is traced and called once untimed, once more as warm-up, "
        f"then timed for {k['rounds']} rounds; each round calls every model once, in an order "
        "that reverses between rounds. Reported: median (ms), minimum, ratio of medians against "
        "the reference of the setting (bold), and the median [quartiles] of the per-round "
        "ratios.",
        f"Data: synthetic, inputs standard normal in D = {k['dim']}, targets sum_d sin(x_d)/"
        f"sqrt(D) + N(0, 0.3^2). Kernel Matérn-3/2 ARD (variance 1, lengthscales "
        f"{k['lengthscale']}); Gaussian noise variance {k['noise']}; float64.",
        "Inducing inputs: a random subset Z of M training inputs; Z_u = its first M/2 rows and "
        "Z_v = the other M/2. SVGP/TightSVGP/SGPR use all of Z, the SOLVE models (Z_u, Z_v); "
        "all trainable.",
        f"(a) uncollapsed: N = {a[0]['key']['num_data'] if a else args.num_data:,}, one fixed "
        f"minibatch of B = {k['batch_size']}, full-rank q (q_sqrt = I, q_mu = 0), whiten=True "
        "unless the row says whiten=False. Reference: `gpflow.models.SVGP` with M points. "
        "`SOLVEGP` / `TightSOLVEGP` with M_u = M_v = M/2, each set with its own full-rank q; "
        "the tight models use relaxation='beta', beta initialised at the noise variance. 'SVGP "
        "M/2': SVGP with Z_u only, so SOLVEGP / (SVGP M/2) is the cost of the orthogonal half.",
        f"(b) collapsed: N = {(b[0]['key'] if b else vars(args))['collapsed_num_data']:,}, "
        "full data in every step. Reference: `gpflow.models.SGPR` with Z = Z_u ∪ Z_v. "
        "`SOLVEGPR(..., bound='solve')` (the exact collapsed SOLVE-GP bound, one more M/2 x M/2 "
        "Cholesky for Δ) and `bound='thesis'` (numerically SGPR on the union).",
        "TensorFlow threads: "
        + (f"{k['threads']} intra-op" if k["threads"] else "TensorFlow's default")
        + "; one Python process.",
    ]
    report.head("SOLVE-GP: cost of one ELBO + gradient step against SVGP / SGPR", records,
                protocol, missing)  # fmt: skip

    def label(r):
        return f"M = {r['key']['M']}" + ("" if r["key"]["whiten"] else ", whiten=False")

    def per_round(r, name, ref):
        return harness.ratio(r["times"], name, ref)[1]

    def rows(part, names, ref, extra):
        out = []
        for r in part:
            for name in (n for n in names if n in r["times"]):
                t = 1e3 * np.asarray(r["times"][name])
                value, ratios, _ = harness.ratio(r["times"], name, ref)
                end = (
                    [f"{r['parameters'][name]:,}", f"{r['losses'][name]:.1f}"]
                    if part is a
                    else [f"{r['losses'][name]:.4f}"]
                )
                out.append(
                    [
                        label(r),
                        name,
                        *extra(r, name),
                        f"{np.median(t):.1f}",
                        f"{t.min():.1f}",
                        f"**{value:.2f}**",
                        harness.quartiles(ratios),
                        *end,
                    ]
                )
        return out

    findings = []
    if a:
        report.section("(a) Uncollapsed: SOLVEGP (M/2 + M/2) vs SVGP (M), one minibatch step")
        inducing = {SOLVE: "M/2 + M/2", TSOLVE: "M/2 + M/2", HALF: "M/2"}
        report.table(["setting", "model", "inducing", "median ms", "min ms", "/ SVGP(M)",
                      "per-round / SVGP(M): median [q1, q3]", "trainable numbers", "loss at init"],
                     rows(a, [SVGP, SOLVE, TSVGP, TSOLVE, HALF], SVGP,
                          lambda r, n: [inducing.get(n, "M")]))  # fmt: skip
        pairs = [(SOLVE, SVGP), (TSOLVE, SVGP), (TSVGP, SVGP), (TSOLVE, SOLVE), (SOLVE, HALF)]
        report.add("Summary: median [quartiles] of the per-round ratios.", "")
        names = {SVGP: "SVGP(M)", HALF: "SVGP(M/2)"}
        report.table(["setting", *(f"{x} / {names.get(y, y)}" for x, y in pairs)],
                     [[label(r)] + [harness.quartiles(per_round(r, x, y)) if y in r["times"]
                                    else "—" for x, y in pairs] for r in a])  # fmt: skip
        med = {(x, y): [float(np.median(per_round(r, x, y))) for r in a if y in r["times"]]
               for x, y in pairs}  # fmt: skip
        white = [r for r in a if r["key"]["whiten"]]
        solve = [float(np.median(per_round(r, SOLVE, SVGP))) for r in white]
        findings.append(
            "(a) SOLVEGP with M/2 + M/2 points costs "
            + ", ".join(f"{x:.2f} at M = {r['key']['M']}" for x, r in zip(solve, white))
            + " of SVGP with M points (whitened, per-round medians): "
            + ("cheaper per step at every M" if max(solve) < 1 else "not cheaper at every M")
            + (", the saving growing with M" if solve == sorted(solve, reverse=True) else "")
            + ". Its cubic work (two Cholesky factorisations of M/2, an M/2 x M/2 triangular "
            "solve and a GEMM) is about 0.46 M^3 flops against SVGP's M^3/3 for one Cholesky of "
            "M, so "
            + ("the saving is not explained by the flop count." if max(solve) < 1 else
               "a flop count predicts no saving.")
        )  # fmt: skip
        if med[(SOLVE, HALF)]:
            findings.append(
                f"Adding the orthogonal half: SOLVEGP costs {harness.span(med[(SOLVE, HALF)])} "
                "times SVGP with its M/2 regular points alone."
            )
        for x, y in ((TSVGP, SVGP), (TSOLVE, SOLVE)):
            test = harness.Paired(*(np.concatenate([r["times"][m] for r in a]) for m in (x, y)))
            findings.append(f"{x} / {y}: per-round medians {harness.span(med[(x, y)])}; {x} is "
                            f"slower in {harness.of(test.losses, test.n, 'rounds')} of all "
                            f"settings ({test.sign()}).")  # fmt: skip
        for r in (r for r in a if not r["key"]["whiten"]):
            same = [w for w in white if w["key"]["M"] == r["key"]["M"]]
            if same:
                x, y = (np.median(s["times"][SVGP]) for s in (r, same[0]))
                findings.append(
                    f"whiten=False at M = {r['key']['M']} makes SVGP's step {x / y:.1f} "
                    f"times longer ({1e3 * x:.0f} ms against {1e3 * y:.0f} ms whitened)."
                )
    if b:
        report.section("(b) Collapsed: SOLVEGPR (M/2 + M/2) vs SGPR on the union (M), full data")
        report.table(["setting", "model", "median ms", "min ms", "/ SGPR",
                      "per-round / SGPR: median [q1, q3]", "loss at init"],
                     rows(b, [SGPR, SOLVE_R, THESIS_R], SGPR, lambda r, n: []))  # fmt: skip
        th, so = ([float(np.median(per_round(r, n, SGPR))) for r in b] for n in (THESIS_R, SOLVE_R))
        equal = all(abs(r["losses"][THESIS_R] / r["losses"][SGPR] - 1) <= 1e-8 for r in b)
        lower = all(r["losses"][SOLVE_R] > r["losses"][SGPR] for r in b)
        findings.append(
            f"(b) SOLVEGPR costs {harness.span(th)} (bound='thesis') and {harness.span(so)} "
            f"(bound='solve') of SGPR on the union (M = {', '.join(str(r['key']['M']) for r in b)})"
            ": "
            + (
                "no 25-50 % saving, as expected: the thesis bound is SGPR's bound on the union "
                "evaluated by a blocked Cholesky (docs/solve.md, Derivations), so like for like it "
                "does the same flops; the thesis's 25-50 % counts each operation at unit cost."
                if min(th + so) > 0.75
                else "a saving of 25 % or more in some settings."
            )
            + f" At initialisation 'thesis' {'equals' if equal else 'does not equal'} SGPR on the "
            f"union and 'solve' is {'lower' if lower else 'not always lower'} (higher loss)."
        )
    if c:
        t = {name: float(np.median(v)) for name, v in c["times"].items()}
        body = []
        for name, s in t.items():
            op, n = name.split(" n=")[0], int(name.split("=")[1].split()[0])
            flops = (n**3 / 3 if op == "Cholesky" else 2 * n**3) / 1e9
            fwd = "grad" not in name
            body.append(
                [
                    op + ("" if fwd else " + gradient"),
                    n,
                    f"{1e3 * s:.1f}",
                    f"{flops:.3f}" if fwd else "—",
                    f"{flops / s:.1f}" if fwd else "—",
                ]
            )
        report.section("(c) Where the cubic time goes: Cholesky vs GEMM in TensorFlow")
        report.add(
            "One compiled `tf.linalg.cholesky` of an n x n SPD matrix, or `tf.linalg.matmul`"
            " of two n x n matrices, with or without the gradient of a random linear "
            "functional of the result. Flops: Cholesky n^3/3, GEMM 2n^3 (forward).",
            "",
        )
        report.table(["op", "n", "median ms", "forward GFLOP", "GFLOP/s"], body)
        n = max(c["key"]["n"])
        rate = [n**3 / 3 / t[f"Cholesky n={n}"], 2 * n**3 / t[f"GEMM n={n}"]]
        svgp = [np.median(r["times"][SVGP]) for r in a if r["key"]["M"] == n and r["key"]["whiten"]]
        findings.append(
            f"(c) At n = {n}, TensorFlow's Cholesky runs at {rate[0] / rate[1]:.2f} of GEMM's flop "
            f"rate, and its gradient takes {t[f'Cholesky n={n} + grad'] / t[f'Cholesky n={n}']:.1f}"
            f" times its forward pass; a Cholesky with its gradient "
            f"({1e3 * t[f'Cholesky n={n} + grad']:.0f} ms)"
            + (
                f" is {100 * t[f'Cholesky n={n} + grad'] / svgp[0]:.0f} % of SVGP's whole step at "
                f"M = {n} in (a)."
                if svgp
                else "."
            )
        )
    if a or b:
        report.figure(plot(a + b), "solve_cost.png", "step time against M")
    report.section("Findings")
    report.bullets(findings)


def plot(records):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 5))
    panels = [
        (axes[0], "a", [SVGP, SOLVE, TSVGP, TSOLVE, HALF], "(a) uncollapsed, one step on B = 256"),
        (axes[1], "b", [SGPR, SOLVE_R, THESIS_R], "(b) collapsed, one full-data step"),
    ]
    for ax, part, names, title in panels:
        for whiten in (True, False):
            mine = sorted(
                (r for r in records if r["key"]["part"] == part and r["key"]["whiten"] == whiten),
                key=lambda r: r["key"]["M"],
            )
            for i, name in enumerate(names):
                points = [
                    (r["key"]["M"], 1e3 * np.median(r["times"][name]))
                    for r in mine
                    if name in r["times"]
                ]
                if points:
                    ax.plot(
                        *zip(*points),
                        ["-o", "-s", "--o", "--s", ":x"][i],
                        color=f"C{i}",
                        label=name + ("" if whiten else ", whiten=False"),
                        alpha=1 if whiten else 0.5,
                        markersize=7 if whiten else 10,
                    )
        ax.set(xscale="log", yscale="log", ylabel="ms per step (median)", title=title,
               xlabel="total inducing points M (SOLVE: M/2 + M/2; 'SVGP M/2': M/2)")  # fmt: skip
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


if __name__ == "__main__":
    harness.main(__import__(__name__))
