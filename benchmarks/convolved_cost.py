"""
Cost of the convolved multi-output GP as N grows: exact multi-output GPR
(``gpflow.models.GPR`` with ``ConvolvedKernel``) against PITC with one block per output, PITC
with blocks of at most B rows within each output, FITC and DTC on ``LatentInducingPoints``
(M fixed): one training step (loss and gradient) and one prediction, compiled.
"""

import harness
import numpy as np

NAME = "convolved_cost"
GPR = "exact GPR"
PITC_OUTPUTS, PITC_SMALL = "PITC (block = output)", "PITC (blocks <= B)"
MODELS = [GPR, PITC_OUTPUTS, PITC_SMALL, "FITC", "DTC"]
SETTINGS = ["rounds", "num_outputs", "num_latent", "num_inducing", "block_size", "num_test"]
SETTINGS += ["noise", "threads", "seed"]
PRESETS = {"quick": dict(rounds=3, sizes=[300, 600])}


def arguments(parser):
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sizes", type=int, nargs="*", default=[300, 1000, 2000],
                        help="N, the stacked rows of all outputs")  # fmt: skip
    parser.add_argument("--num-outputs", type=int, default=3, help="D_out")
    parser.add_argument("--num-latent", type=int, default=2, help="Q")
    parser.add_argument("--num-inducing", type=int, default=50, help="M, over all latents")
    parser.add_argument("--block-size", type=int, default=200, help="B of the second PITC")
    parser.add_argument("--num-test", type=int, default=1000, help="prediction inputs")
    parser.add_argument("--noise", type=float, default=0.01)
    parser.add_argument("--threads", type=int, default=0, help="0: TensorFlow's default")
    parser.add_argument("--seed", type=int, default=0)


def plan(args):
    return [harness.keyed(args, SETTINGS, N=n) for n in args.sizes]


def problem(key):
    """Heterotopic data: each output at its own N / D_out random inputs on [0, 10]."""
    rng = np.random.default_rng(key["seed"])
    P, N = key["num_outputs"], key["N"]
    index = np.arange(N) % P
    x = rng.uniform(0, 10, N)
    phase = np.linspace(0, 1, P)[index]
    Y = np.sin(x + phase) + 0.3 * np.cos(3 * x) * (index % 2) + 0.1 * rng.standard_normal(N)
    order = np.argsort(index, kind="stable")  # rows grouped by output
    X = np.c_[x, index.astype(float)][order]
    Xnew = np.c_[rng.uniform(0, 10, key["num_test"]), np.arange(key["num_test"]) % P]
    return rng, X, Y[order][:, None], Xnew


def blocks_of(X, block_size):
    """One block per output, and blocks of at most ``block_size`` nearby rows within outputs."""
    per_output, small = [], []
    for d in np.unique(X[:, -1]):
        rows = np.flatnonzero(X[:, -1] == d)
        rows = rows[np.argsort(X[rows, 0])]
        per_output.append(rows)
        small += np.array_split(rows, int(np.ceil(len(rows) / block_size)))
    return per_output, small


def run(key, args):
    import gpflow

    import gpflow_tight as gt
    from gpflow_tight.inducing_variables import LatentInducingPoints
    from gpflow_tight.kernels import ConvolvedKernel

    rng, X, Y, Xnew = problem(key)
    P, Q = key["num_outputs"], key["num_latent"]

    def kernel():
        return ConvolvedKernel(
            sensitivities=1.0 + 0.1 * rng.standard_normal((P, Q)),
            smoothing_widths=np.full((P, 1), 0.3),
            latent_lengthscales=np.linspace(1.0, 3.0, Q)[:, None],
        )

    per_latent = key["num_inducing"] // Q
    Z = np.sort(rng.uniform(0, 10, per_latent))[:, None]

    def inducing():
        return LatentInducingPoints.for_each_latent(Z.copy(), Q)

    per_output, small = blocks_of(X, key["block_size"])
    noise = key["noise"]
    models = {
        GPR: gpflow.models.GPR((X, Y), kernel(), noise_variance=noise),
        PITC_OUTPUTS: gt.PITC(
            (X, Y), kernel(), inducing(), noise_variance=noise, blocks=per_output
        ),
        PITC_SMALL: gt.PITC((X, Y), kernel(), inducing(), noise_variance=noise, blocks=small),
        "FITC": gt.FITC((X, Y), kernel(), inducing(), noise_variance=noise),
        "DTC": gt.DTC((X, Y), kernel(), inducing(), noise_variance=noise),
    }
    return {
        **harness.steps_and_predictions(models, Xnew, key["rounds"]),
        "blocks": dict(outputs=len(per_output), small=len(small)),
    }


def exponent(sizes, times):
    """The slope of log time against log N between the smallest and the largest N."""
    return float(np.log(times[-1] / times[0]) / np.log(sizes[-1] / sizes[0]))


def render(report, records, missing, args):
    k = records[0]["key"] if records else harness.keyed(args, SETTINGS)
    protocol = [
        "Quantities timed: (step) one compiled call of `model.training_loss` and its gradient "
        "w.r.t. all trainable variables (kernel, noise and, for the sparse models, the inducing "
        "inputs), everything fetched with `.numpy()`; (predict) one compiled `model.predict_f` "
        f"at {k['num_test']:,} new stacked inputs (all outputs), mean and variance fetched.",
        f"Every model of one N is traced and called once untimed, once more as warm-up, then "
        f"timed for {k['rounds']} rounds; each round calls every model once, in an order that "
        "reverses between rounds. Reported: median (ms) and the median [quartiles] of the "
        "per-round ratios against exact GPR measured in the same rounds.",
        f"Data: synthetic and heterotopic, D_out = {k['num_outputs']} outputs, each at its own "
        "N / D_out uniform inputs on [0, 10] (1-D), smooth targets plus N(0, 0.1^2) noise. "
        f"Kernel: `ConvolvedKernel` with Q = {k['num_latent']} latent processes; Gaussian noise "
        f"variance {k['noise']}; float64.",
        f"Sparse models: M = {k['num_inducing']} `LatentInducingPoints` in total "
        f"({k['num_inducing'] // k['num_latent']} random inputs on each latent, the same for "
        "every model). PITC with one block per output (the convolved-GP approximation of "
        "Álvarez & Lawrence: blocks of N / D_out rows) and PITC with blocks of at most "
        f"B = {k['block_size']} neighbouring rows within each output.",
        "Timings were taken on a shared machine (2 cores used by several people at once): "
        "the load average of each run is listed above, and only ratios measured in the same "
        "interleaved rounds are compared.",
        "TensorFlow threads: "
        + (f"{k['threads']} intra-op" if k["threads"] else "TensorFlow's default")
        + "; one Python process.",
    ]
    report.head(
        "Convolved multi-output GPs: sparse approximations against exact GPR as N grows",
        records,
        protocol,
        missing,
    )
    if not records:
        return

    def median_ratio(r, quantity, name):
        return float(np.median(harness.ratio(r[quantity], name, GPR)[1]))

    rows = []
    for r in records:
        for name in MODELS:
            cells = [f"N = {r['key']['N']:,}", name]
            for quantity in ("step", "predict"):
                t = 1e3 * np.median(r[quantity][name])
                _, ratios, _ = harness.ratio(r[quantity], name, GPR)
                cells += [f"{t:.1f}", harness.quartiles(ratios, ".3f")]
            rows.append(cells)
    report.section("Step and prediction against exact GPR")
    report.table(["N", "model", "step ms", "step / exact", "predict ms", "predict / exact"], rows)

    sizes = [r["key"]["N"] for r in records]
    step = {name: [float(np.median(r["step"][name])) for r in records] for name in MODELS}
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name in MODELS:
        ax.loglog(sizes, 1e3 * np.array(step[name]), "o-", ms=4, label=name)
    ax.set_xlabel("N (stacked rows of all outputs)")
    ax.set_ylabel("step: loss + gradient (ms)")
    ax.set_title(f"D_out = {k['num_outputs']}, Q = {k['num_latent']}, M = {k['num_inducing']}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    report.figure(fig, f"{NAME}.png", "step time against N, log-log, one line per model")

    findings = []
    if len(records) > 1:
        findings.append(
            "Growth of the step time from N = "
            + f"{sizes[0]:,} to {sizes[-1]:,} (slope of log time against log N): "
            + ", ".join(f"{name} {exponent(sizes, step[name]):.2f}" for name in MODELS)
            + "."
        )
    last = records[-1]
    seconds = float(np.median(last["step"][GPR]))
    findings.append(
        f"At N = {sizes[-1]:,} one exact GPR step took {seconds:.1f} s, so 1,000 L-BFGS "
        f"iterations would take about {1000 * seconds / 3600:.1f} h on this machine; the sizes "
        "stop there."
    )
    for name in MODELS[1:]:
        ratios = [median_ratio(r, "step", name) for r in records]
        faster = [r["key"]["N"] for r, x in zip(records, ratios) if x < 1]
        findings.append(
            f"{name}: step {harness.span(ratios, '.3f')} of exact GPR's over N = "
            + ", ".join(f"{n:,}" for n in sizes)
            + f" ({ratios[-1]:.3f} at N = {sizes[-1]:,}, i.e. {1 / ratios[-1]:.1f} times faster"
            + (")" if ratios[-1] < 1 else "; slower)")
            + (
                "; faster than exact GPR at every N."
                if faster == sizes
                else f"; faster than exact GPR from N = {faster[0]:,}."
                if faster and faster == sizes[sizes.index(faster[0]) :]
                else "."
            )
        )
    predict = [median_ratio(last, "predict", name) for name in MODELS[1:]]
    findings.append(
        f"Prediction at N = {sizes[-1]:,}: "
        + ", ".join(f"{name} {x:.3f}" for name, x in zip(MODELS[1:], predict))
        + " of exact GPR's (which refactorises the N x N matrix at every call)."
    )
    blocks = last["blocks"]
    pitc_outputs = [median_ratio(r, "step", PITC_OUTPUTS) for r in records]
    pitc_small = [median_ratio(r, "step", PITC_SMALL) for r in records]
    growth = (
        f" (growth exponents {exponent(sizes, step[PITC_OUTPUTS]):.2f} and "
        f"{exponent(sizes, step[PITC_SMALL]):.2f}, exact GPR {exponent(sizes, step[GPR]):.2f})"
        if len(records) > 1
        else ""
    )
    findings.append(
        f"PITC with one block per output factorises {blocks['outputs']} blocks of N / "
        f"{blocks['outputs']} rows, a cubic cost of about 1 / D_out^2 = "
        f"{1 / blocks['outputs'] ** 2:.2f} of the exact GP's: its step was "
        f"{pitc_outputs[-1]:.3f} of exact GPR's at N = {sizes[-1]:,}, against "
        f"{pitc_small[-1]:.3f} with blocks of at most {k['block_size']} rows "
        f"({blocks['small']} blocks){growth}."
    )
    report.section("Findings")
    report.bullets(findings)


if __name__ == "__main__":
    harness.main(__import__(__name__))
