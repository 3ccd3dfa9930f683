"""
Train and test GPyTorch's VNNGP (``NNVariationalStrategy``) on one regression split, for
``vnngp_uci.py`` (model ``GPyTorch``), which runs this with its own virtualenv (torch, gpytorch,
faiss-cpu) as a separate process: GPyTorch is not a dependency of this project. It prints one
JSON object (the numbers, or ``{"error": ...}``).

``--data FILE.npz`` holds ``X_train`` [N, D], ``Y_train`` [N, 1], ``X_test``, ``Y_test`` (already
split and standardised by the caller), ``order`` (a permutation of the N training rows: the
ordering of the inducing points, the paper's random ordering) and, optionally, ``q_mu`` [N] (the
initial variational means, in the rows' original order).

Model (GPyTorch's VNNGP example and the paper, App. D.3.1): inducing points = the training
inputs in the given order (M = N, duplicates kept: GPyTorch's jitter keeps their blocks
positive definite), ``MeanFieldVariationalDistribution``, ``NNVariationalStrategy(k=K,
training_batch_size=B, jitter_val=--jitter)``, ``ZeroMean``, ``ScaleKernel(MaternKernel(nu=2.5,
ard_num_dims=D))``, ``GaussianLikelihood``; outputscale, lengthscales and noise start at
softplus(0) = 0.6931 (GPyTorch's defaults, as in the paper); float64.

Training, GPyTorch's recommended loop (``model(x=None)``, "mode 1"): for each of ``--epochs``
epochs, ``_total_training_batches`` steps (the first-k block, then the other points in a random
order cut into blocks of B), each the data term and the KL of the same block,
``-VariationalELBO(num_data=N)``, ``torch.optim.Adam(lr)`` over all parameters, and
``MultiStepLR(milestones=[int(0.75 epochs), int(0.9 epochs)], gamma=0.1)`` stepped once per
epoch. Test: ``likelihood(model(X_test))`` in eval mode, in chunks: RMSE of the mean and the mean
negative log predictive density of y (same units as the caller's data).
"""

import argparse
import json
import time
import traceback

import numpy as np
from vnngp_gpytorch import nngp_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help=".npz file (see the module docstring)")
    parser.add_argument("--k", type=int, default=32, help="number of neighbours")
    parser.add_argument("--batch-size", type=int, default=256, help="training_batch_size")
    parser.add_argument("--epochs", type=int, default=300)
    parser.add_argument("--max-steps", type=int, help="stop after this many steps (smoke runs)")
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--jitter", type=float, default=1e-3, help="jitter_val (GPyTorch's 1e-3)")
    parser.add_argument("--init", type=float, default=float(np.log(2.0)), help="hyperparameters")
    parser.add_argument("--q-sqrt", type=float, help="initial q std (default: GPyTorch's 1e-2)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--prediction-batch-size", type=int, default=1024)
    args = parser.parse_args()
    try:
        print(json.dumps(train(args)))
    except Exception as error:  # noqa: BLE001 - reported to the caller, which records it
        trace = traceback.format_exc().strip().splitlines()
        print(json.dumps({"error": f"{type(error).__name__}: {error}", "trace": trace[-6:]}))


def train(args: argparse.Namespace) -> dict:
    import gpytorch
    import torch

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(args.threads)
    try:
        import faiss

        faiss.omp_set_num_threads(args.threads)
        nnlib = f"faiss {faiss.__version__}"
    except ImportError:
        nnlib = "scikit-learn (faiss not installed)"
    torch.manual_seed(args.seed)
    loaded = np.load(args.data)
    order = loaded["order"]
    X = torch.tensor(loaded["X_train"][order], dtype=torch.float64)
    y = torch.tensor(loaded["Y_train"][order, 0], dtype=torch.float64)
    X_test = torch.tensor(loaded["X_test"], dtype=torch.float64)
    Y_test = np.asarray(loaded["Y_test"][:, 0], dtype=float)
    num_data, dim = X.shape

    start = time.perf_counter()
    model = nngp_model(X, args.k, args.batch_size, args.jitter)  # O(M^2) neighbour table
    setup_seconds = time.perf_counter() - start
    likelihood = gpytorch.likelihoods.GaussianLikelihood()
    model.double()
    likelihood.double()
    model.covar_module.outputscale = args.init
    model.covar_module.base_kernel.lengthscale = args.init
    likelihood.noise = args.init
    strategy = model.variational_strategy
    q = strategy._variational_distribution
    if "q_mu" in loaded or args.q_sqrt is not None:  # our initial q instead of GPyTorch's
        with torch.no_grad():
            if "q_mu" in loaded:
                q.variational_mean.copy_(torch.tensor(loaded["q_mu"][order], dtype=torch.float64))
            else:  # GPyTorch's own: the prior mean (0) + 1e-3 N(0, 1)
                q.variational_mean.copy_(q.mean_init_std * torch.randn(num_data))
            std = 1e-2 if args.q_sqrt is None else args.q_sqrt
            q._variational_stddev.fill_(std)
        strategy.variational_params_initialized.fill_(1)
    model.train()
    likelihood.train()
    elbo = gpytorch.mlls.VariationalELBO(likelihood, model, num_data=num_data)
    parameters = list({id(p): p for p in [*model.parameters(), *likelihood.parameters()]}.values())
    optimizer = torch.optim.Adam(parameters, lr=args.lr)
    milestones = [int(0.75 * args.epochs), int(0.9 * args.epochs)]
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=milestones, gamma=0.1)
    steps_per_epoch = strategy._total_training_batches
    losses, epoch_loss, steps = [], [], 0
    for _ in range(args.epochs):
        total = 0.0
        for _ in range(steps_per_epoch):
            optimizer.zero_grad(set_to_none=True)
            output = model(x=None)
            loss = -elbo(output, y[strategy.current_training_indices])
            loss.backward()
            optimizer.step()
            value = float(loss.detach()) * num_data  # -ELBO estimate, as GPflow's training_loss
            losses.append(value)
            total += value
            steps += 1
            if args.max_steps and steps >= args.max_steps:
                break
        scheduler.step()
        epoch_loss.append(total / steps_per_epoch)
        if args.max_steps and steps >= args.max_steps:
            break
    train_seconds = time.perf_counter() - start

    start = time.perf_counter()
    model.eval()
    likelihood.eval()
    means, variances = [], []
    with torch.no_grad():
        for chunk in torch.split(X_test, args.prediction_batch_size):
            predictive = likelihood(model(chunk))  # q(f*) + the noise: q(y*)
            means.append(predictive.mean.numpy())
            variances.append(predictive.variance.numpy())
    mean, variance = np.concatenate(means), np.concatenate(variances)
    log_density = -0.5 * (np.log(2 * np.pi * variance) + (Y_test - mean) ** 2 / variance)
    return dict(
        num_train=int(num_data), dim=int(dim), num_test=len(Y_test), num_inducing=int(num_data),
        k=args.k, batch_size=args.batch_size, epochs=args.epochs, steps=steps,
        steps_per_epoch=steps_per_epoch, lr=args.lr, jitter=args.jitter, threads=args.threads,
        setup_seconds=setup_seconds, train_seconds=train_seconds,
        predict_seconds=time.perf_counter() - start, nll=float(-np.mean(log_density)),
        rmse=float(np.sqrt(np.mean((mean - Y_test) ** 2))),
        noise=float(likelihood.noise.item()), outputscale=float(model.covar_module.outputscale),
        lengthscales=model.covar_module.base_kernel.lengthscale.detach().numpy().ravel().tolist(),
        final_loss=float(np.mean(losses[-50:])), epoch_loss=epoch_loss, nnlib=nnlib,
        versions=dict(torch=torch.__version__, gpytorch=gpytorch.__version__),
    )  # fmt: skip


if __name__ == "__main__":
    main()
