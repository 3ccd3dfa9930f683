"""
Wu, Pleiss & Cunningham (2022), §4.1 / Fig. 2: VNNGP's test RMSE and NLL against the number of
neighbours K on Elevators, beside SVGP (the figure's other set, UKHousing, does not ship). Each
run is ``vnngp_uci.run`` with K varied, so the protocol is that study's: scaled down by default
(5,000 training points, 600 Adam steps), the paper's size with ``--max-train 0 --epochs 300``.
"""

import harness
import numpy as np
import vnngp_uci

NAME = "vnngp_neighbors"
NEAREST = ("VNNGP", "GPyTorch")  # the models K applies to
PRESETS = {"quick": dict(splits=1, max_train=1000, vnngp_iterations=30, svgp_iterations=30,
                         num_inducing=32, k_grid=[4, 8])}  # fmt: skip
BUDGET = None


def arguments(parser):
    vnngp_uci.arguments(parser)
    parser.add_argument("--k-grid", type=int, nargs="+", default=[32, 64, 128, 256])
    parser.set_defaults(datasets=["elevators"], models=["VNNGP", "SVGP"], threads=1)


def plan(args):
    """Split-major; per split every K of the nearest-neighbour models, then SVGP's run."""
    keys = []
    for s in range(args.splits):
        for d in args.datasets:
            for m in args.models:
                key = vnngp_uci.key_of(args, dataset=d, split=s, model=m)
                keys += [dict(key, neighbors=k) for k in args.k_grid] if m in NEAREST else [key]
    return keys


def run(key, args):
    return vnngp_uci.run(key, args)


def render(report, records, missing, args):
    ok = [r for r in records if "error" not in r]
    k0 = ok[0]["key"] if ok else vnngp_uci.key_of(args)
    splits = sorted({r["key"]["split"] for r in ok})
    length = f"{k0.get('epochs')} epochs"
    if "epochs" not in k0:
        length = f"{k0['vnngp_iterations']} Adam steps (VNNGP), {k0['svgp_iterations']} (SVGP)"
    size = "all" if not k0["max_train"] else f"a random {k0['max_train']:,} (per split) of the"
    report.head(
        "VNNGP: sensitivity to the number of neighbours K (paper §4.1, Fig. 2)",
        records,
        [
            "Paper (Wu, Pleiss & Cunningham 2022, §4.1, Fig. 2): Elevators and UKHousing, K in "
            "{32, 64, 128, 256}, against SVGP and the exact GP; no numbers are given. Claims: "
            "test RMSE and NLL both decrease as K grows; on Elevators SVGP is better than "
            "VNNGP; on UKHousing VNNGP with K = 32 already beats SVGP (UKHousing is not in "
            "`../shared/data`, so only the Elevators claims are checked).",
            f"Here: split(s) {', '.join(map(str, splits)) or '—'} of the `uci_wilson` 90/10 "
            f"splits, {size} training points, {length}, data batch {k0['batch_size']}, VNNGP "
            f"with K in {{{', '.join(map(str, args.k_grid))}}} (prior and prediction), its KL "
            f"on {k0['inducing_batch_size']} inducing points per step, Adam lr "
            f"{k0['vnngp_lr']} (SVGP {k0['svgp_lr']}) with the paper's x0.1 steps at 75% and "
            f"90%; SVGP with M = {k0['num_inducing']} k-means inducing inputs, full-rank q. "
            "Every run is `vnngp_uci.run` (`benchmarks/vnngp_uci.py`), whose report "
            "(`vnngp_uci.md`) states the rest of the protocol: Matérn-5/2 ARD, every "
            "hyperparameter started at 0.6931, inputs and targets standardised, VNNGP's "
            "inducing inputs = the distinct training inputs with q_mu started at the targets.",
            "NLL = mean negative log predictive density of y, RMSE of the predictive mean, both "
            "in standardised units; mean ± standard error over the splits.",
        ],
        missing,
    )
    report.failures(records)
    findings = []
    for d in dict.fromkeys(r["key"]["dataset"] for r in ok):
        findings += dataset_section(report, [r for r in ok if r["key"]["dataset"] == d], d)
    if findings:
        report.section("Findings")
        report.bullets(findings)


def dataset_section(report, records, dataset):
    from scipy import stats

    metrics = ("nll", "rmse")
    report.section(f"{vnngp_uci.SETS[dataset][0]} (`{dataset}`)")
    nearest = [r for r in records if r["key"]["model"] in NEAREST]
    grid = sorted({r["key"]["neighbors"] for r in nearest})
    rows, means = [], {}
    for model in dict.fromkeys(r["key"]["model"] for r in records):
        for k in grid if model in NEAREST else [None]:
            runs = [r for r in records if r["key"]["model"] == model
                    and (k is None or r["key"]["neighbors"] == k)]  # fmt: skip
            if not runs:
                continue
            means[model, k] = {x: np.mean([r[x] for r in runs]) for x in metrics}
            rows.append([model, k or "—", len(runs), harness.pm([r["nll"] for r in runs]),
                         harness.pm([r["rmse"] for r in runs]),
                         f"{np.mean([r['noise'] for r in runs]):.4f}",
                         f"{np.mean([r['train_seconds'] for r in runs]):.0f}"])  # fmt: skip
    report.table(["model", "K", "splits", "NLL", "RMSE", "noise", "train s"], rows)
    figure(report, records, grid, dataset)
    findings = []
    for model in dict.fromkeys(r["key"]["model"] for r in nearest):
        runs = [r for r in nearest if r["key"]["model"] == model]
        # the trend on the splits every K has, so that no K is compared on other splits
        splits = [{r["key"]["split"] for r in runs if r["key"]["neighbors"] == k} for k in grid]
        common = set.intersection(*splits)
        runs = [r for r in runs if r["key"]["split"] in common]
        if len(grid) < 2 or not runs:
            continue
        trend = {
            k: {x: np.mean([r[x] for r in runs if r["key"]["neighbors"] == k]) for x in metrics}
            for k in grid
        }
        where = "" if all(s == common for s in splits) else (
            f" (on split(s) {', '.join(map(str, sorted(common)))}, the ones every K has)"
        )  # fmt: skip
        for x, label in (("nll", "NLL"), ("rmse", "RMSE")):
            rho, p = stats.spearmanr([r["key"]["neighbors"] for r in runs], [r[x] for r in runs])
            first, last = trend[grid[0]][x], trend[grid[-1]][x]
            falling = all(trend[a][x] >= trend[b][x] for a, b in zip(grid, grid[1:]))
            findings.append(
                f"{dataset}, {model}{where}: the mean test {label} goes from {first:.3f} at K = "
                f"{grid[0]} to {last:.3f} at K = {grid[-1]} ("
                + ("falling at every step" if falling else "not monotone")
                + f"); Spearman correlation of K and {label} over these runs {rho:+.2f} (p = "
                f"{p:.2g}). The paper's 'decreases as K grows': "
                + verdict(falling and last < first, last < first, "lower at the largest K")
            )
        if ("SVGP", None) in means:
            svgp = means["SVGP", None]
            better = {x: [k for k in grid if svgp[x] < means[model, k][x]] for x in svgp}
            both = len(better["nll"]) + len(better["rmse"])
            findings.append(
                f"{dataset}: SVGP's NLL ({svgp['nll']:.3f}) is below {model}'s at "
                f"{harness.of(len(better['nll']), len(grid))} values of K, its RMSE "
                f"({svgp['rmse']:.3f}) at {len(better['rmse'])}; the paper's 'SVGP is better on "
                f"Elevators': {verdict(both == 2 * len(grid), both > 0, 'not at every K')}"
            )
    return findings


def verdict(every, some, how):
    """'reproduces.' if the claim holds everywhere, 'partly (how).' if somewhere."""
    return "reproduces." if every else f"partly ({how})." if some else "does not reproduce."


def figure(report, records, grid, dataset):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, (x, label) in zip(axes, (("rmse", "test RMSE"), ("nll", "test NLL"))):
        for model in dict.fromkeys(r["key"]["model"] for r in records):
            runs = [r for r in records if r["key"]["model"] == model]
            if model in NEAREST:
                stats = [harness.mean_se(r[x] for r in runs if r["key"]["neighbors"] == k)
                         for k in grid]  # fmt: skip
                ax.errorbar(grid, [s[0] for s in stats], [s[1] for s in stats], marker="o",
                            capsize=3, label=model)  # fmt: skip
            else:
                mean, se = harness.mean_se(r[x] for r in runs)
                ax.axhline(mean, ls="--", c="grey", label=f"{model} (M = "
                           f"{runs[0]['num_inducing']})")  # fmt: skip
                ax.axhspan(mean - se, mean + se, color="grey", alpha=0.15)
        ax.set_xscale("log", base=2)
        ax.set_xticks(grid, [str(k) for k in grid])
        ax.set_xlabel("K (neighbours)")
        ax.set_ylabel(label)
        ax.legend(fontsize=8)
    fig.suptitle(f"{vnngp_uci.SETS[dataset][0]}: VNNGP against K (paper Fig. 2)")
    fig.tight_layout()
    report.figure(fig, f"{NAME}_{dataset}.png", f"{dataset}: RMSE and NLL against K")


if __name__ == "__main__":
    harness.main(__import__(__name__))
