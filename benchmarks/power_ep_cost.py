"""
Cost of one training step (objective and gradient) of `PowerEPSGP` against its GPflow peers
`GPRFITC` and `SGPR` on the same data and parameters: alpha = 0.5, 1 (FITC) and 0 (VFE) for
several M, PITC blocks (block_size = M) separately, and a TensorFlow op profile of one step.
A second study times block factors (balanced blocks, alpha = 1 (PITC) and 0.5, block_size M and
M/2) against GPRFITC over a grid of N and M (``--pitc-data``, ``--pitc-inducing``).
"""

import harness
import numpy as np

NAME = "power_ep_cost"
GOAL = 1.05
SAME_TOL = 1e-8  # "same numbers": relative loss and gradient differences below this
FITC, SGPR = "GPRFITC", "SGPR"
HALF, ONE, ZERO, PITC = "PEP α=0.5", "PEP α=1", "PEP α=0", "PITC (PEP α=1, blocks)"
COMPARISONS = [(HALF, FITC), (HALF, SGPR), (ONE, FITC), (ZERO, SGPR), (SGPR, FITC)]
SETTINGS = ["rounds", "num_data", "dim", "noise", "seed", "threads", "pitc"]
PRESETS = {
    "quick": dict(
        num_inducing=[20], num_data=1000, rounds=3, profile_m=0, pitc_data=[400],
        pitc_inducing=[20], pitc_rounds=3, pitc_profile=[400, 20],
    )
}  # fmt: skip
BLOCK_GOAL = 1.5  # block factors with block_size <= M: step <= 1.5 x GPRFITC's
BLOCK_SETTINGS = ["pitc_rounds", "dim", "noise", "seed", "threads"]


def block_name(alpha, fraction):
    """The label of a block model: power and block size as a fraction of M."""
    size = "M" if fraction == 1 else f"M/{round(1 / fraction)}"
    return f"{'PITC' if alpha == 1 else f'PEP α={alpha:g}'}, S={size}"


BLOCK_MODELS = [(alpha, fraction) for alpha in (1.0, 0.5) for fraction in (1.0, 0.5)]


def arguments(parser):
    parser.add_argument("--rounds", type=int, default=15, help="timed rounds per M")
    parser.add_argument("--num-inducing", type=int, nargs="+", default=[100, 300, 500])
    parser.add_argument("--num-data", type=int, default=10_000)
    parser.add_argument("--dim", type=int, default=4)
    parser.add_argument("--noise", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="TensorFlow threads")
    parser.add_argument("--no-pitc", dest="pitc", action="store_false", help="skip PITC")
    parser.add_argument("--profile-m", type=int, default=300, help="M of the profile (0: none)")
    parser.add_argument("--profile-steps", type=int, default=3)
    parser.add_argument(
        "--pitc-data",
        type=int,
        nargs="*",
        default=[2000, 5000],
        help="N of the block-factor study (none: skip it)",
    )
    parser.add_argument("--pitc-inducing", type=int, nargs="+", default=[100, 300])
    parser.add_argument("--pitc-rounds", type=int, default=15)
    parser.add_argument(
        "--pitc-profile",
        type=int,
        nargs=2,
        default=[5000, 300],
        metavar=("N", "M"),
        help="profile of the block study (N 0: none)",
    )


def plan(args):
    keys = [harness.keyed(args, SETTINGS, M=m) for m in args.num_inducing]
    if args.profile_m:
        keys.append(harness.keyed(args, SETTINGS + ["profile_steps"], profile=args.profile_m))
    for n in args.pitc_data:
        keys += [harness.keyed(args, BLOCK_SETTINGS, block_N=n, block_M=m)
                 for m in args.pitc_inducing]  # fmt: skip
    if args.pitc_data and args.pitc_profile[0]:
        n, m = args.pitc_profile
        keys.append(harness.keyed(args, BLOCK_SETTINGS + ["profile_steps"], block_profile=[n, m]))
    return keys


def build_blocks(key, num_data, num_inducing):
    """GPRFITC, PowerEPSGP at alpha = 1 without blocks, and the block models, on one dataset."""
    import gpflow

    from gpflow_tight import PowerEPSGP

    rng = np.random.default_rng(key["seed"])
    X = rng.uniform(0.0, 10.0, size=(num_data, key["dim"]))
    Y = np.sin(X).sum(1, keepdims=True) + 0.1 * rng.standard_normal((len(X), 1))
    Z = X[np.random.default_rng(key["seed"] + num_inducing).choice(len(X), num_inducing, False)]

    def kw():
        kernel = gpflow.kernels.SquaredExponential(lengthscales=np.ones(X.shape[1]))
        return dict(kernel=kernel, inducing_variable=Z.copy(), noise_variance=key["noise"])

    models = {FITC: gpflow.models.GPRFITC((X, Y), **kw()),
              ONE: PowerEPSGP((X, Y), alpha=1.0, **kw())}  # fmt: skip
    for alpha, fraction in BLOCK_MODELS:
        size = max(1, int(round(num_inducing * fraction)))
        models[block_name(alpha, fraction)] = PowerEPSGP(
            (X, Y), alpha=alpha, block_size=size, **kw()
        )
    return models


def run_blocks(key):
    """Interleaved step times of the block models and their peers; load average before/after."""
    import os

    if "block_profile" in key:
        models = build_blocks(key, *key["block_profile"])
        names = [FITC, block_name(1.0, 1.0), block_name(0.5, 1.0), block_name(1.0, 0.5)]
        return profile(models, key["profile_steps"], names)
    load_before = [round(x, 2) for x in os.getloadavg()]
    models = build_blocks(key, key["block_N"], key["block_M"])
    layouts = {}
    for alpha, fraction in BLOCK_MODELS:
        model = models[block_name(alpha, fraction)]
        sizes = np.array([len(block) for block in model.blocks])
        layouts[block_name(alpha, fraction)] = dict(
            block_size=max(1, int(round(key["block_M"] * fraction))), count=len(sizes),
            min=int(sizes.min()), max=int(sizes.max()), padded=list(model.block_layout_shape),
        )  # fmt: skip
    fns = {name: harness.step_function(model) for name, model in models.items()}
    times = harness.interleaved(fns, key["pitc_rounds"])
    return dict(times=times, layouts=layouts, load_before=load_before,
                load_after=[round(x, 2) for x in os.getloadavg()])  # fmt: skip


def build(key, num_inducing):
    import gpflow

    from gpflow_tight import PowerEPSGP

    rng = np.random.default_rng(key["seed"])
    X = rng.uniform(0.0, 10.0, size=(key["num_data"], key["dim"]))
    Y = np.sin(X).sum(1, keepdims=True) + 0.1 * rng.standard_normal((len(X), 1))
    Z = X[np.random.default_rng(key["seed"] + num_inducing).choice(len(X), num_inducing, False)]

    def kw():
        kernel = gpflow.kernels.SquaredExponential(lengthscales=np.ones(X.shape[1]))
        return dict(kernel=kernel, inducing_variable=Z.copy(), noise_variance=key["noise"])

    models = {FITC: gpflow.models.GPRFITC((X, Y), **kw()), SGPR: gpflow.models.SGPR((X, Y), **kw())}
    for name, alpha in ((HALF, 0.5), (ONE, 1.0), (ZERO, 0.0)):
        models[name] = PowerEPSGP((X, Y), alpha=alpha, **kw())
    if key["pitc"]:
        models[PITC] = PowerEPSGP((X, Y), alpha=1.0, block_size=num_inducing, **kw())
    return models


def gradients(model):
    """Loss and gradient w.r.t. each trainable parameter, by parameter path."""
    import gpflow
    import tensorflow as tf

    parameters = {path: p for path, p in gpflow.utilities.parameter_dict(model).items()
                  if p.trainable and not path.startswith(".likelihood.variance_lower")}  # fmt: skip
    with tf.GradientTape() as tape:
        loss = model.training_loss()
    grads = tape.gradient(loss, [p.unconstrained_variable for p in parameters.values()])
    return float(loss), {path: g.numpy() for path, g in zip(parameters, grads)}


def run(key, args):
    if "block_N" in key or "block_profile" in key:
        return run_blocks(key)
    if "profile" in key:
        return profile(build(key, key["profile"]), key["profile_steps"])
    models = build(key, key["M"])
    same = []
    for model, peer in ((ONE, FITC), (ZERO, SGPR)):
        (loss, g), (peer_loss, h) = gradients(models[model]), gradients(models[peer])
        grad = max(np.max(np.abs(g[k] - h[k])) / max(np.max(np.abs(h[k])), 1e-300) for k in h)
        same.append(dict(models=f"{model} vs {peer}", loss=loss, peer_loss=peer_loss,
                         rel=abs(loss - peer_loss) / abs(peer_loss), grad=float(grad)))  # fmt: skip
    fns = {name: harness.step_function(model) for name, model in models.items()}
    out = dict(times=harness.interleaved(fns, key["rounds"]), same=same)
    if PITC in models:
        sizes = np.array([len(block) for block in models[PITC].blocks])
        out["blocks"] = dict(count=len(sizes), min=int(sizes.min()), max=int(sizes.max()),
                             mean=float(sizes.mean()))  # fmt: skip
    return out


def profile(models, steps, names=(FITC, SGPR, HALF, PITC)):
    """Wall seconds per step and seconds per step by op type and op name (TF profiler)."""
    import collections
    import re
    import shutil
    import tempfile
    import time
    from pathlib import Path

    import tensorflow as tf
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    pattern = re.compile(r"^(?P<name>[^:\s]+):(?P<type>[A-Za-z_][A-Za-z0-9_]*)$")
    out = dict(wall={}, by_type={}, top_ops={}, steps=steps)
    for name in (n for n in names if n in models):
        step = harness.step_function(models[name])
        step(), step()
        folder = Path(tempfile.mkdtemp(prefix="power_ep_cost_"))
        tf.profiler.experimental.start(str(folder))
        start = time.perf_counter()
        for _ in range(steps):
            step()
        out["wall"][name] = (time.perf_counter() - start) / steps
        tf.profiler.experimental.stop()
        space = xplane_pb2.XSpace()
        space.ParseFromString(next(folder.rglob("*.xplane.pb")).read_bytes())
        shutil.rmtree(folder, ignore_errors=True)
        by_type, by_name = collections.Counter(), collections.Counter()
        for plane in space.planes:
            for line in plane.lines:
                for event in line.events:
                    match = pattern.match(plane.event_metadata[event.metadata_id].name)
                    if match:
                        by_type[match["type"]] += event.duration_ps / 1e12 / steps
                        by_name[f"{match['name']} ({match['type']})"] += (
                            event.duration_ps / 1e12 / steps
                        )
        out["by_type"][name] = dict(by_type)
        out["top_ops"][name] = dict(by_name.most_common(12))
    return out


def render(report, records, missing, args):
    timed = [r for r in records if "M" in r["key"]]
    prof = next((r for r in records if "profile" in r["key"]), None)
    block_records = [r for r in records if "block_N" in r["key"]]
    block_prof = next((r for r in records if "block_profile" in r["key"]), None)
    k = timed[0]["key"] if timed else harness.keyed(args, SETTINGS)
    protocol = [
        "Quantity timed: one call of a `tf.function` that evaluates `model.training_loss` and "
        "its gradient w.r.t. all trainable variables (kernel variance and lengthscales, noise "
        "variance, pseudo-inputs Z), results fetched with `.numpy()`.",
        f"Data: synthetic, N={k['num_data']}, D={k['dim']}, inputs uniform on [0, 10]^{k['dim']}"
        f", targets sum_d sin(x_d) + N(0, 0.1^2) noise. SE-ARD kernel (variance 1, lengthscales "
        f"1), noise variance {k['noise']}, pseudo-inputs a random subset of the inputs; every "
        "model of a setting gets the same data and parameters.",
        f"M in {{{', '.join(str(r['key']['M']) for r in timed)}}}. Models per M: "
        "`gpflow.models.GPRFITC`, `gpflow.models.SGPR`, `PowerEPSGP` with alpha 0.5, 1 and 0"
        + (
            ", and `PowerEPSGP(alpha=1, block_size=M)` (PITC: k-means blocks of about M points; "
            "reported separately)."
            if k["pitc"]
            else "."
        ),  # fmt: skip
        f"All models of one M are warmed up with 2 untimed calls each, then timed for "
        f"{k['rounds']} rounds; each round calls every model once, the order reversing between "
        "rounds. Reported: median and minimum over the rounds; ratio = median / median of the "
        "peer in the same rounds; 'paired' = median of the per-round ratios; 'slower in' = "
        "rounds in which the model took longer than its peer (with the sign test).",
        f"TensorFlow threads: {k['threads']} intra-op and inter-op. Goal: ratio <= {GOAL} "
        "against the GPflow peer.",
    ]
    report.head("Cost of one objective + gradient step: PowerEPSGP vs GPRFITC and SGPR", records,
                protocol, missing)  # fmt: skip
    rows, ratios = [], {}
    for r in timed:
        for model, peer in COMPARISONS:
            t, p = np.asarray(r["times"][model]), np.asarray(r["times"][peer])
            value, per_round, paired = harness.ratio(r["times"], model, peer)
            ratios[(r["key"]["M"], model, peer)] = value
            rows.append([r["key"]["M"], f"{model} / {peer}", f"{np.median(t):.4f}",
                         f"{np.median(p):.4f}", f"**{value:.3f}**", f"{np.median(per_round):.3f}",
                         f"{paired.losses}/{paired.n} (p = {paired.p_sign:.2g})",
                         f"{t.min():.4f}", f"{p.min():.4f}"])  # fmt: skip
    report.section("Results")
    report.table(["M", "model / peer", "model median s", "peer median s", "ratio", "paired",
                  "slower in", "model min s", "peer min s"], rows)  # fmt: skip
    report.add("`SGPR / GPRFITC` is a reference row: the two GPflow models differ in cost too.")
    pep = {c: v for c, v in ratios.items() if c[1] != SGPR}
    floor = [
        abs(ratios[(m, HALF, FITC)] - ratios[(m, ONE, FITC)]) for m in sorted({c[0] for c in pep})
    ]
    findings = [
        f"{harness.of(sum(v <= GOAL for v in pep.values()), len(pep))} PowerEPSGP ratios are "
        f"within {GOAL} (range {harness.span(list(pep.values()), '.3f')})"
        + "".join(
            f"; above: {c[1]} / {c[2]} at M={c[0]} ({v:.3f})" for c, v in pep.items() if v > GOAL
        )
        + ".",  # fmt: skip
        "α=0.5 and α=1 against the same GPRFITC medians differ by up to "
        f"{max(floor):.3f} in ratio (per M: {', '.join(f'{x:.3f}' for x in floor)}), a gauge "
        "of the timing noise in this run."
        if floor
        else "",
    ]
    if k["pitc"] and timed:
        rows = []
        for r in timed:
            b, t, p = r["blocks"], np.median(r["times"][PITC]), np.median(r["times"][FITC])
            rows.append([r["key"]["M"], f"{b['count']} blocks, sizes {b['min']}-{b['max']} (mean "
                         f"{b['mean']:.0f}), padded to {b['max']}", f"{t:.4f}", f"{p:.4f}",
                         f"{t / p:.2f}"])  # fmt: skip
        report.section("PITC (block factors, block_size = M), at the code of that session")
        report.add("No GPflow peer exists; the ratio is against GPRFITC (the same model with "
                   "singleton blocks), which PITC exceeds by its block work O(sum_b n_b^3 + N S "
                   "M), S = padded block size.", "")  # fmt: skip
        report.table(["M", "blocks (k-means)", "PITC median s", "GPRFITC median s", "ratio"], rows)
        sessions = ", ".join(str(x) for x in sorted({r["session"] + 1 for r in timed}))
        findings.append(
            f"PITC (block_size = M, the code of session {sessions}) costs "
            f"{harness.span([float(x[-1]) for x in rows])} times GPRFITC."
        )
    same = [s for r in timed for s in r["same"]]
    report.section("Same numbers")
    bad = [s for s in same if not (s["rel"] < SAME_TOL and s["grad"] < SAME_TOL)]
    if not same:
        verdict = "No limit was compared with its peer."
    elif not bad:
        verdict = (
            f"The limits compute the same objective and gradient as their peers (largest "
            f"relative difference {max(s['rel'] for s in same):.1e} in the loss, "
            f"{max(s['grad'] for s in same):.1e} in the gradient, both below {SAME_TOL:.0e}), "
            f"so the timings compare equal work."
        )
    else:
        verdict = (
            f"Not all limits match their peers to {SAME_TOL:.0e}: "
            + "; ".join(
                f"M={r['key']['M']} {s['models']} (loss {s['rel']:.1e}, gradient {s['grad']:.1e})"
                for r in timed
                for s in r["same"]
                if s in bad
            )
            + ", so those timings may not compare equal work."
        )
    report.add(verdict + " Gradient difference: max over parameters of max |g - g_peer| / "
               "max |g_peer|.", "")  # fmt: skip
    report.table(
        ["M", "models", "loss", "peer loss", "rel. difference", "gradient difference"],
        [
            [
                r["key"]["M"],
                s["models"],
                f"{s['loss']:.6f}",
                f"{s['peer_loss']:.6f}",
                f"{s['rel']:.1e}",
                f"{s['grad']:.1e}",
            ]
            for r in timed
            for s in r["same"]
        ],
    )
    if same and not bad:
        findings.append(
            f"The α=1 and α=0 limits reproduce GPRFITC and SGPR: losses to "
            f"{max(s['rel'] for s in same):.0e} relative, gradients to "
            f"{max(s['grad'] for s in same):.0e}."
        )
    elif bad:
        findings.append(
            f"{len(bad)} of {len(same)} limit/peer pairs differ by {SAME_TOL:.0e} or more (see "
            "'Same numbers'), so their timings may not compare equal work."
        )
    if prof:
        findings += profile_section(report, prof)
    if block_records:
        findings += block_section(report, block_records, block_prof)
    report.section("Findings")
    report.bullets(findings)
    report.section("Raw times (s, in round order)")
    for r in block_records:
        timed.append(dict(r, key=dict(M=f"{r['key']['block_M']}, N={r['key']['block_N']}")))
    for r in timed:
        report.add(f"- M={r['key']['M']}")
        report.add(
            *(f"  - {n}: " + ", ".join(f"{x:.4f}" for x in t) for n, t in r["times"].items())
        )


def block_section(report, records, prof):
    """The block-factor study: table, profile and findings computed from the records."""
    first = records[0]
    report.section("Block factors (balanced blocks) against GPRFITC")
    report.add(
        f"Session {first['session'] + 1} (see the header). Data as above with N in "
        f"{{{', '.join(sorted({str(r['key']['block_N']) for r in records}, key=int))}}}, M in "
        f"{{{', '.join(sorted({str(r['key']['block_M']) for r in records}, key=int))}}}. "
        "Models per (N, M): `gpflow.models.GPRFITC`, `PowerEPSGP(alpha=1)` (FITC, no blocks) and "
        "`PowerEPSGP(alpha, block_size=S)` for alpha in {1 (PITC), 0.5} and S in {M, M/2}: "
        "balanced k-means blocks (B = ceil(N/S) blocks of at most ceil(N/B) <= S rows, the "
        "padded layout B x ceil(N/B)). Each (N, M) is warmed up with 2 untimed calls per model, "
        f"then timed for {first['key']['pitc_rounds']} interleaved rounds (order reversing); "
        "ratio = median / median of GPRFITC in the same rounds; 'paired' = median of the "
        f"per-round ratios. Goal: block_size <= M at <= {BLOCK_GOAL} x GPRFITC. Load average "
        "(1 min) recorded before and after each (N, M).",
        "",
    )
    rows, ratios = [], {}
    for r in records:
        n, m = r["key"]["block_N"], r["key"]["block_M"]
        peer = np.median(r["times"][FITC])
        for name in [ONE] + [block_name(a, f) for a, f in BLOCK_MODELS]:
            value, per_round, _ = harness.ratio(r["times"], name, FITC)
            layout = r["layouts"].get(name)
            shape = ("-" if layout is None else f"{layout['count']} blocks of {layout['min']}-"
                     f"{layout['max']} rows, padded {layout['padded'][0]} x "
                     f"{layout['padded'][1]}")  # fmt: skip
            if layout is not None:
                ratios[(n, m, name)] = value
            rows.append([n, m, name, shape, f"{np.median(r['times'][name]):.4f}", f"{peer:.4f}",
                         f"**{value:.2f}**", f"{np.median(per_round):.2f}",
                         f"{r['load_before'][0]:.1f} / {r['load_after'][0]:.1f}"])  # fmt: skip
    report.table(["N", "M", "model", "blocks", "median s", "GPRFITC median s", "ratio", "paired",
                  "load before / after"], rows)  # fmt: skip
    findings = []
    for alpha in (1.0, 0.5):
        for fraction in (1.0, 0.5):
            name = block_name(alpha, fraction)
            values = [v for (n, m, nm), v in ratios.items() if nm == name]
            met = sum(v <= BLOCK_GOAL for v in values)
            findings.append(
                f"{name}: {harness.span(values)} x GPRFITC; within {BLOCK_GOAL} in "
                f"{harness.of(met, len(values))} (N, M) settings"
                + ("" if met == len(values) else
                   f", the largest {max(values):.2f} ({max(values) / BLOCK_GOAL - 1:.0%} over)")
                + "."
            )  # fmt: skip
    loads = [x for r in records for x in (r["load_before"][0], r["load_after"][0])]
    findings.append(f"Load average (1 min) during the block study: {harness.span(loads, '.1f')}.")
    if prof:
        n, m = prof["key"]["block_profile"]
        findings += profile_section(report, prof, f"block factors, N={n}, M={m}")
    return findings


def profile_section(report, prof, title=None):
    names = list(prof["wall"])
    total = {}
    for by_type in prof["by_type"].values():
        for op, s in by_type.items():
            if op != "_other":
                total[op] = total.get(op, 0.0) + s
    top = sorted(total, key=total.get, reverse=True)[:12]
    rows = [[op] + [f"{prof['by_type'][n].get(op, 0.0):.4f}" for n in names] for op in top]
    other = [sum(s for o, s in prof["by_type"][n].items() if o not in top) for n in names]
    rows.append(["other op types"] + [f"{s:.4f}" for s in other])
    sums = {n: sum(prof["by_type"][n].values()) for n in names}
    rows.append(["**sum of op times**"] + [f"{sums[n]:.4f}" for n in names])
    rows.append(["**wall time per step**"] + [f"{prof['wall'][n]:.4f}" for n in names])
    title = title or f"M={prof['key']['profile']}"
    report.section(f"Where the time goes (TensorFlow profiler, {title})")
    report.add(
        f"Seconds per step by op type, mean of {prof['key']['profile_steps']} profiled "
        "steps after warm-up (`tf.profiler.experimental`; with one thread op times add up "
        "to about the wall time). Forward and gradient ops are counted together.",
        "",
    )
    report.table(["op type", *names], rows)
    for name in (HALF, PITC, block_name(1.0, 1.0), block_name(0.5, 1.0)):
        if name in prof["top_ops"]:
            report.add(f"Most expensive ops of {name} (s per step; `gradient_tape/...` = "
                       "backward pass):", "")  # fmt: skip
            report.table(["op (type)", "s"], [[op, f"{s:.4f}"] for op, s in
                                              prof["top_ops"][name].items()])  # fmt: skip
    blocked = [n for n in names if n.startswith(("PITC,", "PEP α=0.5, S"))]
    if blocked and FITC in sums:
        out = []
        for name in blocked:
            by_type = prof["by_type"][name]
            extra = {op: by_type.get(op, 0.0) - prof["by_type"][FITC].get(op, 0.0)
                     for op in set(by_type) | set(prof["by_type"][FITC])}  # fmt: skip
            worst = sorted(extra, key=extra.get, reverse=True)[:3]
            out.append(
                f"Profile ({title}): {name} takes {sums[name]:.3f} s of op time against "
                f"GPRFITC's {sums[FITC]:.3f} s ({sums[name] / sums[FITC]:.2f}x); the extra time "
                "is mostly " + ", ".join(f"{op} +{extra[op]:.3f} s" for op in worst) + "."
            )
        return out
    if HALF not in sums or FITC not in sums:
        return []
    mm = [prof["by_type"][n].get("MatMul", 0.0) for n in (HALF, FITC)]
    return [f"Profile at M={prof['key']['profile']}: a PEP α=0.5 step takes {sums[HALF]:.3f} s "
            f"of op time against GPRFITC's {sums[FITC]:.3f} s ({sums[HALF] / sums[FITC]:.2f}x); "
            f"MatMul {mm[0]:.3f} vs {mm[1]:.3f} s."]  # fmt: skip


if __name__ == "__main__":
    harness.main(__import__(__name__))
