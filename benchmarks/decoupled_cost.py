"""
Cost of one training step (loss and gradient) of the orthogonally decoupled models with a
mean-only orthogonal set against SOLVE-GP's: (a) ODVGP against SOLVEGP with M/2 + M/2 points
(and SVGP with M) on one minibatch; (b) ODGPR against SOLVEGPR with M/2 + M/2 (and SGPR on the
union) on the full data, each on its exact collapsed bound.
"""

import harness
import numpy as np
from solve_cost import decoupled_problem, timed_steps

NAME = "decoupled_cost"
SOLVE, OD, SVGP = "SOLVEGP", "ODVGP", "SVGP (M)"
SOLVE_R, OD_R, SGPR = "SOLVEGPR", "ODGPR", "SGPR (union)"
SETTINGS = ["rounds", "batch_size", "dim", "lengthscale", "noise", "threads", "seed"]
PRESETS = {"quick": dict(rounds=3, sizes=[32], collapsed_sizes=[32], num_data=500,
                         collapsed_num_data=300)}  # fmt: skip


def arguments(parser):
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--sizes", type=int, nargs="*", default=[128, 256, 512])
    parser.add_argument("--collapsed-sizes", type=int, nargs="*", default=[64, 128, 256])
    parser.add_argument("--num-data", type=int, default=5000, help="N of (a)")
    parser.add_argument("--collapsed-num-data", type=int, default=2000, help="N of (b)")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--dim", type=int, default=8)
    parser.add_argument("--lengthscale", type=float, default=2.0)
    parser.add_argument("--noise", type=float, default=0.1)
    parser.add_argument("--threads", type=int, default=0, help="0: TensorFlow's default")
    parser.add_argument("--seed", type=int, default=0)


def plan(args):
    keys = [harness.keyed(args, SETTINGS + ["num_data"], part="a", M=m) for m in args.sizes]
    return keys + [
        harness.keyed(args, SETTINGS + ["collapsed_num_data"], part="b", M=m)
        for m in args.collapsed_sizes
    ]


def run(key, args):
    import gpflow

    from gpflow_tight import ODGPR, ODVGP, SOLVEGP, SOLVEGPR

    X, Y, Z, Zu, Zv, kernel, batch, uncollapsed = decoupled_problem(key)
    if key["part"] == "a":
        models = {
            SOLVE: SOLVEGP(**uncollapsed(Zu), orthogonal_inducing_variable=Zv.copy()),
            OD: ODVGP(**uncollapsed(Zu), orthogonal_inducing_variable=Zv.copy()),
            SVGP: gpflow.models.SVGP(**uncollapsed(Z)),
        }
    else:
        noise = key["noise"]
        models = {
            SOLVE_R: SOLVEGPR((X, Y), kernel(), Zu.copy(), Zv.copy(), noise_variance=noise),
            OD_R: ODGPR((X, Y), kernel(), Zu.copy(), Zv.copy(), noise_variance=noise),
            SGPR: gpflow.models.SGPR((X, Y), kernel(), Z.copy(), noise_variance=noise),
        }
    return timed_steps(models, batch, key["rounds"])


def render(report, records, missing, args):
    k = records[0]["key"] if records else harness.keyed(args, SETTINGS)
    a = [r for r in records if r["key"]["part"] == "a"]
    b = [r for r in records if r["key"]["part"] == "b"]
    protocol = [
        "Quantity timed: one compiled call that evaluates `model.training_loss` and its "
        "gradient w.r.t. all trainable variables, the loss and every gradient fetched with "
        "`.numpy()` (`harness.step_function`).",
        f"Every model of one setting is traced and called once untimed, once more as warm-up, "
        f"then timed for {k['rounds']} rounds; each round calls every model once, in an order "
        "that reverses between rounds. Reported: median (ms), minimum, ratio of medians against "
        "the SOLVE model of the setting (bold), and the median [quartiles] of the per-round "
        "ratios.",
        f"Data: synthetic, inputs standard normal in D = {k['dim']}, targets sum_d sin(x_d)/"
        f"sqrt(D) + N(0, 0.3^2). Kernel Matérn-3/2 ARD (variance 1, lengthscales "
        f"{k['lengthscale']}); Gaussian noise variance {k['noise']}; float64.",
        "Inducing inputs: a random subset Z of M training inputs; Z_u = its first M/2 rows and "
        "Z_v = the other M/2; SVGP/SGPR take all of Z. All trainable.",
        f"(a) uncollapsed: N = {a[0]['key']['num_data'] if a else args.num_data:,}, one fixed "
        f"minibatch of B = {k['batch_size']}, whitened, q at its default (q_mu = 0, q_sqrt = I). "
        "`SOLVEGP` has a full-rank q(v⊥); `ODVGP` a mean only (S_v = C_vv), so M_v(M_v + 1)/2 "
        "fewer parameters and no R_vᵀa_v product; otherwise the same code (orthogonal.py).",
        f"(b) collapsed: N = {(b[0]['key'] if b else vars(args))['collapsed_num_data']:,}, "
        "full data in every step. `SOLVEGPR` (bound 'solve': one more M/2 x M/2 Cholesky for "
        "Δ) against `ODGPR` (bound 'od': a trace of A_vA_vᵀ and the diagonal of L_Q, which the "
        "union's Cholesky already holds); `gpflow.models.SGPR` on Z_u ∪ Z_v beside them.",
        "TensorFlow threads: "
        + (f"{k['threads']} intra-op" if k["threads"] else "TensorFlow's default")
        + "; one Python process. The machine (2 cores) was shared with other people's jobs "
        "while this ran, so absolute times are noisy; the interleaved rounds and per-round "
        "ratios are what to read.",
    ]
    report.head("ODVGP / ODGPR: cost of one ELBO + gradient step against SOLVE-GP", records,
                protocol, missing)  # fmt: skip

    def per_round(r, name, ref):
        return harness.ratio(r["times"], name, ref)[1]

    def rows(part, names, ref):
        out = []
        for r in part:
            for name in names:
                t = 1e3 * np.asarray(r["times"][name])
                value, ratios, _ = harness.ratio(r["times"], name, ref)
                out.append(
                    [
                        f"M = {r['key']['M']}",
                        name,
                        f"{np.median(t):.1f}",
                        f"{t.min():.1f}",
                        f"**{value:.2f}**",
                        harness.quartiles(ratios),
                        f"{r['parameters'][name]:,}",
                        f"{r['losses'][name]:.2f}",
                    ]
                )
        return out

    headers = ["setting", "model", "median ms", "min ms", "/ SOLVE", "per-round: median [q1, q3]",
               "trainable numbers", "loss at init"]  # fmt: skip
    findings = []
    for part, title, names, (od, solve, peer) in (
        (a, "(a) Uncollapsed: ODVGP vs SOLVEGP (M/2 + M/2), one minibatch step",
         [SOLVE, OD, SVGP], (OD, SOLVE, SVGP)),
        (b, "(b) Collapsed: ODGPR vs SOLVEGPR (M/2 + M/2), full data",
         [SOLVE_R, OD_R, SGPR], (OD_R, SOLVE_R, SGPR)),
    ):  # fmt: skip
        if not part:
            continue
        report.section(title)
        report.table(headers, rows(part, names, solve))
        ratios = [float(np.median(per_round(r, od, solve))) for r in part]
        peers = [float(np.median(per_round(r, od, peer))) for r in part]
        sizes = ", ".join(str(r["key"]["M"]) for r in part)
        test = harness.Paired(*(np.concatenate([r["times"][m] for r in part]) for m in (od, solve)))
        findings.append(
            f"{od} / {solve} per step (per-round medians at M = {sizes}): "
            f"{', '.join(f'{x:.2f}' for x in ratios)}; {od} is faster in "
            f"{harness.of(test.wins, test.n, 'rounds')} ({test.sign()}). "
            f"{od} / {peer}: {', '.join(f'{x:.2f}' for x in peers)}."
        )
        if part is b:
            lower = all(r["losses"][OD_R] >= r["losses"][SOLVE_R] for r in b)
            findings.append(
                "At initialisation ODGPR's loss is "
                + ("at or above" if lower else "not always above")
                + " SOLVEGPR's in every setting (L_OD <= L_SOLVE), as it must be."
            )
    findings.append(
        "Both orthogonal models share the O(N(M_u^2 + M_u M_v + M_v^2)) projection a_v = "
        "L_v⁻¹C_vf, so dropping S_v saves only the work on q(v⊥)'s covariance (O(N M_v^2) "
        "uncollapsed, an M_v^3 Cholesky collapsed): expect ratios a little below 1, not the "
        "linear-in-M_v cost of Salimbeni et al.'s dual parameterisation, which this package "
        "does not implement."
    )
    report.section("Findings")
    report.bullets(findings)


if __name__ == "__main__":
    harness.main(__import__(__name__))
