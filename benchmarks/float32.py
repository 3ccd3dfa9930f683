"""
What float32 costs each sparse model in accuracy: every model (and GPflow's SGPR and SVGP, the
peers) trained in float64 and in float32 from the same initialisation with the same optimiser,
then compared: final objective, objective round-off at the same parameters, predictive means and
variances at test points, and whether training stopped early or failed.
"""

import harness
import numpy as np

NAME = "float32"
COLLAPSED = ["SGPR", "TightSGPR", "RelaxedSGPR", "SGPR-2M", "SOLVEGPR", "TightSOLVEGPR"]
UNCOLLAPSED = ["SVGP", "TightSVGP", "RelaxedSVGP", "SVGP-2M", "SOLVEGP", "TightSOLVEGP", "VNNGP"]
MODELS = COLLAPSED + UNCOLLAPSED
PEERS = {
    "TightSGPR": "SGPR",
    "RelaxedSGPR": "SGPR",
    "SOLVEGPR": "SGPR-2M",
    "TightSOLVEGPR": "SGPR-2M",
    "TightSVGP": "SVGP",
    "RelaxedSVGP": "SVGP",
    "SOLVEGP": "SVGP-2M",
    "TightSOLVEGP": "SVGP-2M",
    "VNNGP": "SVGP",
}
PROBLEMS = {"snelson": 10, "concrete": 20}  # problem -> M (inducing points per set)
PRESETS = {"quick": dict(seeds=[0], maxiter=50, adam_iterations=100, problems=["snelson"])}


def arguments(parser):
    parser.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2], help="Z draws")
    parser.add_argument("--problems", nargs="*", default=list(PROBLEMS), choices=list(PROBLEMS))
    parser.add_argument("--models", nargs="*", default=MODELS, choices=MODELS)
    parser.add_argument("--maxiter", type=int, default=1000, help="L-BFGS iterations (most)")
    parser.add_argument("--adam-iterations", type=int, default=1000)
    parser.add_argument("--lr", type=float, default=0.01, help="Adam learning rate")
    parser.add_argument(
        "--jitters", type=float, nargs="*", default=[1e-6, 1e-4], help="each in both precisions"
    )
    parser.add_argument("--neighbors", type=int, default=8, help="VNNGP's K")


def plan(args):
    settings = ["maxiter", "adam_iterations", "lr", "neighbors"]
    return [
        {**harness.keyed(args, settings, model=m, problem=p, seed=s, jitter=j), **centred(m)}
        for j in args.jitters
        for p in args.problems
        for s in args.seeds
        for m in args.models
    ]


def centred(model):
    """
    The key's mark of VNNGP's runs with centred neighbour conditionals (``CENTRED``), which the
    package computes since the fix was merged: the records of VNNGP without the mark are from
    before it (``before_the_fix``), and are not reused for the current code.
    """
    return {"vnngp_centred": True} if model == "VNNGP" else {}


def before_the_fix(keys):
    """The keys of the VNNGP runs measured before the fix (``CENTRED``) among ``keys``."""
    return [
        {k: v for k, v in key.items() if k != "vnngp_centred"}
        for key in keys
        if key.get("vnngp_centred")
    ]


# ------------------------------------------------------------------------------- problems


def problem(name, seed):
    """
    Training and test data and the initial inducing inputs (two disjoint random subsets of the
    training inputs, M each), every array rounded to float32 once so that both precisions
    start from the same numbers.
    """
    from gpflow_tight.datasets import find_data_dir, load_snelson, load_uci_gal

    if name == "snelson":
        X, Y = load_snelson()
        Xs = np.loadtxt(find_data_dir() / "snelson" / "snelson_test_inputs.dat")[:, None]
    else:
        split = load_uci_gal(name, split=0)
        X, Y, Xs = split.X_train, split.Y_train, split.X_test
    M = PROBLEMS[name]
    rows = np.random.default_rng(seed).permutation(len(X))
    Z_u, Z_v = X[rows[:M]], X[rows[M : 2 * M]]
    return tuple(a.astype(np.float32) for a in (X, Y, Xs, Z_u, Z_v))


def build(name, X, Y, Z_u, Z_v, neighbors, seed=0):
    """The model ``name`` in the current default float, and its loss data (None if it holds it)."""
    import gpflow

    import gpflow_tight as gt

    dtype = gpflow.config.default_float()
    X, Y, Z_u, Z_v = (a.astype(dtype) for a in (X, Y, Z_u, Z_v))
    kernel = gpflow.kernels.SquaredExponential(lengthscales=np.ones(X.shape[1]))
    data, noise, N = (X, Y), 0.1, len(X)

    def likelihood():
        return gpflow.likelihoods.Gaussian(noise)

    Z_uv = np.concatenate([Z_u, Z_v])
    collapsed = {
        "SGPR": lambda: gpflow.models.SGPR(data, kernel, Z_u, noise_variance=noise),
        "SGPR-2M": lambda: gpflow.models.SGPR(data, kernel, Z_uv, noise_variance=noise),
        "TightSGPR": lambda: gt.TightSGPR(data, kernel, Z_u, noise_variance=noise),
        "RelaxedSGPR": lambda: gt.RelaxedSGPR(
            data, kernel, Z_u, noise_variance=noise, relaxation="beta"
        ),
        "SOLVEGPR": lambda: gt.SOLVEGPR(data, kernel, Z_u, Z_v, noise_variance=noise),
        "TightSOLVEGPR": lambda: gt.TightSOLVEGPR(data, kernel, Z_u, Z_v, noise_variance=noise),
    }
    if name in collapsed:
        return collapsed[name](), None
    if name == "VNNGP":
        # inducing inputs: the distinct training inputs (M = N but for duplicates)
        Z = np.unique(X, axis=0)
        model = gt.VNNGP(kernel, likelihood(), Z, neighbors, num_data=N, seed=seed)
        return model, model.training_data(X, Y)
    uncollapsed = {
        "SVGP": lambda: gpflow.models.SVGP(kernel, likelihood(), Z_u, num_data=N),
        "SVGP-2M": lambda: gpflow.models.SVGP(kernel, likelihood(), Z_uv, num_data=N),
        "TightSVGP": lambda: gt.TightSVGP(kernel, likelihood(), Z_u, num_data=N),
        "RelaxedSVGP": lambda: gt.RelaxedSVGP(
            kernel, likelihood(), Z_u, num_data=N, relaxation="optimal"
        ),
        "SOLVEGP": lambda: gt.SOLVEGP(kernel, likelihood(), Z_u, Z_v, num_data=N),
        "TightSOLVEGP": lambda: gt.TightSOLVEGP(kernel, likelihood(), Z_u, Z_v, num_data=N),
    }
    return uncollapsed[name](), data


CENTRED = """
``VNNGPPosterior.conditional_on_neighbors`` (gpflow_tight/posteriors.py) evaluates, for a
stationary kernel, each point's joint covariance with its neighbours on inputs translated by the
mean of its (unmasked) neighbours (by the point itself when it has none). k depends on x - x'
only, so the matrices are the same in exact arithmetic, but GPflow's float32 squared distances
||x||² + ||z||² - 2xᵀz no longer cancel: their error is that of the neighbourhood's size, not of
the inputs' distance from the origin. It also clips c = k_xx - k_nxᵀa at 0, the package's
round-off policy for residual variances. The VNNGP runs of this study were measured with this
fix applied to a copy of the function in this script, before it was merged (the same operations
as the package's now); the runs without it are kept below.
"""


# ------------------------------------------------------------------------------- one run


def in_precision(dtype, jitter, fn):
    """``fn()`` with GPflow's default float ``dtype`` and default jitter ``jitter``."""
    import gpflow

    with gpflow.config.as_context(gpflow.config.Config(float=dtype, jitter=jitter)):
        return fn()


def short_error(error):
    """The error's class and the first sentence of its message."""
    return f"{type(error).__name__}: {str(error).split('. ')[0][:160]}"


def train(name, key, arrays):
    """
    Build and train ``name`` in the current default float. Returns the model (None when its
    construction failed), its loss data and what happened.
    """
    import tensorflow as tf

    from gpflow_tight import CholeskyError
    from gpflow_tight.training import TrainingError, fit_adam, fit_scipy

    X, Y, _, Z_u, Z_v = arrays
    try:
        model, data = build(name, X, Y, Z_u, Z_v, key["neighbors"], key["seed"])
    except (CholeskyError, tf.errors.InvalidArgumentError, ValueError) as error:
        return None, None, dict(status=f"refused at construction: {short_error(error)}", steps=0)
    try:
        if name in COLLAPSED:
            result = fit_scipy(model, maxiter=key["maxiter"], progress=False)
            steps = int(result.nit)
            status = f"{'converged' if result.success else 'not converged'}: {result.message}"
        else:
            iterations, lr = key["adam_iterations"], key["lr"]
            steps = len(fit_adam(model, data, iterations, learning_rate=lr, progress=False))
            status = "done"
    except TrainingError as error:  # the model holds the last finite-loss parameters
        steps, status = error.step - 1, f"stopped at step {error.step}: {short_error(error)}"
    except (CholeskyError, tf.errors.InvalidArgumentError) as error:
        steps, status = None, short_error(error)
    return model, data, dict(status=status, steps=steps)


def parameters_into(source, target):
    """Copy every parameter of ``source`` into ``target`` (same class), unconstrained, cast."""
    from gpflow.utilities import parameter_dict

    into = parameter_dict(target)
    for path, value in parameter_dict(source).items():
        variable = getattr(into[path], "unconstrained_variable", into[path])
        value = getattr(value, "unconstrained_variable", value).numpy()
        variable.assign(value.astype(variable.dtype.as_numpy_dtype))


def evaluate(model, data, Xs):
    """The objective, the predictions at ``Xs`` and the hyperparameters (an error: None)."""
    import gpflow
    import tensorflow as tf

    from gpflow_tight import CholeskyError

    try:
        value = float((model.elbo() if data is None else model.elbo(data)).numpy())
        mean, var = model.predict_f(Xs.astype(gpflow.config.default_float()))
    except (CholeskyError, tf.errors.InvalidArgumentError) as error:
        return dict(evaluate_error=short_error(error)), None, None
    mean, var = mean.numpy(), var.numpy()
    return (
        dict(
            objective=value,
            finite=bool(
                np.isfinite(value) and np.all(np.isfinite(mean)) and np.all(np.isfinite(var))
            ),
            dtype=str(mean.dtype),
            noise=float(model.likelihood.variance.numpy()),
            kernel_variance=float(model.kernel.variance.numpy()),
            lengthscales=np.atleast_1d(model.kernel.lengthscales.numpy()).tolist(),
        ),
        mean,
        var,
    )


def errors(mean, var, mean64, var64):
    """Largest mean error in predictive sds of float64, largest relative variance error."""
    mean_err = np.max(np.abs(mean.astype(float) - mean64) / np.sqrt(var64))
    var_err = np.max(np.abs(var.astype(float) - var64) / var64)
    return float(mean_err), float(var_err)


def run(key, args):
    """Both trainings, then the comparisons (see ``render``'s protocol)."""
    import time
    from functools import partial

    X, Y, Xs, Z_u, Z_v = arrays = problem(key["problem"], key["seed"])
    name, jitter, out, models, outputs = key["model"], key["jitter"], {}, {}, {}

    def trained(dtype):
        begin = time.perf_counter()
        model, data, record = train(name, key, arrays)
        record["seconds"] = time.perf_counter() - begin
        if model is None:
            return record, None
        values, mean, var = evaluate(model, data, Xs)
        models[dtype] = model
        return {**record, **values}, (values.get("objective"), mean, var)

    for dtype, label in ((np.float64, "f64"), (np.float32, "f32")):
        out[label], outputs[label] = in_precision(dtype, jitter, partial(trained, dtype))
    if outputs["f64"] is None or outputs["f32"] is None or outputs["f32"][1] is None:
        return out
    (L64, mean64, var64), (L32, mean32, var32) = outputs["f64"], outputs["f32"]
    if mean64 is not None:
        out["objective_rel"] = abs(L32 - L64) / abs(L64)
        out["mean_err"], out["var_err"] = errors(mean32, var32, mean64, var64)

    # the float64 model at float32's final parameters: float32's round-off alone (the same
    # parameters), and how much lower float32's training ended on the float64 objective
    def at_theta32():
        model, data = build(name, X, Y, Z_u, Z_v, key["neighbors"], key["seed"])
        parameters_into(models[np.float32], model)
        return evaluate(model, data, Xs)

    values, mean_at, var_at = in_precision(np.float64, jitter, at_theta32)
    if mean_at is None:
        out["at_theta32_error"] = values["evaluate_error"]
        return out
    out["roundoff_objective_rel"] = abs(L32 - values["objective"]) / abs(values["objective"])
    out["roundoff_mean_err"], out["roundoff_var_err"] = errors(mean32, var32, mean_at, var_at)
    if mean64 is not None:
        out["objective_gap"] = L64 - values["objective"]  # nats (float64 objective)
    return out


# ---------------------------------------------------------------------------------- report


METRICS = [  # record field, column title, format, negligible below
    ("objective_rel", "objective, rel. diff.", ".1e", 1e-4),
    ("objective_gap", "objective gap (nats)", ".3g", None),
    ("mean_err", "means (sd)", ".1e", 1e-2),
    ("var_err", "variances, rel.", ".1e", 1e-2),
    ("roundoff_objective_rel", "round-off: objective", ".1e", 1e-4),
    ("roundoff_mean_err", "round-off: means (sd)", ".1e", 1e-2),
    ("roundoff_var_err", "round-off: variances", ".1e", 1e-2),
]
TITLES = {field: title for field, title, _, _ in METRICS}
WORSE = 3.0  # flagged: over WORSE x the peer's largest error, and not negligible


def outcome(record):
    """How float32 training ended: "ok", or the kind of failure."""
    status = record["f32"]["status"]
    if status.startswith("refused"):
        return "refused at construction"
    if status.startswith("stopped"):
        return f"stopped at step {status.split()[3].rstrip(':')}"
    if "evaluate_error" in record["f32"] or not record["f32"].get("finite", False):
        return "no finite predictions"
    if record["f32"]["steps"] is not None and record["f32"]["steps"] <= 1:
        return f"no progress ({record['f32']['steps']} iteration, scipy: 'converged')"
    return "ok"


def largest(records, field):
    values = [r[field] for r in records if outcome(r) == "ok" and r.get(field) is not None]
    return max(values) if values else None


def summary(report, group, peers, flags, label):
    """One table: each model's largest differences, the peer's beside them; flags collected."""
    by_model = {m: [r for r in group if r["key"]["model"] == m] for m in MODELS}
    rows = []
    for model in MODELS:
        runs = by_model[model]
        if not runs:
            continue
        peer = peers.get(model)
        outcomes = [outcome(r) for r in runs]
        failures = sorted(set(o for o in outcomes if o != "ok"))
        trained = f"{outcomes.count('ok')} of {len(runs)}" + (
            f"; {', '.join(failures)}" if failures else ""
        )
        f64_failed = sum(r["f64"]["status"].startswith(("refused", "stopped")) for r in runs)
        trained += f" (float64 failed in {f64_failed})" if f64_failed else ""
        cells = []
        for field, _, fmt, negligible in METRICS:
            ours = largest(runs, field)
            text = "—" if ours is None else f"{ours:{fmt}}"
            theirs = largest(by_model.get(peer, []), field) if peer else None
            if peer:
                text += f" ({'—' if theirs is None else f'{theirs:{fmt}}'})"
            if None not in (ours, theirs, negligible) and ours > max(WORSE * theirs, negligible):
                text = f"**{text}**"
                flags.append((field, f"{label}: {model}, '{TITLES[field]}' {ours:{fmt}}, "
                                     f"{ours / theirs:.0f}x {peer}'s {theirs:{fmt}}"))  # fmt: skip
            cells.append(text)
        rows.append([model + (f" [{peer}]" if peer else ""), trained, *cells])
    report.table(["model [peer]", "float32 trained", *(t for _, t, _, _ in METRICS)], rows)


def render(report, records, missing, args):
    protocol = [
        "Models: TightSGPR, RelaxedSGPR (relaxation='beta'), SOLVEGPR, TightSOLVEGPR: L-BFGS-B "
        "(`fit_scipy`, at most `maxiter` iterations, scipy's default tolerances); TightSVGP, "
        "RelaxedSVGP (relaxation='optimal'), SOLVEGP, TightSOLVEGP, VNNGP: Adam (`fit_adam`, "
        "full batch, `adam_iterations` steps, learning rate `lr`). Peers (GPflow, the same "
        "protocol): `SGPR`/`SVGP` on Z_u for the one-set models and VNNGP, `SGPR`/`SVGP` on "
        "Z_u ∪ Z_v ('-2M') for the SOLVE models.",
        "Problems: Snelson 1-D (N = 200, M = 10 per set; test inputs: Snelson's 301-point grid "
        "on [-3, 10]) and UCI concrete split 0 (standardised, N = 927, D = 8, M = 20 per set; "
        "its 103 test inputs). Z_u, Z_v: two disjoint random subsets of the training inputs "
        "(seed); VNNGP: Z = the distinct training inputs, K = `neighbors`, random ordering "
        "(seed). Start: SE kernel (variance 1, lengthscales 1), noise variance 0.1, GPflow's "
        "default q(u). Every array is rounded to float32 once, so both precisions start from the "
        "same numbers; the jitter is the same in both precisions.",
        "'objective, rel. diff.': |L32 - L64| / |L64|, each trained model's ELBO in its own "
        "precision. 'objective gap': L64(θ64) - L64(θ32), how far below float64's end point "
        "float32's end point is on the float64 objective (nats; negative: float32 ended "
        "higher). 'means (sd)': max over the test inputs of |μ32 - μ64| / σ64 (latent f); "
        "'variances, rel.': max |v32 - v64| / v64.",
        "'round-off: ...': the same three between the float32 model and the float64 model at "
        "the same parameters (float32's end point): float32 arithmetic alone, without the two "
        "training paths.",
        "Tables: the largest value over the seeds whose float32 training ended normally ('ok'), "
        "the peer's in brackets; outcomes counted over all seeds ('stopped at step k': "
        "`TrainingError` at step k; 'refused at construction': `CholeskyError` when the model "
        "was built). **Bold**: over "
        f"{WORSE:g}x the peer's and not negligible (objective 1e-4, means 1e-2 sd, variances "
        "1e-2).",
    ]
    before, _ = report.store.collect(before_the_fix(plan(args)))  # kept, not rerun
    report.head(
        "float32 against float64: what each model loses", records + before, protocol, missing
    )
    flags = []
    for jitter in sorted({r["key"]["jitter"] for r in records}):
        for problem_name in PROBLEMS:
            group = [
                r for r in records
                if r["key"]["jitter"] == jitter and r["key"]["problem"] == problem_name
            ]  # fmt: skip
            if group:
                report.section(f"{problem_name}, jitter {jitter:g}")
                summary(report, group, PEERS, flags, f"{problem_name}, jitter {jitter:g}")
    if before:
        report.section("VNNGP before the fix of its neighbour conditionals")
        report.add(" ".join(CENTRED.split()), "")
        for jitter in sorted({r["key"]["jitter"] for r in before}):
            for problem_name in PROBLEMS:
                unfixed = [
                    r for r in before
                    if r["key"]["jitter"] == jitter and r["key"]["problem"] == problem_name
                ]  # fmt: skip
                peers = [
                    r for r in records
                    if r["key"]["jitter"] == jitter and r["key"]["problem"] == problem_name
                    and r["key"]["model"] == "SVGP"
                ]  # fmt: skip
                if unfixed:
                    label = f"{problem_name}, jitter {jitter:g}, before the fix"
                    report.section(label, level=3)
                    summary(report, unfixed + peers, {"VNNGP": "SVGP"}, [], label)
    report.section("Findings")
    roundoff = [text for field, text in flags if field.startswith("roundoff")]
    trained = [text for field, text in flags if not field.startswith("roundoff")]
    report.bullets(
        [
            f"Round-off at the same parameters over {WORSE:g}x the peer's: "
            + ("; ".join(roundoff) if roundoff else "none")
            + ".",
            f"After training, over {WORSE:g}x the peer's: "
            + ("; ".join(trained) if trained else "none")
            + ". Where the round-off is not flagged too, the two precisions took different "
            "optimisation paths (float32 L-BFGS stops early; Adam on flat directions).",
        ]
    )
    report.section("Every run")

    def num(value, fmt=".1e"):
        return "—" if value is None else f"{value:{fmt}}"

    rows = []
    for r in records + before:
        k, a, b = r["key"], r["f64"], r["f32"]
        unfixed = k["model"] == "VNNGP" and not k.get("vnngp_centred")
        rows.append([
            k["jitter"], k["problem"], k["seed"], k["model"] + (" (before the fix)" * unfixed),
            a["status"][:70], a["steps"], num(a.get("objective"), ".2f"),
            b["status"][:70], b["steps"], num(b.get("objective"), ".2f"),
            *(num(r.get(field), fmt) for field, _, fmt, _ in METRICS),
        ])  # fmt: skip
    report.table(
        ["jitter", "problem", "seed", "model", "float64 training", "steps", "objective",
         "float32 training", "steps", "objective", *(t for _, t, _, _ in METRICS)],
        rows,
    )  # fmt: skip


if __name__ == "__main__":
    harness.main(__import__(__name__))
