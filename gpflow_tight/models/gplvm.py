"""
The tighter Bayesian GPLVM (TV-BGPLVM) of Bui, Ashman & Turner, *Tighter sparse variational
Gaussian processes* (2025), §5, as a drop-in for ``gpflow.models.BayesianGPLVM`` (Titsias &
Lawrence 2010), and an uncollapsed Bayesian GPLVM that trains on minibatches of rows.
"""

import warnings
from typing import Any, NamedTuple

import gpflow
import numpy as np
import tensorflow as tf
from check_shapes import check_shapes, inherit_check_shapes
from gpflow.base import Parameter, RegressionData
from gpflow.config import default_float, default_jitter
from gpflow.covariances import Kuu
from gpflow.expectations import expectation
from gpflow.functions import Zero
from gpflow.kernels import Kernel
from gpflow.kullback_leiblers import gauss_kl
from gpflow.models import BayesianGPLVM, ExternalDataTrainingLossMixin, GPModel
from gpflow.probability_distributions import DiagonalGaussian
from gpflow.utilities import assert_params_false, positive, triangular

from ..projection import (
    ExpectedProjection,
    Projection,
    expected_projection,
    inducing_cholesky,
    project,
)
from ..relaxation import Relaxation, SampledOptimalRelaxation, as_relaxation
from ..validation import check_batch, checked_cholesky, explain_cholesky_failure
from .base import ConstructorOnly, NaNLossOnCholeskyFailure

__all__ = ["TightBayesianGPLVM", "TVBGPLVM", "MinibatchBayesianGPLVM"]


class _PsiStatistics(NamedTuple):
    """Per-point psi statistics: ψ0 [N], Ψ1 [N, M], Ψ2 [N, M, M]."""

    psi0: tf.Tensor
    psi1: tf.Tensor
    psi2: tf.Tensor


def _psi_statistics(
    kernel: Kernel, inducing_variable: Any, mean: tf.Tensor, var: tf.Tensor
) -> _PsiStatistics:
    """``gpflow.expectations`` per point (analytic where GPflow has it, else quadrature)."""
    q_x = DiagonalGaussian(mean, var)
    return _PsiStatistics(
        expectation(q_x, kernel),
        expectation(q_x, (kernel, inducing_variable)),
        expectation(q_x, (kernel, inducing_variable), (kernel, inducing_variable)),
    )


def _check_latent(
    data: Any, X_data_mean: Any, X_data_var: Any, inducing_variable: Any = None
) -> None:
    Y = np.asarray(data)
    mean, var = np.asarray(X_data_mean), np.asarray(X_data_var)
    if Y.ndim != 2 or mean.ndim != 2:
        raise ValueError(
            f"`data` [N, P] and `X_data_mean` [N, Q] must be 2-D, got {Y.shape} and {mean.shape}."
        )
    if Y.shape[0] == 0:
        raise ValueError(
            "`data` is empty: a Bayesian GPLVM needs at least one row of observations (and one "
            "row of `X_data_mean` and `X_data_var` per row of `data`)."
        )
    if mean.shape[0] != Y.shape[0] or var.shape != mean.shape:
        raise ValueError(
            f"`X_data_mean` and `X_data_var` must both have shape [N, Q] with N = {Y.shape[0]} "
            f"(the rows of `data`), got {mean.shape} and {var.shape}."
        )
    if not np.all(np.isfinite(Y)) or not np.all(np.isfinite(mean)):
        raise ValueError("`data` and `X_data_mean` must be finite (no NaN or inf).")
    if not np.all(np.isfinite(var)) or np.any(var <= 0):
        raise ValueError("`X_data_var` must hold finite, strictly positive variances.")
    if inducing_variable is not None:
        Z = getattr(inducing_variable, "Z", inducing_variable)
        width = Z.shape[-1]
        if width != mean.shape[1]:
            raise ValueError(
                f"The inducing inputs have {width} columns but the latent space has "
                f"Q = {mean.shape[1]}; they must match."
            )


#: the smallest jitter with which the GPLVMs train reliably below float64 (docs/gplvm.md)
_FLOAT32_MIN_JITTER = 1e-3


def _warn_low_precision(model: str) -> None:
    """
    A ``RuntimeWarning`` for a GPLVM built below float64 with a jitter under
    1e-3: its psi statistics, rounded to float32, are multiplied by
    :math:`K_{uu}^{-1}`, whose condition number only the jitter bounds.
    """
    dtype: np.dtype[Any] = np.dtype(default_float())
    if dtype.itemsize >= 8 or default_jitter() >= _FLOAT32_MIN_JITTER:
        return
    warnings.warn(
        f"{model} in {dtype.name} with jitter {default_jitter():g}: the psi statistics are "
        "rounded to float32 and then multiplied by K_uu⁻¹, so where K_uu is ill-conditioned "
        "the bound can be off by tens of nats and training stops early or diverges (see "
        "docs/gplvm.md, 'float32'). Raise the jitter to at least "
        f"{_FLOAT32_MIN_JITTER:g} (`gpflow.config.set_default_jitter({_FLOAT32_MIN_JITTER:g})`) "
        "and train with Adam, or use float64 (`gpflow.config.set_default_float(np.float64)`).",
        RuntimeWarning,
        stacklevel=3,
    )


_ALIASES = {"analytic": "optimal"}


def _gplvm_relaxation(
    relaxation: Any, num_samples: int | None, allowed: tuple[str, ...], model: str
) -> Relaxation:
    """
    The :class:`~gpflow_tight.relaxation.Relaxation` of a GPLVM: ``"analytic"`` is an alias of
    ``"optimal"``; ``num_samples`` is for ``"sampled"`` only (refused with the other names).
    """
    if isinstance(relaxation, str):
        names = tuple(
            name for name in ("analytic", *allowed) if _ALIASES.get(name, name) in allowed
        )
        if relaxation not in names:
            raise ValueError(
                f"`relaxation` of {model} must be one of {', '.join(map(repr, names))} or a "
                f"gpflow_tight.relaxation.Relaxation of one of those kinds, got {relaxation!r}."
            )
        relaxation = _ALIASES.get(relaxation, relaxation)
    return as_relaxation(relaxation, allowed=allowed, model=model, num_samples=num_samples)


def _latent_kl(
    mean: tf.Tensor, var: tf.Tensor, prior_mean: tf.Tensor, prior_var: tf.Tensor
) -> tf.Tensor:
    """:math:`\\sum_n \\mathrm{KL}[q(\\mathbf x_n) \\| p(\\mathbf x_n)]` for diagonal Gaussians."""
    return tf.reduce_sum(_latent_kl_rows(mean, var, prior_mean, prior_var))


def _latent_kl_rows(
    mean: tf.Tensor, var: tf.Tensor, prior_mean: tf.Tensor, prior_var: tf.Tensor
) -> tf.Tensor:
    """:math:`\\mathrm{KL}[q(\\mathbf x_n) \\| p(\\mathbf x_n)]` per row [N]."""
    ratio = var / prior_var
    return 0.5 * tf.reduce_sum(
        ratio - 1 - tf.math.log(ratio) + tf.square(mean - prior_mean) / prior_var, axis=-1
    )


def _positive_definite_b(B: tf.Tensor) -> tf.Tensor:
    """
    ``B`` [M, M] :math:`= I + L^{-1}\\Psi_2L^{-\\top}/\\sigma^2`, whose eigenvalues are at least 1
    in exact arithmetic, with any eigenvalue below :math:`\\tfrac12` raised to
    :math:`\\tfrac12` below float64. In float32 the round-off of the psi statistics, amplified by
    :math:`L^{-1}` where :math:`K_{uu}` is ill-conditioned, can leave :math:`B` indefinite
    (GPflow's ``BayesianGPLVM`` then predicts NaN and fails to train). This is the projection
    onto the convex set :math:`\\{B \\succeq \\tfrac12 I\\}`, which holds the exact :math:`B`: it
    never moves ``B`` further from its exact value (in the Frobenius norm) than the round-off
    did. Ordinary round-off, which scatters the eigenvalues near 1 both ways and largely cancels
    in :math:`\\log|B|`, is left alone: raising every eigenvalue below 1 to 1 biased the float32
    bounds of the tests by up to 1 nat. The correction is added (a matrix that needs none is
    unchanged to the bit), held constant under differentiation (it is round-off), and a
    non-finite ``B`` stays non-finite (its factorisation then fails as it should).
    :math:`O(M^3)`, like the factorisation; in float64 ``B`` is returned as it is.
    """
    if B.dtype == tf.float64:
        return B
    eye = tf.eye(tf.shape(B)[0], dtype=B.dtype)
    safe = tf.where(tf.reduce_all(tf.math.is_finite(B)), B, eye)
    # the matrix the Cholesky factorisation reads: the lower triangle, mirrored
    lower = tf.linalg.band_part(safe, -1, 0)
    read = lower + tf.linalg.adjoint(lower) - tf.linalg.diag(tf.linalg.diag_part(safe))
    eigenvalues, eigenvectors = tf.linalg.eigh(read)
    correction = tf.linalg.matmul(
        eigenvectors * tf.maximum(0.5 - eigenvalues, 0.0), eigenvectors, transpose_b=True
    )
    return B + tf.stop_gradient(correction)


class _Collapsed(NamedTuple):
    """
    The projection, :math:`L_B` and :math:`\\mathbf c = L_B^{-1}AY/\\sigma` of the collapsed
    bound.
    """

    projection: ExpectedProjection
    LB: tf.Tensor
    c: tf.Tensor


def _residual_cov(new: Projection, kernel: Kernel, Xnew: Any) -> tf.Tensor:
    """
    :math:`K_{**} - A_*^\\top A_*` [N*, N*], the covariance of :math:`p(\\mathbf f_* \\mid
    \\mathbf u)`.
    """
    return kernel(Xnew) - tf.linalg.matmul(new.A, new.A, transpose_a=True)


class _FixedQ(NamedTuple):
    """
    :math:`q(\\mathbf v_p) = \\mathcal N(\\tilde{\\mathbf m}_p, \\tilde S_p)` of the whitened
    inducing outputs :math:`\\mathbf v_p = L^{-1}\\mathbf u_p`, held fixed while new rows are
    fitted: ``L`` [M, M], ``mean`` [M, P] (the :math:`\\tilde{\\mathbf m}_p`), ``cov_sum``
    [M, M] :math:`= \\sum_p \\tilde S_p`.
    """

    L: tf.Tensor
    mean: tf.Tensor
    cov_sum: tf.Tensor


def _row_bounds(
    model: Any,
    fixed: _FixedQ,
    Y: tf.Tensor,
    mean: tf.Tensor,
    var: tf.Tensor,
    prior_mean: tf.Tensor,
    prior_var: tf.Tensor,
    noise: tf.Tensor | None = None,
) -> tf.Tensor:
    """
    The contribution of each row [N] to the model's bound at a fixed :math:`q(\\mathbf u)`:

    .. math::
        \\ell_n = \\sum_p \\mathbb E_{q(\\mathbf x_n) q(f_{np})}[\\log\\mathcal N(y_{np}; f_{np},
        \\sigma^2)] + P\\,r_n - \\mathrm{KL}[q(\\mathbf x_n) \\| p(\\mathbf x_n)],

    the summand of the uncollapsed bound (:class:`MinibatchBayesianGPLVM`), with the expected
    squared errors of its :meth:`~MinibatchBayesianGPLVM.elbo` per row and the trace term
    :math:`-\\langle d_n \\rangle / 2\\sigma^2` replaced by the relaxation's term :math:`r_n`
    (:cite:t:`bui2025tighter`, §5; per element, the summand of
    :meth:`~gpflow_tight.relaxation.Relaxation.gaussian_residual_term`). With ``noise``
    [S, N, Q], :math:`r_n` is averaged over the samples ``mean + sqrt(var) * noise``
    (``relaxation="sampled"``). At Titsias's optimal :math:`q(\\mathbf u)` the sum over the
    training rows minus :math:`\\mathrm{KL}[q(\\mathbf u) \\| p(\\mathbf u)]` is the collapsed
    bound of :class:`TightBayesianGPLVM`.
    """
    psi = _psi_statistics(model.kernel, model.inducing_variable, mean, var)
    projection = expected_projection(psi.psi0, psi.psi1, psi.psi2, fixed.L, centred=True)
    A = projection.A  # [M, N]
    f_mean = tf.linalg.matmul(A, fixed.mean, transpose_a=True)  # [N, P]
    carried = tf.reduce_sum(A * tf.linalg.matmul(fixed.cov_sum, A), axis=0)  # a_nᵀ Σ_p S̃_p a_n
    # tr(L⁻¹ C_n L⁻ᵀ Σ_p (S̃_p + m̃_p m̃_pᵀ)) with C_n = Ψ2_n - ψ1_n ψ1_nᵀ
    eye = tf.eye(tf.shape(fixed.L)[0], dtype=fixed.L.dtype)
    L_inv = tf.linalg.triangular_solve(fixed.L, eye, lower=True)
    second_moment = fixed.cov_sum + tf.linalg.matmul(fixed.mean, fixed.mean, transpose_b=True)
    weights = tf.linalg.matmul(L_inv, tf.linalg.matmul(second_moment, L_inv), transpose_a=True)
    spread = tf.einsum("nab,ab->n", psi.psi2 - tf.einsum("na,nb->nab", psi.psi1, psi.psi1), weights)
    squares = tf.reduce_sum(tf.square(Y - f_mean), axis=1) + carried + spread
    sigma2 = model.likelihood.variance
    if noise is None:
        residual = projection.residual[None]  # ⟨d_n⟩ [1, N]
    else:
        samples = mean + tf.sqrt(var) * noise  # [S, N, Q]
        flat = tf.reshape(samples, [-1, tf.shape(samples)[-1]])
        flat_residual = project(model.inducing_variable, model.kernel, flat, fixed.L).residual
        residual = tf.reshape(flat_residual, tf.shape(samples)[:2])  # d_n(x_s) [S, N]
    column = tf.reshape(residual, [-1, 1])
    m = model.relaxation.weights(column, tf.ones_like(column) * sigma2)
    terms = -0.5 * m * column / sigma2 + 0.5 * (1.0 + tf.math.log(m) - m)
    residual_term = tf.reduce_mean(tf.reshape(terms, tf.shape(residual)), axis=0)
    num_outputs = tf.cast(tf.shape(Y)[1], Y.dtype)
    return (
        -0.5 * num_outputs * tf.math.log(2 * np.pi * sigma2)
        - 0.5 * squares / sigma2
        + num_outputs * residual_term
        - _latent_kl_rows(mean, var, prior_mean, prior_var)
    )


def _as_float_matrix(value: Any, name: str, shape: Any) -> tf.Tensor:
    """``value`` as a [N, Q] tensor of the default float, broadcast to ``shape``, checked."""
    tensor = tf.convert_to_tensor(value, dtype_hint=default_float())
    if tensor.dtype != default_float():
        tensor = tf.cast(tensor, default_float())
    try:
        tensor = tf.broadcast_to(tensor, shape)
    except (ValueError, tf.errors.InvalidArgumentError) as error:
        raise ValueError(
            f"`{name}` must have shape {list(shape)} (one row per row of `Y_new`, one column per "
            f"latent dimension) or broadcast to it, got shape {list(np.shape(value))}."
        ) from error
    if tf.executing_eagerly() and not np.all(np.isfinite(tensor.numpy())):
        raise ValueError(f"`{name}` must be finite (no NaN or inf).")
    return tensor


class _NewRows:
    """
    Inference of :math:`q(\\mathbf x_*)` for held-out rows and their held-out log density, shared
    by both GPLVMs. A model provides :meth:`_fixed_q` and :attr:`_num_outputs`.
    """

    # set by the models
    kernel: Kernel
    inducing_variable: Any
    likelihood: Any
    relaxation: Relaxation
    mean_function: Any
    X_data_mean: Parameter
    X_data_var: Parameter

    @property
    def _num_outputs(self) -> int:
        raise NotImplementedError

    def _fixed_q(self) -> _FixedQ:
        raise NotImplementedError

    def _new_rows(
        self, Y_new: Any, X_prior_mean: Any, X_prior_var: Any
    ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """``Y_new`` [N*, P] and the prior mean and variance [N*, Q] of its latent points."""
        if not isinstance(self.mean_function, Zero):
            raise ValueError(
                f"The bound of {type(self).__name__} (as that of GPflow's BayesianGPLVM) ignores "
                "`mean_function`, so q(x*) cannot be fitted to it: build the model without a "
                "mean function (subtract a constant mean from the data instead)."
            )
        eager = tf.executing_eagerly()
        if eager or not isinstance(Y_new, tf.Tensor):
            values = np.asarray(Y_new.numpy() if isinstance(Y_new, tf.Tensor) else Y_new)
            if values.dtype == object or not np.issubdtype(values.dtype, np.number):
                raise TypeError(f"`Y_new` must hold numbers, got dtype {values.dtype}.")
            if values.ndim == 2 and not np.all(np.isfinite(values)):
                raise ValueError(
                    "`Y_new` must be finite (no NaN or inf): drop or impute those rows."
                )
            Y = tf.constant(values, default_float())
        else:  # traced: the shape is checked below, the values are the caller's
            Y = tf.cast(Y_new, default_float())
        shape = Y.shape
        if shape.rank != 2 or shape[1] != self._num_outputs or shape[0] == 0:
            raise ValueError(
                f"`Y_new` must be a non-empty 2-D array [N*, {self._num_outputs}] (one row per "
                f"held-out observation, the model's {self._num_outputs} output columns), got "
                f"shape {tuple(shape)}; reshape a single row `y` with `y[None, :]`."
            )
        num_rows = tf.shape(Y)[0] if shape[0] is None else shape[0]
        latent: Any = (num_rows, int(self.X_data_mean.shape[-1]))
        prior_mean = _as_float_matrix(
            0.0 if X_prior_mean is None else X_prior_mean, "X_prior_mean", latent
        )
        prior_var = _as_float_matrix(
            1.0 if X_prior_var is None else X_prior_var, "X_prior_var", latent
        )
        if eager and np.any(prior_var.numpy() <= 0):
            raise ValueError("`X_prior_var` must hold strictly positive variances.")
        return Y, prior_mean, prior_var

    def _noise(self, num_rows: Any) -> tf.Tensor | None:
        """Standard normal draws [S, N*, Q] for ``relaxation="sampled"``, else None."""
        if not isinstance(self.relaxation, SampledOptimalRelaxation):
            return None
        shape = [self.relaxation.num_samples, num_rows, int(self.X_data_mean.shape[-1])]
        return tf.random.normal(shape, dtype=default_float())

    def _initial_latent(
        self, fixed: _FixedQ, Y: tf.Tensor, prior_mean: tf.Tensor, prior_var: tf.Tensor
    ) -> tuple[np.ndarray, np.ndarray]:
        """
        For each row of ``Y``, the :math:`q(\\mathbf x_n)` of the training row whose mean best
        explains it: the highest predictive log density of the row at that mean plus its prior
        log density. :math:`O(N_*NP)`, in blocks of rows.
        """
        candidates = self.X_data_mean.numpy()
        new = project(self.inducing_variable, self.kernel, self.X_data_mean, fixed.L)
        f_mean = tf.linalg.matmul(new.A, fixed.mean, transpose_a=True).numpy()  # [N, P]
        average_cov = fixed.cov_sum / tf.cast(self._num_outputs, fixed.L.dtype)
        carried = tf.reduce_sum(new.A * tf.linalg.matmul(average_cov, new.A), axis=0)
        variance = (new.residual + carried + self.likelihood.variance).numpy()  # [N]
        Y, prior_mean, prior_var = Y.numpy(), prior_mean.numpy(), prior_var.numpy()
        best = np.empty(len(Y), dtype=int)
        for start in range(0, len(Y), 256):
            rows = slice(start, start + 256)
            distances = (
                np.sum(Y[rows] ** 2, 1)[:, None]
                - 2 * Y[rows] @ f_mean.T
                + np.sum(f_mean**2, 1)[None, :]
            )
            fit = -0.5 * (distances / variance + Y.shape[1] * np.log(variance))
            prior = -0.5 * np.sum(
                (candidates[None] - prior_mean[rows, None]) ** 2 / prior_var[rows, None], axis=-1
            )
            best[rows] = np.argmax(fit + prior, axis=1)
        return candidates[best], self.X_data_var.numpy()[best]

    def infer_latent(
        self,
        Y_new: Any,
        initial_mean: Any = None,
        initial_var: Any = None,
        *,
        X_prior_mean: Any = None,
        X_prior_var: Any = None,
        maxiter: int = 1000,
        tol: float | None = None,
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """
        The variational distribution :math:`q(\\mathbf x_*) = \\mathcal N(\\boldsymbol\\mu_*,
        \\mathrm{diag}\\,\\mathbf s_*)` of the latent point of each held-out row of ``Y_new``,
        with the model held fixed (no parameter of the model changes): each row's term
        :math:`\\ell_*` of the model's bound at the model's :math:`q(\\mathbf u)` (the optimal
        one for :class:`TightBayesianGPLVM`; the same bound the model trains, tight or not)

        .. math::
            \\ell_* = \\sum_p \\mathbb E_{q(\\mathbf x_*) q(f_{*p})}[\\log\\mathcal N(y_{*p};
            f_{*p}, \\sigma^2)] + P\\,r_* - \\mathrm{KL}[q(\\mathbf x_*) \\| p(\\mathbf x_*)]

        (:math:`r_*` the relaxation's term, :cite:t:`bui2025tighter` §5), is maximised over
        :math:`\\boldsymbol\\mu_*, \\mathbf s_*` by L-BFGS-B (as Titsias & Lawrence 2010, §4.1,
        fit new points; the counterpart of GPy's ``infer_newX``). Rows are independent, so
        they are fitted together at :math:`O(N_*M^2)` per iteration. At a training row
        :math:`q(\\mathbf x_n)` is a stationary point of :math:`\\ell_n` wherever it is one of the
        model's bound. With ``relaxation="sampled"`` the objective uses one fixed set of
        ``num_samples`` draws per row (a sample-average approximation, deterministic for the
        optimiser).

        :param Y_new: held-out observations [N*, P].
        :param initial_mean: the starting :math:`\\boldsymbol\\mu_*` [N*, Q]; with
            ``initial_var``. By default each row starts at the :math:`q(\\mathbf x_n)` of the
            training row whose mean best explains it (highest predictive log density of the row
            plus prior log density).
        :param initial_var: the starting :math:`\\mathbf s_*` [N*, Q], positive.
        :param X_prior_mean: the mean of :math:`p(\\mathbf x_*)`, broadcast to [N*, Q]
            (default 0).
        :param X_prior_var: the variance of :math:`p(\\mathbf x_*)`, broadcast to [N*, Q]
            (default 1).
        :param maxiter: the most L-BFGS-B iterations; a ``RuntimeWarning`` says if scipy
            stopped without convergence.
        :param tol: passed to ``scipy.optimize.minimize`` (its default stops L-BFGS-B on a
            relative reduction of about 2e-9: latent means to about 1e-4).
        :return: the means and variances of :math:`q(\\mathbf x_*)`, each [N*, Q].
        """
        Y, prior_mean, prior_var = self._new_rows(Y_new, X_prior_mean, X_prior_var)
        with explain_cholesky_failure():
            fixed = self._fixed_q()
        shape = tuple(prior_mean.shape)
        if (initial_mean is None) != (initial_var is None):
            raise ValueError("Pass both `initial_mean` and `initial_var`, or neither.")
        if initial_mean is None:
            initial_mean, initial_var = self._initial_latent(fixed, Y, prior_mean, prior_var)
        start_mean = _as_float_matrix(initial_mean, "initial_mean", shape)
        start_var = _as_float_matrix(initial_var, "initial_var", shape)
        if np.any(start_var.numpy() <= 0):
            raise ValueError("`initial_var` must hold strictly positive variances.")
        mean = tf.Variable(start_mean, name="X_new_mean")
        var = Parameter(start_var, transform=positive(), name="X_new_var")
        noise = self._noise(shape[0])

        def loss() -> tf.Tensor:
            return -tf.reduce_sum(
                _row_bounds(self, fixed, Y, mean, var, prior_mean, prior_var, noise)
            )

        result = gpflow.optimizers.Scipy().minimize(
            loss, [mean, var.unconstrained_variable], options=dict(maxiter=maxiter), tol=tol
        )
        if not result.success:
            warnings.warn(
                f"infer_latent: L-BFGS-B stopped after {result.nit} iterations without "
                f"convergence ({result.message}); raise `maxiter` or start elsewhere "
                "(`initial_mean`, `initial_var`).",
                RuntimeWarning,
                stacklevel=2,
            )
        return tf.convert_to_tensor(mean), tf.convert_to_tensor(var)

    def predict_log_density_new(
        self,
        Y_new: Any,
        X_new_mean: Any = None,
        X_new_var: Any = None,
        *,
        X_prior_mean: Any = None,
        X_prior_var: Any = None,
        maxiter: int = 1000,
    ) -> tf.Tensor:
        """
        A lower bound on the held-out log density of each row of ``Y_new`` [N*] under the
        trained model, the latent point integrated out:

        .. math::
            \\ell_* \\le \\log \\int p(\\mathbf x_*) \\prod_p \\int
            \\mathcal N(y_{*p}; f_{*p}, \\sigma^2) q(f_{*p} \\mid \\mathbf x_*)\\,df_{*p}\\,
            d\\mathbf x_*,

        where :math:`q(f_{*p} \\mid \\mathbf x_*)` is the model's prediction at a latent point
        (:meth:`predict_log_density` at ``(x_*, y_*)`` is the log of the inner product), and
        :math:`\\ell_*` is the row's term of the model's bound (:meth:`infer_latent`), taken at
        ``(X_new_mean, X_new_var)`` when given, else at :math:`q(\\mathbf x_*)` from
        :meth:`infer_latent` (where it is tightest). The gap is
        :math:`\\mathrm{KL}[q(\\mathbf x_*) \\| p(\\mathbf x_* \\mid \\mathbf y_*)]` plus that of
        the relaxation. With ``relaxation="sampled"`` the value is an unbiased estimate from
        fresh draws.

        :param Y_new: held-out observations [N*, P].
        :param X_new_mean: the means of :math:`q(\\mathbf x_*)` [N*, Q], with ``X_new_var``;
            e.g. from :meth:`infer_latent`.
        :param X_new_var: the variances of :math:`q(\\mathbf x_*)` [N*, Q], positive.
        :param X_prior_mean: the mean of :math:`p(\\mathbf x_*)`, broadcast to [N*, Q]
            (default 0).
        :param X_prior_var: the variance of :math:`p(\\mathbf x_*)`, broadcast to [N*, Q]
            (default 1).
        :param maxiter: passed to :meth:`infer_latent` when ``X_new_mean`` is not given.
        """
        if (X_new_mean is None) != (X_new_var is None):
            raise ValueError(
                "Pass both `X_new_mean` and `X_new_var` (a q(x*), e.g. from infer_latent), or "
                "neither (then q(x*) is inferred)."
            )
        if X_new_mean is None:
            X_new_mean, X_new_var = self.infer_latent(
                Y_new, X_prior_mean=X_prior_mean, X_prior_var=X_prior_var, maxiter=maxiter
            )
        Y, prior_mean, prior_var = self._new_rows(Y_new, X_prior_mean, X_prior_var)
        static = prior_mean.shape
        shape: Any = tuple(static) if static.is_fully_defined() else tf.shape(prior_mean)
        mean = _as_float_matrix(X_new_mean, "X_new_mean", shape)
        var = _as_float_matrix(X_new_var, "X_new_var", shape)
        if tf.executing_eagerly() and np.any(var.numpy() <= 0):
            raise ValueError("`X_new_var` must hold strictly positive variances.")
        with explain_cholesky_failure():
            fixed = self._fixed_q()
            return _row_bounds(
                self, fixed, Y, mean, var, prior_mean, prior_var, self._noise(shape[0])
            )


class TightBayesianGPLVM(NaNLossOnCholeskyFailure, ConstructorOnly, _NewRows, BayesianGPLVM):
    """
    Bayesian GPLVM (:cite:t:`titsias2010bayesian`) with the tighter collapsed bound (TV-BGPLVM)
    of :cite:t:`bui2025tighter`, §5: the prior conditional :math:`p(\\mathbf f \\mid \\mathbf u,
    X)` is replaced by one with variances :math:`m_n d_n`, and Titsias & Lawrence's trace term
    :math:`-\\tfrac{P}{2\\sigma^2}\\sum_n \\langle d_n \\rangle_{q(\\mathbf x_n)}` becomes the
    relaxation's residual term (:mod:`gpflow_tight.relaxation`):

    - ``relaxation="analytic"`` (default; :class:`~gpflow_tight.relaxation.OptimalRelaxation`,
      also named ``"optimal"``): :math:`-\\tfrac P2 \\sum_n \\log(1 + \\langle d_n \\rangle /
      \\sigma^2)`, the optimum over an :math:`m_n` constant in :math:`\\mathbf x_n`, from per-point
      psi statistics; deterministic and never looser than ``BayesianGPLVM``;
    - ``relaxation="sampled"`` (:class:`~gpflow_tight.relaxation.SampledOptimalRelaxation`): the
      paper's :math:`m_n(\\mathbf x_n) = \\sigma^2 / (d_n(\\mathbf x_n) + \\sigma^2)`, giving
      :math:`-\\tfrac P2 \\sum_n \\langle \\log(1 + d_n(\\mathbf x_n) / \\sigma^2)
      \\rangle_{q(\\mathbf x_n)}`, at least as tight (Jensen), estimated without bias from
      ``num_samples`` reparameterised samples of each :math:`q(\\mathbf x_n)` per call;
    - ``relaxation="none"`` (:class:`~gpflow_tight.relaxation.NoRelaxation`): :math:`m_n = 1`,
      the standard bound of ``BayesianGPLVM``.

    ``relaxation`` may also be a relaxation object of one of these kinds. The optimal
    :math:`q(\\mathbf u)` is unchanged, so predictions at latent points are ``BayesianGPLVM``'s;
    :meth:`predict_log_density` scores held-out observations at given latent points (GPflow's
    ``BayesianGPLVM`` raises ``NotImplementedError``). Every kernel with psi statistics in
    ``gpflow.expectations`` (analytic or by quadrature) works. The projection is
    :func:`~gpflow_tight.projection.expected_projection`, whose centred form keeps float32 bounds
    as accurate as the float32 psi statistics allow.

    For held-out observations whose latent points are unknown, :meth:`infer_latent` fits their
    :math:`q(\\mathbf x_*)` with the model fixed and :meth:`predict_log_density_new` gives a lower
    bound on their log density (``docs/gplvm.md``). Predictions raise
    :class:`~gpflow_tight.CholeskyError` where a factorisation fails (GPflow's return NaN); a
    training loss is NaN there, as GPflow's. Below float64 with a jitter under 1e-3 the
    constructor warns: the bound is then unreliable (``docs/gplvm.md``, float32).

    The constructor is ``BayesianGPLVM``'s plus ``relaxation`` (fixed at construction) and
    ``num_samples`` (for ``"sampled"`` only). ``data`` must have at least one row.
    """

    _constructor_only = ("relaxation",)
    _relaxations = ("none", "optimal", "sampled")

    def __init__(
        self,
        data: Any,
        X_data_mean: Any,
        X_data_var: Any,
        kernel: Kernel,
        *args: Any,
        relaxation: str | Relaxation = "analytic",
        num_samples: int | None = None,
        **kwargs: Any,
    ) -> None:
        _check_latent(data, X_data_mean, X_data_var, kwargs.get("inducing_variable"))
        chosen = _gplvm_relaxation(relaxation, num_samples, self._relaxations, type(self).__name__)
        _warn_low_precision(type(self).__name__)
        super().__init__(data, X_data_mean, X_data_var, kernel, *args, **kwargs)
        self.relaxation = chosen

    @property
    def num_samples(self) -> int | None:
        """Samples of each :math:`q(\\mathbf x_n)` per evaluation (``"sampled"``; else None)."""
        return getattr(self.relaxation, "num_samples", None)

    def _latent_kl(self) -> tf.Tensor:
        """KL[q(X) ‖ p(X)] for diagonal Gaussians."""
        return _latent_kl(self.X_data_mean, self.X_data_var, self.X_prior_mean, self.X_prior_var)

    def _expected_projection(self) -> ExpectedProjection:
        """The projection of the latent inputs under :math:`q(X)`."""
        psi = _psi_statistics(
            self.kernel, self.inducing_variable, self.X_data_mean, self.X_data_var
        )
        L = inducing_cholesky(self.inducing_variable, self.kernel)
        return expected_projection(psi.psi0, psi.psi1, psi.psi2, L)

    def _sampled_residuals(self, L: tf.Tensor) -> tf.Tensor:
        """:math:`d_n(\\mathbf x_n)` at ``num_samples`` reparameterised samples of each
        :math:`q(\\mathbf x_n)` [S N]."""
        shape = tf.concat([[self.relaxation.num_samples], tf.shape(self.X_data_mean)], 0)
        noise = tf.random.normal(shape, dtype=default_float())
        samples = self.X_data_mean + tf.sqrt(self.X_data_var) * noise  # [S, N, Q]
        flat = tf.reshape(samples, [-1, tf.shape(samples)[-1]])
        return project(self.inducing_variable, self.kernel, flat, L).residual

    def _collapsed(self) -> _Collapsed:
        """
        The factors of the collapsed bound and of the optimal :math:`q(\\mathbf u)`
        (Titsias & Lawrence 2010): :math:`B = I + L^{-1}\\Psi_2L^{-\\top}/\\sigma^2`, read as
        :math:`I + AA^\\top + V/\\sigma^2` from the projection, kept positive definite below
        float64 (:func:`_positive_definite_b`), and its Cholesky factor (checked).
        """
        projection = self._expected_projection()
        sigma2 = self.likelihood.variance
        sigma = tf.sqrt(sigma2)
        A = projection.A / sigma
        AAT = tf.linalg.matmul(A, A, transpose_b=True) + projection.V / sigma2
        B = _positive_definite_b(AAT + tf.eye(tf.shape(A)[0], dtype=A.dtype))
        LB = checked_cholesky(B, "B = I + L⁻¹ Ψ2 L⁻ᵀ / σ²")
        c = tf.linalg.triangular_solve(LB, tf.linalg.matmul(A, self.data)) / sigma
        return _Collapsed(projection, LB, c)

    @check_shapes("return: []")
    def elbo(self) -> tf.Tensor:
        """
        The TV-BGPLVM bound (Bui et al. 2025, §5, with :math:`\\sigma^2`, not
        :math:`2\\sigma^2`, inside the bracket of its equation, as in their §3).
        """
        with explain_cholesky_failure():
            Y = self.data
            projection, LB, c = self._collapsed()
            sigma2 = self.likelihood.variance
            num_outputs = tf.cast(tf.shape(Y)[1], LB.dtype)
            data_term = (
                -0.5 * tf.cast(tf.size(Y), LB.dtype) * tf.math.log(2 * np.pi * sigma2)
                - num_outputs * tf.reduce_sum(tf.math.log(tf.linalg.diag_part(LB)))
                - 0.5 * tf.reduce_sum(tf.square(Y)) / sigma2
                + 0.5 * tf.reduce_sum(tf.square(c))
            )
            if isinstance(self.relaxation, SampledOptimalRelaxation):
                residual = self._sampled_residuals(projection.L)
            else:
                residual = projection.residual
            residual_term = self.relaxation.gaussian_residual_term(
                residual[:, None], tf.ones_like(residual)[:, None] * sigma2
            )
            return data_term + num_outputs * residual_term - self._latent_kl()

    @property
    def _num_outputs(self) -> int:
        return int(self.data.shape[1])

    def _fixed_q(self) -> _FixedQ:
        """
        The optimal :math:`q(\\mathbf v_p) = \\mathcal N(L_B^{-\\top}\\mathbf c_p, B^{-1})` of the
        whitened inducing outputs (the same :math:`B^{-1}` for every output).
        """
        projection, LB, c = self._collapsed()
        mean = tf.linalg.triangular_solve(LB, c, lower=True, adjoint=True)
        LB_inv = tf.linalg.triangular_solve(LB, tf.eye(tf.shape(LB)[0], dtype=LB.dtype))
        B_inv = tf.linalg.matmul(LB_inv, LB_inv, transpose_a=True)
        return _FixedQ(projection.L, mean, tf.cast(self._num_outputs, B_inv.dtype) * B_inv)

    @inherit_check_shapes
    def predict_f(
        self, Xnew: Any, full_cov: bool = False, full_output_cov: bool = False
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """
        :math:`q(\\mathbf f_*)` at latent points ``Xnew``, as ``BayesianGPLVM.predict_f`` (the
        optimal :math:`q(\\mathbf u)` does not depend on the relaxation), from the factors of the
        bound: a failed factorisation raises :class:`~gpflow_tight.CholeskyError` with advice
        (GPflow's returns NaN on CPU). The variances are :math:`d_* + \\|L_B^{-1}\\mathbf
        a_*\\|^2`, with :math:`d_*` clipped at zero (:func:`~gpflow_tight.projection.project`).
        """
        assert_params_false(self.predict_f, full_output_cov=full_output_cov)
        with explain_cholesky_failure():
            projection, LB, c = self._collapsed()
            new = project(self.inducing_variable, self.kernel, Xnew, projection.L)
            carried = tf.linalg.triangular_solve(LB, new.A)  # L_B⁻¹ a_* [M, N*]
            mean = tf.linalg.matmul(carried, c, transpose_a=True) + self.mean_function(Xnew)
            if full_cov:
                var = _residual_cov(new, self.kernel, Xnew) + tf.linalg.matmul(
                    carried, carried, transpose_a=True
                )
                return mean, tf.tile(var[None], [self._num_outputs, 1, 1])
            var = new.residual + tf.reduce_sum(tf.square(carried), axis=0)
            return mean, tf.tile(var[:, None], [1, self._num_outputs])

    @inherit_check_shapes
    def predict_log_density(
        self, data: RegressionData, full_cov: bool = False, full_output_cov: bool = False
    ) -> tf.Tensor:
        """
        :math:`\\log p(\\mathbf y_* \\mid \\mathbf x_*)` of held-out rows at given latent points
        (for rows whose latent points are unknown, see :meth:`predict_log_density_new`).
        """
        return GPModel.predict_log_density(self, data, full_cov, full_output_cov)


TVBGPLVM = TightBayesianGPLVM


class MinibatchBayesianGPLVM(
    NaNLossOnCholeskyFailure, ConstructorOnly, _NewRows, GPModel, ExternalDataTrainingLossMixin
):
    """
    An uncollapsed Bayesian GPLVM (:cite:t:`titsias2010bayesian`) that trains on minibatches of
    rows: an explicit :math:`q(\\mathbf u_p) = \\mathcal N(\\mathbf m_p, S_p)` per output column
    (``whiten`` as in SVGP), a Gaussian :math:`q(\\mathbf x_n)` per row, and the bound

    .. math::
        \\sum_{n,p} \\mathbb E_{q(\\mathbf x_n) q(f_{np})}[\\log \\mathcal N(y_{np}; f_{np},
        \\sigma^2)] - \\sum_p \\mathrm{KL}[q(\\mathbf u_p) \\| p(\\mathbf u_p)]
        - \\sum_n \\mathrm{KL}[q(\\mathbf x_n) \\| p(\\mathbf x_n)],

    in closed form from per-row psi statistics, with the data sums estimated from a minibatch
    (scaled by N/B): :math:`O(BM^2 + PM^3)` per step, independent of N (GPflow issue 1749).
    With ``tight=True`` (default; ``relaxation="optimal"``, alias ``"analytic"``) the conditional
    :math:`q(f_{np} \\mid \\mathbf u, \\mathbf x_n)` has the optimal constant variance
    :math:`m_n d_n` (:cite:t:`bui2025tighter`, §5), so the term :math:`-\\langle d_n \\rangle /
    2\\sigma^2` becomes :math:`-\\tfrac12\\log(1 + \\langle d_n \\rangle / \\sigma^2)`; at the
    optimal :math:`q(\\mathbf u)` the bound equals :class:`TightBayesianGPLVM`'s (``tight=False``,
    ``relaxation="none"``: ``BayesianGPLVM``'s). Pass ``tight`` or ``relaxation`` (also a
    relaxation object of those two kinds), not both.

    Data batches are ``(rows, Y_rows)``: the integer row indices [B, 1] (which select
    :math:`q(\\mathbf x_n)`) and the observations [B, P], e.g. from
    ``tf.data.Dataset.from_tensor_slices((np.arange(N)[:, None], Y))``; see
    :meth:`training_data`. Every batch a loss sees is checked (finite observations, row indices
    in range; graph assertions when compiled). :meth:`infer_latent` and
    :meth:`predict_log_density_new` handle held-out rows as for :class:`TightBayesianGPLVM`,
    with the model's own :math:`q(\\mathbf u)`.
    """

    _constructor_only = ("relaxation",)
    _relaxations = ("none", "optimal")

    def __init__(
        self,
        num_data: int,
        num_outputs: int,
        X_data_mean: Any,
        X_data_var: Any,
        kernel: Kernel,
        inducing_variable: Any,
        *,
        noise_variance: float = 1.0,
        X_prior_mean: Any = None,
        X_prior_var: Any = None,
        whiten: bool = True,
        tight: bool | None = None,
        relaxation: str | Relaxation | None = None,
        q_mu: Any = None,
        q_sqrt: Any = None,
    ) -> None:
        for name, size in (("num_data", num_data), ("num_outputs", num_outputs)):
            if isinstance(size, bool) or not isinstance(size, int | np.integer) or size < 1:
                raise ValueError(f"`{name}` must be a positive int, got {size!r}.")
        _check_latent(np.zeros((num_data, num_outputs)), X_data_mean, X_data_var, inducing_variable)
        if relaxation is None:
            relaxation = "none" if tight is not None and not tight else "optimal"
        elif tight is not None:
            raise ValueError(
                "Pass `tight` or `relaxation`, not both: tight=True is relaxation='optimal', "
                "tight=False is relaxation='none'."
            )
        chosen = _gplvm_relaxation(relaxation, None, self._relaxations, type(self).__name__)
        _warn_low_precision(type(self).__name__)
        super().__init__(kernel, gpflow.likelihoods.Gaussian(noise_variance), None, num_outputs)
        self.relaxation = chosen
        self.num_data = int(num_data)
        self.X_data_mean = Parameter(X_data_mean, dtype=default_float())
        self.X_data_var = Parameter(X_data_var, transform=positive(), dtype=default_float())
        shape = np.shape(X_data_mean)
        self.X_prior_mean = tf.constant(
            np.zeros(shape) if X_prior_mean is None else X_prior_mean, default_float()
        )
        self.X_prior_var = tf.constant(
            np.ones(shape) if X_prior_var is None else X_prior_var, default_float()
        )
        self.inducing_variable = gpflow.models.util.inducingpoint_wrapper(inducing_variable)
        num_inducing = self.inducing_variable.num_inducing
        self.whiten = bool(whiten)
        q_mu = np.zeros((num_inducing, num_outputs)) if q_mu is None else q_mu
        if q_sqrt is None:
            q_sqrt = np.tile(np.eye(num_inducing)[None], [num_outputs, 1, 1])
            if not whiten:
                Kmm = Kuu(self.inducing_variable, kernel, jitter=default_jitter()).numpy()
                q_sqrt = np.tile(np.linalg.cholesky(Kmm)[None], [num_outputs, 1, 1])
        self.q_mu = Parameter(q_mu, dtype=default_float())
        self.q_sqrt = Parameter(q_sqrt, transform=triangular(), dtype=default_float())

    @property
    def tight(self) -> bool:
        """Whether the conditional is the tighter one (``relaxation`` is not ``"none"``)."""
        return self.relaxation.kind != "none"

    @staticmethod
    def training_data(Y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(rows, Y)`` for :meth:`elbo` and ``gpflow_tight.training.minibatches``."""
        return np.arange(len(Y))[:, None], np.asarray(Y)

    def _whitened_q(self, L: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """
        :math:`q(\\mathbf v_p)` of :math:`\\mathbf v_p = L^{-1}\\mathbf u_p`: the means [M, P] and
        the factors [P, M, M] of the covariances (``q_mu`` and ``q_sqrt`` when ``whiten``).
        """
        if self.whiten:
            return self.q_mu, self.q_sqrt
        batch_L = tf.broadcast_to(L, tf.shape(self.q_sqrt))
        return (
            tf.linalg.triangular_solve(L, self.q_mu, lower=True),
            tf.linalg.triangular_solve(batch_L, self.q_sqrt, lower=True),
        )

    def prior_kl(self) -> tf.Tensor:
        """:math:`\\sum_p \\mathrm{KL}[q(\\mathbf u_p) \\| p(\\mathbf u_p)]`."""
        if self.whiten:
            return gauss_kl(self.q_mu, self.q_sqrt)
        K = Kuu(self.inducing_variable, self.kernel, jitter=default_jitter())
        return gauss_kl(self.q_mu, self.q_sqrt, K)

    def elbo(self, data: tuple[Any, Any]) -> tf.Tensor:
        """
        The bound, with the row sums estimated from the minibatch ``(rows, Y_rows)``. With
        :math:`\\mathbf a_n = L^{-1}\\boldsymbol\\psi_{1,n}^\\top`, :math:`V` and
        :math:`\\langle d_n\\rangle` from :func:`~gpflow_tight.projection.expected_projection`
        and :math:`q(\\mathbf v_p) = \\mathcal N(\\tilde{\\mathbf m}_p, \\tilde S_p)` for
        :math:`\\mathbf v_p = L^{-1}\\mathbf u_p`,

        .. math::
            \\sum_{n,p}\\mathbb E[(y_{np} - f_{np})^2] = \\sum_{n,p}(y_{np} - \\mathbf a_n^\\top
            \\tilde{\\mathbf m}_p)^2 + \\sum_p \\mathrm{tr}\\big((AA^\\top + V)\\tilde S_p\\big)
            + \\sum_p \\tilde{\\mathbf m}_p^\\top V \\tilde{\\mathbf m}_p + P\\sum_n\\langle d_n
            \\rangle,

        whose last term the relaxation replaces.
        """
        with explain_cholesky_failure():
            return self._elbo(*self._checked_batch(data))

    def _checked_batch(self, data: Any) -> tuple[tf.Tensor, tf.Tensor]:
        """
        The minibatch ``(rows, Y_rows)`` as row indices [B] and observations [B, P], checked
        (:func:`~gpflow_tight.validation.check_batch`): finite observations, one row index per
        row, indices in ``[0, num_data)``. Eagerly a ``ValueError``; inside ``tf.function`` graph
        assertions, without a round trip to the host.
        """
        if not isinstance(data, tuple | list) or len(data) != 2:
            raise TypeError(
                "`data` must be a tuple (rows [B, 1], Y_rows [B, P]); build it with "
                f"`model.training_data(Y)`, got {type(data).__name__}."
            )
        rows, Y = data
        rows = tf.convert_to_tensor(rows)
        if not rows.dtype.is_integer:
            raise TypeError(
                "`data` rows must be integer row indices (of q(x_n)), got dtype "
                f"{rows.dtype.name}; build the batch with `model.training_data(Y)`."
            )
        Y = tf.convert_to_tensor(Y, dtype_hint=default_float())
        if Y.dtype != default_float():
            Y = tf.cast(Y, default_float())
        if Y.shape.rank != 2 or (Y.shape[1] is not None and Y.shape[1] != self.num_latent_gps):
            raise ValueError(
                f"`data` Y_rows must have shape [B, {self.num_latent_gps}] (the model's "
                f"num_outputs), got {Y.shape}."
            )
        rows = tf.reshape(rows, [-1])
        check_batch(rows, Y)
        message = f"`data` rows must be row indices in [0, num_data = {self.num_data})"
        if tf.executing_eagerly():
            indices = rows.numpy()
            if indices.size and (indices.min() < 0 or indices.max() >= self.num_data):
                raise ValueError(f"{message}, got {indices.min()}..{indices.max()}.")
        else:  # before the gathers, which would fail first with TensorFlow's own message
            checks = [
                tf.debugging.assert_non_negative(rows, message=message),
                tf.debugging.assert_less(rows, tf.cast(self.num_data, rows.dtype), message=message),
            ]
            with tf.control_dependencies(checks):
                rows = tf.identity(rows)
        return rows, Y

    def _elbo(self, rows: tf.Tensor, Y: tf.Tensor) -> tf.Tensor:
        """The bound from checked row indices [B] and observations [B, P]."""
        mean, var = tf.gather(self.X_data_mean, rows), tf.gather(self.X_data_var, rows)
        psi = _psi_statistics(self.kernel, self.inducing_variable, mean, var)
        L = inducing_cholesky(self.inducing_variable, self.kernel)
        projection = expected_projection(psi.psi0, psi.psi1, psi.psi2, L)
        sigma2 = self.likelihood.variance
        q_mean, q_factor = self._whitened_q(L)
        f_mean = tf.linalg.matmul(projection.A, q_mean, transpose_a=True)  # [B, P]
        q_cov = tf.reduce_sum(tf.linalg.matmul(q_factor, q_factor, transpose_b=True), axis=0)
        AAT = tf.linalg.matmul(projection.A, projection.A, transpose_b=True)
        squares = (
            tf.reduce_sum(tf.square(Y - f_mean))
            + tf.reduce_sum((AAT + projection.V) * q_cov)
            + tf.reduce_sum(q_mean * tf.linalg.matmul(projection.V, q_mean))
        )
        residual = projection.residual  # ⟨d_n⟩ [B]
        residual_term = self.relaxation.gaussian_residual_term(
            residual[:, None], tf.ones_like(residual)[:, None] * sigma2
        )
        num_outputs = tf.cast(tf.shape(Y)[1], default_float())
        fit = (
            -0.5 * tf.cast(tf.size(Y), default_float()) * tf.math.log(2 * np.pi * sigma2)
            - 0.5 * squares / sigma2
            + num_outputs * residual_term
        )
        latent_kl = _latent_kl(
            mean, var, tf.gather(self.X_prior_mean, rows), tf.gather(self.X_prior_var, rows)
        )
        scale = tf.cast(self.num_data, default_float()) / tf.cast(tf.shape(Y)[0], default_float())
        return scale * (fit - latent_kl) - self.prior_kl()

    def maximum_log_likelihood_objective(self, data: Any) -> tf.Tensor:  # type: ignore[override]
        """The ELBO on ``data``; ``training_loss(data)`` is −(this + log prior density)."""
        return self.elbo(data)

    @property
    def _num_outputs(self) -> int:
        return int(self.num_latent_gps)

    def _fixed_q(self) -> _FixedQ:
        """The model's :math:`q(\\mathbf v_p)`, whitened (:meth:`_whitened_q`)."""
        L = inducing_cholesky(self.inducing_variable, self.kernel)
        mean, factor = self._whitened_q(L)
        cov_sum = tf.reduce_sum(tf.linalg.matmul(factor, factor, transpose_b=True), axis=0)
        return _FixedQ(L, mean, cov_sum)

    @inherit_check_shapes
    def predict_f(self, Xnew: Any, full_cov: bool = False, full_output_cov: bool = False) -> Any:
        """
        :math:`q(\\mathbf f_*)` at latent points ``Xnew``, as SVGP's (GPflow's conditional, with
        the shapes it returns for independent outputs); a failed factorisation of
        :math:`K_{uu}` raises :class:`~gpflow_tight.CholeskyError` with advice (GPflow's returns
        NaN on CPU). The marginal variances are :math:`d_* + \\|R_p^\\top\\mathbf a_*\\|^2`, with
        :math:`d_*` clipped at zero (:func:`~gpflow_tight.projection.project`).
        """
        with explain_cholesky_failure():
            L = inducing_cholesky(self.inducing_variable, self.kernel)
            new = project(self.inducing_variable, self.kernel, Xnew, L)
            q_mean, q_factor = self._whitened_q(L)
            mean = tf.linalg.matmul(new.A, q_mean, transpose_a=True) + self.mean_function(Xnew)
            carried = tf.linalg.matmul(q_factor, new.A[None], transpose_a=True)  # [P, M, N*]
            if full_cov:
                var = _residual_cov(new, self.kernel, Xnew)[None] + tf.linalg.matmul(
                    carried, carried, transpose_a=True
                )  # [P, N*, N*]
                if full_output_cov:
                    eye = tf.eye(self.num_latent_gps, dtype=var.dtype)
                    return mean, tf.einsum("pnm,pq->npmq", var, eye)
                return mean, var
            var = tf.transpose(new.residual[None] + tf.reduce_sum(tf.square(carried), axis=1))
            if full_output_cov:
                return mean, tf.linalg.diag(var)
            return mean, var
