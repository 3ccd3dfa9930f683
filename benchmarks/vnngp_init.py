"""
Where should VNNGP's q(u) start? With M = N the inducing outputs are the function at the
training inputs, so q_mu can start at the targets. This study trains VNNGP from the
constructor's default start (q_mu = 0, q_sqrt = 1) and from the targets (q_sqrt 1 and 0.1), with
everything else as ``vnngp_uci.py`` (each run is ``vnngp_uci.run``), and reports which start
``VNNGP.from_data`` should use.
"""

import harness
import numpy as np
import vnngp_uci

NAME = "vnngp_init"
STARTS = [("zero", 1.0), ("targets", 1.0), ("targets", 0.1)]
PRESETS = {
    "quick": dict(datasets=["pol"], splits=1, max_train=1000, vnngp_iterations=30),
    # five times the training (154 epochs): does the constructor's start catch up?
    "long": dict(datasets=["pol", "kin40k"], splits=1, vnngp_iterations=3000),
}
RENDER_PRESETS = ("long",)
BUDGET = None


def arguments(parser):
    vnngp_uci.arguments(parser)
    parser.set_defaults(datasets=["pol", "elevators", "kin40k"], models=["VNNGP"], splits=2,
                        threads=1)  # fmt: skip


def plan(args):
    """Split-major; every start of one (split, set) together."""
    return [dict(vnngp_uci.key_of(args, dataset=d, split=s, model="VNNGP"), vnngp_init=init,
                 vnngp_q_sqrt=std)
            for s in range(args.splits) for d in args.datasets for init, std in STARTS]  # fmt: skip


def run(key, args):
    return vnngp_uci.run(key, args)


def label(key):
    mean = "0" if key["vnngp_init"] == "zero" else "targets"
    return f"q_mu = {mean}, q_sqrt = {key['vnngp_q_sqrt']:g}"


def render(report, records, missing, args):
    ok = [r for r in records if "error" not in r]
    k0 = ok[0]["key"] if ok else vnngp_uci.key_of(args)
    splits = sorted({r["key"]["split"] for r in ok})
    report.head(
        "VNNGP: where q(u) starts (q_mu = 0 or the targets)"
        + (f", {k0['vnngp_iterations']} steps" if k0["vnngp_iterations"] != 600 else ""),
        records,
        [
            "Each run is `vnngp_uci.run` (`benchmarks/vnngp_uci.py`, whose report states the "
            "shared protocol: Matérn-5/2 ARD, hyperparameters started at 0.6931, inputs and "
            "targets standardised, inducing inputs = the distinct training inputs, K = "
            f"{k0['neighbors']}, data batch {k0['batch_size']}, KL on "
            f"{k0['inducing_batch_size']} inducing points per step, Adam lr {k0['vnngp_lr']} with "
            f"x0.1 steps at 75% and 90%), on split(s) {', '.join(map(str, splits)) or '—'}, "
            f"{k0['max_train']:,} training points per split (a random subset), "
            f"{k0['vnngp_iterations']} Adam steps. Only the start of q(u) differs: the "
            "constructor's default (q_mu = 0, q_sqrt = 1), or q_mu = the mean training target "
            "at each inducing input with q_sqrt = 1 or 0.1.",
            "The paper (Wu, Pleiss & Cunningham 2022) and GPyTorch start q_mu at 0 (GPyTorch ≥ "
            "1.13 at the prior mean with standard deviation 0.01); the paper trains 300-500 "
            "epochs, here far fewer, which is where the start matters most.",
        ],
        missing,
    )
    report.failures(records)
    rows, findings = [], []
    for d in dict.fromkeys(r["key"]["dataset"] for r in ok):
        runs = [r for r in ok if r["key"]["dataset"] == d]
        for init, std in STARTS:
            mine = [
                r for r in runs if (r["key"]["vnngp_init"], r["key"]["vnngp_q_sqrt"]) == (init, std)
            ]
            if mine:
                rows.append([d, label(mine[0]["key"]), len(mine),
                             harness.pm([r["nll"] for r in mine]),
                             harness.pm([r["rmse"] for r in mine]),
                             harness.pm([r["final_loss"] / r["num_train"] for r in mine]),
                             f"{np.mean([r['noise'] for r in mine]):.4f}"])  # fmt: skip
    report.table(["dataset", "start", "splits", "test NLL", "test RMSE",
                  "final loss / N (−ELBO estimate)", "noise"], rows)  # fmt: skip
    for a, b in (((("targets", 0.1)), ("zero", 1.0)), (("targets", 1.0), ("zero", 1.0)),
                 (("targets", 0.1), ("targets", 1.0))):  # fmt: skip
        pairs = {}
        for r in ok:
            start = (r["key"]["vnngp_init"], r["key"]["vnngp_q_sqrt"])
            if start in (a, b):
                pairs.setdefault((r["key"]["dataset"], r["key"]["split"]), {})[start] = r
        both = [p for p in pairs.values() if len(p) == 2]
        if not both:
            continue
        for metric in ("nll", "rmse"):
            test = harness.Paired([p[a][metric] for p in both], [p[b][metric] for p in both])
            findings.append(
                f"{label(dict(vnngp_init=a[0], vnngp_q_sqrt=a[1]))} against "
                f"{label(dict(vnngp_init=b[0], vnngp_q_sqrt=b[1]))}: lower test "
                f"{metric.upper()} in {harness.of(test.wins, test.n)} (set, split) pairs, mean "
                f"difference {test.mean:+.3f} ({test.sign()})."
            )
    if findings:
        report.section("Findings")
        report.bullets(findings)


if __name__ == "__main__":
    harness.main(__import__(__name__))
