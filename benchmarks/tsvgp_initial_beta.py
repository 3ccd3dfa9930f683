"""
Where should T-SVGP's β start for a non-Gaussian likelihood? ``TightSVGP`` starts at
``gpflow_tight.relaxation.initial_beta(likelihood)``, the inverse Fisher information at the prior
mean (4 for a logistic Bernoulli, π/2 for a probit, C²/(C−1) for a C-class softmax); before, it
started at 1. This study trains SVGP and T-SVGP from both starts on the six UCI binary sets
(logistic and probit) and on a 10-class MNIST subset (softmax), each run as
``tsvgp_classification.run``, and reports the objective at the start and after training.
"""

import harness
import numpy as np
import tsvgp_classification as classification

NAME = "tsvgp_initial_beta"
STARTS = [("SVGP", None), ("T-SVGP", 1.0), ("T-SVGP", None)]  # None: the package's default
PRESETS = {
    "quick": dict(
        splits=1, train_size=500, test_size=200, steps=50, num_inducing=[16], kmeans_subset=500,
        uci_sets=["crabs"], uci_splits=1, uci_steps=50,
    )
}  # fmt: skip
BUDGET = None


def arguments(parser):
    classification.arguments(parser)
    parser.set_defaults(
        likelihoods=["softmax"], num_inducing=[64], splits=2, train_size=2000, test_size=1000,
        uci_splits=2, uci_steps=1000,
    )  # fmt: skip
    parser.add_argument("--uci-likelihoods", nargs="+", default=["logistic", "probit"])


def plan(args):
    """Split-major: every set's three starts together, the UCI sets before MNIST."""
    keys = []
    for s in range(args.uci_splits):
        for lik in args.uci_likelihoods:
            for d in args.uci_sets:
                for model, beta in STARTS:
                    key = classification.uci_key(args, d, s, model)
                    keys.append(dict(key, likelihood=lik, beta=beta, initial_objective=True))
    for s in range(args.splits):
        for lik in args.likelihoods:
            for model, beta in STARTS:
                key = classification.mnist_key(args, lik, args.num_inducing[0], s, model)
                keys.append(dict(key, beta=beta, initial_objective=True))
    return keys


def run(key, args):
    return classification.run(key, args)


def start_of(key):
    if key["model"] == "SVGP":
        return "SVGP"
    return "T-SVGP, β = 1" if key["beta"] is not None else "T-SVGP, β = default"


def render(report, records, missing, args):
    ok = [r for r in records if r["finished"]]
    mnist = next((r["key"] for r in ok if r["key"]["dataset"] == "mnist"), None)
    uci = next((r["key"] for r in ok if r["key"]["dataset"] != "mnist"), None)
    report.head(
        "T-SVGP: where β starts for non-Gaussian likelihoods",
        records,
        [
            "Question: T-SVGP's m_n = β / (d_n + β) with one trainable β per latent GP. The "
            "package starts β at `initial_beta(likelihood)`, 1 / (Fisher information of the "
            "likelihood at f = 0), the per-point optimum of the bound where q(f_n) sits at the "
            "prior mean and d_n is small (see `gpflow_tight.relaxation.initial_beta`); its "
            "earlier default was 1. The paper (Bui, Ashman & Turner 2025) does not say how β "
            "starts.",
            "Protocol: each run is `tsvgp_classification.run` (`benchmarks/tsvgp_classification"
            ".py`, whose report describes data, kernels, Z and training). Only the likelihood and "
            "the initial β vary here. "
            + (
                f"UCI binary: the six sets, {uci['steps']} full-batch Adam steps (lr "
                f"{uci['lr']}), M = {uci['M']}, logistic (`Bernoulli(invlink=tf.sigmoid)`, "
                "default β = 4) and probit (`ExactProbit`, default β = π/2). "
                if uci
                else ""
            )
            + (
                f"MNIST: {mnist['train_size']:,}/{mnist['test_size']:,} random splits, softmax "
                f"(default β = 100/9 ≈ 11.1), M = {mnist['M']}, {mnist['steps']} Adam steps on "
                f"batches of {mnist['batch_size']}. The robust max has no finite Fisher "
                "information at 0, so its default stays 1 and it is not run here."
                if mnist
                else ""
            ),
            "The objective at the start is each model's own ELBO on the whole training set "
            "before the first step (same kernel, Z and q for all three starts of a split).",
        ],
        missing,
    )
    for r in records:
        if not r["finished"]:
            report.add(f"- Failed: {harness.short(r['key'])}: {r['refused'] or r['failure']}")
    groups = {}
    for r in ok:
        k = r["key"]
        group = "MNIST, softmax" if k["dataset"] == "mnist" else f"UCI, {k['likelihood']}"
        groups.setdefault(group, {}).setdefault((k["dataset"], k["split"]), {})[start_of(k)] = r
    findings = []
    for group, units in groups.items():
        report.section(group)
        rows = []
        for start in ("SVGP", "T-SVGP, β = 1", "T-SVGP, β = default"):
            runs = [u[start] for u in units.values() if start in u]
            if not runs:
                continue
            betas = [np.mean(r[field]) for r in runs for field in ("initial_beta",) if r.get(field)]
            rows.append([
                start, len(runs),
                f"{np.mean(betas):.3g}" if betas else "—",
                harness.pm([r["initial_elbo_per_point"] for r in runs], ".4f"),
                harness.pm([r["elbo_per_point"] for r in runs], ".4f"),
                harness.pm([r["nll"] for r in runs], ".4f"),
                harness.pm([r["error"] for r in runs], ".4f"),
                f"{np.mean([np.mean(r['beta']) for r in runs]):.3g}" if start != "SVGP" else "—",
            ])  # fmt: skip
        report.table(["start", "runs", "initial β", "ELBO / N at the start", "final ELBO / N",
                      "test NLL", "test error", "final β (mean)"], rows)  # fmt: skip
        both = [u for u in units.values() if len(u) == 3]
        if not both:
            continue
        new, old, base = ("T-SVGP, β = default", "T-SVGP, β = 1", "SVGP")
        for field, what, sign in (
            ("initial_elbo_per_point", "ELBO / N at the start", -1),
            ("elbo_per_point", "final ELBO / N", -1),
            ("nll", "test NLL", 1),
        ):
            test = harness.Paired(
                [sign * u[new][field] for u in both], [sign * u[old][field] for u in both]
            )
            better = "higher" if sign < 0 else "lower"
            findings.append(
                f"{group}: from the default rather than β = 1, a {better} {what} in "
                f"{harness.of(test.wins, test.n)} (set, split) pairs, mean difference "
                f"{sign * test.mean:+.3g} ({test.sign()})."
            )
        for start in (old, new):
            gaps = [u[start]["initial_elbo_per_point"] - u[base]["initial_elbo_per_point"]
                    for u in both]  # fmt: skip
            below = sum(g < 0 for g in gaps)
            findings.append(
                f"{group}: T-SVGP from {start.split(', ')[1]} starts below SVGP's ELBO in "
                f"{harness.of(below, len(gaps))} pairs (mean gap {np.mean(gaps):+.3g} per point)."
            )
    if findings:
        report.section("Findings")
        report.bullets(findings)


if __name__ == "__main__":
    harness.main(__import__(__name__))
