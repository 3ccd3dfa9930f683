"""
Step time of GPyTorch's ``NNVariationalStrategy`` (VNNGP, Wu, Pleiss & Cunningham 2022), the
reference implementation that ``benchmarks/vnngp_cost.py`` compares ``gpflow_tight.VNNGP``
with. GPyTorch is not a dependency of this project, so this script runs with its own
virtualenv, as a separate process, e.g.::

    python3.11 -m venv /work/gpytorch-venv
    /work/gpytorch-venv/bin/pip install "torch==2.13.0+cpu" gpytorch faiss-cpu
    /work/gpytorch-venv/bin/python benchmarks/vnngp_gpytorch.py --num-data 10000 --k 32

``vnngp_cost.py --gpytorch-python /work/gpytorch-venv/bin/python`` runs it for every M on the
same data (passed as an ``.npz`` file with ``--data``). It prints one JSON object.

What is timed (float64, ``torch.set_num_threads(--threads)``, faiss with as many threads):

- ``mode1``: GPyTorch's recommended training step (spec §3.5-3.6): ``model(x=None)`` draws the
  next block of ``training_batch_size`` inducing points = training points, the data term is
  read off q(u) at those points (no kernel work), the KL is estimated on the same block; then
  ``-VariationalELBO`` and ``backward()``.
- ``mode2``: a separate random data batch ``x`` (located in Z by a faiss 1-NN search over all M
  points) and the next inducing block for the KL (spec §3.5).
- ``mode1_adam``: mode 1 plus ``torch.optim.Adam.step()`` over all parameters.

Steps on the first-k block of an epoch (whose KL is the joint k x k Gaussian KL) or on a short
last block are left out of the medians and counted separately.
"""

import argparse
import json
import time

import numpy as np


def make_data(num_data: int, dim: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The synthetic data of ``vnngp_cost.py`` (used only when no ``--data`` file is given)."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 10.0, size=(num_data, dim))
    Y = np.sin(X).sum(axis=1, keepdims=True) + 0.1 * rng.standard_normal((num_data, 1))
    return X, Y


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help=".npz file with X [N, D] and Y [N, 1]")
    parser.add_argument("--num-data", type=int, default=10_000, help="without --data")
    parser.add_argument("--dim", type=int, default=3, help="without --data")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--k", type=int, default=32, help="number of neighbours")
    parser.add_argument("--batch-size", type=int, default=256, help="training_batch_size")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=30, help="timed steps per mode")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--lengthscale", type=float, default=1.0)
    parser.add_argument("--noise", type=float, default=0.1)
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(args.threads)
    import gpytorch

    try:
        import faiss

        faiss.omp_set_num_threads(args.threads)
        nnlib = f"faiss {faiss.__version__}"
    except ImportError:
        nnlib = "scikit-learn (faiss not installed)"
    torch.manual_seed(args.seed)

    if args.data:
        loaded = np.load(args.data)
        X_np, Y_np = loaded["X"], loaded["Y"]
    else:
        X_np, Y_np = make_data(args.num_data, args.dim, args.seed)
    num_data, dim = X_np.shape
    X = torch.tensor(X_np, dtype=torch.float64)
    y = torch.tensor(Y_np[:, 0], dtype=torch.float64)

    class NNGP(gpytorch.models.ApproximateGP):
        def __init__(self, inducing_points: torch.Tensor) -> None:
            q = gpytorch.variational.MeanFieldVariationalDistribution(len(inducing_points))
            strategy = gpytorch.variational.NNVariationalStrategy(
                self, inducing_points, q, k=args.k, training_batch_size=args.batch_size
            )
            super().__init__(strategy)
            self.mean_module = gpytorch.means.ZeroMean()
            self.covar_module = gpytorch.kernels.ScaleKernel(
                gpytorch.kernels.MaternKernel(nu=2.5, ard_num_dims=dim)
            )

        def forward(self, x: torch.Tensor) -> gpytorch.distributions.MultivariateNormal:
            return gpytorch.distributions.MultivariateNormal(
                self.mean_module(x), self.covar_module(x)
            )

        def __call__(self, x: torch.Tensor | None, prior: bool = False, **kwargs):  # type: ignore
            return self.variational_strategy(x=x, prior=False, **kwargs)

    start = time.perf_counter()
    model = NNGP(X)  # builds the faiss index and the sequential neighbour table
    setup_seconds = time.perf_counter() - start
    likelihood = gpytorch.likelihoods.GaussianLikelihood()
    model.double()
    likelihood.double()
    model.covar_module.outputscale = 1.0
    model.covar_module.base_kernel.lengthscale = args.lengthscale
    likelihood.noise = args.noise
    model.train()
    likelihood.train()
    strategy = model.variational_strategy
    elbo = gpytorch.mlls.VariationalELBO(likelihood, model, num_data=num_data)
    parameters = list(model.parameters()) + list(likelihood.parameters())
    optimizer = torch.optim.Adam(parameters, lr=1e-3)
    generator = np.random.default_rng(args.seed)

    def mode1(adam: bool = False) -> int:
        optimizer.zero_grad(set_to_none=True)
        output = model(x=None)
        indices = strategy.current_training_indices
        loss = -elbo(output, y[indices])
        loss.backward()
        if adam:
            optimizer.step()
        return len(indices)

    def mode2() -> int:
        optimizer.zero_grad(set_to_none=True)
        rows = torch.from_numpy(generator.choice(num_data, args.batch_size, replace=False))
        output = model(X[rows])
        loss = -elbo(output, y[rows])
        loss.backward()
        return len(strategy.current_training_indices)

    steps = {"mode1": mode1, "mode2": mode2, "mode1_adam": lambda: mode1(adam=True)}
    for _ in range(args.warmup):
        for step in steps.values():
            step()
    times: dict[str, list[float]] = {name: [] for name in steps}
    skipped = {name: 0 for name in steps}
    names = list(steps)
    count = 0
    while min(len(t) for t in times.values()) < args.rounds and count < 4 * args.rounds:
        for name in names if count % 2 == 0 else names[::-1]:
            start = time.perf_counter()
            block = steps[name]()
            seconds = time.perf_counter() - start
            if block == args.batch_size:  # not the first-k block nor a short last block
                times[name].append(seconds)
            else:
                skipped[name] += 1
        count += 1
    print(
        json.dumps(
            dict(
                num_data=num_data,
                dim=dim,
                k=args.k,
                batch_size=args.batch_size,
                threads=args.threads,
                setup_seconds=setup_seconds,
                nnlib=nnlib,
                times=times,
                skipped=skipped,
                versions=dict(torch=torch.__version__, gpytorch=gpytorch.__version__),
            )
        )
    )


if __name__ == "__main__":
    main()
