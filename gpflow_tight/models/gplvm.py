"""
The tighter Bayesian GPLVM (TV-BGPLVM) of Bui, Ashman & Turner, *Tighter sparse variational
Gaussian processes* (2025), §5, as a drop-in for ``gpflow.models.BayesianGPLVM``, and an
uncollapsed Bayesian GPLVM that trains on minibatches of rows.
"""

from typing import Any, NamedTuple

import gpflow
import numpy as np
import tensorflow as tf
from check_shapes import check_shapes, inherit_check_shapes
from gpflow.base import Parameter, RegressionData
from gpflow.config import default_float, default_jitter
from gpflow.covariances import Kuf, Kuu
from gpflow.expectations import expectation
from gpflow.kernels import Kernel
from gpflow.kullback_leiblers import gauss_kl
from gpflow.models import BayesianGPLVM, ExternalDataTrainingLossMixin, GPModel
from gpflow.probability_distributions import DiagonalGaussian
from gpflow.utilities import positive, triangular

from ..tighter import log_residual_term
from ..validation import KUU, checked_cholesky, explain_cholesky_failure
from .base import ExplainsCholeskyFailures

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


@tf.custom_gradient
def _sum_and_contract(flat_psi2: tf.Tensor, weights: tf.Tensor) -> Any:
    """
    :math:`\\sum_n \\mathrm{vec}(\\Psi_{2,n})` [M²] and :math:`\\mathrm{vec}(\\Psi_{2,n})^\\top
    \\mathbf w` [N] for the rows ``flat_psi2`` [N, M²]. The gradient with respect to
    ``flat_psi2`` is the rank-2 matrix :math:`\\mathbf 1 \\bar{\\mathbf s}^\\top + \\bar{\\mathbf r}
    \\mathbf w^\\top`, formed by one matrix product instead of two [N, M²] tensors and their
    sum: the tight bound then costs one extra pass over the per-point :math:`\\Psi_2` forward
    and one backward.
    """
    total = tf.reduce_sum(flat_psi2, axis=0)
    contracted = tf.linalg.matvec(flat_psi2, weights)

    def gradient(d_total: tf.Tensor | None, d_contracted: tf.Tensor | None) -> Any:
        d_total = tf.zeros_like(total) if d_total is None else d_total
        d_contracted = tf.zeros_like(contracted) if d_contracted is None else d_contracted
        left = tf.stack([tf.ones_like(d_contracted), d_contracted], axis=1)  # [N, 2]
        right = tf.stack([d_total, weights], axis=0)  # [2, M²]
        d_weights = tf.linalg.matvec(flat_psi2, d_contracted, transpose_a=True)
        return tf.linalg.matmul(left, right), d_weights

    return (total, contracted), gradient


@check_shapes(
    "L: [M, M]",
    "return[0]: [M, M]",
    "return[1]: [N]",
)
def _psi2_sum_and_expected_residual(
    psi: _PsiStatistics, L: tf.Tensor
) -> tuple[tf.Tensor, tf.Tensor]:
    """
    :math:`\\sum_n \\Psi_{2,n}` and :math:`\\langle d_n \\rangle = \\psi_{0,n} -
    \\mathrm{tr}(K_{uu}^{-1}\\Psi_{2,n})` [N] (:math:`K_{uu}^{-1}` is symmetric, so the trace is a
    dot product of the flattened matrices).
    """
    flat_psi2, flat_Kuu_inv = _flattened(psi, L)
    total, contracted = _sum_and_contract(flat_psi2, flat_Kuu_inv)
    num_inducing = tf.shape(L)[0]
    return tf.reshape(total, [num_inducing, num_inducing]), psi.psi0 - contracted


def _expected_residual(psi: _PsiStatistics, L: tf.Tensor) -> tf.Tensor:
    """:math:`\\langle d_n \\rangle` alone, for minibatches (no sum over the rows is needed)."""
    flat_psi2, flat_Kuu_inv = _flattened(psi, L)
    return psi.psi0 - tf.linalg.matvec(flat_psi2, flat_Kuu_inv)


def _flattened(psi: _PsiStatistics, L: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Per-point :math:`\\Psi_{2,n}` as rows [N, M²], :math:`K_{uu}^{-1}` as a vector [M²]."""
    num_inducing = tf.shape(L)[0]
    Kuu_inv = tf.linalg.cholesky_solve(L, tf.eye(num_inducing, dtype=L.dtype))
    flat_psi2 = tf.reshape(psi.psi2, [-1, num_inducing * num_inducing])
    return flat_psi2, tf.reshape(Kuu_inv, [-1])


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


class TightBayesianGPLVM(ExplainsCholeskyFailures, BayesianGPLVM):
    """
    Bayesian GPLVM with the tighter collapsed bound (TV-BGPLVM) of :cite:t:`bui2025tighter`,
    §5: the prior conditional :math:`p(\\mathbf f \\mid \\mathbf u, X)` is replaced by one with
    variances :math:`m_n d_n`, and Titsias & Lawrence's trace term
    :math:`-\\tfrac{P}{2\\sigma^2}\\sum_n \\langle d_n \\rangle_{q(\\mathbf x_n)}` becomes

    - ``relaxation="analytic"`` (default): :math:`-\\tfrac P2 \\sum_n \\log(1 + \\langle d_n
      \\rangle / \\sigma^2)`, the optimum over an :math:`m_n` constant in :math:`\\mathbf x_n`,
      from per-point psi statistics; deterministic and never looser than ``BayesianGPLVM``;
    - ``relaxation="sampled"``: the paper's :math:`m_n(\\mathbf x_n) = \\sigma^2 / (d_n(\\mathbf
      x_n) + \\sigma^2)`, giving :math:`-\\tfrac P2 \\sum_n \\langle \\log(1 + d_n(\\mathbf x_n) /
      \\sigma^2) \\rangle_{q(\\mathbf x_n)}`, at least as tight (Jensen), estimated without bias
      from ``num_samples`` reparameterised samples of each :math:`q(\\mathbf x_n)` per call;
    - ``relaxation="none"``: :math:`m_n = 1`, the standard bound of ``BayesianGPLVM``.

    The optimal :math:`q(\\mathbf u)` is unchanged, so predictions at latent points are
    ``BayesianGPLVM``'s; :meth:`predict_log_density` scores held-out observations at given latent
    points (GPflow's ``BayesianGPLVM`` raises ``NotImplementedError``). Every kernel with psi
    statistics in ``gpflow.expectations`` (analytic or by quadrature) works.

    The constructor is ``BayesianGPLVM``'s plus ``relaxation`` and ``num_samples``.
    """

    def __init__(
        self,
        data: Any,
        X_data_mean: Any,
        X_data_var: Any,
        kernel: Kernel,
        *args: Any,
        relaxation: str = "analytic",
        num_samples: int = 10,
        **kwargs: Any,
    ) -> None:
        _check_latent(data, X_data_mean, X_data_var, kwargs.get("inducing_variable"))
        if relaxation not in ("analytic", "sampled", "none"):
            raise ValueError(
                f"`relaxation` must be 'analytic', 'sampled' or 'none', got {relaxation!r}."
            )
        if num_samples < 1:
            raise ValueError(f"`num_samples` must be at least 1, got {num_samples}.")
        super().__init__(data, X_data_mean, X_data_var, kernel, *args, **kwargs)
        self.relaxation = relaxation
        self.num_samples = int(num_samples)

    def _latent_kl(self) -> tf.Tensor:
        """KL[q(X) ‖ p(X)] for diagonal Gaussians."""
        mean, var = self.X_data_mean, self.X_data_var
        ratio = var / self.X_prior_var
        return 0.5 * tf.reduce_sum(
            ratio - 1 - tf.math.log(ratio) + tf.square(mean - self.X_prior_mean) / self.X_prior_var
        )

    def _sampled_residual_term(self, L: tf.Tensor, sigma2: tf.Tensor) -> tf.Tensor:
        """
        Unbiased Monte Carlo estimate of
        :math:`-\\tfrac12\\sum_n\\langle\\log(1 + d_n(\\mathbf x_n)/\\sigma^2)\\rangle`.
        """
        shape = tf.concat([[self.num_samples], tf.shape(self.X_data_mean)], 0)
        noise = tf.random.normal(shape, dtype=default_float())
        samples = self.X_data_mean + tf.sqrt(self.X_data_var) * noise  # [S, N, Q]
        flat = tf.reshape(samples, [-1, tf.shape(samples)[-1]])
        A = tf.linalg.triangular_solve(L, Kuf(self.inducing_variable, self.kernel, flat))
        residual = self.kernel(flat, full_cov=False) - tf.reduce_sum(tf.square(A), 0)
        return log_residual_term(residual / sigma2) / self.num_samples

    @check_shapes("return: []")
    def elbo(self) -> tf.Tensor:
        """The TV-BGPLVM bound (paper §5 with the erratum of spec/tight.md §6)."""
        with explain_cholesky_failure():
            Y = self.data
            psi = _psi_statistics(
                self.kernel, self.inducing_variable, self.X_data_mean, self.X_data_var
            )
            L = checked_cholesky(
                Kuu(self.inducing_variable, self.kernel, jitter=default_jitter()), KUU
            )
            sigma2 = self.likelihood.variance
            num_inducing = tf.shape(L)[0]
            A = tf.linalg.triangular_solve(L, tf.linalg.adjoint(psi.psi1)) / tf.sqrt(sigma2)
            if self.relaxation == "sampled":
                psi2 = tf.reduce_sum(psi.psi2, axis=0)
            else:
                psi2, residual = _psi2_sum_and_expected_residual(psi, L)
            AAT = tf.linalg.triangular_solve(
                L, tf.linalg.adjoint(tf.linalg.triangular_solve(L, psi2))
            )
            B = tf.eye(num_inducing, dtype=default_float()) + AAT / sigma2
            LB = checked_cholesky(B, "B = I + L⁻¹ Ψ2 L⁻ᵀ / σ²")
            c = tf.linalg.triangular_solve(LB, tf.linalg.matmul(A, Y)) / tf.sqrt(sigma2)
            num_outputs = tf.cast(tf.shape(Y)[1], default_float())
            data_term = (
                -0.5 * tf.cast(tf.size(Y), default_float()) * tf.math.log(2 * np.pi * sigma2)
                - num_outputs * tf.reduce_sum(tf.math.log(tf.linalg.diag_part(LB)))
                - 0.5 * tf.reduce_sum(tf.square(Y)) / sigma2
                + 0.5 * tf.reduce_sum(tf.square(c))
            )
            if self.relaxation == "analytic":
                relaxation_term = log_residual_term(residual / sigma2)
            elif self.relaxation == "none":
                relaxation_term = -0.5 * tf.reduce_sum(residual) / sigma2
            else:
                relaxation_term = self._sampled_residual_term(L, sigma2)
            return data_term + num_outputs * relaxation_term - self._latent_kl()

    @inherit_check_shapes
    def predict_log_density(
        self, data: RegressionData, full_cov: bool = False, full_output_cov: bool = False
    ) -> tf.Tensor:
        """:math:`\\log p(\\mathbf y_* \\mid \\mathbf x_*)` of held-out rows at latent points."""
        return GPModel.predict_log_density(self, data, full_cov, full_output_cov)


TVBGPLVM = TightBayesianGPLVM


class MinibatchBayesianGPLVM(ExplainsCholeskyFailures, GPModel, ExternalDataTrainingLossMixin):
    """
    An uncollapsed Bayesian GPLVM that trains on minibatches of rows: an explicit
    :math:`q(\\mathbf u_p) = \\mathcal N(\\mathbf m_p, S_p)` per output column (``whiten`` as in
    SVGP), a Gaussian :math:`q(\\mathbf x_n)` per row, and the bound

    .. math::
        \\sum_{n,p} \\mathbb E_{q(\\mathbf x_n) q(f_{np})}[\\log \\mathcal N(y_{np}; f_{np},
        \\sigma^2)] - \\sum_p \\mathrm{KL}[q(\\mathbf u_p) \\| p(\\mathbf u_p)]
        - \\sum_n \\mathrm{KL}[q(\\mathbf x_n) \\| p(\\mathbf x_n)],

    in closed form from per-row psi statistics, with the data sums estimated from a minibatch
    (scaled by N/B): :math:`O(BM^2 + M^3)` per step, independent of N (GPflow issue 1749). With
    ``tight=True`` (default) the conditional :math:`q(f_{np} \\mid \\mathbf u, \\mathbf x_n)` has
    the optimal constant variance :math:`m_n d_n` (Bui et al. 2025, §5), so the term
    :math:`-\\langle d_n \\rangle / 2\\sigma^2` becomes :math:`-\\tfrac12\\log(1 + \\langle d_n
    \\rangle / \\sigma^2)`; at the optimal :math:`q(\\mathbf u)` the bound equals
    :class:`TightBayesianGPLVM`'s (``tight=False``: ``BayesianGPLVM``'s).

    Data batches are ``(rows, Y_rows)``: the integer row indices [B, 1] (which select
    :math:`q(\\mathbf x_n)`) and the observations [B, P], e.g. from
    ``tf.data.Dataset.from_tensor_slices((np.arange(N)[:, None], Y))``; see
    :meth:`training_data`.
    """

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
        tight: bool = True,
        q_mu: Any = None,
        q_sqrt: Any = None,
    ) -> None:
        _check_latent(np.zeros((num_data, num_outputs)), X_data_mean, X_data_var, inducing_variable)
        super().__init__(kernel, gpflow.likelihoods.Gaussian(noise_variance), None, num_outputs)
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
        self.tight = bool(tight)
        q_mu = np.zeros((num_inducing, num_outputs)) if q_mu is None else q_mu
        if q_sqrt is None:
            q_sqrt = np.tile(np.eye(num_inducing)[None], [num_outputs, 1, 1])
            if not whiten:
                Kmm = Kuu(self.inducing_variable, kernel, jitter=default_jitter()).numpy()
                q_sqrt = np.tile(np.linalg.cholesky(Kmm)[None], [num_outputs, 1, 1])
        self.q_mu = Parameter(q_mu, dtype=default_float())
        self.q_sqrt = Parameter(q_sqrt, transform=triangular(), dtype=default_float())

    @staticmethod
    def training_data(Y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(rows, Y)`` for :meth:`elbo` and ``gpflow_tight.training.minibatches``."""
        return np.arange(len(Y))[:, None], np.asarray(Y)

    def _projected_q(self, L: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """:math:`K_{uu}^{-1}\\mathbf m` [M, P] and the factor R [P, M, M] of
        :math:`K_{uu}^{-1} S K_{uu}^{-1} = R R^T`."""
        batch_L = tf.tile(L[None], [tf.shape(self.q_sqrt)[0], 1, 1])
        if self.whiten:
            Lt = tf.linalg.adjoint(L)
            mean = tf.linalg.triangular_solve(Lt, self.q_mu, lower=False)
            factor = tf.linalg.triangular_solve(
                tf.linalg.adjoint(batch_L), self.q_sqrt, lower=False
            )
        else:
            mean = tf.linalg.cholesky_solve(L, self.q_mu)
            factor = tf.linalg.cholesky_solve(batch_L, self.q_sqrt)
        return mean, factor

    def prior_kl(self) -> tf.Tensor:
        """:math:`\\sum_p \\mathrm{KL}[q(\\mathbf u_p) \\| p(\\mathbf u_p)]`."""
        if self.whiten:
            return gauss_kl(self.q_mu, self.q_sqrt)
        K = Kuu(self.inducing_variable, self.kernel, jitter=default_jitter())
        return gauss_kl(self.q_mu, self.q_sqrt, K)

    def elbo(self, data: tuple[Any, Any]) -> tf.Tensor:
        """The bound, with the row sums estimated from the minibatch ``(rows, Y_rows)``."""
        rows, Y = data
        rows = tf.reshape(rows, [-1])
        Y = tf.convert_to_tensor(Y, default_float())
        mean, var = tf.gather(self.X_data_mean, rows), tf.gather(self.X_data_var, rows)
        psi = _psi_statistics(self.kernel, self.inducing_variable, mean, var)
        L = checked_cholesky(Kuu(self.inducing_variable, self.kernel, jitter=default_jitter()), KUU)
        sigma2 = self.likelihood.variance
        projected_mean, factor = self._projected_q(L)
        f_mean = tf.linalg.matmul(psi.psi1, projected_mean)  # [B, P]
        # E[f²] - E[f]² summed into: tr(R_pᵀ Ψ2_n R_p) + mᵀΨ2_n m - (ψ1_n m)², per row and output
        second = tf.einsum("pmk,nml,plk->np", factor, psi.psi2, factor) + tf.einsum(
            "mp,nml,lp->np", projected_mean, psi.psi2, projected_mean
        )
        residual = _expected_residual(psi, L)  # ⟨d_n⟩ [B]
        num_outputs = tf.cast(tf.shape(Y)[1], default_float())
        fit = -0.5 * tf.reduce_sum(
            tf.math.log(2 * np.pi * sigma2) + (tf.square(Y) - 2 * Y * f_mean + second) / sigma2
        )
        if self.tight:
            fit += num_outputs * log_residual_term(residual / sigma2)
        else:
            fit -= 0.5 * num_outputs * tf.reduce_sum(residual) / sigma2
        ratio = var / tf.gather(self.X_prior_var, rows)
        latent_kl = 0.5 * tf.reduce_sum(
            ratio
            - 1
            - tf.math.log(ratio)
            + tf.square(mean - tf.gather(self.X_prior_mean, rows))
            / tf.gather(self.X_prior_var, rows)
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
