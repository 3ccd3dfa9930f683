"""
Tables 1-2 of Wu, Pleiss & Cunningham (2022), *Variational nearest neighbor Gaussian process*:
test RMSE and NLL of ``gpflow_tight.VNNGP`` (M = N, mean-field q) against ``gpflow.models.SVGP``
and ``gpflow_tight.TightSVGP`` (M inducing inputs, full-rank q) on the seven UCI sets of the
paper that ``uci_wilson`` has, beside the paper's numbers. By default scaled down (training sets
cut to 5,000 points, 600 Adam steps); ``--preset paper`` is the paper's size (full training
sets, epochs, M = 1024) with GPyTorch's VNNGP (model ``GPyTorch``: ``NNVariationalStrategy``,
trained by ``vnngp_gpytorch_train.py`` in GPyTorch's own virtualenv, ``--gpytorch-python``)
beside ours.
"""

import harness
import numpy as np

NAME = "vnngp_uci"
SETS = {"pol": ("PoleTele", "9.6K"), "elevators": ("Elevators", "10.6K"),
        "bike": ("Bike", "11.1K"), "kin40k": ("Kin40K", "25.6K"), "protein": ("Protein", "25.6K"),
        "keggdirected": ("KEGG", "31.2K"), "keggundirected": ("KEGGU", "40.7K")}  # fmt: skip
# Paper Tables 1-3 (Wu, Pleiss & Cunningham 2022, §4.3, App. D.3.2-D.3.3): NLL, RMSE and learned
# noise of ExactGP, SVGP and VNNGP.
PAPER_TABLE = """
pol            −.509±.005 .095±.000 .020  −.708±.003  .113±.000 .015  −1.160±.014 .091±.002 .002
elevators      .464±.011  .360±.006 .166  .417±.017   .366±.006 .132  .463±.020   .373±.004 .067
bike           −.744±.007 .054±.003 .016  −1.849±.016 .028±.001 .002  −1.690±.057 .043±.003 .001
kin40k         −.149±.001 .099±.001 .020  −.399±.003  .145±.001 .031  −1.016±.004 .096±.001 .001
protein        1.044±.003 .533±.002 .182  .967±.005   .633±.003 .417  .671±.009   .565±.003 .018
keggdirected   −.713±.004 .085±.002 .019  −1.000±.011 .089±.001 .008  −1.039±.018 .085±.001 .005
keggundirected −.471±.003 .117±.000 .023  −.680±.002  .122±.000 .015  −.715±.004   .118±.000 .013
"""
PAPER = {row[0]: dict(zip(("ExactGP", "SVGP", "VNNGP"), (row[1:4], row[4:7], row[7:])))
         for row in map(str.split, PAPER_TABLE.strip().splitlines())}  # fmt: skip
MODELS = ["VNNGP", "GPyTorch", "SVGP", "TightSVGP"]
DEFAULT_MODELS = ["VNNGP", "SVGP", "TightSVGP"]  # GPyTorch needs its own virtualenv
PAPER_MODEL = {"VNNGP": "VNNGP", "GPyTorch": "VNNGP", "SVGP": "SVGP"}  # the paper's VNNGP: GPyTorch
INIT = float(np.log(2.0))  # 0.6931 = softplus(0): the paper's initial value of every hyperparameter
SETTINGS = ["max_train", "neighbors", "batch_size", "inducing_batch_size", "num_inducing",
            "vnngp_iterations", "svgp_iterations", "vnngp_lr", "svgp_lr", "vnngp_init",
            "vnngp_q_sqrt", "seed"]  # fmt: skip
PRESETS = {
    "quick": dict(datasets=["pol", "keggdirected"], splits=1, max_train=2000,
                  vnngp_iterations=50, svgp_iterations=50, num_inducing=64),
    # The paper's size (App. D.3.1; see the protocol of `render`): all training points, K = 32,
    # 300 epochs of batch 256, lr 0.01 with the MultiStep schedule, SVGP M = 1024 with batch
    # 1024, 3 splits; our VNNGP as `VNNGP.from_data` builds it: the jitter of the paper's code
    # (GPyTorch's 1e-3) and the KL on the data batch's own inducing points.
    "paper": dict(models=MODELS, splits=3, max_train=0, neighbors=32, batch_size=256,
                  svgp_batch_size=1024, inducing_batch_size=256, num_inducing=1024, epochs=300,
                  vnngp_lr=0.01, svgp_lr=0.01, vnngp_jitter=1e-3, vnngp_kl="data",
                  time_budget=None),
}  # fmt: skip


def _has_paper_records():
    """Whether the committed records hold runs in epochs (``harness.py render all`` then also
    renders ``results/vnngp_uci_paper.md``)."""
    path = harness.RESULTS / f"{NAME}.jsonl"
    return path.exists() and '"epochs"' in path.read_text()


RENDER_PRESETS = ("paper",) if _has_paper_records() else ()
GPYTORCH_PYTHON = "/work/gpytorch-venv/bin/python"
GPFLOW_JITTER = 1e-6  # gpflow.config.default_jitter(): what a VNNGP key without vnngp_jitter ran at
KL_ESTIMATES = {"uniform": "the KL on inducing points drawn uniformly",
                "data": "the KL on the data batch's own inducing points"}  # fmt: skip
REPEAT_OFFSET = 1e-7  # `--vnngp-z rows`: the k-th repeat of an input moves k times this
INDUCING_SETS = {
    "distinct": "one inducing point per distinct input",
    "rows": "one inducing point per training row (GPyTorch's set)",
}
# The value of a setting in keys without it (records made before the setting existed).
ABSENT = {"vnngp_kl": "uniform", "vnngp_jitter": GPFLOW_JITTER, "vnngp_z": "distinct"}
SAY = {"vnngp_kl": KL_ESTIMATES.get, "vnngp_z": INDUCING_SETS.get,
       "vnngp_jitter": "ε = {:g}".format,
       "vnngp_lr": "learning rate {:g}".format, "epochs": "{:g} epochs".format}  # fmt: skip
UNIFORM = {"vnngp_kl": "uniform"}
GRID = "The paper picked each setting from its grid by validation NLL"
# The planned runs beside the same runs with settings changed, each section a pair of runs made
# from a planned key: (title, why, the changes that make the first run, those of the second).
VARIANTS = (
    ("The KL estimate", "`kl_estimate='data_batch'`, the default of `VNNGP.from_data`, is "
     "GPyTorch's estimate: at Z = X a data batch's inducing points are its own inputs. The "
     "uniform sample was this study's first choice", {}, UNIFORM),
    ("The inducing set", "GPyTorch's mode 1 takes Z = X row for row, the repeats of an input "
     "included (made non-singular by its jitter); ours keeps the distinct inputs, about a "
     "third of the rows on the KEGG sets. To give every row its own inducing point, the k-th "
     f"repeat of an input is moved by k x {REPEAT_OFFSET:g} in the first coordinate",
     {}, {"vnngp_z": "rows"}),
    ("GPflow's default jitter", "These are the records made first, before the paper preset "
     "took the jitter of the paper's code", UNIFORM, {**UNIFORM, "vnngp_jitter": GPFLOW_JITTER}),
    ("The paper's other grid value", GRID, UNIFORM, {**UNIFORM, "vnngp_lr": 0.005}),
    ("The paper's other grid value", GRID, UNIFORM, {**UNIFORM, "epochs": 500}),
)  # fmt: skip
BUDGET = 45


def arguments(parser):
    parser.add_argument("--datasets", nargs="+", choices=list(SETS), default=list(SETS))
    parser.add_argument("--models", nargs="+", choices=MODELS, default=DEFAULT_MODELS)
    parser.add_argument("--splits", type=int, default=3)
    parser.add_argument("--max-train", type=int, default=5000, help="subsample; 0: all points")
    parser.add_argument("--neighbors", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--svgp-batch-size", type=int,
                        help="SVGP / TightSVGP data batch (default --batch-size)")  # fmt: skip
    parser.add_argument("--inducing-batch-size", type=int, default=256)
    parser.add_argument("--num-inducing", type=int, default=256, help="SVGP / TightSVGP M")
    parser.add_argument("--vnngp-iterations", type=int, default=600)
    parser.add_argument("--svgp-iterations", type=int, default=600)
    parser.add_argument("--vnngp-lr", type=float, default=0.02)
    parser.add_argument("--svgp-lr", type=float, default=0.02)
    parser.add_argument("--vnngp-init", choices=["zero", "targets"], default="targets")
    parser.add_argument("--vnngp-q-sqrt", type=float, default=0.1, help="initial q_sqrt")
    parser.add_argument("--epochs", type=int, help="train for epochs (replaces the iterations)")
    parser.add_argument("--gpytorch-python", default=GPYTORCH_PYTHON,
                        help="python of a virtualenv with torch, gpytorch, faiss-cpu")  # fmt: skip
    parser.add_argument("--gpytorch-jitter", type=float, default=1e-3, help="GPyTorch jitter_val")
    parser.add_argument("--vnngp-jitter", type=float, help="our VNNGP's jitter (default GPflow's)")
    parser.add_argument("--vnngp-kl", choices=list(KL_ESTIMATES), default=ABSENT["vnngp_kl"],
                        help="our VNNGP's KL: on --inducing-batch-size points drawn uniformly, "
                        "or on the data batch's own inducing points (GPyTorch's; "
                        "kl_estimate='data_batch')")  # fmt: skip
    parser.add_argument("--vnngp-z", choices=list(INDUCING_SETS), default=ABSENT["vnngp_z"],
                        help="our VNNGP's inducing inputs: the distinct training inputs, or "
                        "every row (repeats moved apart a little; GPyTorch's Z = X)")  # fmt: skip
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)


def key_of(args, **identity):
    """
    A run's key: the scaled-down study's settings; with ``--epochs``, ``epochs`` replaces the
    two iteration counts; GPyTorch's runs also carry its jitter, ours their jitter, KL estimate
    and inducing set where these differ from ``ABSENT`` (the values of the records made before
    the settings existed); SVGP's and TightSVGP's ``batch_size`` is ``--svgp-batch-size`` when
    given.
    (The committed records' keys are unchanged.)
    """
    key = harness.keyed(args, SETTINGS, **identity)
    if args.epochs:
        del key["vnngp_iterations"], key["svgp_iterations"]
        key["epochs"] = args.epochs
    if identity.get("model") == "GPyTorch":
        key["gpytorch_jitter"] = args.gpytorch_jitter
    for name in ("vnngp_jitter", "vnngp_kl", "vnngp_z"):
        value = getattr(args, name)
        if identity.get("model") == "VNNGP" and value not in (None, ABSENT[name]):
            key[name] = value
    if identity.get("model") in ("SVGP", "TightSVGP") and args.svgp_batch_size:
        key["batch_size"] = args.svgp_batch_size
    return key


def plan(args):
    keys = [key_of(args, dataset=d, split=s, model=m)
            for s in range(args.splits) for d in args.datasets for m in args.models]  # fmt: skip
    if args.epochs:  # the nearest-neighbour models (minutes per run) before SVGP's (hours)
        keys.sort(key=lambda key: key["model"] in ("SVGP", "TightSVGP"))  # stable
    return keys


def apart(X, inverse, counts):
    """X with the k-th repeat of each input (rows with the same ``inverse``) moved by k times
    ``REPEAT_OFFSET`` in the first coordinate, so that every row is a distinct input."""
    order = np.argsort(inverse, kind="stable")
    rank = np.empty(len(X))
    rank[order] = np.arange(len(X)) - np.repeat(np.cumsum(counts) - counts, counts)
    moved = X.copy()
    moved[:, 0] += REPEAT_OFFSET * rank
    return moved


def steps_of(key, num_train, model):
    """Adam steps: the iterations, or ``epochs`` passes over the N training points."""
    if "epochs" in key:
        return -(-key["epochs"] * num_train // key["batch_size"])
    return key["vnngp_iterations" if model in ("VNNGP", "GPyTorch") else "svgp_iterations"]


def gpytorch(key, args, data, X, Y, seed):
    """GPyTorch's VNNGP on the same split, in GPyTorch's virtualenv (vnngp_gpytorch_train.py)."""
    import json
    import subprocess
    import tempfile
    from pathlib import Path

    if not Path(args.gpytorch_python).exists():
        raise SystemExit(f"--gpytorch-python {args.gpytorch_python}: no such interpreter")
    _, inverse = np.unique(X, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    arrays = dict(X_train=X, Y_train=Y, X_test=data.X_test, Y_test=data.Y_test,
                  order=np.random.default_rng(seed).permutation(len(X)))  # fmt: skip
    if key["vnngp_init"] == "targets":  # as ours: the mean target over each input's duplicates
        mean = np.bincount(inverse, weights=Y[:, 0]) / np.bincount(inverse)
        arrays["q_mu"] = mean[inverse]
    if "epochs" in key:
        epochs = key["epochs"]
    else:  # whole epochs of GPyTorch's (1 + ceil((N - K) / B) steps), about the iterations
        per_epoch = 1 + -(-(len(X) - key["neighbors"]) // key["batch_size"])
        epochs = max(1, round(key["vnngp_iterations"] / per_epoch))
    with tempfile.TemporaryDirectory() as folder:
        np.savez(Path(folder) / "data.npz", **arrays)
        command = [args.gpytorch_python, str(harness.HERE / "vnngp_gpytorch_train.py"),
                   f"--data={folder}/data.npz", f"--k={key['neighbors']}",
                   f"--batch-size={key['batch_size']}", f"--epochs={epochs}",
                   f"--lr={key['vnngp_lr']}", f"--jitter={key['gpytorch_jitter']}",
                   f"--init={INIT}", f"--q-sqrt={key['vnngp_q_sqrt']}",
                   f"--threads={args.threads}", f"--seed={seed}"]  # fmt: skip
        result = subprocess.run(command, capture_output=True, text=True)
    lines = result.stdout.strip().splitlines()
    if result.returncode or not lines:
        return {"error": (result.stderr.strip().splitlines() or ["failed"])[-1]}
    out = json.loads(lines[-1])
    if "error" not in out:
        out.update(num_train_full=len(data.X_train), iterations=out["steps"])
    return out


def run(key, args):
    import time

    import gpflow
    import tensorflow as tf
    from gpflow.keras import tf_keras
    from scipy.cluster.vq import kmeans2

    from gpflow_tight import VNNGP, TightSVGP
    from gpflow_tight.datasets import load_uci_wilson
    from gpflow_tight.training import fit_adam

    data = load_uci_wilson(key["dataset"], key["split"], standardize=True)
    X, Y = data.X_train, data.Y_train
    if key["max_train"] and len(X) > key["max_train"]:
        rng = np.random.default_rng(1000 + key["split"])
        rows = np.sort(rng.choice(len(X), key["max_train"], replace=False))
        X, Y = X[rows], Y[rows]
    seed = key["seed"] + key["split"]
    if key["model"] == "GPyTorch":
        return gpytorch(key, args, data, X, Y, seed)
    tf.random.set_seed(seed)
    start = time.perf_counter()
    kernel = gpflow.kernels.Matern52(variance=INIT, lengthscales=np.full(X.shape[1], INIT))
    likelihood = gpflow.likelihoods.Gaussian(variance=INIT)
    if key["model"] == "VNNGP":  # one inducing input per distinct input (duplicates: singular K)
        Z, inverse = np.unique(X, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        counts, q_mu = np.bincount(inverse, minlength=len(Z)), None
        if key["vnngp_init"] == "targets":  # the mean target at each distinct input
            q_mu = (np.bincount(inverse, weights=Y[:, 0], minlength=len(Z)) / counts)[:, None]
        if setting(key, "vnngp_z") == "rows":  # each row its own inducing input, as GPyTorch's
            X = Z = apart(X, inverse, counts)
            q_mu = None if q_mu is None else q_mu[inverse]
            inverse, counts = np.arange(len(X)), np.ones(len(X), dtype=int)
        kl = dict(inducing_batch_size=key["inducing_batch_size"])
        if setting(key, "vnngp_kl") == "data":  # the batch's own inducing points, 1/count each
            kl = dict(kl_estimate="data_batch", data_multiplicity=counts)
        model = VNNGP(kernel, likelihood, Z, key["neighbors"], num_data=len(X), q_mu=q_mu,
                      q_sqrt=np.full((len(Z), 1), key["vnngp_q_sqrt"]), ordering="random",
                      seed=seed, jitter=key.get("vnngp_jitter"), **kl)  # fmt: skip
        train, lr = model.training_data(X, Y), key["vnngp_lr"]
        assert np.array_equal(train[2][:, 0], inverse), "each input's nearest is its own Z row"
        steps = steps_of(key, len(X), "VNNGP")
    else:
        m = min(key["num_inducing"], len(np.unique(X, axis=0)))
        start_Z = X[np.random.default_rng(seed).choice(len(X), m, replace=False)]
        Z, _ = kmeans2(X, start_Z, iter=10, minit="matrix")
        cls = gpflow.models.SVGP if key["model"] == "SVGP" else TightSVGP
        model = cls(kernel, likelihood, Z, num_data=len(X))
        train, steps, lr = (X, Y), steps_of(key, len(X), key["model"]), key["svgp_lr"]
    schedule = tf_keras.optimizers.schedules.PiecewiseConstantDecay(  # the paper's MultiStepLR
        [int(0.75 * steps), int(0.9 * steps)], [lr, lr / 10, lr / 100]
    )
    losses = fit_adam(model, train, iterations=steps, batch_size=key["batch_size"],
                      learning_rate=schedule, progress=False, seed=seed)  # fmt: skip
    train_seconds = time.perf_counter() - start
    start = time.perf_counter()
    mean = model.predict_y(data.X_test)[0].numpy()
    nll = -float(np.mean(model.predict_log_density((data.X_test, data.Y_test)).numpy()))
    out = dict(num_train=len(X), num_train_full=len(data.X_train), num_test=len(data.X_test),
               dim=X.shape[1], num_inducing=int(model.inducing_variable.num_inducing),
               iterations=steps, train_seconds=train_seconds,
               predict_seconds=time.perf_counter() - start, nll=nll,
               rmse=float(np.sqrt(np.mean((mean - data.Y_test) ** 2))),
               noise=float(model.likelihood.variance.numpy()),
               final_loss=float(np.mean(losses[-50:])))  # fmt: skip
    if "epochs" in key:  # the mean loss of each epoch (a trace to compare with GPyTorch's)
        out["epoch_loss"] = [float(np.mean(x)) for x in np.array_split(losses, key["epochs"])]
    return out


def number(cell):
    """The mean of a paper cell such as '−1.160±.014'."""
    return float(cell.split("±")[0].replace("−", "-"))


def spread(cell):
    """The standard error of a paper cell such as '−1.160±.014' (0 without one)."""
    return float(cell.split("±")[1]) if "±" in cell else 0.0


def gpytorch_bullet(k, records):
    """How GPyTorch's VNNGP was run (the protocol's bullet)."""
    torch = next((r for r in records if "versions" in r), None)
    init = "the targets" if k["vnngp_init"] == "targets" else "0"
    versions = ""
    if torch:
        v = torch["versions"]
        versions = f" (gpytorch {v['gpytorch']}, torch {v['torch']}, {torch['nnlib']})"
    length = (
        f"{k['epochs']} of its epochs"
        if "epochs" in k
        else "whole epochs of its own, as many as make about the iterations"
    )
    return (
        f"GPyTorch: `gpytorch.variational.NNVariationalStrategy`{versions}, run as a separate "
        "process in GPyTorch's own virtualenv (`benchmarks/vnngp_gpytorch_train.py`) on the "
        "same standardised arrays: inducing points = all N training inputs in a random "
        "order (seed = split; duplicates kept, as GPyTorch's mode 1 needs Z = X row for "
        f"row), `jitter_val` = {k.get('gpytorch_jitter', 1e-3)} (GPyTorch's default), "
        f"k = {k['neighbors']}, `training_batch_size` = {k['batch_size']}, mean-field q "
        f"started as ours (means {init}, std {k['vnngp_q_sqrt']}; GPyTorch's own start is "
        "the prior mean and std 0.01), `ZeroMean`, `ScaleKernel(MaternKernel(nu=2.5, "
        "ard_num_dims=D))`, `GaussianLikelihood` (noise ≥ 1e-4, GPyTorch's constraint), "
        "float64; GPyTorch's recommended loop (`model(x=None)`: the data term and the KL "
        f"on the same block, `VariationalELBO(num_data=N)`) for {length}, Adam (lr "
        f"{k['vnngp_lr']}) over all parameters with `MultiStepLR` (x0.1 at 75% and 90% of the "
        "epochs); test predictions `likelihood(model(X_test))` in eval mode (the K nearest "
        "inducing points of each test input). Its 'train s' include building the neighbour "
        "table (faiss, one search per inducing point, O(N^2))."
    )


def vnngp_jitter(records, k):
    """Our VNNGP's jitter in the records (GPflow's default where the key has none)."""
    keys = [r["key"] for r in records if r["key"]["model"] == "VNNGP"] or [k]
    values = sorted({setting(key, "vnngp_jitter") for key in keys})
    return " and ".join(f"{v:g}" for v in values) + (
        " (GPyTorch's `jitter_val`, as `VNNGP.from_data`)" if values == [1e-3] else ""
    )


def paper_protocol(k, args, splits, records):
    """The protocol of the paper-size study (``--epochs``): what the paper did, what we did."""
    init = ("the training target at each inducing input (mean over duplicates)"
            if k["vnngp_init"] == "targets" else "0")  # fmt: skip
    svgp_batch = key_of(args, model="SVGP")["batch_size"]
    svgp_batches = (f" ({svgp_batch} for SVGP and TightSVGP)"
                    if svgp_batch != k["batch_size"] else "")  # fmt: skip
    protocol = [
        "Paper protocol (Wu, Pleiss & Cunningham 2022, §4.3 and App. D.3.1): random 64/16/20 "
        "train/validation/test splits, 3 seeds; VNNGP with M = N, mean-field q, random "
        "ordering, K in {32, 256}; SVGP with M = 1024, full-rank q, k-means Z; Matérn-5/2 ARD, "
        "lengthscales, outputscale and noise initialised to 0.6931; Adam with a MultiStepLR "
        "(x0.1 at 75% and 90%) for {300, 500} 'iterations' with lr in {0.005, 0.01} (N < 50K); "
        "each configuration picked by validation NLL; batch sizes not stated. The paper's VNNGP "
        "is GPyTorch's implementation (§1, footnote 1).",
        f"Here: split(s) {', '.join(map(str, splits or range(args.splits)))} of the 10 "
        "`uci_wilson` 90/10 splits (test = the split's 10%; no validation set, no tuning: one "
        "configuration per model, fixed in advance). Inputs and targets standardised with the "
        "statistics of the training "
        "split (`load_uci_wilson`); RMSE and NLL (mean negative log predictive density of y) in "
        "standardised units, for every model. Mean ± standard error over the splits.",
        ("**The paper's size**: all training points of each split (no subsampling; 13.5K-57.2K, "
         "90% of each set, against the paper's 64% = 9.6K-40.7K)" if not k["max_train"] else
         f"**Subsampled** to {k['max_train']:,} training points per split (not the paper's "
         "size)")
        + f"; K = {k['neighbors']}; {k['epochs']} epochs of data batches of {k['batch_size']}"
        f"{svgp_batches}; "
        f"Adam lr {k['vnngp_lr']} (VNNGP, GPyTorch) and {k['svgp_lr']} (SVGP, TightSVGP); SVGP "
        f"and TightSVGP with M = {k['num_inducing']}. Where the paper gives a grid tuned on "
        "validation NLL we fix one value (the paper preset: K = 32 of {32, 256}, as a KL term "
        "costs O(K^3) and K = 256 is about 500 times dearer per step; 300 of {300, 500} epochs; "
        "lr 0.01 of {0.005, 0.01}). The paper's 'iterations' are read as epochs (§4.2 trains for "
        "'300 epochs'; GPyTorch's VNNGP example loops over epochs and steps its MultiStepLR once "
        "per epoch). Where the paper is silent, our choice: data batches of "
        f"{k['batch_size']} (GPyTorch's `training_batch_size` = the same {k['batch_size']})"
        + (f"; for SVGP and TightSVGP batches of {svgp_batch}, as GPyTorch's SVGP regression "
           f"example: at M = {k['num_inducing']} the Cholesky factor of K_uu and its gradient "
           f"take much of a step's cost whatever the batch, and the larger batch takes "
           f"{svgp_batch / k['batch_size']:g} times fewer steps for the same epochs"
           if svgp_batches else "")
        + ".",
        f"Training length: our models take ceil({k['epochs']} N / B) Adam steps for a data batch "
        "of B points "
        "(each epoch a fresh random permutation of the rows, `gpflow_tight.training."
        "minibatches`); GPyTorch takes its own epochs of 1 + ceil((N - K) / B) steps (the "
        "first-K block, then the others in a random order). The learning rate drops x0.1 after "
        "75% and again after 90% of the steps (ours, `PiecewiseConstantDecay`) or epochs "
        "(GPyTorch, `MultiStepLR`). Matérn-5/2 ARD, Gaussian likelihood, every hyperparameter "
        "initialised to 0.6931, float64, for all models.",
        f"VNNGP: `gpflow_tight.VNNGP`, inducing inputs = the distinct training inputs (duplicated "
        f"inducing inputs make K_nn singular), jitter {vnngp_jitter(records, k)}, "
        f"K = {k['neighbors']} "
        f"(prior and prediction), random ordering (seed = split), mean-field q initialised with "
        f"q_mu = {init} and q_sqrt = {k['vnngp_q_sqrt']}, data batch {k['batch_size']} with the "
        f"neighbour rows of `model.training_data`, "
        + (f"KL on {k['inducing_batch_size']} inducing points per step drawn uniformly with "
           "replacement." if setting(key_of(args, model="VNNGP"), "vnngp_kl") == "uniform" else
           "KL on the data batch's own inducing points, each row's term divided by the number "
           "of training rows at its input (`kl_estimate='data_batch'`, as `VNNGP.from_data`: "
           "GPyTorch's estimate; unbiased, and its mean over a partition of the rows into "
           "equal batches is the exact KL; no separate inducing batch)."),
    ]  # fmt: skip
    if "GPyTorch" in args.models:
        protocol.append(gpytorch_bullet(k, records))
    protocol += [
        "SVGP: `gpflow.models.SVGP`; TightSVGP: `gpflow_tight.TightSVGP`; whitened, full-rank q "
        "(q_mu = 0, q_sqrt = I), Z from k-means (`kmeans2`, 10 iterations from a random subset) "
        f"and trained, data batch {svgp_batch}.",
        "Test predictions: `predict_y` (RMSE of the mean) and `predict_log_density` on the whole "
        "test split; VNNGP predicts from the K nearest inducing inputs of each test input. The "
        "paper columns of the GPyTorch rows repeat the paper's VNNGP.",
        "Threads: TensorFlow intra-op and inter-op, torch and faiss, as many as the header's "
        "machine line says; other jobs may share the cores (times are indicative only).",
    ]  # fmt: skip
    hours = sum(r.get("train_seconds", 0) + r.get("predict_seconds", 0) for r in records) / 3600
    protocol[-1] += f" Training and prediction took {hours:.1f} h in all."
    return protocol


def scaled_protocol(k, args, splits, records):
    """The protocol of the scaled-down study (iterations)."""

    def epochs(model):
        return k[f"{model}_iterations"] * k["batch_size"] / k["max_train"]

    return [
        "Paper protocol (Wu, Pleiss & Cunningham 2022, §4, §4.3, App. D.3.1): random 64/16/20 "
        "train/validation/test splits, 3 seeds, VNNGP with M = N, mean-field q, K in "
        "{32, 256}; SVGP with M = 1024, full-rank q, k-means Z; Matérn-5/2 ARD, every "
        "hyperparameter initialised to 0.6931; Adam for {300, 500} epochs (N < 50K) with lr in "
        "{0.005, 0.01}, x0.1 at 75% and 90%; hyperparameters chosen on validation NLL; batch "
        "sizes not stated.",
        f"Here: split(s) {', '.join(map(str, splits))} of the 10 `uci_wilson` 90/10 splits "
        "(test = the split's 10%; no validation set, no tuning: one configuration per model, "
        "fixed in advance). Inputs and targets standardised with the statistics of the full "
        "training split (`load_uci_wilson`); RMSE and NLL (mean negative log predictive density "
        "of y) in standardised units. Mean ± standard error over the splits.",
        f"**Scaled down**: training sets larger than {k['max_train']:,} points are subsampled at "
        f"random to {k['max_train']:,} (per split), against 9.6K-40.7K in the paper; "
        f"{k['vnngp_iterations']} Adam steps (VNNGP) / {k['svgp_iterations']} (SVGP, TightSVGP) "
        f"of batch {k['batch_size']}, i.e. {epochs('vnngp'):.0f} / {epochs('svgp'):.0f} epochs, "
        f"against the paper's 300-500; SVGP and TightSVGP have M = {k['num_inducing']} "
        "inducing inputs against the paper's 1024.",
        "Common to all models: Matérn-5/2 with ARD lengthscales; kernel variance, lengthscales "
        "and Gaussian noise variance initialised to 0.6931 as in the paper; `fit_adam` with the "
        "paper's MultiStep schedule (`PiecewiseConstantDecay`: lr, lr/10 after 75% and lr/100 "
        "after 90% of the steps); float64.",
        f"VNNGP: `gpflow_tight.VNNGP`, inducing inputs = the distinct training inputs (duplicated "
        f"inducing inputs make K_nn singular), K = {k['neighbors']} (prior and prediction), "
        "random ordering (seed = split), mean-field q initialised with q_mu = "
        + ("the training target at each inducing input (mean over duplicates)"
           if k["vnngp_init"] == "targets" else "0")  # fmt: skip
        + f" and q_sqrt = {k['vnngp_q_sqrt']}, data batch {k['batch_size']} with the neighbour "
        f"rows of `model.training_data`, KL on {k['inducing_batch_size']} inducing points per "
        f"step, Adam lr {k['vnngp_lr']}.",
        "SVGP: `gpflow.models.SVGP`; TightSVGP: `gpflow_tight.TightSVGP`; whitened, full-rank q "
        "(q_mu = 0, q_sqrt = I), Z from k-means (`kmeans2`, 10 iterations from a random subset) "
        f"and trained, data batch {k['batch_size']}, Adam lr {k['svgp_lr']}.",
        "Test predictions: `predict_y` (RMSE of the mean) and `predict_log_density` on the whole "
        "test split; VNNGP predicts from the K nearest inducing inputs of each test input.",
        "Threads: TensorFlow intra-op and inter-op, as many as the header's machine line says; "
        "other jobs may share the cores (times are indicative only). Training and prediction took "
        f"{sum(r['train_seconds'] + r['predict_seconds'] for r in records) / 60:.1f} min in all.",
    ]  # fmt: skip


def render(report, records, missing, args):
    k = records[0]["key"] if records else key_of(args)
    splits = sorted({r["key"]["split"] for r in records})
    full = "epochs" in k  # the paper-size study (epochs) or the scaled-down one (iterations)
    shown = [m for m in MODELS if m in args.models]
    failed = [r for r in records if "error" in r]
    records = [r for r in records if "error" not in r]
    if full:
        protocol = paper_protocol(k, args, splits, records + failed)
    else:
        protocol = scaled_protocol(k, args, splits, records)
        if "GPyTorch" in shown:
            protocol.insert(-3, gpytorch_bullet(k, records + failed))
    title = "VNNGP vs SVGP on UCI regression (scaled-down paper Tables 1-2)"
    if full:
        title = "VNNGP (ours and GPyTorch's) vs SVGP on UCI regression, paper-size Tables 1-2"
    paired = [[] for _ in VARIANTS]
    if full or "GPyTorch" in shown:  # the variant sections are among the paper sections
        planned = [r["key"] for r in records + failed] + list(missing)
        planned.sort(key=lambda key: (list(SETS).index(key["dataset"]), key["split"]))
        paired = [list(variants(report, planned, first, second)) for *_, first, second in VARIANTS]
    report.head(title, records + failed, protocol, missing,
                [run for pairs in paired for pair in pairs for run in pair])  # fmt: skip
    by = {}
    for r in records:
        by.setdefault(r["key"]["dataset"], {}).setdefault(r["key"]["model"], []).append(r)
    summary, deltas, worse, tight = [], [], 0, []
    for d, models in by.items():
        first = next(iter(models.values()))[0]
        report.section(f"{SETS[d][0]} (`{d}`)")
        report.add(f"Here N = {first['num_train']:,} of {first['num_train_full']:,} training "
                   f"points, D = {first['dim']}, {first['num_test']:,} test points, "
                   f"{len({r['key']['split'] for rs in models.values() for r in rs})} split(s). "
                   f"Paper: N = {SETS[d][1]}.", "")  # fmt: skip
        rows, cells = [], [SETS[d][0]]
        for m in shown:
            mine = models.get(m, [])
            if not mine:
                cells.append("—")
                continue
            name = PAPER_MODEL.get(m)
            paper = PAPER[d].get(name, ("—",) * 3)
            nll, rmse = (np.mean([r[x] for r in mine]) for x in ("nll", "rmse"))
            worse += name in PAPER[d] and nll > number(paper[0])
            rows.append([m, str(len(mine)), harness.pm([r["nll"] for r in mine]), paper[0],
                         harness.pm([r["rmse"] for r in mine]), paper[1],
                         f"{np.mean([r['noise'] for r in mine]):.4f}", paper[2],
                         f"{int(np.mean([r['num_inducing'] for r in mine])):,}",
                         f"{np.mean([r['train_seconds'] for r in mine]):.0f}",
                         f"{np.mean([r['predict_seconds'] for r in mine]):.1f}"])  # fmt: skip
            cells.append(f"{nll:.3f} / {rmse:.3f}" + (f" ({paper[0]} / {paper[1]})" if name in
                                                       PAPER[d] else ""))  # fmt: skip
        exact = PAPER[d]["ExactGP"]
        rows.append(
            ["ExactGP (paper only)", "—", "—", exact[0], "—", exact[1], "—", exact[2]] + ["—"] * 3
        )
        report.table(["model", "splits", "NLL here", "NLL paper", "RMSE here", "RMSE paper",
                      "noise here", "noise paper", "M", "train s", "predict s"], rows)  # fmt: skip
        summary.append(cells)
        if "VNNGP" in models and "SVGP" in models:
            here = [np.mean([r[x] for r in models["VNNGP"]]) - np.mean([r[x] for r in
                    models["SVGP"]]) for x in ("nll", "rmse")]  # fmt: skip
            there = [number(PAPER[d]["VNNGP"][i]) - number(PAPER[d]["SVGP"][i]) for i in (0, 1)]
            deltas.append([SETS[d][0]] + [c for h, t in zip(here, there) for c in
                          (f"{h:+.3f}", f"{t:+.3f}", "yes" if h * t > 0 else "no")])  # fmt: skip
        if "TightSVGP" in models and "SVGP" in models:
            pairs = {r["key"]["split"]: r for r in models["SVGP"]}
            tight += [(r, pairs[r["key"]["split"]]) for r in models["TightSVGP"]
                      if r["key"]["split"] in pairs]  # fmt: skip
    report.section("Summary: NLL / RMSE here (paper)")
    report.add("Means over each model's own splits (the tables above give how many).", "")
    report.table(["dataset", *shown], summary)
    report.section("VNNGP against SVGP: better on which sets, here and in the paper")
    report.add("Differences VNNGP − SVGP of the mean test NLL and RMSE (negative: VNNGP "
               "better).", "")  # fmt: skip
    report.table(["dataset", "ΔNLL here", "ΔNLL paper", "same sign", "ΔRMSE here",
                  "ΔRMSE paper", "same sign"], deltas)  # fmt: skip
    count = [sum(x[i] == "yes" or x[i].startswith("-") for x in deltas) for i in range(7)]
    compared = sum(PAPER_MODEL.get(x) in PAPER[d] for d, m in by.items() for x in m)
    findings = [
        f"VNNGP − SVGP has the paper's sign on {harness.of(count[3], len(deltas))} sets for the "
        f"NLL and {count[6]} for the RMSE; VNNGP is better here on {count[1]} (NLL) and "
        f"{count[4]} (RMSE) sets, in the paper on {count[2]} and {count[5]}."
        if deltas else "No set has both VNNGP and SVGP records yet: VNNGP against SVGP is "
        "not compared.",
        f"The NLL here is worse than the paper's for {harness.of(worse, compared)} (set, model) "
        + ("pairs (the paper's own model for the GPyTorch rows: its VNNGP)." if full else
           "pairs: with the scaled-down protocol, compare the orderings, not the values."),
    ]  # fmt: skip
    for metric in ("nll", "rmse") if tight else ():
        test = harness.Paired([t[metric] for t, _ in tight], [s[metric] for _, s in tight])
        findings.append(f"TightSVGP vs SVGP, paired over (set, split): lower test {metric.upper()} "
                        f"in {harness.of(test.wins, test.n)} pairs (mean difference "
                        f"{test.mean:+.4f}, {test.sign()}).")  # fmt: skip
    dup = {
        d: np.mean([r["num_inducing"] for r in m["VNNGP"]]) for d, m in by.items() if "VNNGP" in m
    }
    if full:
        sizes = {d: np.mean([r["num_train"] for r in m["VNNGP"]]) for d, m in by.items()
                 if "VNNGP" in m}  # fmt: skip
        dup = [f"{d} {m:,.0f} of {sizes[d]:,.0f}" for d, m in dup.items() if m < 0.9 * sizes[d]]
        if dup:
            findings.append(
                "Sets with many repeated inputs, where our VNNGP's M (the distinct inputs) is "
                f"well below N (GPyTorch keeps M = N): {', '.join(dup)}."
            )
    else:
        dup = [f"{d} {m:,.0f}" for d, m in dup.items() if m < 0.9 * k["max_train"]]
        if dup:
            findings.append(
                "Sets with many repeated inputs, where VNNGP's M (the distinct inputs) is "
                f"well below N = {k['max_train']:,}: {', '.join(dup)}."
            )
    if full or "GPyTorch" in shown:
        findings += paper_sections(report, by, shown, missing, failed, args, paired)
    report.section("Findings")
    report.bullets(findings)


def paper_sections(report, by, shown, missing, failed, args, paired):
    """Runs done, the best model per set, VNNGP against the paper, the runs of ``VARIANTS``
    (``paired``: their pairs) and VNNGP against GPyTorch."""
    findings = []
    planned = {}
    for key in missing:
        planned.setdefault((key["dataset"], key["model"]), [0, 0])[1] += 1
    for d, models in by.items():
        for m, rs in models.items():
            planned.setdefault((d, m), [0, 0])[0] += len(rs)
            planned[(d, m)][1] += len(rs)
    for r in failed:
        planned.setdefault((r["key"]["dataset"], r["key"]["model"]), [0, 0])[1] += 1
    report.section("Runs done (splits with a record / planned)")
    report.table(["dataset", *shown], [[SETS[d][0]] + [
        "{}/{}".format(*planned[(d, m)]) if (d, m) in planned else "—" for m in shown]
        for d in args.datasets])  # fmt: skip
    gaps = [f"{SETS[d][0]} {m} ({n - done} of {n})" for (d, m), (done, n) in planned.items()
            if done < n]  # fmt: skip
    findings.append("Planned runs without a record: " + (", ".join(gaps) if gaps else "none")
                    + ".")  # fmt: skip
    if failed:
        errors = [f"{r['key']['dataset']} split {r['key']['split']} {r['key']['model']}: "
                  f"{r['error']}" for r in failed]  # fmt: skip
        findings.append(
            "Failed runs (recorded with their error; delete their lines of the records to "
            f"retry): {'; '.join(errors)}."
        )
    rows, wins = [], {}
    for d, models in by.items():
        means = {m: {x: np.mean([r[x] for r in rs]) for x in ("nll", "rmse")}
                 for m, rs in models.items()}  # fmt: skip
        best = {x: min(means, key=lambda m: means[m][x]) for x in ("nll", "rmse")}
        paper = {x: min(("SVGP", "VNNGP"), key=lambda m: number(PAPER[d][m][i]))
                 for i, x in enumerate(("nll", "rmse"))}  # fmt: skip
        for x in best:
            wins.setdefault(x, {}).setdefault(best[x], []).append(SETS[d][0])
        rows.append([SETS[d][0], f"{best['nll']} ({means[best['nll']]['nll']:.3f})",
                     paper["nll"], f"{best['rmse']} ({means[best['rmse']]['rmse']:.3f})",
                     paper["rmse"], len(models)])  # fmt: skip
    report.section("Best model per set (lowest mean over the splits done)")
    report.add("Paper: the better of its SVGP and VNNGP (ExactGP and the other baselines "
               "left out).", "")  # fmt: skip
    report.table(["dataset", "best NLL here", "paper (SVGP vs VNNGP)", "best RMSE here", "paper",
                  "models compared"], rows)  # fmt: skip
    for x, who in wins.items():
        findings.append(f"Lowest test {x.upper()} here: " + "; ".join(
            f"{m} on {len(s)} ({', '.join(s)})" for m, s in who.items()) + ".")  # fmt: skip
    for m in ("VNNGP", "GPyTorch"):
        gaps, reach = [], {"nll": 0, "rmse": 0}
        for d, models in by.items():
            if m not in models:
                continue
            cells = PAPER[d]["VNNGP"]
            diff = []
            for i, x in enumerate(("nll", "rmse")):
                delta = np.mean([r[x] for r in models[m]]) - number(cells[i])
                reach[x] += delta <= 2 * spread(cells[i])
                diff.append(f"{delta:+.3f}")
            gaps.append(f"{SETS[d][0]} {diff[0]} / {diff[1]}")
        if gaps:
            findings.append(
                f"{m} against the paper's VNNGP (here − paper, NLL / RMSE): {', '.join(gaps)}; "
                f"at or below the paper's mean + 2 s.e. on {harness.of(reach['nll'], len(gaps))} "
                f"sets for the NLL and {reach['rmse']} for the RMSE."
            )
    for variant, pairs in zip(VARIANTS, paired):
        findings += variant_section(report, by, pairs, *variant)
    pairs = []
    for models in by.values():
        ours = {r["key"]["split"]: r for r in models.get("VNNGP", [])}
        pairs += [(ours[r["key"]["split"]], r) for r in models.get("GPyTorch", [])
                  if r["key"]["split"] in ours]  # fmt: skip
    if pairs:
        rows = []
        for a, b in pairs:
            rows.append([SETS[a["key"]["dataset"]][0], a["key"]["split"],
                         f"{a['nll']:.3f}", f"{b['nll']:.3f}", f"{a['rmse']:.3f}",
                         f"{b['rmse']:.3f}", f"{a['noise']:.4f}", f"{b['noise']:.4f}",
                         f"{a['train_seconds']:.0f}", f"{b['train_seconds']:.0f}"])  # fmt: skip
        report.section("Our VNNGP against GPyTorch's, split by split")
        report.table(["dataset", "split", "NLL ours", "NLL GPyTorch", "RMSE ours",
                      "RMSE GPyTorch", "noise ours", "noise GPyTorch", "train s ours",
                      "train s GPyTorch"], rows)  # fmt: skip
        for x in ("nll", "rmse"):
            test = harness.Paired([a[x] for a, _ in pairs], [b[x] for _, b in pairs])
            gap = np.abs(test.diffs)
            findings.append(
                f"Our VNNGP vs GPyTorch's, paired over (set, split): lower test {x.upper()} in "
                f"{harness.of(test.wins, test.n)} pairs (mean difference {test.mean:+.4f}, "
                f"largest |difference| {gap.max():.4f}, {test.sign()})."
            )
        ratio = [a["train_seconds"] / b["train_seconds"] for a, b in pairs]
        findings.append(
            "Training time, ours / GPyTorch's (same thread count, run one after the other): "
            f"median {np.median(ratio):.2f} (range {harness.span(ratio)})."
        )
    return findings


def changed(key, settings):
    """``key`` with ``settings`` changed (a setting at its ``ABSENT`` value leaves the key)."""
    key = {**key, **settings}
    for name, value in settings.items():
        if name in ABSENT and ABSENT[name] == value:
            del key[name]
    return key


def setting(key, name):
    """The value of the setting ``name`` in ``key``."""
    return key.get(name, ABSENT.get(name))


def variants(report, planned, first, second):
    """(run, run) pairs: for each planned key of our VNNGP (done or not), the records of the key
    with the changes ``first`` and with the changes ``second`` (an entry of ``VARIANTS``), where
    both exist, succeeded and differ."""
    for key in planned:
        if key["model"] == "VNNGP":
            keys = [changed(key, c) for c in (first, second)]
            pair = [report.store.get(k) for k in keys]
            if keys[0] != keys[1] and all(x and "error" not in x for x in pair):
                yield pair


def gpytorch_run(by, key):
    """GPyTorch's record on the data set and split of ``key``, if there is one."""
    runs = by[key["dataset"]].get("GPyTorch", [])
    return next((g for g in runs if g["key"]["split"] == key["split"]), None)


def variant_section(report, by, pairs, title, why, first, second):
    """The ``pairs`` of runs made from the planned runs by an entry of ``VARIANTS`` (``title``,
    ``why``, the changes ``first`` and ``second``), with GPyTorch's NLL on the same split and the
    loss of the last epoch and of the epoch before the first learning-rate drop (75%)."""

    def loss(run, fraction):
        epochs = run.get("epoch_loss", [])
        return f"{epochs[int(fraction * len(epochs)) - 1]:,.0f}" if epochs else "—"

    def show(value):
        return f"{value:g}" if isinstance(value, float) else str(value)

    if not pairs:
        return []
    keys = [run["key"] for run in pairs[0]]
    names = [n for n in {**keys[0], **keys[1]} if len({show(setting(k, n)) for k in keys}) > 1]
    here, there = (", ".join(SAY[n](setting(k, n)) for n in names) for k in keys)
    both = "".join(f", both with {SAY[n](v)}" for n, v in first.items())
    report.section(f"{title}: {there}")
    report.add(f"The same runs (data, seed) of our VNNGP with {there} instead of {here}{both}, "
               "with GPyTorch's NLL on the same split and the epoch-mean training loss just "
               f"before the first drop (75% of the epochs) and in the last epoch. {why}.",
               "")  # fmt: skip
    peers = [gpytorch_run(by, a["key"]) for a, _ in pairs]
    columns = (("NLL", lambda r: f"{r['nll']:.3f}"), ("RMSE", lambda r: f"{r['rmse']:.3f}"),
               ("noise", lambda r: f"{r['noise']:.4f}"), ("loss at 75%", lambda r: loss(r, 0.75)),
               ("last loss", lambda r: loss(r, 1.0)),
               ("train s", lambda r: f"{r['train_seconds']:.0f}"))  # fmt: skip
    rows = [
        [SETS[a["key"]["dataset"]][0], a["key"]["split"]]
        + [cell(run) for _, cell in columns for run in (a, b)]
        + [f"{peer['nll']:.3f}" if peer else "—"]
        for (a, b), peer in zip(pairs, peers)
    ]
    values = [" ".join(show(setting(k, n)) for n in names) for k in keys]
    report.table(
        ["dataset", "split"] + [f"{x} {v}" for x, _ in columns for v in values]
        + ["NLL GPyTorch"],
        rows,
    )  # fmt: skip
    change = [b["nll"] - a["nll"] for a, b in pairs]
    findings = [f"Our VNNGP with {there} instead of {here}{both}: test NLL lower in "
                f"{harness.of(sum(c < 0 for c in change), len(change))} runs (NLL change "
                f"{harness.span(change, '+.3f')} nats per test point)."]  # fmt: skip
    beside = [(a["nll"], b["nll"], peer["nll"]) for (a, b), peer in zip(pairs, peers) if peer]
    if not beside:
        return findings
    findings.append(
        f"Ours at or below GPyTorch's NLL on the same split: with {here} in "
        f"{harness.of(sum(a <= g for a, _, g in beside), len(beside))} runs, with {there} in "
        f"{sum(b <= g for _, b, g in beside)}."
    )
    if np.mean(change) > 0:  # the second setting worse on average: the gap from it to the first
        beside, here, there = [(b, a, g) for a, b, g in beside], there, here
    behind = [(a, b, g) for a, b, g in beside if a > g]  # GPyTorch's NLL below the worse one's
    if behind:
        closed = [min(1.0, (a - b) / (a - g)) for a, b, g in behind]  # 1: GPyTorch's reached
        share = f"{100 * closed[0]:.0f}%"
        if len(closed) > 1:
            share = f"a median {100 * float(np.median(closed)):.0f}%"
        findings.append(
            f"Where GPyTorch's NLL is lower than ours with {here} "
            f"({harness.of(len(behind), len(beside))} runs), {there} closes {share} of the gap "
            "(counting a run that reaches GPyTorch's NLL as 100%)."
        )
    return findings


if __name__ == "__main__":
    harness.main(__import__(__name__))
