"""
The models in Trieste (``make test-compat``: Trieste's pinned stack, tensorflow 2.18): each
model that fits one of Trieste's GPflow wrappers works in it unchanged, through what Trieste
does between Bayesian-optimisation steps: training, data updates (the data become
dynamic-shape variables), posterior-cache updates (``PrecomputeCacheType.VARIABLE``, read by
compiled acquisition functions), covariances between query points and trajectory sampling.
"""

import gpflow
import numpy as np
import pytest
import tensorflow as tf
import trieste
from gpflow.keras import tf_keras
from trieste.acquisition.rule import EfficientGlobalOptimization
from trieste.data import Dataset
from trieste.models.gpflow import SparseGaussianProcessRegression, SparseVariational
from trieste.models.optimizer import BatchOptimizer
from trieste.objectives import Branin, ScaledBranin

import gpflow_tight as gt
from gpflow_tight.trieste import SOLVESparseRegression, SOLVESparseVariational

Z = np.array([[0.1, 0.2], [0.8, 0.3], [0.5, 0.9], [0.3, 0.6], [0.9, 0.9]])
Z_V = np.array([[0.6, 0.1], [0.2, 0.9]])


def kernel():
    return gpflow.kernels.Matern52(variance=1.3, lengthscales=[0.3, 0.4])


def branin_data(rng, num_data):
    X = rng.uniform(0.0, 1.0, (num_data, 2))
    Y = Branin.objective(tf.constant(X)).numpy()
    return X, (Y - 60.0) / 50.0


SGPR_FAMILY = {
    "TightSGPR": lambda d: gt.TightSGPR(d, kernel(), Z, noise_variance=0.05),
    "RelaxedSGPR": lambda d: gt.RelaxedSGPR(d, kernel(), Z, noise_variance=0.05),
    "PowerEPSGP": lambda d: gt.PowerEPSGP(d, kernel(), Z, alpha=0.5, noise_variance=0.05),
    "FITC": lambda d: gt.FITC(d, kernel(), Z, noise_variance=0.05),
    "VFE": lambda d: gt.VFE(d, kernel(), Z, noise_variance=0.05),
    "DTC": lambda d: gt.DTC(d, kernel(), Z, noise_variance=0.05),
    "SOLVEGPR": lambda d: gt.SOLVEGPR(d, kernel(), Z, Z_V, noise_variance=0.05),
    "TightSOLVEGPR": lambda d: gt.TightSOLVEGPR(d, kernel(), Z, Z_V, noise_variance=0.05),
}
SVGP_FAMILY = {
    "TightSVGP": lambda n: gt.TightSVGP(
        kernel(), gpflow.likelihoods.Gaussian(0.05), Z, num_data=n
    ),  # fmt: skip
    "RelaxedSVGP": lambda n: gt.RelaxedSVGP(
        kernel(), gpflow.likelihoods.Gaussian(0.05), Z, num_data=n, relaxation="free"
    ),
    "SOLVEGP": lambda n: gt.SOLVEGP(
        kernel(), gpflow.likelihoods.Gaussian(0.05), Z, Z_V, num_data=n
    ),  # fmt: skip
    "TightSOLVEGP": lambda n: gt.TightSOLVEGP(
        kernel(), gpflow.likelihoods.Gaussian(0.05), Z, Z_V, num_data=n
    ),  # fmt: skip
}
ORTHOGONAL = {"SOLVEGPR", "TightSOLVEGPR", "SOLVEGP", "TightSOLVEGP"}


def wrap_sgpr(name, data):
    model = SGPR_FAMILY[name](data)
    wrapper = SOLVESparseRegression if name in ORTHOGONAL else SparseGaussianProcessRegression
    optimizer = trieste.models.optimizer.Optimizer(
        gpflow.optimizers.Scipy(), minimize_args=dict(options=dict(maxiter=30))
    )
    return wrapper(model, optimizer=optimizer)


def wrap_svgp(name, num_data, **kwargs):
    model = SVGP_FAMILY[name](num_data)
    wrapper = SOLVESparseVariational if name in ORTHOGONAL else SparseVariational
    optimizer = BatchOptimizer(tf_keras.optimizers.Adam(0.01), max_iter=20, batch_size=16)
    return wrapper(model, optimizer=optimizer, **kwargs)


def rebuilt_sgpr(name, wrapped, data):
    """A fresh model of the same class on ``data``, with the wrapped model's parameters."""
    fresh = SGPR_FAMILY[name](data)
    parameters = gpflow.utilities.parameter_dict(wrapped.model)
    # Trieste holds the data in variables, which parameter_dict lists too
    parameters = {k: v for k, v in parameters.items() if isinstance(v, gpflow.Parameter)}
    gpflow.utilities.multiple_assign(fresh, parameters)
    return fresh


@pytest.mark.parametrize("name", SGPR_FAMILY)
def test_sgpr_family_trains_updates_and_predicts_like_a_fresh_model(rng, name):
    X, Y = branin_data(rng, 12)
    wrapped = wrap_sgpr(name, (X, Y))
    loss_before = wrapped.model.training_loss().numpy()
    wrapped.optimize(Dataset(tf.constant(X), tf.constant(Y)))
    assert wrapped.model.training_loss().numpy() < loss_before
    query = tf.constant(rng.uniform(0.0, 1.0, (7, 2)))
    predict = tf.function(wrapped.predict)  # as Trieste's acquisition functions read it
    predict(query)

    X2, Y2 = branin_data(rng, 5)
    X_all, Y_all = np.concatenate([X, X2]), np.concatenate([Y, Y2])
    wrapped.update(Dataset(tf.constant(X_all), tf.constant(Y_all)))
    fresh = rebuilt_sgpr(name, wrapped, (X_all, Y_all))
    expected = fresh.predict_f(query)
    for compiled, direct, reference in zip(predict(query), wrapped.predict(query), expected):
        np.testing.assert_allclose(compiled, reference, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(direct, reference, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(
        wrapped.model.training_loss(), fresh.training_loss(), rtol=1e-10, atol=1e-10
    )


@pytest.mark.parametrize("name", SVGP_FAMILY)
def test_svgp_family_trains_updates_and_predicts_from_its_cache(rng, name):
    X, Y = branin_data(rng, 16)
    wrapped = wrap_svgp(name, len(X))
    loss_before = wrapped.model.training_loss((X, Y)).numpy()
    wrapped.optimize(Dataset(tf.constant(X), tf.constant(Y)))
    assert wrapped.model.training_loss((X, Y)).numpy() < loss_before
    query = tf.constant(rng.uniform(0.0, 1.0, (7, 2)))
    predict = tf.function(wrapped.predict)
    predict(query)
    wrapped.model.q_mu.assign(wrapped.model.q_mu + 0.3)  # a change only the cache update shows
    wrapped.update_posterior_cache()
    expected = wrapped.model.predict_f(query)
    for compiled, reference in zip(predict(query), expected):
        np.testing.assert_allclose(compiled, reference, rtol=1e-10, atol=1e-12)
    X2, Y2 = branin_data(rng, 4)
    wrapped.update(Dataset(tf.constant(np.r_[X, X2]), tf.constant(np.r_[Y, Y2])))
    assert int(wrapped.model.num_data.numpy()) == len(X) + len(X2)


def wrapped_model(name, rng):
    if name in SGPR_FAMILY:
        return wrap_sgpr(name, branin_data(rng, 12))
    wrapped = wrap_svgp(name, 12)
    wrapped.model.q_mu.assign(rng.normal(size=wrapped.model.q_mu.shape))
    if name in ORTHOGONAL:
        wrapped.model.q_mu_orthogonal.assign(rng.normal(size=(len(Z_V), 1)))
    wrapped.update_posterior_cache()
    return wrapped


def variational_covariance(kernel, Z, q_sqrt, whiten, A, B):
    """
    The covariance between A and B of the GP whose inducing variables at Z have q = N(m, S),
    S = q_sqrt q_sqrtᵀ (whitened with the jittered K_ZZ's Cholesky factor if ``whiten``), in
    numpy with solves: what Trieste's formula computes, without its Cholesky of S.
    """
    K = kernel(Z).numpy() + 1e-6 * np.eye(len(Z))
    K_a, K_b = kernel(Z, A).numpy(), kernel(Z, B).numpy()
    S = q_sqrt[0] @ q_sqrt[0].T
    if whiten:
        L = np.linalg.cholesky(K)
        S = L @ S @ L.T
    K_inv_a, K_inv_b = np.linalg.solve(K, K_a), np.linalg.solve(K, K_b)
    return kernel(A, B).numpy() - K_a.T @ K_inv_b + K_inv_a.T @ S @ K_inv_b


@pytest.mark.parametrize("name", [*SGPR_FAMILY, *SVGP_FAMILY])
def test_covariance_between_points_is_the_models_predictive_covariance(rng, name):
    """
    What Trieste reads (``get_inducing_variables``: the inducing points and q) gives the model's
    predictive covariance, to 1e-9 in exact arithmetic; Trieste's own computation of it agrees
    to within ten times the error it makes for GPflow's SGPR on the same data (its Cholesky of
    SGPR's ``compute_qu`` covariance loses digits: about 1e-7 here).
    """
    wrapped = wrapped_model(name, rng)
    A, B = rng.uniform(0.0, 1.0, (4, 2)), rng.uniform(0.0, 1.0, (3, 2))
    _, joint = wrapped.model.predict_f(np.r_[A, B], full_cov=True)
    expected = joint[0, :4, 4:].numpy()
    Z, _, q_sqrt, whiten = wrapped.get_inducing_variables()
    exact = variational_covariance(
        wrapped.get_kernel(), tf.convert_to_tensor(Z), q_sqrt.numpy(), whiten, A, B
    )
    np.testing.assert_allclose(exact, expected, rtol=1e-9, atol=1e-12)

    covariance = wrapped.covariance_between_points(tf.constant(A), tf.constant(B))[0].numpy()
    tolerance = 1e-9
    if name in SGPR_FAMILY:
        data = tuple(values.numpy() for values in wrapped.model.data)
        sgpr = SparseGaussianProcessRegression(
            gpflow.models.SGPR(
                data,
                wrapped.get_kernel(),
                wrapped.model.inducing_variable.Z,
                noise_variance=wrapped.get_observation_noise(),
            )  # fmt: skip
        )
        _, sgpr_joint = sgpr.model.predict_f(np.r_[A, B], full_cov=True)
        sgpr_covariance = sgpr.covariance_between_points(tf.constant(A), tf.constant(B))[0]
        tolerance += 10 * np.max(np.abs(sgpr_covariance - sgpr_joint[0, :4, 4:]))
    np.testing.assert_allclose(covariance, expected, rtol=0, atol=tolerance)


@pytest.mark.parametrize("name", [*SGPR_FAMILY, *SVGP_FAMILY])
def test_trajectories_average_to_the_predictive_mean(rng, name):
    """
    Trieste's decoupled sampler: a prior draw by random features plus an exact update from
    q(u), whose mean is exactly the predictive mean (the feature weights have mean zero).
    The sample mean of 2000 trajectories is within 5 standard errors of it.
    """
    tf.random.set_seed(3)
    wrapped = wrapped_model(name, rng)
    query = tf.constant(rng.uniform(0.0, 1.0, (5, 2)))
    sampler = wrapped.trajectory_sampler()
    trajectory = sampler.get_trajectory()
    draws = 2000
    batch = tf.tile(query[:, None, :], [1, draws, 1])  # [N, B, D]
    trajectory = sampler.resample_trajectory(trajectory)
    values = trajectory(batch).numpy()[..., 0]  # [N, B]
    mean, _ = wrapped.predict(query)
    standard_error = values.std(axis=1) / np.sqrt(draws)
    assert np.all(np.abs(values.mean(axis=1) - mean.numpy()[:, 0]) < 5 * standard_error + 1e-8)


@pytest.mark.parametrize("name", ["TightSGPR", "PowerEPSGP", "SOLVEGPR", "TightSVGP", "SOLVEGP"])
@pytest.mark.parametrize("rule", ["expected improvement", "Thompson sampling"])
def test_a_bayesian_optimisation_loop_runs(name, rule):
    """Three steps of expected improvement, or of batch Thompson sampling by trajectories."""
    from trieste.acquisition.function import ParallelContinuousThompsonSampling

    tf.random.set_seed(1)
    search_space = ScaledBranin.search_space
    observer = trieste.objectives.utils.mk_observer(ScaledBranin.objective)
    initial = observer(search_space.sample(10))
    if name in SGPR_FAMILY:
        model = wrap_sgpr(name, (initial.query_points, initial.observations))
    else:
        model = wrap_svgp(name, 10)
    optimizer = trieste.bayesian_optimizer.BayesianOptimizer(observer, search_space)
    if rule == "expected improvement":
        acquisition, batch = EfficientGlobalOptimization(), 1
    else:
        batch = 2
        acquisition = EfficientGlobalOptimization(
            ParallelContinuousThompsonSampling(), num_query_points=batch
        )
    result = optimizer.optimize(3, initial, model, acquisition)
    final = result.try_get_final_dataset()
    assert final.query_points.shape[0] == 10 + 3 * batch
    assert np.all(np.isfinite(final.observations.numpy()))


def traces_in_a_loop(name, steps):
    """
    The Python calls, in a Bayesian-optimisation loop with Trieste's default (compiled)
    optimiser, of the model's ELBO and of its posterior's ``predict_f``: each is a trace, as
    compiled functions run the Python only when they trace.
    """
    tf.random.set_seed(1)
    search_space = Branin.search_space
    observer = trieste.objectives.utils.mk_observer(Branin.objective)
    initial = observer(search_space.sample(10))
    model = SVGP_FAMILY[name](10)
    wrapped = (SOLVESparseVariational if name in ORTHOGONAL else SparseVariational)(model)
    counts = {"elbo": 0, "predict_f": 0}

    def counting(owner, method):
        original = getattr(owner, method)

        def counted(*args, **kwargs):
            counts[method] += 1
            return original(*args, **kwargs)

        object.__setattr__(owner, method, counted)

    counting(model, "elbo")
    counting(wrapped._posterior, "predict_f")
    optimizer = trieste.bayesian_optimizer.BayesianOptimizer(observer, search_space)
    optimizer.optimize(steps, initial, wrapped, EfficientGlobalOptimization())
    return counts


def test_solvegp_traces_no_more_than_tightsvgp_in_trieste():
    """
    Trieste compiles a training step per optimisation and its acquisition functions a few times
    per step; SOLVEGP must not add traces of its own (a retrace per step would cost seconds).
    """
    for steps in (2, 4):
        solve, tight = traces_in_a_loop("SOLVEGP", steps), traces_in_a_loop("TightSVGP", steps)
        assert solve == tight, (steps, solve, tight)


def selector_wrapped(name, data):
    """A wrapped model whose inducing points Trieste moves by k-means at each data update."""
    from trieste.models.gpflow.inducing_point_selectors import KMeansInducingPointSelector

    selector = KMeansInducingPointSelector()
    if name in SGPR_FAMILY:
        wrapper = SOLVESparseRegression if name in ORTHOGONAL else SparseGaussianProcessRegression
        return wrapper(SGPR_FAMILY[name](data), inducing_point_selector=selector)
    return SparseVariational(SVGP_FAMILY[name](len(data[0])), inducing_point_selector=selector)


@pytest.mark.parametrize("name", ["TightSGPR", "FITC", "SOLVEGPR"])
def test_collapsed_models_follow_trieste_selector(rng, name):
    """
    Trieste's inducing-point selectors move Z at each data update. A collapsed model then
    equals one built afresh at the new points, as its q follows from the data (a SOLVE model
    takes the selected points as its regular set, then its orthogonal one).
    """
    X, Y = branin_data(rng, 14)
    wrapped = selector_wrapped(name, (X, Y))
    old_points = tf.convert_to_tensor(wrapped.get_inducing_variables()[0]).numpy()
    X2, Y2 = branin_data(rng, 6)
    X_all, Y_all = np.r_[X, X2], np.r_[Y, Y2]
    wrapped.update(Dataset(tf.constant(X_all), tf.constant(Y_all)))
    new_points = tf.convert_to_tensor(wrapped.get_inducing_variables()[0]).numpy()
    assert new_points.shape == old_points.shape
    assert not np.allclose(new_points, old_points)
    if name in ORTHOGONAL:
        fresh = gt.SOLVEGPR((X_all, Y_all), kernel(), new_points[: len(Z)],
                            new_points[len(Z) :], noise_variance=0.05)  # fmt: skip
    else:
        fresh = type(wrapped.model)((X_all, Y_all), kernel(), new_points, noise_variance=0.05)
    query = tf.constant(rng.uniform(0.0, 1.0, (6, 2)))
    for got, expected in zip(wrapped.predict(query), fresh.predict_f(query)):
        np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)


def test_svgp_family_predictive_is_kept_at_the_selected_points(rng):
    """TightSVGP: after Trieste moves Z, the predictive at the new Z is the old one there."""
    X, Y = branin_data(rng, 14)
    wrapped = selector_wrapped("TightSVGP", (X, Y))
    wrapped.model.q_mu.assign(rng.normal(size=wrapped.model.q_mu.shape))
    wrapped.update_posterior_cache()
    X_all = np.r_[X, branin_data(rng, 6)[0]]
    Y_all = Branin.objective(tf.constant(X_all)).numpy()
    selector = wrapped.inducing_point_selector
    # the points k-means will choose, and the model's predictive there before the move
    chosen = selector.calculate_inducing_points(
        wrapped.get_inducing_variables()[0],
        wrapped,
        Dataset(tf.constant(X_all), tf.constant(Y_all)),
    )
    mean_before, cov_before = wrapped.model.predict_f(chosen, full_cov=True)
    wrapped._update_inducing_variables(chosen)
    wrapped.update_posterior_cache()
    mean_after, cov_after = wrapped.model.predict_f(chosen, full_cov=True)
    np.testing.assert_allclose(mean_after, mean_before, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(cov_after, cov_before, rtol=1e-4, atol=1e-6)


def test_solvegp_wrapper_refuses_a_selector():
    from trieste.models.gpflow.inducing_point_selectors import KMeansInducingPointSelector

    with pytest.raises(NotImplementedError, match="inducing_point_selector"):
        SOLVESparseVariational(
            SVGP_FAMILY["SOLVEGP"](10), inducing_point_selector=KMeansInducingPointSelector()
        )
    with pytest.raises(NotImplementedError, match="inducing_point_selector"):  # by position
        SOLVESparseVariational(SVGP_FAMILY["SOLVEGP"](10), None, 10, KMeansInducingPointSelector())
    # None, Trieste's default, by position as by name
    wrapped = SOLVESparseVariational(SVGP_FAMILY["SOLVEGP"](10), None, 10, None)
    assert wrapped.inducing_point_selector is None
