"""
Cost of the Bayesian GPLVMs of gpflow_tight against GPflow's BayesianGPLVM: (a) one ELBO +
gradient step of TightBayesianGPLVM (analytic relaxation) against gpflow.models.BayesianGPLVM on
the same data and parameters; (b) one step of MinibatchBayesianGPLVM as N grows, beside the
collapsed models' step where N is small enough.
"""

import harness
import numpy as np

NAME = "gplvm_cost"
GOAL = 1.10
PEER, TIGHT = "BayesianGPLVM", "TightBayesianGPLVM"
MB_GRAD, MB_ADAM = "MinibatchBayesianGPLVM loss+grad", "MinibatchBayesianGPLVM Adam step"
PRESETS = {"quick": dict(rounds=3, collapsed_sizes=[1000], minibatch_sizes=[1000, 5000])}


def arguments(parser):
    parser.add_argument("--rounds", type=int, default=15, help="timed rounds per comparison")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--collapsed-sizes", type=int, nargs="*", default=[1000, 5000])
    parser.add_argument(
        "--minibatch-sizes", type=int, nargs="*", default=[1000, 5000, 10_000, 50_000]
    )
    parser.add_argument(
        "--max-collapsed", type=int, default=10_000, help="largest collapsed N of (b)"
    )
    parser.add_argument("--batch-size", type=int, default=256)


def plan(args):
    keys = [harness.keyed(args, ["rounds", "seed"], part="a", N=n, Q=q, M=m)
            for n in args.collapsed_sizes for q in (2, 5) for m in (32, 128)]  # fmt: skip
    settings = ["rounds", "seed", "batch_size", "max_collapsed"]
    return keys + [harness.keyed(args, settings, part="b", N=n) for n in args.minibatch_sizes]


def run(key, args):
    import gpflow
    import tensorflow as tf

    from gpflow_tight import MinibatchBayesianGPLVM, TightBayesianGPLVM

    N, Q, M = key["N"], key.get("Q", 5), key.get("M", 64)
    rng = np.random.default_rng(key["seed"])
    X = rng.standard_normal((N, Q))
    Y = np.sin(X @ rng.standard_normal((Q, 12))) + 0.1**0.5 * rng.standard_normal((N, 12))
    X_mean = X + 0.3 * rng.standard_normal(X.shape)
    Z = X_mean[rng.choice(N, M, replace=False)]

    def kernel():
        return gpflow.kernels.SquaredExponential(lengthscales=np.linspace(1.0, 2.0, Q))

    def collapsed(cls, **kw):
        model = cls(
            Y, X_mean.copy(), np.full(X.shape, 0.1), kernel(), inducing_variable=Z.copy(), **kw
        )
        model.likelihood.variance.assign(0.1)
        return model

    if key["part"] == "a":
        peer, tight = (
            collapsed(gpflow.models.BayesianGPLVM),
            collapsed(TightBayesianGPLVM, relaxation="analytic"),
        )
        fns = {PEER: harness.step_function(peer), TIGHT: harness.step_function(tight)}
        return dict(times=harness.interleaved(fns, key["rounds"]),
                    elbo=dict(peer=float(peer.elbo()), tight=float(tight.elbo())))  # fmt: skip
    minibatch = MinibatchBayesianGPLVM(N, 12, X_mean.copy(), np.full(X.shape, 0.1), kernel(),
                                       Z.copy(), noise_variance=0.1, tight=True)  # fmt: skip
    rows = np.random.default_rng(key["seed"]).choice(N, key["batch_size"], replace=False)
    batch = (tf.constant(rows[:, None]), tf.constant(Y[rows]))
    fns = {MB_GRAD: harness.step_function(minibatch, batch),
           MB_ADAM: harness.step_function(minibatch, batch, adam=1e-4)}  # fmt: skip
    if N <= key["max_collapsed"]:
        fns[f"{PEER} loss+grad"] = harness.step_function(collapsed(gpflow.models.BayesianGPLVM))
        fns[f"{TIGHT} loss+grad"] = harness.step_function(collapsed(TightBayesianGPLVM))
    return dict(times=harness.interleaved(fns, key["rounds"]))


def render(report, records, missing, args):
    part_a = [r for r in records if r["key"]["part"] == "a"]
    part_b = [r for r in records if r["key"]["part"] == "b"]
    k = records[0]["key"] if records else vars(args)
    protocol = [
        "Quantity timed: one compiled call that evaluates `model.training_loss` (-ELBO) and its "
        "gradient w.r.t. all trainable variables (latent means and variances, inducing inputs, "
        "kernel, noise; for the minibatch model also q(u)), results fetched with `.numpy()`. "
        "'Adam step' adds the `tf_keras` Adam update of all variables (lr 1e-4) in the same "
        "`tf.function`, as `fit_adam` runs it.",
        f"Timing: 2 untimed warm-up calls per function, then {k['rounds']} rounds; each round "
        "calls every function once, in an order that alternates between rounds. Reported: "
        "medians; ratio = tight median / peer median; 'per-round' = median of the per-round "
        "ratios, with the number of rounds in which the tight model was slower (sign test).",
        "Data: synthetic, latent X ~ N(0, I_Q), Y = sin(X W) + noise (W standard normal [Q, 12], "
        "noise variance 0.1); q(X) means = X + N(0, 0.3^2), variances 0.1; inducing inputs a "
        "random subset of the means; SE-ARD kernel, variance 1, lengthscales evenly spaced on "
        "[1, 2]; noise variance 0.1; float64.",
        "(a) `gpflow.models.BayesianGPLVM` (peer) vs `gpflow_tight.TightBayesianGPLVM` "
        "(relaxation='analytic') with identical parameters; the two bounds at those parameters "
        "are also given (tight must be >= peer).",
        f"(b) `MinibatchBayesianGPLVM` (tight=True, whiten=True), one fixed minibatch of "
        f"B={args.batch_size} rows, M=64, Q=5, P=12, for N in {[r['key']['N'] for r in part_b]}; "
        f"the collapsed models (full data per step) for N <= {args.max_collapsed} only.",
        f"Goal for (a): ratio <= {GOAL:.2f}.",
    ]
    report.head("Cost of the Bayesian GPLVMs: TightBayesianGPLVM and MinibatchBayesianGPLVM",
                records, protocol, missing)  # fmt: skip
    rows, ratios, per_round, ordered = [], [], [], 0
    for r in part_a:
        value, per, paired = harness.ratio(r["times"], TIGHT, PEER)
        ratios.append(value)
        per_round.append(float(np.median(per)))
        ordered += r["elbo"]["tight"] >= r["elbo"]["peer"]
        rows.append([r["key"]["N"], r["key"]["Q"], r["key"]["M"],
                     f"{np.median(r['times'][PEER]):.4f}", f"{np.median(r['times'][TIGHT]):.4f}",
                     f"**{value:.3f}**", f"{per_round[-1]:.3f}", f"{paired.losses}/{paired.n}",
                     f"{r['elbo']['peer']:.1f}", f"{r['elbo']['tight']:.1f}",
                     "yes" if r["elbo"]["tight"] >= r["elbo"]["peer"] else "**NO**"])  # fmt: skip
    report.section("(a) Collapsed: TightBayesianGPLVM vs BayesianGPLVM, one ELBO + gradient step")
    report.table(["N", "Q", "M", f"{PEER} median s", f"{TIGHT} median s", "ratio", "per-round",
                  "tight slower in", "ELBO peer", "ELBO tight", "tight >= peer"], rows)  # fmt: skip
    labels = sorted({label for r in part_b for label in r["times"]})
    report.section("(b) MinibatchBayesianGPLVM step time against N")
    report.table(["N", *(f"{label} (median s)" for label in labels)],
                 [[r["key"]["N"]] + [f"{np.median(r['times'][x]):.4f}" if x in r["times"] else "-"
                                     for x in labels] for r in part_b])  # fmt: skip
    findings = []
    if part_a:
        findings.append(
            f"(a) TightBayesianGPLVM / BayesianGPLVM = {harness.span(ratios, '.3f')} (ratio of "
            f"medians; per-round medians {harness.span(per_round, '.3f')}): "
            f"{harness.of(sum(x <= GOAL for x in ratios), len(ratios))} settings within the goal "
            f"of {GOAL:.2f}. The tight bound is >= the standard one in "
            f"{harness.of(ordered, len(part_a), 'settings')}."
        )
    if len(part_b) > 1:
        first, last = part_b[0], part_b[-1]
        growth = np.median(last["times"][MB_GRAD]) / np.median(first["times"][MB_GRAD])
        a, b = (np.median(r["times"][MB_GRAD]) for r in (first, last))
        text = (f"(b) The minibatch loss+grad step goes from {a:.3f} s at N={first['key']['N']} "
                f"to {b:.3f} s at N={last['key']['N']} (x{growth:.2f} for "
                f"x{last['key']['N'] / first['key']['N']:.0f} rows)")  # fmt: skip
        full = [r for r in part_b if f"{PEER} loss+grad" in r["times"]]
        if len(full) > 1:
            a, b = (np.median(r["times"][f"{PEER} loss+grad"]) for r in (full[0], full[-1]))
            text += (
                f"; the collapsed BayesianGPLVM step goes from {a:.2f} s to {b:.2f} s "
                f"(x{b / a:.1f} for x{full[-1]['key']['N'] / full[0]['key']['N']:.0f} rows)"
            )
        findings.append(text + ".")
    report.section("Findings")
    report.bullets(findings)
    if part_b:
        report.figure(plot(part_b, labels, args.batch_size), "gplvm_cost.png", "step time vs N")
    report.section("Raw times (s, in round order)")
    for r in records:
        report.add(
            f"- ({r['key']['part']}) "
            + " ".join(f"{x}={r['key'][x]}" for x in "NQM" if x in r["key"])
        )
        report.add(
            *(f"  - {n}: " + ", ".join(f"{t:.4f}" for t in v) for n, v in r["times"].items())
        )


def plot(part_b, labels, batch_size):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, marker in zip(labels, "osd^v"):
        points = [
            (r["key"]["N"], np.median(r["times"][label])) for r in part_b if label in r["times"]
        ]
        ax.plot(*zip(*points), marker=marker, label=label)
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="N (rows)",
        ylabel="median step time (s)",
        title=f"Bayesian GPLVM step time, P=12, Q=5, M=64 (minibatch B={batch_size})",
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig


if __name__ == "__main__":
    harness.main(__import__(__name__))
