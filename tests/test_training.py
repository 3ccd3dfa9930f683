import gpflow
import numpy as np
import pytest
import scipy.optimize
import scipy.stats
import tensorflow as tf

from gpflow_tight.models.base import InfiniteLossOnCholeskyFailure
from gpflow_tight.training import (
    TrainingError,
    fit_adam,
    fit_power_ep,
    fit_scipy,
    minibatches,
    run_power_ep,
)
from gpflow_tight.validation import checked_cholesky
from tests.model_zoo import MODEL_FACTORIES


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


# ---- faults: the helpers lose nothing -------------------------------------------------------


class _IndefiniteAboveTwo(InfiniteLossOnCholeskyFailure, gpflow.models.GPR):
    """
    GPR whose objective also needs the Cholesky factor of [[1, v/2], [v/2, 1]] (v the kernel
    variance), which is positive definite only for v < 2, while the data ask for v near 9: a line
    search that follows the gradient steps into a region where the factorisation fails.
    """

    def maximum_log_likelihood_objective(self) -> tf.Tensor:
        half = self.kernel.variance / 2
        one = tf.ones_like(half)
        matrix = tf.stack([tf.stack([one, half]), tf.stack([half, one])])
        factor = checked_cholesky(matrix, "[[1, v/2], [v/2, 1]]")
        logdet = 2 * tf.reduce_sum(tf.math.log(tf.linalg.diag_part(factor)))
        return super().maximum_log_likelihood_objective() + logdet


def _indefinite_above_two(rng, variance=1.0):
    X = rng.uniform(-3, 3, (40, 1))
    Y = 3 * np.sin(2 * X) + 0.1 * rng.standard_normal((40, 1))
    kernel = gpflow.kernels.SquaredExponential(variance=variance)
    return _IndefiniteAboveTwo((X, Y), kernel, noise_variance=0.5)


@pytest.mark.parametrize("method", ["L-BFGS-B", "BFGS"])
def test_fit_scipy_backs_off_from_a_failed_factorisation(rng, method):
    """
    The training loss is +inf where the factorisation fails, so both line searches reject those
    trial points and the run ends at a point with a finite loss (with NaN there, as GPflow's
    models give, both methods end at a NaN point with these scipy versions).
    """
    model = _indefinite_above_two(rng)
    losses = []
    result = fit_scipy(
        model, progress=False, method=method, step_callback=lambda k, loss: losses.append(loss)
    )
    assert model.kernel.variance.numpy() < 2.0
    assert np.isfinite(result.fun)
    np.testing.assert_allclose(result.fun, model.training_loss().numpy(), rtol=1e-12)
    assert losses == result.history and len(losses) == result.nit > 0
    assert result.fun < result.history[0]


def test_fit_scipy_from_a_point_where_the_factorisation_fails_loses_nothing(rng):
    model = _indefinite_above_two(rng, variance=3.0)
    start = [v.numpy() for v in model.trainable_variables]
    assert model.training_loss().numpy() == np.inf
    with pytest.raises(TrainingError, match=r"step 1: Cholesky .* for \[\[1, v/2\]") as info:
        fit_scipy(model, progress=False)
    assert info.value.step == 1 and info.value.history == []
    assert isinstance(info.value.result, scipy.optimize.OptimizeResult)
    assert isinstance(info.value.__cause__, tf.errors.InvalidArgumentError)
    for got, expected in zip(model.trainable_variables, start):
        np.testing.assert_array_equal(got.numpy(), expected)


def test_fit_adam_puts_the_model_back_to_the_last_finite_loss(rng):
    """
    A fault injected after step 3 (a NaN parameter) stops step 4 before it changes anything; the
    model is put back to the point where step 3's loss was computed: the parameters after two
    steps of an identical run, and its loss there is history[-1].
    """
    make = MODEL_FACTORIES["TightSGPR"]
    model, _ = make(np.random.default_rng(0))
    seen = []

    def inject(step, loss):
        seen.append((step, loss))
        if step == 3:
            model.kernel.variance.unconstrained_variable.assign(np.nan)

    with pytest.raises(TrainingError, match="fit_adam stopped at step 4: ") as info:
        fit_adam(model, iterations=10, learning_rate=0.1, progress=False, step_callback=inject)
    error = info.value
    assert error.step == 4 and len(error.history) == 3
    assert seen == list(enumerate(error.history, start=1))
    assert "the parameters of the last finite loss (step 3's" in str(error)

    reference, _ = make(np.random.default_rng(0))
    fit_adam(reference, iterations=2, learning_rate=0.1, progress=False)
    for got, expected in zip(model.trainable_variables, reference.trainable_variables):
        np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-13)
    np.testing.assert_allclose(model.training_loss().numpy(), error.history[-1], rtol=1e-12)


def test_fit_adam_stops_at_the_minibatch_with_nan_and_says_so(rng):
    model, (X, Y) = MODEL_FACTORIES["TightSVGP"](np.random.default_rng(0))
    Y = Y.copy()
    Y[17] = np.nan
    batches = iter(minibatches((X, Y), 8, seed=0))
    first_bad = next(k for k in range(1, 100) if np.isnan(next(batches)[1].numpy()).any())
    assert first_bad > 2
    with pytest.raises(TrainingError, match=f"step {first_bad}: `data` Y contains NaN") as info:
        fit_adam(model, (X, Y), iterations=50, batch_size=8, progress=False)
    assert len(info.value.history) == first_bad - 1
    assert np.all(np.isfinite(info.value.history))

    reference, _ = MODEL_FACTORIES["TightSVGP"](np.random.default_rng(0))
    fit_adam(reference, (X, Y), iterations=first_bad - 2, batch_size=8, progress=False)
    for got, expected in zip(model.trainable_variables, reference.trainable_variables):
        np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-13)


def test_fit_adam_refuses_data_a_model_would_ignore(rng):
    model, _ = MODEL_FACTORIES["TightSGPR"](rng)
    X, Y = model.data
    with pytest.raises(ValueError, match="holds its training data"):
        fit_adam(model, (X.numpy(), Y.numpy()), iterations=1, progress=False)
    with pytest.raises(ValueError, match="`batch_size`"):
        fit_adam(model, iterations=1, batch_size=10, progress=False)
    with pytest.raises(ValueError, match="holds its training data"):
        fit_scipy(model, (X.numpy(), Y.numpy()), progress=False)


def test_fit_power_ep_puts_sites_and_parameters_back(rng):
    """
    A fault injected after iteration 2 stops iteration 3 in its sweep; the model holds the sites
    and hyperparameters at which iteration 2's loss was computed, so its energy there is
    trace.loss[-1].
    """
    model, _ = MODEL_FACTORIES["PowerEPSGP-sites"](np.random.default_rng(0))

    def inject(step, loss):
        if step == 2:
            model.kernel.lengthscales.unconstrained_variable.assign(np.nan)

    with pytest.raises(TrainingError, match="fit_power_ep stopped at step 3") as info:
        fit_power_ep(model, iterations=5, learning_rate=0.05, progress=False, step_callback=inject)
    trace = info.value.history
    assert len(trace.loss) == len(trace.max_change) == 2
    assert all(np.isfinite(v.numpy()).all() for v in model.variables)
    energy = -model.log_marginal_likelihood() - model.log_prior_density()
    np.testing.assert_allclose(energy.numpy(), trace.loss[-1], rtol=1e-12)


def test_run_power_ep_keeps_the_sites_of_the_last_good_sweep(rng):
    model, _ = MODEL_FACTORIES["PowerEPSGP-sites"](np.random.default_rng(0))
    before = [v.numpy() for v in model.variables]
    model.kernel.variance.unconstrained_variable.assign(np.nan)
    before[
        [v.ref() for v in model.variables].index(model.kernel.variance.unconstrained_variable.ref())
    ] = np.nan
    with pytest.raises(TrainingError, match="run_power_ep stopped at step 1") as info:
        run_power_ep(model)
    assert info.value.history.max_change == []
    for got, expected in zip(model.variables, before):
        np.testing.assert_array_equal(got.numpy(), expected)
