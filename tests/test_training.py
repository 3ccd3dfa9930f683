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
from gpflow_tight.validation import CholeskyError, checked_cholesky
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


def test_fit_scipy_passes_scipy_options_on(rng):
    """``options`` reach scipy as with ``gpflow.optimizers.Scipy``; ``maxiter`` stays ours."""
    options = dict(gtol=1e-3, maxcor=3)
    model, reference = _gpr(np.random.default_rng(5)), _gpr(np.random.default_rng(5))
    result = fit_scipy(model, maxiter=30, options=options, progress=False)
    expected = gpflow.optimizers.Scipy().minimize(
        reference.training_loss, reference.trainable_variables, options=dict(maxiter=30, **options)
    )
    assert result.nit == expected.nit
    np.testing.assert_allclose(result.x, expected.x, rtol=1e-12)
    with pytest.raises(ValueError, match="`maxiter` as fit_scipy's own argument"):
        fit_scipy(model, options=dict(maxiter=5), progress=False)


def test_bad_settings_of_the_helpers_are_refused(rng):
    X = np.arange(10.0)[:, None]
    for parts in ((X, X[:9]), (X[:9], X)):  # no silent drop of rows, no error mid-training
        with pytest.raises(ValueError, match="`data`: every part must have one row per"):
            minibatches(parts, 4)
    for size, error in ((0, ValueError), (-1, ValueError), (2.5, TypeError)):
        with pytest.raises(error, match="`batch_size`"):
            minibatches((X, X), size)
    model, data = MODEL_FACTORIES["TightSVGP"](rng)
    for rate in (-0.05, 0.0, np.nan, np.inf):
        with pytest.raises(ValueError, match="`learning_rate` must be finite and strictly"):
            fit_adam(model, data, iterations=2, learning_rate=rate, progress=False)
    with pytest.raises(ValueError, match="`iterations` must be at least 0"):
        fit_adam(model, data, iterations=-5, progress=False)
    with pytest.raises(ValueError, match="`data`: every part"):
        fit_adam(model, (data[0], data[1][:-1]), iterations=2, batch_size=4, progress=False)
    # a tf_keras schedule is passed on to Adam
    schedule = gpflow.keras.tf_keras.optimizers.schedules.ExponentialDecay(0.01, 10, 0.9)
    assert len(fit_adam(model, data, iterations=2, learning_rate=schedule, progress=False)) == 2
    sites, _ = MODEL_FACTORIES["PowerEPSGP-sites"](np.random.default_rng(0))
    with pytest.raises(ValueError, match="`max_sweeps` must be at least 1"):
        run_power_ep(sites, max_sweeps=-1)
    with pytest.raises(ValueError, match="`learning_rate` must be finite"):
        fit_power_ep(sites, iterations=2, learning_rate=-1.0, progress=False)
    trace = run_power_ep(sites, max_sweeps=3, tolerance=0.0)  # as documented: a loss at the end
    assert len(trace.max_change) == len(trace.num_skipped) == 3 and len(trace.loss) == 1
    energy = -sites.log_marginal_likelihood()
    np.testing.assert_allclose(trace.loss[-1], energy.numpy(), rtol=1e-12)


# ---- faults: the helpers lose nothing -------------------------------------------------------


def variance_factor(model) -> tf.Tensor:
    """The Cholesky factor of [[1, v/2], [v/2, 1]] (v the kernel variance): NaN unless v < 2."""
    half = model.kernel.variance / 2
    one = tf.ones_like(half)
    matrix = tf.stack([tf.stack([one, half]), tf.stack([half, one])])
    return checked_cholesky(matrix, "[[1, v/2], [v/2, 1]]")


class _IndefiniteAboveTwo(InfiniteLossOnCholeskyFailure, gpflow.models.GPR):
    """
    GPR whose objective also needs the Cholesky factor of [[1, v/2], [v/2, 1]] (v the kernel
    variance), which is positive definite only for v < 2, while the data ask for v near 9: a line
    search that follows the gradient steps into a region where the factorisation fails.
    """

    def maximum_log_likelihood_objective(self) -> tf.Tensor:
        logdet = 2 * tf.reduce_sum(tf.math.log(tf.linalg.diag_part(variance_factor(self))))
        return super().maximum_log_likelihood_objective() + logdet


class DefinedBelowTwo:
    """
    Mixin for a GPflow model with a kernel variance v: its objective where the factor of
    :func:`variance_factor` exists (v < 2), NaN beyond, so that the training loss is +inf there
    (or, with the training helpers' checks, the factorisation fails with advice). Unlike
    ``_IndefiniteAboveTwo``'s log-determinant, nothing in it pulls v back from 2: with data that
    ask for a larger v, the steps along the gradient cross into the failed region.
    """

    def maximum_log_likelihood_objective(self, *data) -> tf.Tensor:
        objective = super().maximum_log_likelihood_objective(*data)
        exists = tf.reduce_all(tf.math.is_finite(variance_factor(self)))
        return tf.where(exists, objective, tf.constant(np.nan, objective.dtype))


class _GPRDefinedBelowTwo(DefinedBelowTwo, InfiniteLossOnCholeskyFailure, gpflow.models.GPR):
    pass


def toy_data(rng):
    X = rng.uniform(-3, 3, (40, 1))
    return X, 3 * np.sin(2 * X) + 0.1 * rng.standard_normal((40, 1))  # asks for v near 9


def _indefinite_above_two(rng, variance=1.0, model_class=_IndefiniteAboveTwo):
    kernel = gpflow.kernels.SquaredExponential(variance=variance)
    return model_class(toy_data(rng), kernel, noise_variance=0.5)


@pytest.mark.parametrize("method", ["L-BFGS-B", "BFGS"])
def test_fit_scipy_backs_off_from_a_failed_factorisation(rng, method):
    """
    The training loss is +inf where the factorisation fails, so the run ends at a point with a
    finite loss (with NaN there, as GPflow's models give, both methods end at a NaN point with
    these scipy versions). BFGS's line search backs off and converges (zero gradient);
    L-BFGS-B's does not back off from its failed trial point and ends at the iterate before it,
    claiming convergence where the gradient is far from zero: fit_scipy reports it unconverged.
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
    if method == "BFGS":
        assert result.success, result.message
        np.testing.assert_allclose(result.jac, 0.0, atol=1e-4)
    else:
        assert not result.success
        assert result.message.startswith("STOPPED AT A FAILED TRIAL POINT, NOT CONVERGED: ")
        assert "for [[1, v/2], [v/2, 1]]" in result.message
        assert "(scipy: CONVERGENCE: " in result.message  # what scipy claimed
        assert np.max(np.abs(result.jac)) > 1.0


@pytest.mark.parametrize("method", ["L-BFGS-B", "BFGS"])
def test_fit_scipy_that_cannot_leave_its_start_says_so(rng, method):
    """
    Started just inside the region where the factorisation exists (v = 2 - 1e-9, the boundary
    at v = 2), with data that ask for v near 9 and nothing pulling v back, every point scipy
    tries beyond the start fails: L-BFGS-B returns to the start and reports convergence after
    one iteration, BFGS reports a loss of precision after none. Both are a TrainingError, with
    the model at its start.
    """
    model = _indefinite_above_two(rng, variance=2 - 1e-9, model_class=_GPRDefinedBelowTwo)
    start = [v.numpy() for v in model.trainable_variables]
    start_loss = model.training_loss().numpy()
    assert np.isfinite(start_loss)
    with pytest.raises(TrainingError, match="^fit_scipy made no progress: ") as info:
        fit_scipy(model, progress=False, method=method)
    error = info.value
    assert "At the last point tried: Cholesky decomposition was not successful for [[1, v/2]" in (
        str(error)
    )
    assert "The model holds its starting point" in str(error)
    assert "start from other parameter values, or take smaller first steps" in str(error)
    assert isinstance(error.__cause__, CholeskyError)
    assert isinstance(error.result, scipy.optimize.OptimizeResult)
    assert error.result.nit <= 1 and error.result.nfev > 2
    np.testing.assert_array_equal(error.result.x, np.concatenate([v.ravel() for v in start]))
    assert error.step == len(error.history) + 1
    np.testing.assert_allclose(error.history, [start_loss] * len(error.history), rtol=1e-12)
    for got, expected in zip(model.trainable_variables, start):
        np.testing.assert_array_equal(got.numpy(), expected)


def test_fit_scipy_converging_at_once_is_not_flagged(rng):
    """
    Started at its optimum, L-BFGS-B ends at once without moving, as in the no-progress case,
    but no trial point failed: a converged run (zero gradient), not an error.
    """
    model = _gpr(rng)
    first = fit_scipy(model, progress=False)
    again = fit_scipy(model, progress=False)
    assert first.success and again.success, again.message
    assert again.nit <= 1
    np.testing.assert_array_equal(again.x, first.x)
    np.testing.assert_allclose(again.fun, first.fun, rtol=1e-12)
    np.testing.assert_allclose(again.jac, 0.0, atol=1e-4)


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
