import gpflow
import numpy as np
import pytest
import scipy.optimize
import scipy.stats

from gpflow_tight.training import fit_scipy, minibatches


def test_full_batch_stream_is_the_whole_data_every_step():
    X = np.arange(10.0)[:, None]
    for batch_size in (10, 50):
        batches = iter(minibatches((X, X), batch_size))
        for _ in range(3):
            np.testing.assert_array_equal(next(batches)[0].numpy(), X)


def test_minibatches_cover_each_epoch_once():
    X = np.arange(12.0)[:, None]
    batches = iter(minibatches((X, 2 * X), 4, seed=1))
    for _ in range(2):
        epoch = [next(batches) for _ in range(3)]
        for x, y in epoch:  # the tuple's members are gathered at the same rows
            np.testing.assert_array_equal(y.numpy(), 2 * x.numpy())
        rows = np.concatenate([x.numpy() for x, _ in epoch])
        np.testing.assert_array_equal(np.sort(rows[:, 0]), X[:, 0])


def test_minibatch_epochs_are_uniform_permutations_of_large_data():
    """
    N = 25,000 rows, more than the 10,000-element shuffle buffer used before. Each epoch must be
    a permutation of all rows (batches may span epochs: 768 does not divide N), and a uniform
    one: under a uniform permutation a row's position is independent of its index, so their
    Spearman correlation is about N(0, 1/N) (|rho| < 5/sqrt(N) = 0.032 with probability
    1 - 6e-7). The former 10,000-row shuffle buffer gave permutations too, but only mixed rows
    that are near each other in the data's order: rho = 0.51 for this test's stream.
    """
    num_data, batch_size = 25_000, 768
    X = np.arange(num_data)[:, None]
    batches = iter(minibatches((X,), batch_size, seed=3))
    num_batches = -(-2 * num_data // batch_size)  # enough for two epochs
    stream = np.concatenate([next(batches)[0].numpy()[:, 0] for _ in range(num_batches)])
    assert all(len(b) == batch_size for b in np.split(stream, num_batches))
    epochs = stream[:num_data], stream[num_data : 2 * num_data]
    for epoch in epochs:
        np.testing.assert_array_equal(np.sort(epoch), X[:, 0])
        rho = scipy.stats.spearmanr(np.arange(num_data), epoch).statistic
        assert abs(rho) < 5 / np.sqrt(num_data), rho
    assert np.mean(epochs[0] == epochs[1]) < 0.01  # a fresh permutation each epoch (~1/N)
    # reproducible from the seed, and a different seed gives a different stream
    again = next(iter(minibatches((X,), batch_size, seed=3)))[0].numpy()[:, 0]
    np.testing.assert_array_equal(again, stream[:batch_size])
    other = next(iter(minibatches((X,), batch_size, seed=4)))[0].numpy()[:, 0]
    assert not np.array_equal(other, stream[:batch_size])


def _gpr(rng):
    X = rng.uniform(-3, 3, (40, 1))
    Y = np.sin(2 * X) + 0.1 * rng.standard_normal((40, 1))
    return gpflow.models.GPR((X, Y), gpflow.kernels.SquaredExponential(), noise_variance=0.5)


def test_fit_scipy_returns_scipy_result_with_history(rng):
    """
    On the exact GP: the result is scipy's, the history has one loss per iteration at that
    iteration's point (non-increasing, as L-BFGS-B's line search only accepts descent), the last
    is the model's loss at the returned point, and at convergence the gradient vanishes.
    """
    model = _gpr(rng)
    start = model.training_loss().numpy()
    result = fit_scipy(model, progress=False)
    assert isinstance(result, scipy.optimize.OptimizeResult)
    assert result.success, result.message
    assert len(result.history) == result.nit > 0
    assert all(isinstance(loss, float) for loss in result.history)
    history = np.array([start, *result.history])
    assert np.all(np.diff(history) <= 1e-12 * np.abs(history[1:]))
    final = model.training_loss().numpy()
    np.testing.assert_allclose(result.fun, final, rtol=1e-12)
    np.testing.assert_allclose(result.history[-1], final, rtol=1e-12)
    np.testing.assert_allclose(result.jac, 0.0, atol=1e-4)


def test_fit_scipy_reports_an_unconverged_run(rng):
    model = _gpr(rng)
    result = fit_scipy(model, maxiter=3, progress=False)
    assert not result.success
    assert "ITERATIONS REACHED LIMIT" in result.message
    assert result.nit == len(result.history) == 3
    np.testing.assert_allclose(result.history[-1], model.training_loss().numpy(), rtol=1e-12)


def test_fit_scipy_external_data(rng):
    X = rng.uniform(-3, 3, (30, 1))
    Y = np.sin(2 * X)
    Z = np.linspace(-3, 3, 5)[:, None]
    svgp = gpflow.models.SVGP(
        gpflow.kernels.SquaredExponential(), gpflow.likelihoods.Gaussian(0.5), Z, num_data=30
    )
    with pytest.raises(ValueError, match="pass `data`"):
        fit_scipy(svgp, progress=False)
    result = fit_scipy(svgp, (X, Y), maxiter=20, progress=False)
    np.testing.assert_allclose(result.history[-1], -svgp.elbo((X, Y)).numpy(), rtol=1e-10)
