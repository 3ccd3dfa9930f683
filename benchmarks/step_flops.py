"""
How close each model's training step comes to the machine: the step's dense linear-algebra flops
(counted from its compiled graph), its time as TensorFlow runs it and under XLA
(``jit_compile=True``), and the achieved GFLOP/s against the GEMM rate measured in the same run.
"""

import harness
import numpy as np

NAME = "step_flops"
GOAL = 0.5  # the goal: SGPR- and SVGP-family steps at >= 50 % of the GEMM rate, M >= 500
COLLAPSED = ["SGPR", "TightSGPR", "GPRFITC", "FITC", "PowerEPSGP a=0.5", "PITC", "SOLVEGPR",
             "TightSOLVEGPR"]  # fmt: skip
UNCOLLAPSED = ["SVGP", "TightSVGP", "SOLVEGP", "TightSOLVEGP"]
OTHER = ["VNNGP", "BayesianGPLVM", "TightBayesianGPLVM", "MinibatchBayesianGPLVM"]
MODELS = COLLAPSED + UNCOLLAPSED + OTHER
FAMILY = {"SGPR", "TightSGPR", "SVGP", "TightSVGP", "SOLVEGPR", "TightSOLVEGPR", "SOLVEGP",
          "TightSOLVEGP"}  # fmt: skip
PEER = {"TightSGPR": "SGPR", "TightSVGP": "SVGP", "FITC": "GPRFITC",
        "TightBayesianGPLVM": "BayesianGPLVM"}  # fmt: skip
PRESETS = {"quick": dict(rounds=2, sizes=[32], models=["SGPR", "TightSGPR", "SVGP", "VNNGP"],
                         num_data=500, batch_size=64, gemm=[128], alternatives=[64])}  # fmt: skip

# ops whose flops are counted (the dense linear algebra); every other op is memory traffic,
# elementwise or bookkeeping, and its cost shows in the time only
LINEAR_ALGEBRA = ("MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "Cholesky",
                  "MatrixTriangularSolve", "MatrixInverse", "MatrixDeterminant",
                  "LogMatrixDeterminant", "SelfAdjointEigV2", "MatrixSolve")  # fmt: skip


def arguments(parser):
    parser.add_argument("--sizes", type=int, nargs="+", default=[500, 1000], help="M")
    parser.add_argument("--models", nargs="+", choices=MODELS, default=MODELS)
    parser.add_argument("--num-data", type=int, default=10_000, help="N of the collapsed models")
    parser.add_argument("--batch-size", type=int, default=1024, help="B of the minibatch models")
    parser.add_argument("--gemm", type=int, nargs="+", default=[1000, 2000], help="GEMM sizes")
    parser.add_argument(
        "--alternatives",
        type=int,
        nargs="*",
        default=[500, 1000],
        help="M of the GEMM-rich alternatives to the solve and the Cholesky",
    )
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=0, help="0: TensorFlow's default")
    parser.add_argument("--seed", type=int, default=0)


def plan(args):
    settings = ["num_data", "batch_size", "rounds", "threads", "seed"]
    keys = [harness.keyed(args, ["threads"], part="gemm", n=n) for n in args.gemm]
    keys += [harness.keyed(args, ["num_data", "rounds", "threads", "seed"], part="alternative", M=m)
             for m in args.alternatives]  # fmt: skip
    return keys + [
        harness.keyed(args, settings, part="step", model=name, M=m)
        for m in args.sizes
        for name in args.models
    ]


def _flops(shape_of, op):
    """Flops of one linear-algebra op from its static shapes (None if a shape is unknown)."""
    out = shape_of(op.outputs[0]) if op.outputs else None
    ins = [shape_of(t) for t in op.inputs]
    if out is None or any(s is None for s in ins[:2]):
        return None
    kind = op.type
    if kind == "MatMul":
        a = ins[0]
        inner = a[0] if op.get_attr("transpose_a") else a[1]
        return 2.0 * out[0] * out[1] * inner
    if kind.startswith("BatchMatMul"):
        a = ins[0]
        inner = a[-2] if op.get_attr("adj_x") else a[-1]
        return 2.0 * np.prod(out[:-2]) * out[-2] * out[-1] * inner
    if kind == "MatrixTriangularSolve":  # [..., m, m] \ [..., m, n]
        return float(np.prod(out[:-2]) * out[-2] ** 2 * out[-1])
    if kind == "Cholesky":
        return np.prod(out[:-2]) * out[-1] ** 3 / 3.0
    if kind in ("MatrixInverse", "MatrixDeterminant", "LogMatrixDeterminant", "MatrixSolve"):
        return 2.0 * np.prod(ins[0][:-2]) * ins[0][-1] ** 3
    if kind == "SelfAdjointEigV2":  # tridiagonal reduction and QR, about 9 n^3 with vectors
        return 9.0 * np.prod(ins[0][:-2]) * ins[0][-1] ** 3
    return 0.0


def count_flops(concrete):
    """
    Dense linear-algebra flops of a concrete function's graph, the functions it calls included
    (each counted once per call), and the op types whose shapes were not static.
    """
    from collections import Counter

    def shape_of(tensor):
        shape = tensor.shape
        return shape.as_list() if shape.is_fully_defined() else None

    unknown: Counter = Counter()

    def walk(graph, library):
        total = 0.0
        for op in graph.get_operations():
            if op.type in LINEAR_ALGEBRA:
                flops = _flops(shape_of, op)
                if flops is None:
                    unknown[op.type] += 1
                else:
                    total += flops
            elif op.type in ("PartitionedCall", "StatefulPartitionedCall"):
                name = op.get_attr("f").name
                if name in library:
                    total += walk(library[name].graph, library)
        return total

    graph = concrete.graph
    library = {
        name: function
        for name, function in getattr(graph, "_functions", {}).items()
        if hasattr(function, "graph")
    }
    return walk(graph, library), dict(unknown)


def _build(name, M, key):
    """The model and its training batch (None for models that hold their data)."""
    import gpflow

    import gpflow_tight as gt

    rng = np.random.default_rng(key["seed"])
    N, D = key["num_data"], 3

    def kernel(lengthscales=1.0):
        return gpflow.kernels.SquaredExponential(lengthscales=lengthscales)

    def regression(n):
        X = rng.uniform(0.0, 10.0, size=(n, D))
        return X, np.sin(X).sum(1, keepdims=True) + 0.1 * rng.standard_normal((n, 1))

    if name in COLLAPSED:
        X, Y = data = regression(N)
        Z = X[rng.choice(N, M, replace=False)].copy()
        Zu, Zv = Z[: M // 2], Z[M // 2 :]
        build = {
            "SGPR": lambda: gpflow.models.SGPR(data, kernel(), Z, noise_variance=0.1),
            "TightSGPR": lambda: gt.TightSGPR(data, kernel(), Z, noise_variance=0.1),
            "GPRFITC": lambda: gpflow.models.GPRFITC(data, kernel(), Z, noise_variance=0.1),
            "FITC": lambda: gt.FITC(data, kernel(), Z, noise_variance=0.1),
            "PowerEPSGP a=0.5": lambda: gt.PowerEPSGP(
                data, kernel(), Z, alpha=0.5, noise_variance=0.1
            ),  # fmt: skip
            "PITC": lambda: gt.PITC(data, kernel(), Z, block_size=M, noise_variance=0.1),
            "SOLVEGPR": lambda: gt.SOLVEGPR(data, kernel(), Zu, Zv, noise_variance=0.1),
            "TightSOLVEGPR": lambda: gt.TightSOLVEGPR(data, kernel(), Zu, Zv, noise_variance=0.1),
        }
        return build[name](), None
    if name in UNCOLLAPSED:
        batch = regression(key["batch_size"])
        Z = rng.uniform(0.0, 10.0, size=(M, D))
        Zu, Zv = Z[: M // 2], Z[M // 2 :]
        likelihood = gpflow.likelihoods.Gaussian(0.1)
        num = 100 * key["batch_size"]
        build = {
            "SVGP": lambda: gpflow.models.SVGP(kernel(), likelihood, Z, num_data=num),
            "TightSVGP": lambda: gt.TightSVGP(kernel(), likelihood, Z, num_data=num),
            "SOLVEGP": lambda: gt.SOLVEGP(kernel(), likelihood, Zu, Zv, num_data=num),
            "TightSOLVEGP": lambda: gt.TightSOLVEGP(kernel(), likelihood, Zu, Zv, num_data=num),
        }
        return build[name](), batch
    if name == "VNNGP":  # M = N inducing inputs at the data, K = 32, one batch of B
        X, Y = regression(M * 10)
        model = gt.VNNGP(kernel(0.5), gpflow.likelihoods.Gaussian(0.1), X[:M], min(32, M - 1),
                         num_data=len(X))  # fmt: skip
        rows = rng.choice(len(X), key["batch_size"], replace=False)
        return model, model.training_data(X[rows], Y[rows])
    # the GPLVMs: N = 1000 points of 10 outputs, Q = 3 latent dimensions, M inducing inputs / 5
    n, Q, m = 1000, 3, max(M // 5, 10)
    Y = rng.standard_normal((n, 10))
    latent = dict(
        X_data_mean=rng.standard_normal((n, Q)),
        X_data_var=np.full((n, Q), 0.1),
        kernel=gpflow.kernels.SquaredExponential(lengthscales=np.ones(Q)),
        inducing_variable=rng.standard_normal((m, Q)),
    )
    if name == "BayesianGPLVM":
        return gpflow.models.BayesianGPLVM(Y, **latent), None
    if name == "TightBayesianGPLVM":
        return gt.TightBayesianGPLVM(Y, **latent), None
    model = gt.MinibatchBayesianGPLVM(n, 10, noise_variance=0.5, **latent)
    return model, model.training_data(Y)


def _step(model, batch, jit_compile):
    import tensorflow as tf

    variables = model.trainable_variables
    arguments = () if batch is None else (batch,)

    @tf.function(jit_compile=jit_compile)
    def step():
        with tf.GradientTape() as tape:
            loss = model.training_loss(*arguments)
        return loss, tape.gradient(loss, variables)

    def call():
        loss, _ = step()
        return loss.numpy()

    return step, call


def run(key, args):
    import time

    import tensorflow as tf

    if key["part"] == "gemm":
        n = key["n"]
        a = tf.random.normal([n, n], dtype=tf.float64)
        b = tf.random.normal([n, n], dtype=tf.float64)
        c = tf.linalg.cholesky(tf.matmul(a, a, transpose_b=True) + n * tf.eye(n, dtype=a.dtype))
        ops = {
            "GEMM": (tf.function(lambda: tf.matmul(a, b)), 2.0 * n**3),
            "Cholesky": (tf.function(lambda: tf.linalg.cholesky(tf.matmul(c, c, transpose_b=True)
                                                               )), n**3 / 3 + 2.0 * n**3),
            "TriangularSolve": (tf.function(lambda: tf.linalg.triangular_solve(c, b)), 1.0 * n**3),
        }  # fmt: skip
        times = harness.interleaved({k: lambda f=f: f().numpy() for k, (f, _) in ops.items()}, 9)
        flops = {k: fl for k, (_, fl) in ops.items()}
        flops["Cholesky"] -= 2.0 * n**3  # the product that forms its input is timed with it
        times["Cholesky"] = [t - g for t, g in zip(times["Cholesky"], times["GEMM"])]
        return {"times": times, "flops": flops}

    if key["part"] == "alternative":
        return _alternatives(key)

    model, batch = _build(key["model"], key["M"], key)
    plain, plain_call = _step(model, batch, False)
    flops, unknown = count_flops(plain.get_concrete_function())
    fns = {"plain": plain_call}
    start = time.perf_counter()
    try:
        xla, xla_call = _step(model, batch, True)
        xla_call()
        fns["XLA"] = xla_call
        xla_error = None
    except Exception as error:  # XLA refuses some graphs: record why
        xla_error = f"{type(error).__name__}: {str(error).strip().splitlines()[0][:200]}"
    compile_seconds = time.perf_counter() - start
    times = harness.interleaved(fns, key["rounds"])
    return {"times": times, "flops": flops, "uncounted": unknown, "xla_error": xla_error,
            "xla_compile_s": compile_seconds}  # fmt: skip


def _blocked_cholesky(matrix, block):
    """
    Right-looking blocked Cholesky factorisation: per panel, a small factorisation, a triangular
    solve for the panel below it and a GEMM update of the trailing matrix, so most of the
    n^3/3 flops are GEMM's.
    """
    import tensorflow as tf

    n = matrix.shape[0]
    columns, trailing = [], matrix
    for start in range(0, n, block):
        width = min(block, n - start)
        L11 = tf.linalg.cholesky(trailing[:width, :width])
        L21 = tf.linalg.matrix_transpose(
            tf.linalg.triangular_solve(L11, tf.linalg.matrix_transpose(trailing[width:, :width]))
        )
        columns.append(tf.pad(tf.concat([L11, L21], axis=0), [[start, 0], [0, 0]]))
        trailing = trailing[width:, width:] - tf.matmul(L21, L21, transpose_b=True)
    return tf.concat(columns, axis=1)


def _alternatives(key):
    """
    The GEMM-rich alternatives the issue names, against what the steps use, on an SGPR-sized
    problem (M inducing inputs, N inputs): A = L^-1 K_uf by a triangular solve or by the product
    of an explicit inverse with K_uf (loss and gradient of sum(A^2), as in the trace term), and
    TensorFlow's Cholesky against a blocked one (forward only). Each alternative's largest
    relative difference from the reference is recorded.
    """
    import gpflow
    import tensorflow as tf

    rng = np.random.default_rng(key["seed"])
    M, N = key["M"], key["num_data"]
    X = rng.uniform(0.0, 10.0, size=(N, 3))
    Z = X[rng.choice(N, M, replace=False)]
    kernel = gpflow.kernels.SquaredExponential()
    Kuu = kernel(Z) + gpflow.config.default_jitter() * tf.eye(M, dtype=tf.float64)
    Kuf = tf.Variable(kernel(Z, X))
    L = tf.Variable(tf.linalg.cholesky(Kuu))
    eye = tf.eye(M, dtype=tf.float64)

    def trace_step(project):
        @tf.function
        def step():
            with tf.GradientTape() as tape:
                A = project()
                loss = tf.reduce_sum(tf.square(A))
            return A, tape.gradient(loss, [L, Kuf])

        return step

    solve = trace_step(lambda: tf.linalg.triangular_solve(L, Kuf))
    inverse = trace_step(lambda: tf.matmul(tf.linalg.triangular_solve(L, eye), Kuf))
    cholesky = tf.function(lambda: tf.linalg.cholesky(Kuu))
    blocked = tf.function(lambda: _blocked_cholesky(Kuu, 128))

    def difference(got, reference):
        got, reference = np.asarray(got), np.asarray(reference)
        return float(np.max(np.abs(got - reference)) / np.max(np.abs(reference)))

    (A, grads), (A2, grads2) = solve(), inverse()
    errors = {"inverse_product": max(difference(A2, A), *map(difference, grads2, grads)),
              "blocked_cholesky": difference(blocked(), cholesky())}  # fmt: skip
    fns = {
        "solve": lambda: solve()[0].numpy(),
        "inverse_product": lambda: inverse()[0].numpy(),
        "cholesky": lambda: cholesky().numpy(),
        "blocked_cholesky": lambda: blocked().numpy(),
    }
    return {"times": harness.interleaved(fns, key["rounds"]), "errors": errors}


ALTERNATIVES = [("solve", "inverse_product", "A = L^-1 K_uf, loss and gradient: triangular solve "
                 "vs explicit inverse times K_uf"),
                ("cholesky", "blocked_cholesky", "Cholesky of K_uu: TensorFlow's vs blocked "
                 "(panels of 128, GEMM updates)")]  # fmt: skip


def render_alternatives(report, records, num_data):
    if not records:
        return []
    report.section("GEMM-rich alternatives")
    rows, findings = [], []
    for r in sorted(records, key=lambda r: r["key"]["M"]):
        M = r["key"]["M"]
        for reference, alternative, what in ALTERNATIVES:
            ratio = np.median(r["times"][alternative]) / np.median(r["times"][reference])
            error = r["errors"][alternative]
            rows.append([M, what, f"{1e3 * np.median(r['times'][reference]):.1f}",
                         f"{1e3 * np.median(r['times'][alternative]):.1f}", f"{ratio:.2f}",
                         f"{error:.1e}"])  # fmt: skip
            verdict = "faster" if ratio < 1 else "slower"
            findings.append(f"M={M}, N={num_data}: {alternative.replace('_', ' ')} / "
                            f"{reference} = {ratio:.2f} ({verdict}; largest relative "
                            f"difference {error:.1e}).")  # fmt: skip
    report.table(["M", "what", "used (ms)", "alternative (ms)", "alternative / used",
                  "largest relative difference"], rows)  # fmt: skip
    return findings


def render(report, records, missing, args):
    protocol = [
        "Flops: the dense linear algebra of one step's graph (loss and gradient, as "
        "`tf.function` traces it), counted from static shapes: 2mnk per (batched) product, "
        "m^2 n per triangular solve with n right-hand sides, n^3/3 per Cholesky factorisation, "
        "2n^3 per inverse or determinant, 9n^3 per symmetric eigendecomposition. Elementwise "
        "ops, reductions and copies are not counted: their cost shows only in the time, so "
        "the rate is a lower bound of the work done.",
        "Time: one call of the compiled step (`tf.function`, and `tf.function(jit_compile=True)` "
        f"for XLA), results fetched; {args.rounds} interleaved rounds after 2 warm-up calls; "
        "medians. The XLA compile time is the first call.",
        "GEMM rate: float64 products of two n x n matrices in the same run (2n^3 flops), "
        "interleaved with a Cholesky factorisation (timed as product + factorisation, minus "
        "the product) and a triangular solve with n right-hand sides.",
        f"Collapsed models: N = {args.num_data}, D = 3, SE kernel, inducing inputs a random "
        "subset of the inputs (SOLVE: M/2 + M/2; PITC: blocks of M points). Minibatch models: "
        f"one batch of B = {args.batch_size}, full-covariance q, whitened. VNNGP: M inducing "
        f"inputs at the data, K = 32, a batch of B. GPLVMs: N = 1000, 10 outputs, Q = 3, "
        "M/5 inducing inputs.",
        f"Goal stated in the issue: SGPR- and SVGP-family steps at >= {100 * GOAL:.0f} % of the "
        "GEMM rate for M >= 500, and faster than GPflow's own step where the bound is the same.",
    ]
    report.head("Training steps against the machine: GFLOP/s and XLA", records, protocol,
                missing)  # fmt: skip
    gemm = [r for r in records if r["key"]["part"] == "gemm"]
    alternatives = [r for r in records if r["key"]["part"] == "alternative"]
    steps = [r for r in records if r["key"]["part"] == "step"]
    rows = []
    for r in gemm:
        rows.append([r["key"]["n"]] + [
            f"{r['flops'][k] / np.median(r['times'][k]) / 1e9:.1f}"
            for k in ("GEMM", "Cholesky", "TriangularSolve")
        ])  # fmt: skip
    report.section("The machine")
    report.table(["n", "GEMM GFLOP/s", "Cholesky GFLOP/s", "triangular solve GFLOP/s"], rows)
    rate = max((r["flops"]["GEMM"] / np.median(r["times"]["GEMM"]) for r in gemm), default=np.nan)
    rows, findings, family = [], [], []
    medians = {}
    for r in sorted(steps, key=lambda r: (r["key"]["M"], MODELS.index(r["key"]["model"]))):
        name, M = r["key"]["model"], r["key"]["M"]
        plain = np.median(r["times"]["plain"])
        xla = np.median(r["times"]["XLA"]) if "XLA" in r["times"] else None
        medians[name, M] = plain
        gflops = r["flops"] / plain / 1e9
        share = gflops * 1e9 / rate
        if name in FAMILY and M >= 500:
            family.append((name, M, share))
        xla_cell = f"{xla / plain:.2f}" if xla else "refused"
        rows.append([name, M, f"{r['flops'] / 1e9:.2f}", f"{1e3 * plain:.1f}",
                     f"{1e3 * xla:.1f}" if xla else "—", xla_cell, f"{gflops:.1f}",
                     f"{100 * share:.0f} %", f"{r['xla_compile_s']:.1f}"])  # fmt: skip
        if r["xla_error"]:
            findings.append(f"{name}, M={M}: XLA refused the step ({r['xla_error']}).")
        if r["uncounted"]:
            findings.append(f"{name}, M={M}: ops with unknown shapes not counted: "
                            f"{r['uncounted']}.")  # fmt: skip
    report.section("Steps")
    report.table(["model", "M", "GFLOP per step", "step ms", "XLA step ms", "XLA / plain",
                  "GFLOP/s", "share of GEMM rate", "XLA compile s"], rows)  # fmt: skip
    alternative_findings = render_alternatives(report, alternatives, args.num_data)
    report.section("Findings")
    summary = []
    if family:
        met = [f for f in family if f[2] >= GOAL]
        best = max(family, key=lambda f: f[2])
        shares = harness.span([f[2] * 100 for f in family], ".0f")
        summary.append(
            f"SGPR- and SVGP-family steps at M >= 500 reach {shares} % "
            f"of the GEMM rate ({rate / 1e9:.1f} GFLOP/s); {harness.of(len(met), len(family))} "
            f"meet the goal of {100 * GOAL:.0f} %; the best is {best[0]} at M={best[1]} "
            f"({100 * best[2]:.0f} %)."
        )  # fmt: skip
    xla_ratios = [np.median(r["times"]["XLA"]) / np.median(r["times"]["plain"]) for r in steps
                  if "XLA" in r["times"]]  # fmt: skip
    if xla_ratios:
        faster = sum(x < 1 for x in xla_ratios)
        summary.append(
            f"XLA / plain step time: {harness.span(xla_ratios)} over "
            f"{len(xla_ratios)} compiled steps; XLA is faster in {faster}."
        )
    for tight, peer in PEER.items():
        for M in sorted({m for _, m in medians}):
            if (tight, M) in medians and (peer, M) in medians:
                summary.append(f"{tight} / {peer} at M={M}: "
                               f"{medians[tight, M] / medians[peer, M]:.2f}.")  # fmt: skip
    report.bullets(summary + alternative_findings + findings)


if __name__ == "__main__":
    harness.main(__import__(__name__))
