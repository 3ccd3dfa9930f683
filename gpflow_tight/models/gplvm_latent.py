"""
The latent side shared by the Bayesian GPLVMs of :mod:`gpflow_tight.models.gplvm`: per-point psi
statistics, the KL of :math:`q(X)`, and the inference of :math:`q(\\mathbf x_*)` for held-out rows
with the model fixed (:class:`HeldOutRows`: ``infer_latent`` and ``predict_log_density_new``).
"""

import warnings
from typing import Any, NamedTuple

import gpflow
import numpy as np
import tensorflow as tf
from gpflow.base import Parameter
from gpflow.config import default_float
from gpflow.expectations import expectation
from gpflow.functions import Zero
from gpflow.kernels import Kernel
from gpflow.probability_distributions import DiagonalGaussian
from gpflow.utilities import positive

from ..projection import expected_projection, project
from ..relaxation import Relaxation, SampledOptimalRelaxation
from ..validation import explain_cholesky_failure

__all__ = [
    "FixedQ",
    "HeldOutRows",
    "PsiStatistics",
    "latent_kl",
    "latent_kl_rows",
    "psi_statistics",
    "row_bounds",
]


class PsiStatistics(NamedTuple):
    """Per-point psi statistics: ψ0 [N], Ψ1 [N, M], Ψ2 [N, M, M]."""

    psi0: tf.Tensor
    psi1: tf.Tensor
    psi2: tf.Tensor


def psi_statistics(
    kernel: Kernel, inducing_variable: Any, mean: tf.Tensor, var: tf.Tensor
) -> PsiStatistics:
    """``gpflow.expectations`` per point (analytic where GPflow has it, else quadrature)."""
    q_x = DiagonalGaussian(mean, var)
    return PsiStatistics(
        expectation(q_x, kernel),
        expectation(q_x, (kernel, inducing_variable)),
        expectation(q_x, (kernel, inducing_variable), (kernel, inducing_variable)),
    )


def latent_kl(
    mean: tf.Tensor, var: tf.Tensor, prior_mean: tf.Tensor, prior_var: tf.Tensor
) -> tf.Tensor:
    """:math:`\\sum_n \\mathrm{KL}[q(\\mathbf x_n) \\| p(\\mathbf x_n)]` for diagonal Gaussians."""
    return tf.reduce_sum(latent_kl_rows(mean, var, prior_mean, prior_var))


def latent_kl_rows(
    mean: tf.Tensor, var: tf.Tensor, prior_mean: tf.Tensor, prior_var: tf.Tensor
) -> tf.Tensor:
    """:math:`\\mathrm{KL}[q(\\mathbf x_n) \\| p(\\mathbf x_n)]` per row [N]."""
    ratio = var / prior_var
    return 0.5 * tf.reduce_sum(
        ratio - 1 - tf.math.log(ratio) + tf.square(mean - prior_mean) / prior_var, axis=-1
    )


class FixedQ(NamedTuple):
    """
    :math:`q(\\mathbf v_p) = \\mathcal N(\\tilde{\\mathbf m}_p, \\tilde S_p)` of the whitened
    inducing outputs :math:`\\mathbf v_p = L^{-1}\\mathbf u_p`, held fixed while new rows are
    fitted: ``L`` [M, M], ``mean`` [M, P] (the :math:`\\tilde{\\mathbf m}_p`), ``cov_sum``
    [M, M] :math:`= \\sum_p \\tilde S_p`.
    """

    L: tf.Tensor
    mean: tf.Tensor
    cov_sum: tf.Tensor


def row_bounds(
    model: Any,
    fixed: FixedQ,
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

    the summand of the uncollapsed bound (:class:`~gpflow_tight.MinibatchBayesianGPLVM`), with
    the expected squared errors of its :meth:`~gpflow_tight.MinibatchBayesianGPLVM.elbo` per row
    and the trace term
    :math:`-\\langle d_n \\rangle / 2\\sigma^2` replaced by the relaxation's term :math:`r_n`
    (:cite:t:`bui2025tighter`, §5; per element, the summand of
    :meth:`~gpflow_tight.relaxation.Relaxation.gaussian_residual_term`). With ``noise``
    [S, N, Q], :math:`r_n` is averaged over the samples ``mean + sqrt(var) * noise``
    (``relaxation="sampled"``). At Titsias's optimal :math:`q(\\mathbf u)` the sum over the
    training rows minus :math:`\\mathrm{KL}[q(\\mathbf u) \\| p(\\mathbf u)]` is the collapsed
    bound of :class:`~gpflow_tight.TightBayesianGPLVM`.
    """
    psi = psi_statistics(model.kernel, model.inducing_variable, mean, var)
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
        - latent_kl_rows(mean, var, prior_mean, prior_var)
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


class HeldOutRows:
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

    def _fixed_q(self) -> FixedQ:
        raise NotImplementedError

    def posterior(self, *args: Any, **kwargs: Any) -> Any:
        """
        Not available: GPflow's posterior objects condition on inputs that are known, and a
        GPLVM's are distributions :math:`q(\\mathbf x_n)` (GPflow's ``BayesianGPLVM`` has no
        ``posterior()`` either). Raises ``NotImplementedError`` saying what to use instead.
        """
        raise NotImplementedError(
            f"{type(self).__name__} has no posterior() (nor has GPflow's BayesianGPLVM): its "
            "inputs are distributions q(x_n), not points. Predict at latent points with "
            "`model.predict_f(X_latent)` / `predict_y` (e.g. at `model.X_data_mean`), fit the "
            "latent points of new observations with `model.infer_latent(Y_new)`, and score them "
            "with `model.predict_log_density_new(Y_new)`."
        )

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
        return self.relaxation.standard_normal(shape)

    def _initial_latent(
        self, fixed: FixedQ, Y: tf.Tensor, prior_mean: tf.Tensor, prior_var: tf.Tensor
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
        one for :class:`~gpflow_tight.TightBayesianGPLVM`; the same bound the model trains, tight
        or not)

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
                row_bounds(self, fixed, Y, mean, var, prior_mean, prior_var, noise)
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
            return row_bounds(
                self, fixed, Y, mean, var, prior_mean, prior_var, self._noise(shape[0])
            )
