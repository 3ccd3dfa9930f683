"""
Power-EP paper App. I.3, Fig. 23: where the optimised pseudo-inputs go as alpha runs from close to
0 (VFE) to 1 (EP). The paper: they "concentrate around the decision boundary for VFE, and spread
out to cover the data region in EP"; its data set is not named, so banana here (400 training,
4,900 test points, 2-D). Pseudo-inputs and hyperparameters trained to convergence from several
random initialisations; the claim measured by distances to a reference decision boundary and the
coverage of the training inputs, with rank-correlation trend tests across alpha.
"""

import os

# One BLAS thread: OpenBLAS's idle threads spin inside scipy's L-BFGS-B on a loaded machine.
for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import time  # noqa: E402

import harness  # noqa: E402
import numpy as np  # noqa: E402

NAME = "power_ep_banana"
VFE, REFERENCE = "VFE (SVGP)", "reference"
NUM_TRAIN, LIMIT = 400, 3.3  # banana: the first 400 rows of load_classification are training
SETTINGS = ["maxiter", "gauss_hermite", "damping", "site_tolerance", "max_sweeps"]
PRESETS = {"quick": dict(seeds=1, num_inducing=[10], alphas=[0.5, 1.0], maxiter=30,
                         reference_maxiter=5)}  # fmt: skip
BUDGET = 36
GRID_STEP, REFERENCE_STEP = 0.1, 0.05  # the stored p(y=1) grids: each fit (figure seed), reference
# [P] App. I.3: the claim, and the direction each measure takes if it holds as alpha grows
CLAIM = ("once optimised, the pseudo points tend to concentrate around the decision boundary for "
         "VFE, and spread out to cover the data region in EP. Figure 23 illustrates the same "
         "effect as α goes from close to 0 (VFE) to 1 (EP).")  # fmt: skip
MEASURES = {  # name: (label, expected sign of the trend in alpha, which half of the claim)
    "boundary": ("mean distance of z to the reference 0.5 contour", +1, "near the boundary"),
    "margin": ("mean |p_ref(y=1 | z) − 0.5|", +1, "near the boundary"),
    "coverage": ("mean distance of a training input to its nearest z", -1, "cover the data"),
    "spread": ("trace of the covariance of Z", +1, "cover the data"),
}
EXTRA = {"outside": "mean distance of z to its nearest training input",
         "escaped": "pseudo-inputs farther than ESCAPE from every training input"}  # fmt: skip
ESCAPE = 1.0  # escaped pseudo-inputs are left out of boundary, margin, spread and outside


def arguments(parser):
    parser.add_argument("--alphas", type=float, nargs="+",
                        default=[0.01, 0.1, 0.25, 0.5, 0.75, 1.0])  # fmt: skip
    parser.add_argument("--num-inducing", type=int, nargs="+", default=[10, 20])
    parser.add_argument("--seeds", type=int, default=4, help="pseudo-input initialisations")
    parser.add_argument("--maxiter", type=int, default=2000, help="L-BFGS-B iterations at most")
    parser.add_argument("--reference-maxiter", type=int, default=150)
    parser.add_argument("--gauss-hermite", type=int, default=50)
    parser.add_argument("--damping", type=float, default=0.5)
    parser.add_argument("--site-tolerance", type=float, default=1e-6)
    parser.add_argument("--max-sweeps", type=int, default=500, help="per objective evaluation")
    parser.add_argument("--figure-seed", type=int, default=0, help="its fits store a grid")
    parser.add_argument("--threads", type=int, default=1, help="TensorFlow threads")


def methods(args):
    return [VFE, *(f"α={a:g}" for a in args.alphas)]


def plan(args):
    reference = harness.keyed(args, SETTINGS, method=REFERENCE, M=NUM_TRAIN, seed=None)
    reference["maxiter"] = args.reference_maxiter
    return [reference] + [harness.keyed(args, SETTINGS, method=m, M=M, seed=s)
                          for s in range(args.seeds) for M in args.num_inducing
                          for m in methods(args)]  # fmt: skip


def alpha_of(method):
    return 0.0 if method == VFE else float(method[2:])


def data():
    from gpflow_tight.datasets import load_classification

    X, Y = load_classification("banana")
    return X[:NUM_TRAIN], Y[:NUM_TRAIN], X[NUM_TRAIN:], Y[NUM_TRAIN:]


def grid(step):
    axis = np.round(np.arange(-LIMIT, LIMIT + step / 2, step), 6)
    return axis, np.stack(np.meshgrid(axis, axis), -1).reshape(-1, 2)  # row i: y = axis[i]


_CACHE = {}  # (alpha, M) -> Power-EP model and its compiled functions, reused across seeds


class EPFit:
    """
    A ``PowerEPSGP`` trained by L-BFGS-B on its energy at converged sites: each objective
    evaluation starts the sites from those of the last accepted iterate and sweeps until no site
    changes by more than ``tolerance`` (relative); at a fixed point the gradient with the sites
    held fixed is the gradient of the converged energy.
    """

    def __init__(self, model, key):
        import tensorflow as tf

        self.model, self.key = model, key
        self.variables = model.trainable_variables
        self.initial = [v.numpy() for v in model.variables]

        @tf.function
        def sweep():
            result = model.sweep(None, damping=key["damping"], update="full")
            return result["max_change"], result["num_skipped"]

        @tf.function
        def loss_and_grad():
            with tf.GradientTape() as tape:
                loss = -model.log_marginal_likelihood() - model.log_prior_density()
            return loss, tape.gradient(loss, self.variables)

        self.sweep, self.loss_and_grad = sweep, loss_and_grad

    def reset(self, Z=None):
        for variable, value in zip(self.model.variables, self.initial):
            variable.assign(value)
        if Z is not None:
            self.model.inducing_variable.Z.assign(Z)

    def sites(self):
        return [self.model.site_precision.numpy(), self.model.site_shift.numpy()]

    def converge(self):
        """Sweeps until converged: (sweeps, converged, skipped updates, last change)."""
        number, skipped, change = 0, 0, np.inf
        while number < self.key["max_sweeps"]:
            change, missed = self.sweep()
            number, change, skipped = number + 1, float(change), skipped + int(missed)
            if not np.isfinite(change) or change < self.key["site_tolerance"]:
                break
        return number, bool(change < self.key["site_tolerance"]), skipped, change

    def fit(self, maxiter):
        import scipy.optimize
        import tensorflow as tf
        from gpflow.optimizers.scipy import Scipy

        variables, good, last = self.variables, [self.sites()], [None, None]
        stats = dict(evaluations=0, sweeps=[], unconverged=0, skipped=0, failed=0)

        def move(x):
            values = Scipy.unpack_tensors(variables, tf.convert_to_tensor(x))
            Scipy.assign_tensors(variables, values)
            self.model.site_precision.assign(good[0][0])
            self.model.site_shift.assign(good[0][1])

        def objective(x):
            move(x)
            stats["evaluations"] += 1
            try:
                sweeps, converged, skipped, change = self.converge()
                loss, grads = self.loss_and_grad()
                loss = float(loss)
            except tf.errors.InvalidArgumentError:
                sweeps, converged, skipped, loss, change = 0, False, 0, np.inf, np.nan
            stats["sweeps"].append(sweeps)
            last[:] = [np.array(x), self.sites()]
            stats["unconverged"] += not converged
            stats["skipped"] += skipped
            if not (np.isfinite(loss) and np.isfinite(change)):
                stats["failed"] += 1  # L-BFGS-B backs off (or stops at the last good iterate)
                return np.inf, np.zeros_like(x)
            return loss, np.concatenate([g.numpy().ravel() for g in grads])

        def accepted(x):  # the sites of the last evaluation, usually at x
            if last[0] is None or not np.array_equal(x, last[0]):
                move(x)
                self.converge()
                last[:] = [np.array(x), self.sites()]
            good[0] = last[1]

        x0 = Scipy.pack_tensors(variables).numpy()
        options = dict(maxiter=maxiter)
        result = scipy.optimize.minimize(objective, x0, jac=True, method="L-BFGS-B",
                                         callback=accepted, options=options)  # fmt: skip
        move(result.x)  # the final iterate, sites converged from the last accepted ones
        sweeps, converged, skipped, change = self.converge()
        energy = -float(self.loss_and_grad()[0])
        capped = result.nit >= maxiter
        return dict(
            objective=energy,
            converged=bool(result.success and not capped and converged),
            capped=bool(capped),
            message=str(result.message),
            iterations=int(result.nit),
            evaluations=stats["evaluations"],
            sweeps_median=float(np.median(stats["sweeps"])),
            sweeps_max=int(max(stats["sweeps"])),
            unconverged_evaluations=stats["unconverged"],
            failed_evaluations=stats["failed"],
            skipped_updates=stats["skipped"],
            sites_converged=converged,
            final_site_change=change,
        )


def power_ep(key, X, Y, Z, alpha, trainable_Z=True):
    import gpflow

    from gpflow_tight import ExactProbit, PowerEPSGP

    cache_key = (alpha, len(Z), trainable_Z)
    if cache_key not in _CACHE:
        kernel = gpflow.kernels.SquaredExponential(lengthscales=[1.0, 1.0])
        model = PowerEPSGP((X, Y), kernel, Z.copy(), alpha=alpha, likelihood=ExactProbit(),
                           num_gauss_hermite_points=key["gauss_hermite"])  # fmt: skip
        gpflow.set_trainable(model.inducing_variable, trainable_Z)
        _CACHE[cache_key] = EPFit(model, key)
    fit = _CACHE[cache_key]
    fit.reset(Z)
    return fit


def run(key, args):
    import gpflow

    from gpflow_tight import ExactProbit
    from gpflow_tight.training import fit_scipy

    X, Y, X_test, Y_test = data()
    begin = time.perf_counter()
    if key["method"] == REFERENCE:  # the full EP classifier: alpha = 1, Z = X fixed
        fit = power_ep(key, X, Y, X, 1.0, trainable_Z=False)
        out, model = fit.fit(key["maxiter"]), fit.model
        Z0 = None
    else:
        rng = np.random.default_rng([key["seed"], key["M"]])
        Z0 = X[rng.choice(len(X), key["M"], replace=False)]
        if key["method"] == VFE:  # whitened, full q_sqrt, q(u) at the prior; all of it trained
            kernel = gpflow.kernels.SquaredExponential(lengthscales=[1.0, 1.0])
            model = gpflow.models.SVGP(kernel, ExactProbit(), Z0.copy(), num_data=len(X))
            result = fit_scipy(model, (X, Y), maxiter=key["maxiter"], progress=False)
            capped = harness.iterations(result) >= key["maxiter"]
            out = dict(objective=float(model.elbo((X, Y))), iterations=harness.iterations(result),
                       converged=bool(result.success and not capped), capped=bool(capped),
                       message=str(result.message))  # fmt: skip
        else:
            fit = power_ep(key, X, Y, Z0, alpha_of(key["method"]))
            out, model = fit.fit(key["maxiter"]), fit.model
    out["train_seconds"] = time.perf_counter() - begin
    probability = model.predict_y(X_test)[0].numpy()[:, 0]
    out["error"] = float(np.mean((probability > 0.5) != (Y_test[:, 0] > 0.5)))
    out["nll"] = -float(np.mean(model.predict_log_density((X_test, Y_test)).numpy()))
    out["kernel_variance"] = float(model.kernel.variance.numpy())
    out["lengthscales"] = model.kernel.lengthscales.numpy().tolist()
    if key["method"] == REFERENCE:
        _, points = grid(REFERENCE_STEP)
        out["grid"] = np.round(model.predict_y(points)[0].numpy()[:, 0], 5).tolist()
    else:
        out["Z"] = np.round(model.inducing_variable.Z.numpy(), 6).tolist()
        out["Z_init"] = Z0.tolist()
        if key["seed"] == args.figure_seed:
            _, points = grid(GRID_STEP)
            out["grid"] = np.round(model.predict_y(points)[0].numpy()[:, 0], 4).tolist()
    return out


# --------------------------------------------------------------------------------- measures


def boundary_points(p, step):
    """Points along the 0.5 contour of the p(y=1) grid (segments resampled finely)."""
    import contourpy

    axis, _ = grid(step)
    lines = contourpy.contour_generator(axis, axis, p).lines(0.5)
    points = []
    for line in lines:
        for a, b in zip(line[:-1], line[1:]):
            count = max(2, int(np.ceil(np.linalg.norm(b - a) / 0.005)))
            points.append(a + np.linspace(0, 1, count)[:, None] * (b - a))
    return np.concatenate(points) if points else np.zeros((0, 2))


def measures(Z, X, reference, contour):
    """Each measure of MEASURES and EXTRA for the pseudo-inputs Z."""

    def nearest(a, b):
        return np.linalg.norm(a[:, None] - b[None], axis=-1).min(1)

    far = nearest(Z, X) > ESCAPE
    kept = Z[~far] if (~far).sum() > 1 else Z
    p = reference(np.clip(kept, -LIMIT, LIMIT)[:, ::-1])  # (y, x) order of the grid
    return dict(boundary=float(nearest(kept, contour).mean()),
                margin=float(np.abs(p - 0.5).mean()), coverage=float(nearest(X, Z).mean()),
                spread=float(np.trace(np.cov(kept.T))), outside=float(nearest(kept, X).mean()),
                escaped=int(far.sum()))  # fmt: skip


def render(report, records, missing, args):
    from scipy import stats
    from scipy.interpolate import RegularGridInterpolator

    runs = [r for r in records if not r.get("failed")]
    ref = next((r for r in runs if r["key"]["method"] == REFERENCE), None)
    fits = [r for r in runs if r["key"]["method"] != REFERENCE]
    k = fits[0]["key"] if fits else harness.keyed(args, SETTINGS)
    names = [m for m in methods(args) if any(r["key"]["method"] == m for r in fits)]
    Ms = sorted({r["key"]["M"] for r in fits})
    seeds = sorted({r["key"]["seed"] for r in fits})
    total = sum(r["seconds"] for r in records) / 60
    protocol = [
        "Data: banana, `gpflow_tight.datasets.load_classification('banana')`: its first 400 rows "
        "are the 400 training points (all used), the other 4,900 the test points; inputs as "
        "given (mean ≈ 0, std ≈ 1 per input), not rescaled. [P] does not name the data set of "
        "Fig. 23 (spec E3: [AMBIG]); banana is the usual 2-D choice.",
        "Likelihood: exact probit, `gpflow_tight.ExactProbit()`, for every model. Kernel: "
        "SE-ARD, variance 1 and lengthscales (1, 1) initially; all hyperparameters trained.",
        f"Pseudo-inputs: M ∈ {Ms} initialised at M training inputs drawn without replacement "
        f"(`default_rng([seed, M])`), seeds {seeds}, the same start for every α; TRAINED.",
        f"Power EP, α ∈ {{{', '.join(n[2:] for n in names if n != VFE)}}}: `PowerEPSGP(alpha=α, "
        f"likelihood=ExactProbit(), num_gauss_hermite_points={k['gauss_hermite']})` (closed-form "
        "moments at α = 1). Trained by L-BFGS-B (scipy, default tolerances) on the energy at "
        "converged sites: every objective evaluation starts the sites from those of the last "
        f"accepted iterate and runs damped parallel sweeps (`update='full'`, damping "
        f"{k['damping']}) until no site changes by more than {k['site_tolerance']:g} (relative; "
        f"at most {k['max_sweeps']} sweeps), then takes the energy and its gradient with the "
        "sites fixed (the gradient of the converged energy at a fixed point). At most "
        f"{k['maxiter']} L-BFGS-B iterations. This trains to convergence, unlike [P]'s "
        "interleaved minibatch scheme, so the pseudo-inputs are at a stationary point.",
        f"VFE: `gpflow.models.SVGP` (whitened, full q_sqrt, q(u) at the prior; Hensman et al. "
        f"2015) with the same kernel, likelihood and start, all parameters (q(u) included) "
        f"trained by `fit_scipy` (L-BFGS-B, at most {k['maxiter']} iterations). In the trend "
        "tests it is α = 0.",
        "Reference classifier for the boundary measures: EP with M = N (`PowerEPSGP(alpha=1)`, "
        "Z = the 400 training inputs, fixed; standard EP, [P] App. I.5), its hyperparameters "
        f"trained the same way (at most {ref['key']['maxiter'] if ref else '–'} iterations); "
        f"its p(y=1) on a {REFERENCE_STEP:g}-spaced grid over [−{LIMIT}, {LIMIT}]², its 0.5 "
        "contour traced by contourpy. Measures per fit, from its final Z: 'boundary' = mean "
        "Euclidean distance of a pseudo-input to that contour; 'margin' = mean |p_ref(y=1|z) "
        "− 0.5| (bilinear in the grid); 'coverage' = mean distance of a training input to its "
        "nearest pseudo-input; 'spread' = trace of the covariance of Z; 'outside' = mean "
        "distance of a pseudo-input to its nearest training input; 'escaped' = number of "
        f"pseudo-inputs farther than {ESCAPE:g} from every training input, which are left out "
        "of 'boundary', 'margin', 'spread' and 'outside' (they would dominate the means; "
        "'coverage' uses all of Z).",
        "If the claim holds, 'boundary', 'margin' and 'spread' grow with α and 'coverage' "
        "shrinks. Trend test: Spearman's rank correlation between α and the measure over all "
        "fits (VFE at α = 0), two-sided p from scipy; per (seed, M): does the measure move in "
        "the claimed direction from VFE to α = 1 and from the smallest Power-EP α to α = 1.",
        f"Test error (threshold 0.5) and NLL on the 4,900 test points. One process, "
        f"TensorFlow with {args.threads} thread(s) and one BLAS thread, on a machine another "
        f"long job shared; the first seed's seconds include tracing. {total:.1f} min in all.",
    ]
    report.head("Power EP: pseudo-inputs against α on banana ([P] App. I.3, Fig. 23)", records,
                protocol, missing)  # fmt: skip
    if not (ref and fits):
        return
    X = data()[0]
    axis, _ = grid(REFERENCE_STEP)
    p_ref = np.reshape(ref["grid"], (len(axis), len(axis)))
    contour = boundary_points(p_ref, REFERENCE_STEP)
    reference = RegularGridInterpolator((axis, axis), p_ref)
    for r in fits:
        r["m"] = measures(np.asarray(r["Z"]), X, reference, contour)
    report.section("The paper's claim beside these results")
    report.add(f'[P] App. I.3: "{CLAIM}"', "")
    report.add(f"Reference classifier (full EP, M = N): test error {ref['error']:.4f}, NLL "
               f"{ref['nll']:.4f}, kernel variance {ref['kernel_variance']:.3g}, lengthscales "
               f"{', '.join(f'{x:.3g}' for x in ref['lengthscales'])}; "
               f"{'converged' if ref['converged'] else 'NOT converged'} "
               f"({ref['iterations']} iterations, {ref['message']}).", "")  # fmt: skip
    alphas = np.array([alpha_of(r["key"]["method"]) for r in fits])
    rows, agree = [], {}
    for name, (label, sign, half) in MEASURES.items():
        values = np.array([r["m"][name] for r in fits])
        rho, p = stats.spearmanr(alphas, values)
        per_m = []
        for M in Ms:
            mine = [r["key"]["M"] == M for r in fits]
            rho_m, p_m = stats.spearmanr(alphas[mine], values[mine])
            per_m.append(f"M={M}: ρ = {rho_m:+.2f} (p = {p_m:.2g})")
        counts = []
        for low in (VFE, next((n for n in names if n != VFE), None)):
            pairs = paired(fits, low, "α=1", name)
            hits = sum(np.sign(b - a) == sign for a, b in pairs)
            counts.append(f"{low} → α=1: {harness.of(hits, len(pairs))}")
        direction = "up" if sign > 0 else "down"
        ok = np.sign(rho) == sign and p < 0.05
        against = np.sign(rho) == -sign and p < 0.05
        agree[name] = "agrees" if ok else ("opposite" if against else "no clear trend")
        rows.append([name, label, f"{half}: {direction}", f"ρ = {rho:+.2f}, p = {p:.2g}",
                     "; ".join(per_m), "; ".join(counts), agree[name]])  # fmt: skip
    report.table(["measure", "what", "claim: with α", f"Spearman, all {len(fits)} fits",
                  "per M", "claimed direction in (seed, M) pairs", "verdict"], rows)  # fmt: skip
    halves = {}
    for name, (_, _, half) in MEASURES.items():
        halves.setdefault(half, []).append(agree[name])
    words = []
    for half, verdicts in halves.items():
        state = ("reproduces" if all(v == "agrees" for v in verdicts) else "does not reproduce"
                 if all(v != "agrees" for v in verdicts) else "partly reproduces")  # fmt: skip
        words.append((half, state))
    states = {s for _, s in words}
    overall = states.pop() if len(states) == 1 else "partly reproduces"
    report.add(
        "Verdict: "
        + "; ".join(
            f"'{half}' {state} ({', '.join(f'{n} {agree[n]}' for n, v in MEASURES.items() if v[2] == half)})"  # noqa: E501
            for half, state in words
        )
        + f". Overall the paper's claim {overall.replace('reproduces', 'reproduces here')}"
        + " (a measure agrees when its Spearman correlation with α has the claimed sign at p < "
        "0.05).",
        "",
    )
    groups = {}  # (M, method) -> its fits, in table order
    for M in Ms:
        for n in names:
            mine = [r for r in fits if (r["key"]["M"], r["key"]["method"]) == (M, n)]
            if mine:
                groups[M, n] = mine
    report.section("Measures per α (mean ± standard error over seeds)")
    body = []
    for (M, n), mine in groups.items():
        cells = [harness.pm([r["m"][x] for r in mine], ".3f") for x in [*MEASURES, *EXTRA]]
        cells[-1] = f"{sum(r['m']['escaped'] for r in mine)} of {sum(r['key']['M'] for r in mine)}"
        cells += [harness.pm([r[x] for r in mine], ".4f") for x in ("error", "nll")]
        body.append([M, n, len(mine), *cells])
    report.table(["M", "method", "seeds", *MEASURES, *EXTRA, "test error", "test NLL"], body)
    report.add("Measures in input units (banana's inputs have std ≈ 1); 'margin' is a "
               "probability. The claim expects 'boundary', 'margin' and 'spread' to grow and "
               "'coverage' to shrink down each M block.", "")  # fmt: skip
    report.figure(plot(fits, p_ref, names, Ms, args.figure_seed, X),
                  f"{NAME}.png", "pseudo-inputs per α")  # fmt: skip
    report.add(f"Seed {args.figure_seed}. Dots: training inputs by class; black crosses: the "
               "trained pseudo-inputs; grey circles: their start; solid line: that model's "
               "0.5 contour; dashed: the reference classifier's.", "")  # fmt: skip
    report.section("Hyperparameters and convergence")
    body = []
    for (M, n), mine in groups.items():
        pep = n != VFE
        body.append([
            M, n, harness.pm([np.log10(r["kernel_variance"]) for r in mine], ".2f"),
            harness.pm([np.mean(r["lengthscales"]) for r in mine], ".2f"),
            harness.pm([r["objective"] for r in mine], ".2f"),
            f"{sum(r['converged'] for r in mine)} / {len(mine)}",
            sum(r["capped"] for r in mine),
            harness.span([r["iterations"] for r in mine], ".0f"),
            harness.span([r["sweeps_median"] for r in mine], ".0f") if pep else "–",
            sum(r["unconverged_evaluations"] for r in mine) if pep else "–",
            sum(r["failed_evaluations"] for r in mine) if pep else "–",
            sum(r["skipped_updates"] for r in mine) if pep else "–",
            f"{np.mean([r['seconds'] for r in mine]):.1f}"])  # fmt: skip
    report.table(["M", "method", "log10 kernel variance", "mean lengthscale",
                  "objective (energy / ELBO)", "converged", "hit the iteration cap",
                  "L-BFGS-B iterations", "site sweeps per evaluation (median)",
                  "evaluations with sites unconverged", "failed evaluations",
                  "skipped site updates", "mean s"], body)  # fmt: skip
    messages = sorted({f"{r['key']['method']}: {r['message']}" for r in fits if not
                       r["converged"]})  # fmt: skip
    report.add("'converged': L-BFGS-B reported success below the iteration cap (and, for Power "
               "EP, the sites at the final point converged). Messages of the runs that did "
               "not: " + ("; ".join(messages) if messages else "none") + ".", "")  # fmt: skip
    failed = [harness.short(r["key"]) for r in records if r.get("failed")]
    if failed:
        report.bullets([f"failed: {f}" for f in failed])


def paired(fits, a, b, name):
    """(measure of a, measure of b) per (seed, M) where both ran."""
    by = {}
    for r in fits:
        by.setdefault((r["key"]["seed"], r["key"]["M"]), {})[r["key"]["method"]] = r["m"][name]
    return [(v[a], v[b]) for v in by.values() if a in v and b in v]


def plot(fits, p_ref, names, Ms, seed, X):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    Y = data()[1][:, 0]
    axis, _ = grid(GRID_STEP)
    reference, _ = grid(REFERENCE_STEP)
    fig, axes = plt.subplots(len(Ms), len(names), figsize=(3.1 * len(names), 3.2 * len(Ms)),
                             squeeze=False, sharex=True, sharey=True)  # fmt: skip
    for row, M in enumerate(Ms):
        for col, n in enumerate(names):
            ax = axes[row, col]
            ax.scatter(*X[Y > 0.5].T, s=5, c="C0", alpha=0.45, lw=0)
            ax.scatter(*X[Y < 0.5].T, s=5, c="C3", alpha=0.45, lw=0)
            ax.contour(reference, reference, p_ref, levels=[0.5], colors="0.4",
                       linestyles="--", linewidths=1)  # fmt: skip
            mine = [r for r in fits if (r["key"]["M"], r["key"]["method"], r["key"]["seed"])
                    == (M, n, seed) and "grid" in r]  # fmt: skip
            if mine:
                r = mine[0]
                p = np.reshape(r["grid"], (len(axis), len(axis)))
                ax.contour(axis, axis, p, levels=[0.5], colors="k", linewidths=1.2)
                ax.scatter(*np.asarray(r["Z_init"]).T, s=30, facecolors="none",
                           edgecolors="0.5", lw=0.8)  # fmt: skip
                ax.scatter(*np.asarray(r["Z"]).T, s=50, marker="x", c="k", lw=2)
                away = int(np.sum(np.abs(r["Z"]) > LIMIT))
                ax.set_title(f"{n}, M={M}\nerror {r['error']:.3f}, boundary "
                             f"{r['m']['boundary']:.2f}" + (f", {away} z off panel" if away
                                                              else ""), fontsize=9)  # fmt: skip
            ax.set(xlim=(-LIMIT, LIMIT), ylim=(-LIMIT, LIMIT), aspect="equal")
    fig.tight_layout()
    return fig


if __name__ == "__main__":
    harness.main(__import__(__name__))
