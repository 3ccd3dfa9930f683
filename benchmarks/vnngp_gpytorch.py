"""
Step time of GPyTorch's ``NNVariationalStrategy`` (VNNGP), the reference implementation that
``vnngp_cost.py --gpytorch-python PYTHON`` compares ``gpflow_tight.VNNGP`` with. GPyTorch is not
a dependency of this project: run this with its own virtualenv (torch, gpytorch, faiss-cpu), as a
separate process. It prints one JSON object.

Timed (float64, ``--threads`` torch and faiss threads): ``mode1``, GPyTorch's recommended step
(``model(x=None)`` takes the next block of inducing points = training points, the data term read
off q(u), the KL on the same block); ``mode2``, a separate random data batch located in Z by a
faiss 1-NN search and the next KL block; ``mode1_adam``, mode 1 plus ``Adam.step()``. Steps on the
first-k block of an epoch or a short last block are counted in ``skipped``, not timed.

``--neighbor-table FILE.npy`` gives the sequential neighbour table (row j: the k nearest among
rows 0..j-1, in the given order, as ``gpflow_tight.neighbors.sequential_nearest_neighbors``
computes it) instead of GPyTorch's own setup, which searches a flat faiss index once per
inducing point, O(M^2): about 50 s at M = 10^5 and, by that rate, over an hour at 10^6. The step
does not depend on how the table was built; ``setup_seconds`` then excludes the table.
"""

import argparse
import json
import time

import numpy as np


def nngp_model(inducing_points, k: int, batch_size: int, jitter: float | None = None):  # type: ignore
    """
    GPyTorch's VNNGP as its documentation builds it: ``NNVariationalStrategy`` with a mean-field
    q over ``inducing_points``, zero mean, ``ScaleKernel(MaternKernel(nu=2.5))`` with one
    lengthscale per input; ``jitter`` (default GPyTorch's) is added to the neighbour blocks.
    Shared by this script and ``vnngp_gpytorch_train.py``.
    """
    import gpytorch
    import torch

    options = {} if jitter is None else {"jitter_val": jitter}

    class NNGP(gpytorch.models.ApproximateGP):
        def __init__(self) -> None:
            q = gpytorch.variational.MeanFieldVariationalDistribution(len(inducing_points))
            strategy = gpytorch.variational.NNVariationalStrategy(
                self, inducing_points, q, k=k, training_batch_size=batch_size, **options
            )
            super().__init__(strategy)
            self.mean_module = gpytorch.means.ZeroMean()
            self.covar_module = gpytorch.kernels.ScaleKernel(
                gpytorch.kernels.MaternKernel(nu=2.5, ard_num_dims=inducing_points.shape[-1])
            )

        def forward(self, x: torch.Tensor) -> gpytorch.distributions.MultivariateNormal:
            return gpytorch.distributions.MultivariateNormal(
                self.mean_module(x), self.covar_module(x)
            )

        def __call__(self, x: torch.Tensor | None, prior: bool = False, **kwargs):  # type: ignore
            if x is not None and x.dim() == 1:
                x = x.unsqueeze(-1)
            return self.variational_strategy(x=x, prior=False, **kwargs)

    return NNGP()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help=".npz file with X [N, D] and Y [N, 1]")
    parser.add_argument("--k", type=int, default=32, help="number of neighbours")
    parser.add_argument("--batch-size", type=int, default=256, help="training_batch_size")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=30, help="timed steps per mode")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--lengthscale", type=float, default=1.0)
    parser.add_argument("--noise", type=float, default=0.1)
    parser.add_argument("--neighbor-table", help=".npy sequential neighbour table [M, k]")
    args = parser.parse_args()

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
    torch.manual_seed(0)
    loaded = np.load(args.data)
    X = torch.tensor(loaded["X"], dtype=torch.float64)
    y = torch.tensor(loaded["Y"][:, 0], dtype=torch.float64)
    num_data, dim = X.shape

    if args.neighbor_table:  # rows k.. of the table, GPyTorch's layout [M - k, k]
        table = torch.from_numpy(np.load(args.neighbor_table)[args.k :]).long()
        assert table.shape == (num_data - args.k, args.k), table.shape
        from gpytorch.utils.nearest_neighbors import NNUtil

        NNUtil.build_sequential_nn_idx = lambda self, x: table
    start = time.perf_counter()
    model = nngp_model(X, args.k, args.batch_size)  # the faiss index and the neighbour table
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
    optimizer = torch.optim.Adam(list(model.parameters()) + list(likelihood.parameters()), 1e-3)
    generator = np.random.default_rng(0)

    def step(mode: str) -> int:
        optimizer.zero_grad(set_to_none=True)
        if mode == "mode2":
            rows = torch.from_numpy(generator.choice(num_data, args.batch_size, replace=False))
            loss = -elbo(model(X[rows]), y[rows])
        else:
            output = model(x=None)
            loss = -elbo(output, y[strategy.current_training_indices])
        loss.backward()
        if mode == "mode1_adam":
            optimizer.step()
        return len(strategy.current_training_indices)

    names = ["mode1", "mode2", "mode1_adam"]
    for _ in range(args.warmup):
        for name in names:
            step(name)
    times: dict[str, list[float]] = {name: [] for name in names}
    skipped = {name: 0 for name in names}
    count = 0
    while min(len(t) for t in times.values()) < args.rounds and count < 4 * args.rounds:
        for name in names if count % 2 == 0 else names[::-1]:
            start = time.perf_counter()
            block = step(name)
            seconds = time.perf_counter() - start
            if block == args.batch_size:
                times[name].append(seconds)
            else:
                skipped[name] += 1
        count += 1
    versions = dict(torch=torch.__version__, gpytorch=gpytorch.__version__)
    print(json.dumps(dict(num_data=num_data, dim=dim, k=args.k, batch_size=args.batch_size,
                          threads=args.threads, setup_seconds=setup_seconds, nnlib=nnlib,
                          given_table=bool(args.neighbor_table),
                          times=times, skipped=skipped, versions=versions)))  # fmt: skip


if __name__ == "__main__":
    main()
