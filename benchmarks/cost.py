"""
Cost of one training step (loss and gradient) of the tighter models against their GPflow peers,
interleaved in the same rounds: (a) TightSGPR vs SGPR; (b) TightSVGP vs SVGP on one minibatch,
Gaussian likelihood; (c) as (b) with a Bernoulli likelihood.
"""

import harness
import numpy as np

NAME = "cost"
GOAL = 1.05
SETTINGS = {
    "a": "(a) collapsed, Gaussian: N=10000, D=3, M=500",
    "b": "(b) uncollapsed, Gaussian: N=100000, B=1024, M=1000",
    "c": "(c) uncollapsed, Bernoulli: N=100000, B=1024, M=1000",
}
PRESETS = {"quick": dict(rounds=3, settings=["a", "b"])}


def arguments(parser):
    parser.add_argument("--rounds", type=int, default=25, help="timed rounds per pair")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--settings", nargs="+", choices=list(SETTINGS), default=list(SETTINGS))


def plan(args):
    return [harness.keyed(args, ["rounds", "seed"], setting=s) for s in args.settings]


def run(key, args):
    import gpflow
    import tensorflow as tf

    from gpflow_tight import TightSGPR, TightSVGP

    rng = np.random.default_rng(key["seed"])
    kernel = gpflow.kernels.SquaredExponential
    if key["setting"] == "a":
        X = rng.uniform(0.0, 10.0, size=(10_000, 3))
        Y = np.sin(X).sum(1, keepdims=True) + 0.1 * rng.standard_normal((len(X), 1))
        Z = X[rng.choice(len(X), 500, replace=False)]
        models = {
            cls.__name__: cls((X, Y), kernel(), Z.copy(), noise_variance=0.1)
            for cls in (gpflow.models.SGPR, TightSGPR)
        }
        batch = None
    else:
        X = rng.uniform(0.0, 10.0, size=(100_000, 3))
        f = np.sin(X).sum(1, keepdims=True)
        if key["setting"] == "c":
            Y = (f + 0.3 * rng.standard_normal(f.shape) > 0).astype(np.float64)
        else:
            Y = f + 0.1 * rng.standard_normal(f.shape)
        Z = X[rng.choice(len(X), 1000, replace=False)]
        rows = rng.choice(len(X), 1024, replace=False)
        batch = (tf.constant(X[rows]), tf.constant(Y[rows]))

        def likelihood():
            if key["setting"] == "c":
                return gpflow.likelihoods.Bernoulli()
            return gpflow.likelihoods.Gaussian(variance=0.1)

        models = {
            cls.__name__: cls(kernel(), likelihood(), Z.copy(), num_data=len(X))
            for cls in (gpflow.models.SVGP, TightSVGP)
        }
    fns = {name: harness.step_function(model, batch) for name, model in models.items()}
    return {"times": harness.interleaved(fns, key["rounds"])}


def render(report, records, missing, args):
    rounds = sorted({r["key"]["rounds"] for r in records}) or [args.rounds]
    protocol = [
        "Quantity timed: one call of a `tf.function` that evaluates `model.training_loss` and "
        "its gradient w.r.t. all trainable variables (GradientTape), results fetched with "
        "`.numpy()` (`harness.step_function`).",
        f"Each pair is warmed up (traced) with 2 untimed calls each, then timed for "
        f"{'/'.join(map(str, rounds))} rounds; each round calls both models once, the order "
        "alternating between rounds, so machine noise affects both alike. Reported: median "
        "(and minimum) over the rounds; ratio = tight median / peer median; 'median of "
        "per-round ratios' pairs the two calls of each round, and the sign test asks whether "
        "the tight model is slower in more rounds than chance would give.",
        "Data: synthetic, inputs uniform on [0, 10]^3, targets sum_d sin(x_d) + noise (classes: "
        "its sign). SE kernel (variance 1, lengthscale 1), inducing inputs a random subset of "
        "the inputs, no mean function.",
        "(a) `gpflow.models.SGPR` vs `TightSGPR`, N=10000, M=500, noise variance 0.1.",
        "(b) `gpflow.models.SVGP` vs `TightSVGP` (relaxation='beta'), num_data=100000, one fixed "
        "minibatch of B=1024 points, M=1000, whiten=True, full-covariance q_sqrt, Gaussian "
        "likelihood (variance 0.1).",
        "(c) as (b) with a Bernoulli likelihood (Gauss-Hermite variational expectations).",
        f"Goal stated in the issue: ratio <= {GOAL}.",
    ]
    report.head("Cost of one ELBO + gradient step: tight models vs GPflow peers", records,
                protocol, missing)  # fmt: skip
    rows, findings, raw, within = [], [], [], 0
    for r in records:
        peer, tight = list(r["times"])
        t, p = (np.asarray(r["times"][name]) for name in (tight, peer))
        value, per_round, paired = harness.ratio(r["times"], tight, peer)
        within += value <= GOAL
        label = SETTINGS[r["key"]["setting"]]
        rows.append([label, f"{peer} / {tight}", f"{np.median(p):.4f}", f"{np.median(t):.4f}",
                     f"**{value:.3f}**", f"{np.median(per_round):.3f}", f"{p.min():.4f}",
                     f"{t.min():.4f}"])  # fmt: skip
        findings.append(
            f"{label}: {tight} / {peer} = {value:.3f}, "
            f"{'within' if value <= GOAL else 'above'} the goal; {tight} was the slower of the "
            f"two in {harness.of(paired.losses, paired.n, 'rounds')} ({paired.sign()})."
        )
        raw += [f"- {label}"] + [
            f"  - {name}: " + ", ".join(f"{x:.4f}" for x in r["times"][name]) for name in r["times"]
        ]
    report.section("Results")
    report.table(["setting", "models (peer / tight)", "peer median s", "tight median s", "ratio",
                  "median of per-round ratios", "peer min s", "tight min s"], rows)  # fmt: skip
    report.section("Findings")
    report.bullets([f"{harness.of(within, len(records), 'settings')} meet the goal of {GOAL}."])
    report.bullets(findings)
    report.section("Raw times (s, in round order)")
    report.add(*raw)


if __name__ == "__main__":
    harness.main(__import__(__name__))
