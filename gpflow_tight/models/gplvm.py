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
from gpflow.kernels import Kernel
from gpflow.kullback_leiblers import gauss_kl
from gpflow.models import BayesianGPLVM, ExternalDataTrainingLossMixin, GPModel
from gpflow.utilities import assert_params_false, positive, triangular

from ..projection import (
    ExpectedProjection,
    Projection,
    expected_projection,
    inducing_cholesky,
    project,
)
from ..relaxation import Relaxation, SampledOptimalRelaxation, as_relaxation
from ..validation import (
    as_checked_batch,
    check_batch,
    check_count,
    check_inducing_variable,
    check_kernel,
    check_noise_variance,
    check_shape,
    checked_cholesky,
    checked_indices,
    checked_matrix,
    checked_test_data,
    checked_xnew,
    checks_arguments,
    explain_cholesky_failure,
    inducing_input_dim,
    is_checked_batch,
)
from .base import ConstructorOnly, InfiniteLossOnCholeskyFailure
from .gplvm_latent import FixedQ, HeldOutRows, latent_kl, psi_statistics

__all__ = ["TightBayesianGPLVM", "TVBGPLVM", "MinibatchBayesianGPLVM"]


def _checked_latent(
    data: Any, X_data_mean: Any, X_data_var: Any, kernel: Any, inducing_variable: Any = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """
    A GPLVM's observations ``data`` [N, P] and initial :math:`q(X)` (``X_data_mean``,
    ``X_data_var`` [N, Q]), checked and cast to GPflow's default float, its kernel's ARD
    parameters checked against Q, and its inducing variables checked (finite, Q columns) before
    GPflow wraps them.
    """
    Y = checked_matrix(data, "data", "P")
    mean = checked_matrix(X_data_mean, "X_data_mean", "Q")
    var = checked_matrix(X_data_var, "X_data_var", "Q")
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
    if np.any(var <= 0):
        raise ValueError("`X_data_var` must hold finite, strictly positive variances.")
    check_kernel(kernel, mean.shape[1], "kernel")
    if inducing_variable is not None:
        check_inducing_variable(inducing_variable)
        width = inducing_input_dim(inducing_variable)
        if width is not None and width != mean.shape[1]:
            raise ValueError(
                f"`X_data_mean` has {mean.shape[1]} columns (the latent dimension Q) but "
                f"`inducing_variable` has {width}; give the inducing inputs one column per "
                "latent dimension."
            )
    return Y, mean, var


def _checked_prior(
    X_prior_mean: Any, X_prior_var: Any, shape: tuple[int, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """The prior :math:`p(X)` of a GPLVM, [N, Q] like :math:`q(X)`: finite means (default 0) and
    finite, strictly positive variances (default 1), in GPflow's default float."""
    given = {"X_prior_mean": X_prior_mean, "X_prior_var": X_prior_var}
    for name, value in given.items():
        if value is not None and np.shape(value) != shape:
            raise ValueError(
                f"`{name}` must have the shape of `X_data_mean`, {shape} (as in GPflow's "
                f"BayesianGPLVM), got {np.shape(value)}; for one value v at every point pass "
                f"`np.full({shape}, v)`."
            )
    mean = np.zeros(shape) if X_prior_mean is None else checked_matrix(X_prior_mean, "X_prior_mean")
    var = np.ones(shape) if X_prior_var is None else checked_matrix(X_prior_var, "X_prior_var")
    if np.any(var <= 0):
        raise ValueError("`X_prior_var` must hold finite, strictly positive variances.")
    dtype = default_float()
    return mean.astype(dtype), var.astype(dtype)


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


@checks_arguments(checked_test_data, "data", "predict_log_density")
@checks_arguments(checked_xnew, "Xnew", "predict_f", "predict_y", "predict_f_samples")
class TightBayesianGPLVM(
    InfiniteLossOnCholeskyFailure, ConstructorOnly, HeldOutRows, BayesianGPLVM
):
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
      ``num_samples`` reparameterised samples of each :math:`q(\\mathbf x_n)` per call
      (``relaxation=SampledOptimalRelaxation(num_samples, seed=s)`` keeps the same draws at
      every call instead: a deterministic sample average that L-BFGS can train);
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
    training loss is ``+inf`` there (GPflow's is NaN, from which scipy cannot back off). Below
    float64 with a jitter under 1e-3 the constructor warns: the bound is then unreliable
    (``docs/gplvm.md``, float32).

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
        num_inducing_variables: int | None = None,
        inducing_variable: Any = None,
        X_prior_mean: Any = None,
        X_prior_var: Any = None,
        *,
        relaxation: str | Relaxation = "analytic",
        num_samples: int | None = None,
    ) -> None:
        data, X_data_mean, X_data_var = _checked_latent(
            data, X_data_mean, X_data_var, kernel, inducing_variable
        )
        X_prior_mean, X_prior_var = _checked_prior(X_prior_mean, X_prior_var, X_data_mean.shape)
        chosen = _gplvm_relaxation(relaxation, num_samples, self._relaxations, type(self).__name__)
        _warn_low_precision(type(self).__name__)
        super().__init__(
            data,
            X_data_mean,
            X_data_var,
            kernel,
            num_inducing_variables,
            inducing_variable,
            X_prior_mean,
            X_prior_var,
        )
        self.relaxation = chosen

    @property
    def num_samples(self) -> int | None:
        """Samples of each :math:`q(\\mathbf x_n)` per evaluation (``"sampled"``; else None)."""
        return getattr(self.relaxation, "num_samples", None)

    def _latent_kl(self) -> tf.Tensor:
        """KL[q(X) ‖ p(X)] for diagonal Gaussians."""
        return latent_kl(self.X_data_mean, self.X_data_var, self.X_prior_mean, self.X_prior_var)

    def _expected_projection(self) -> ExpectedProjection:
        """The projection of the latent inputs under :math:`q(X)`."""
        psi = psi_statistics(self.kernel, self.inducing_variable, self.X_data_mean, self.X_data_var)
        L = inducing_cholesky(self.inducing_variable, self.kernel)
        return expected_projection(psi.psi0, psi.psi1, psi.psi2, L)

    def _sampled_residuals(self, L: tf.Tensor) -> tf.Tensor:
        """:math:`d_n(\\mathbf x_n)` at ``num_samples`` reparameterised samples of each
        :math:`q(\\mathbf x_n)` [S N]."""
        shape = tf.concat([[self.relaxation.num_samples], tf.shape(self.X_data_mean)], 0)
        noise = self.relaxation.standard_normal(shape)
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

    def _fixed_q(self) -> FixedQ:
        """
        The optimal :math:`q(\\mathbf v_p) = \\mathcal N(L_B^{-\\top}\\mathbf c_p, B^{-1})` of the
        whitened inducing outputs (the same :math:`B^{-1}` for every output).
        """
        projection, LB, c = self._collapsed()
        mean = tf.linalg.triangular_solve(LB, c, lower=True, adjoint=True)
        LB_inv = tf.linalg.triangular_solve(LB, tf.eye(tf.shape(LB)[0], dtype=LB.dtype))
        B_inv = tf.linalg.matmul(LB_inv, LB_inv, transpose_a=True)
        return FixedQ(projection.L, mean, tf.cast(self._num_outputs, B_inv.dtype) * B_inv)

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


def _checked_rows(model: "MinibatchBayesianGPLVM", data: Any) -> tuple[Any, ...]:
    """
    A minibatch ``(rows, Y_rows)`` of a loss: row indices [B, 1] of :math:`q(\\mathbf x_n)`
    and observations [B, P], checked (:func:`~gpflow_tight.validation.check_batch`): finite
    observations, one row index per row, indices in ``[0, num_data)``. Eagerly a
    ``ValueError``/``TypeError``; inside ``tf.function`` graph assertions, without a round trip
    to the host. Checked once (``training_loss`` passes it on to :meth:`elbo` unchanged).
    """
    if is_checked_batch(data):
        return tuple(data)
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
    if Y.shape.rank != 2 or (Y.shape[1] is not None and Y.shape[1] != model.num_latent_gps):
        raise ValueError(
            f"`data` Y_rows must be a 2-D array [B, {model.num_latent_gps}] (the model's "
            f"num_outputs), got shape {tuple(Y.shape)}; reshape a vector `y` with `y[:, None]`."
        )
    rows = tf.reshape(rows, [-1, 1])
    check_batch(rows, Y)
    rows = checked_indices(rows, model.num_data, "data rows", size_name="num_data")
    return as_checked_batch(rows, Y)


@checks_arguments(checked_xnew, "Xnew", "predict_f", "predict_y", "predict_f_samples")
@checks_arguments(
    _checked_rows, "data", "training_loss", "maximum_log_likelihood_objective", "elbo"
)
class MinibatchBayesianGPLVM(
    InfiniteLossOnCholeskyFailure,
    ConstructorOnly,
    HeldOutRows,
    GPModel,
    ExternalDataTrainingLossMixin,
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

    _constructor_only = ("relaxation", "num_data", "whiten")
    _constructor_only_advice = {
        "num_data": "(it is the number of rows of q(X), read when a loss is compiled): build a "
        "new model with `num_data=...` and `X_data_mean`/`X_data_var` of that many rows.",
        "whiten": "(read when a loss is compiled): build a new model with `whiten=...` and copy "
        "the kernel, likelihood and q(X) parameters into it, not `q_mu`/`q_sqrt` (the other "
        "parameterisation of q(u): their values would mean another q(u)).",
    }
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
        check_count(num_data, "num_data")
        check_count(num_outputs, "num_outputs")
        _, X_data_mean, X_data_var = _checked_latent(
            np.zeros((num_data, num_outputs), default_float()),
            X_data_mean,
            X_data_var,
            kernel,
            inducing_variable,
        )
        X_prior_mean, X_prior_var = _checked_prior(X_prior_mean, X_prior_var, X_data_mean.shape)
        check_noise_variance(noise_variance)
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
        self.X_prior_mean = tf.constant(X_prior_mean, default_float())
        self.X_prior_var = tf.constant(X_prior_var, default_float())
        self.inducing_variable = gpflow.models.util.inducingpoint_wrapper(inducing_variable)
        num_inducing = self.inducing_variable.num_inducing
        self.whiten = bool(whiten)
        q_mu = np.zeros((num_inducing, num_outputs)) if q_mu is None else q_mu
        if q_sqrt is None:
            q_sqrt = np.tile(np.eye(num_inducing)[None], [num_outputs, 1, 1])
            if not whiten:
                Kmm = Kuu(self.inducing_variable, kernel, jitter=default_jitter()).numpy()
                q_sqrt = np.tile(np.linalg.cholesky(Kmm)[None], [num_outputs, 1, 1])
        check_shape(q_mu, (num_inducing, num_outputs), "q_mu", "[M, P]")
        check_shape(q_sqrt, (num_outputs, num_inducing, num_inducing), "q_sqrt", "[P, M, M]")
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
        rows, Y = _checked_rows(self, data)
        with explain_cholesky_failure():
            return self._elbo(tf.reshape(rows, [-1]), Y)

    def _elbo(self, rows: tf.Tensor, Y: tf.Tensor) -> tf.Tensor:
        """The bound from checked row indices [B] and observations [B, P]."""
        mean, var = tf.gather(self.X_data_mean, rows), tf.gather(self.X_data_var, rows)
        psi = psi_statistics(self.kernel, self.inducing_variable, mean, var)
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
        kl_rows = latent_kl(
            mean, var, tf.gather(self.X_prior_mean, rows), tf.gather(self.X_prior_var, rows)
        )
        scale = tf.cast(self.num_data, default_float()) / tf.cast(tf.shape(Y)[0], default_float())
        return scale * (fit - kl_rows) - self.prior_kl()

    def maximum_log_likelihood_objective(self, data: Any) -> tf.Tensor:  # type: ignore[override]
        """The ELBO on ``data``; ``training_loss(data)`` is −(this + log prior density)."""
        return self.elbo(data)

    @property
    def _num_outputs(self) -> int:
        return int(self.num_latent_gps)

    def _fixed_q(self) -> FixedQ:
        """The model's :math:`q(\\mathbf v_p)`, whitened (:meth:`_whitened_q`)."""
        L = inducing_cholesky(self.inducing_variable, self.kernel)
        mean, factor = self._whitened_q(L)
        cov_sum = tf.reduce_sum(tf.linalg.matmul(factor, factor, transpose_b=True), axis=0)
        return FixedQ(L, mean, cov_sum)

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
