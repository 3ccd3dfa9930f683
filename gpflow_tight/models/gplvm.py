"""
The tighter Bayesian GPLVM (TV-BGPLVM) of Bui, Ashman & Turner, *Tighter sparse variational
Gaussian processes* (2025), §5, as a drop-in for ``gpflow.models.BayesianGPLVM`` (Titsias &
Lawrence 2010), and an uncollapsed Bayesian GPLVM that trains on minibatches of rows.
"""

from typing import Any, NamedTuple

import gpflow
import numpy as np
import tensorflow as tf
from check_shapes import check_shapes, inherit_check_shapes
from gpflow.base import Parameter, RegressionData
from gpflow.config import default_float, default_jitter
from gpflow.covariances import Kuu
from gpflow.expectations import expectation
from gpflow.kernels import Kernel
from gpflow.kullback_leiblers import gauss_kl
from gpflow.models import BayesianGPLVM, ExternalDataTrainingLossMixin, GPModel
from gpflow.probability_distributions import DiagonalGaussian
from gpflow.utilities import positive, triangular

from ..projection import ExpectedProjection, expected_projection, inducing_cholesky, project
from ..relaxation import Relaxation, SampledOptimalRelaxation, as_relaxation
from ..validation import checked_cholesky, explain_cholesky_failure
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
    ratio = var / prior_var
    return 0.5 * tf.reduce_sum(
        ratio - 1 - tf.math.log(ratio) + tf.square(mean - prior_mean) / prior_var
    )


class TightBayesianGPLVM(NaNLossOnCholeskyFailure, ConstructorOnly, BayesianGPLVM):
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

    The constructor is ``BayesianGPLVM``'s plus ``relaxation`` (fixed at construction) and
    ``num_samples`` (for ``"sampled"`` only).
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

    @check_shapes("return: []")
    def elbo(self) -> tf.Tensor:
        """
        The TV-BGPLVM bound (Bui et al. 2025, §5, with :math:`\\sigma^2`, not
        :math:`2\\sigma^2`, inside the bracket of its equation, as in their §3).
        """
        with explain_cholesky_failure():
            Y = self.data
            projection = self._expected_projection()
            sigma2 = self.likelihood.variance
            sigma = tf.sqrt(sigma2)
            A = projection.A / sigma
            AAT = tf.linalg.matmul(A, A, transpose_b=True) + projection.V / sigma2
            B = AAT + tf.eye(tf.shape(A)[0], dtype=A.dtype)
            LB = checked_cholesky(B, "B = I + L⁻¹ Ψ2 L⁻ᵀ / σ²")
            c = tf.linalg.triangular_solve(LB, tf.linalg.matmul(A, Y)) / sigma
            num_outputs = tf.cast(tf.shape(Y)[1], A.dtype)
            data_term = (
                -0.5 * tf.cast(tf.size(Y), A.dtype) * tf.math.log(2 * np.pi * sigma2)
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

    @inherit_check_shapes
    def predict_log_density(
        self, data: RegressionData, full_cov: bool = False, full_output_cov: bool = False
    ) -> tf.Tensor:
        """:math:`\\log p(\\mathbf y_* \\mid \\mathbf x_*)` of held-out rows at latent points."""
        return GPModel.predict_log_density(self, data, full_cov, full_output_cov)


TVBGPLVM = TightBayesianGPLVM


class MinibatchBayesianGPLVM(
    NaNLossOnCholeskyFailure, ConstructorOnly, GPModel, ExternalDataTrainingLossMixin
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
    :meth:`training_data`.
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
        _check_latent(np.zeros((num_data, num_outputs)), X_data_mean, X_data_var, inducing_variable)
        if relaxation is None:
            relaxation = "none" if tight is not None and not tight else "optimal"
        elif tight is not None:
            raise ValueError(
                "Pass `tight` or `relaxation`, not both: tight=True is relaxation='optimal', "
                "tight=False is relaxation='none'."
            )
        chosen = _gplvm_relaxation(relaxation, None, self._relaxations, type(self).__name__)
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
        rows, Y = data
        rows = tf.reshape(rows, [-1])
        Y = tf.convert_to_tensor(Y, default_float())
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

    @inherit_check_shapes
    def predict_f(self, Xnew: Any, full_cov: bool = False, full_output_cov: bool = False) -> Any:
        """:math:`q(\\mathbf f_*)` at latent points ``Xnew`` (as SVGP)."""
        with explain_cholesky_failure():
            mean, var = gpflow.conditionals.conditional(
                Xnew,
                self.inducing_variable,
                self.kernel,
                self.q_mu,
                q_sqrt=self.q_sqrt,
                full_cov=full_cov,
                white=self.whiten,
                full_output_cov=full_output_cov,
            )
        return mean, var
