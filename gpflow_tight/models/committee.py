"""
Committees of exact GP experts: the Bayesian committee machine of :cite:t:`tresp2000bayesian`
and the robust BCM and (generalised) product of experts of :cite:t:`deisenroth2015distributed`,
in one class, :class:`BCM`.
"""

from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf
from check_shapes import check_shapes, inherit_check_shapes
from gpflow.base import InputData, MeanAndVariance, RegressionData
from gpflow.config import default_float, default_jitter
from gpflow.kernels import Kernel
from gpflow.likelihoods import Gaussian
from gpflow.logdensities import multivariate_normal
from gpflow.mean_functions import MeanFunction
from gpflow.models import GPModel, InternalDataTrainingLossMixin
from gpflow.models.util import data_input_to_tensor

from ..validation import (
    check_kernel,
    check_noise_variance,
    check_regression_data,
    checked_batch,
    checked_cholesky,
    checked_inputs,
    checks_arguments,
    explain_cholesky_failure,
    gaussian_likelihood,
)
from .base import ConstructorOnly, InfiniteLossOnCholeskyFailure
from .power_ep_regression import block_assignment, cluster_blocks, read_only

__all__ = ["BCM", "COMBINATIONS", "split_rows"]

COMBINATIONS = ("bcm", "rbcm", "poe", "gpoe")
"""The combination rules of :class:`BCM`."""

SPLITS = ("kmeans", "random")
EXPERT = "K_kk + noise I (an expert's training covariance)"


def split_rows(X: np.ndarray, num_experts: int, split: str = "kmeans", seed: int = 0) -> list:
    """
    A partition of the rows of ``X`` into ``num_experts`` non-empty parts of (nearly) equal
    size, ascending index arrays: ``"kmeans"`` groups nearby points (the size-capped k-means of
    :func:`~gpflow_tight.models.power_ep_regression.cluster_blocks`, parts of at most
    :math:`\\lceil N/p \\rceil` rows); ``"random"`` a random permutation cut into sizes that
    differ by at most one (``numpy.random.default_rng(seed)``).
    """
    num_data = len(X)
    if isinstance(num_experts, bool) or not isinstance(num_experts, int | np.integer):
        raise TypeError(
            f"`partition` must be an int or a list of index arrays, got {num_experts!r}."
        )
    if not 1 <= num_experts <= num_data:
        raise ValueError(
            f"`partition` = {num_experts} experts for {num_data} data rows: the number of experts "
            f"must be between 1 and N = {num_data}; pass a smaller number."
        )
    if split not in SPLITS:
        raise ValueError(f"`split` must be one of {SPLITS}, got {split!r}.")
    if split == "random":
        order = np.random.default_rng(seed).permutation(num_data)
        return [np.sort(part) for part in np.array_split(order, int(num_experts))]
    return cluster_blocks(X, None, seed=seed, num_blocks=int(num_experts))


def _checked_xnew(model: Any, Xnew: Any) -> tf.Tensor:
    return model._checked_xnew(Xnew)


def _checked_test_data(model: Any, data: Any) -> tuple[Any, ...]:
    return model._checked_test_data(data)


@checks_arguments(_checked_test_data, "data", "predict_log_density")
@checks_arguments(_checked_xnew, "Xnew", "predict_f", "predict_y")
class BCM(ConstructorOnly, InfiniteLossOnCholeskyFailure, GPModel, InternalDataTrainingLossMixin):
    """
    A committee of p exact GP experts with shared hyperparameters, each on one part
    :math:`\\mathcal D_k = (X_k, \\mathbf y_k)` of the data (``partition``), whose predictions at
    the query points are combined into one (Tresp 2000; Deisenroth & Ng 2015, §3-4). Notation:
    :math:`\\mu_k, \\Sigma_k` the posterior mean and covariance of expert k at the query points
    :math:`X_*` (exact GP regression on :math:`\\mathcal D_k`), :math:`\\sigma_k^2(\\mathbf x_*)`
    its marginal variances, :math:`K_{**}` and :math:`\\sigma_{**}^2 = k(\\mathbf x_*, \\mathbf
    x_*)` the prior's. ``combination`` selects the rule:

    * ``"bcm"``, the Bayesian committee machine (:cite:t:`tresp2000bayesian`, eqs. 4-5;
      lecture notes §4.4): assume :math:`p(\\mathbf y_1..\\mathbf y_p \\mid \\mathbf f_*) \\approx
      \\prod_k p(\\mathbf y_k \\mid \\mathbf f_*)`, so :math:`q(\\mathbf f_*) \\propto \\prod_k
      p(\\mathbf f_* \\mid \\mathcal D_k) / p(\\mathbf f_*)^{p-1}`:

      .. math::
          \\Sigma^{-1} = \\sum_k \\Sigma_k^{-1} - (p - 1) K_{**}^{-1}, \\qquad
          \\boldsymbol\\mu = \\Sigma \\sum_k \\Sigma_k^{-1} \\boldsymbol\\mu_k.

      With ``full_cov=True`` this is the joint rule over all query points, which equals PITC
      with the pseudo-inputs at the query points, :math:`Z = X_*`, and the parts as blocks
      (spec property 22). Its marginals depend on which other query points are predicted
      together (Tresp's "query set"); ``full_cov=False`` instead gives the rule applied to each
      query point alone, :math:`\\sigma^{-2} = \\sum_k \\sigma_k^{-2} - (p-1)\\sigma_{**}^{-2}`
      (Deisenroth & Ng, eq. 17), which costs :math:`O(N_*)` per expert, does not depend on the
      batch, and equals PITC with the single pseudo-input :math:`Z = \\{\\mathbf x_*\\}`. So
      ``predict_f(X, full_cov=False)`` is not the diagonal of ``predict_f(X, full_cov=True)``
      for more than one query point. The joint rule factorises :math:`K_{**} + \\epsilon I`
      and the experts' :math:`\\Sigma_k + \\epsilon I` (ε = ``gpflow.config.default_jitter()``)
      and removes :math:`\\epsilon I` from the result, so that one expert gives GPR's
      covariance; it costs :math:`O(p N_*^3)`.
    * ``"rbcm"``, the robust BCM (Deisenroth & Ng, eqs. 20-21), per query point:

      .. math::
          \\sigma^{-2} = \\sum_k \\beta_k \\sigma_k^{-2} + \\Big(1 - \\sum_k \\beta_k\\Big)
          \\sigma_{**}^{-2}, \\qquad \\mu = \\sigma^2 \\sum_k \\beta_k \\sigma_k^{-2} \\mu_k,

      with :math:`\\beta_k = \\tfrac12 (\\log \\sigma_{**}^2 - \\log \\sigma_k^2(\\mathbf x_*))`,
      the difference in differential entropy between the prior and expert k's posterior.
    * ``"poe"``, the product of experts (:math:`\\beta_k = 1`, no prior correction):
      :math:`\\sigma^{-2} = \\sum_k \\sigma_k^{-2}`, :math:`\\mu = \\sigma^2 \\sum_k
      \\sigma_k^{-2} \\mu_k`.
    * ``"gpoe"``, the generalised PoE (:cite:t:`cao2014generalized`) as Deisenroth & Ng use it (eqs.
      13-14 with :math:`\\beta_k = 1/p`): :math:`\\sigma^{-2} = \\sum_k \\beta_k
      \\sigma_k^{-2}`, :math:`\\mu = \\sigma^2 \\sum_k \\beta_k \\sigma_k^{-2} \\mu_k`;
      since :math:`\\sum_k \\beta_k = 1` it falls back to the prior far from the data.

    ``"rbcm"``, ``"poe"`` and ``"gpoe"`` are defined per query point (marginals): they refuse
    ``full_cov=True``. With a mean function the rules combine the experts' predictions of
    :math:`f - m` and add :math:`m(X_*)` back (the prior's mean is :math:`m`). Several output
    columns share the kernel: each column is combined with the same weights.

    **Training objective** (Deisenroth & Ng, §2, eq. 3): the sum of the experts' exact log
    marginal likelihoods with shared hyperparameters,
    :math:`\\sum_k \\log \\mathcal N(\\mathbf y_k; m(X_k), K_{kk} + \\sigma^2 I)` — an
    approximation of :math:`\\log p(\\mathbf y)` that ignores the correlations between the
    parts, in :math:`O(\\sum_k n_k^3)`. ``training_loss`` is its negative, so
    ``gpflow.optimizers.Scipy().minimize(model.training_loss, model.trainable_variables)``
    trains it. With one expert (``partition=1``) the model is ``gpflow.models.GPR`` for
    ``"bcm"``, ``"poe"`` and ``"gpoe"`` (not for ``"rbcm"``, whose single weight
    :math:`\\beta_1 \\ne 1` rescales the expert's precision).

    **Settings fixed at construction**: ``partition`` (the experts' rows, read from
    :attr:`partition`; computed once from ``split`` and ``seed`` when an int) and
    ``combination``. The experts are a Python loop over the parts, compiled into the graph, so
    they are not model state: a checkpoint saves the kernel, likelihood and mean function, and
    restoring it into a model built with the same data, partition (or ``split`` and ``seed``)
    and combination gives the saved model's predictions.

    :param data: ``(X, Y)``, ``X`` [N, D], ``Y`` [N, P].
    :param kernel: a GPflow kernel with one latent GP (shared by the experts).
    :param partition: a list of index arrays partitioning ``range(N)`` (each row in exactly one
        part; the parts need not be of equal size), or an int p, the number of experts, split
        by ``split``.
    :param noise_variance: initial variance of the Gaussian likelihood (default 1.0, as GPR).
    :param likelihood: instead of ``noise_variance``, a ``gpflow.likelihoods.Gaussian``.
    :param mean_function: as in ``gpflow.models.GPR``.
    :param combination: ``"bcm"`` (default), ``"rbcm"``, ``"poe"`` or ``"gpoe"``.
    :param split: for an int ``partition``: ``"kmeans"`` (default; parts of nearby points,
        as Tresp's and Deisenroth & Ng's local experts) or ``"random"`` (Deisenroth & Ng's
        random assignment).
    :param seed: of the split.
    """

    _constructor_only = ("combination", "_labels", "_parts")

    def __init__(
        self,
        data: RegressionData,
        kernel: Kernel,
        partition: Sequence[Any] | int,
        noise_variance: float | None = None,
        *,
        likelihood: Gaussian | None = None,
        mean_function: MeanFunction | None = None,
        combination: str = "bcm",
        split: str = "kmeans",
        seed: int = 0,
    ) -> None:
        X, Y = check_regression_data(data)
        check_noise_variance(noise_variance)
        check_kernel(kernel, X.shape[1])
        if combination not in COMBINATIONS:
            raise ValueError(
                f"`combination` must be one of {COMBINATIONS} (the BCM, the robust BCM, the "
                f"product of experts, the generalised PoE), got {combination!r}."
            )
        likelihood = gaussian_likelihood(
            likelihood, noise_variance, "the experts are exact GP regressions"
        )
        if isinstance(partition, int | np.integer) and not isinstance(partition, bool):
            parts = split_rows(X, int(partition), split, seed)
        elif isinstance(partition, Sequence | np.ndarray) and not isinstance(partition, str):
            if split not in SPLITS:
                raise ValueError(f"`split` must be one of {SPLITS}, got {split!r}.")
            parts = list(partition)
        else:
            raise TypeError(
                "`partition` must be an int (the number of experts) or a list of index arrays, "
                f"got {type(partition).__name__}."
            )
        labels = block_assignment(parts, X.shape[0], name="partition")
        super().__init__(kernel, likelihood, mean_function, num_latent_gps=Y.shape[1])
        self.data = data_input_to_tensor((X, Y))
        self.combination = combination
        self._labels = read_only(labels)
        self._parts = tuple(read_only(np.flatnonzero(labels == k)) for k in range(len(parts)))

    @property
    def partition(self) -> tuple[np.ndarray, ...]:
        """The experts' rows: one read-only, ascending index array per expert."""
        return self._parts

    @property
    def num_experts(self) -> int:
        """The number of experts p."""
        return len(self._parts)

    def _checked_xnew(self, Xnew: Any) -> tf.Tensor:
        return checked_inputs(Xnew, input_dim=int(self.data[0].shape[-1]))

    def _checked_test_data(self, data: Any) -> tuple[Any, ...]:
        return checked_batch(data, input_dim=int(self.data[0].shape[-1]), allow_empty=True)

    @tf.autograph.experimental.do_not_convert
    def _expert_data(self) -> list[tuple[tf.Tensor, tf.Tensor, tf.Tensor]]:
        """Per expert: its inputs, its residuals y - m(X) and the Cholesky factor of K + σ²I."""
        X, Y = self.data
        experts = []
        for rows in self._parts:
            Xk, Yk = tf.gather(X, rows), tf.gather(Y, rows)
            K = self.kernel(Xk) + self.likelihood.variance * tf.eye(len(rows), dtype=X.dtype)
            Lk = checked_cholesky(K, EXPERT)
            experts.append((Xk, Yk - self.mean_function(Xk), Lk))
        return experts

    @inherit_check_shapes
    def maximum_log_likelihood_objective(self) -> tf.Tensor:  # type: ignore[override]
        return self.log_marginal_likelihood()

    @check_shapes("return: []")
    def log_marginal_likelihood(self) -> tf.Tensor:
        """
        The sum over experts of :math:`\\log \\mathcal N(\\mathbf y_k; m(X_k), K_{kk} +
        \\sigma^2 I)` (Deisenroth & Ng 2015, eq. 3), summed over output columns.
        """
        with explain_cholesky_failure(EXPERT):
            total = tf.zeros([], dtype=default_float())
            for _, residual, Lk in self._expert_data():
                zeros = tf.zeros_like(residual)
                total += tf.reduce_sum(multivariate_normal(residual, zeros, Lk))
        return total

    @tf.autograph.experimental.do_not_convert
    def expert_predictions(
        self, Xnew: InputData, full_cov: bool = False
    ) -> list[tuple[tf.Tensor, tf.Tensor]]:
        """
        Each expert's exact GP prediction of :math:`f - m` at ``Xnew``: means [N*, P] and
        variances [N*] (``full_cov=False``) or covariances [N*, N*] (shared by the columns).
        """
        Xnew = self._checked_xnew(Xnew)
        predictions = []
        with explain_cholesky_failure(EXPERT):
            for Xk, residual, Lk in self._expert_data():
                A = tf.linalg.triangular_solve(Lk, self.kernel(Xk, Xnew))  # L_k⁻¹ K_k*
                mean = tf.linalg.matmul(
                    A, tf.linalg.triangular_solve(Lk, residual), transpose_a=True
                )
                if full_cov:
                    cov = self.kernel(Xnew) - tf.linalg.matmul(A, A, transpose_a=True)
                else:
                    cov = self.kernel(Xnew, full_cov=False) - tf.reduce_sum(A**2, axis=0)
                predictions.append((mean, cov))
        return predictions

    @inherit_check_shapes
    def predict_f(
        self, Xnew: InputData, full_cov: bool = False, full_output_cov: bool = False
    ) -> MeanAndVariance:
        if full_output_cov:
            raise ValueError(
                "`full_output_cov=True` is not supported: the outputs share one kernel and are "
                "independent; pass `full_output_cov=False`."
            )
        if full_cov and self.combination != "bcm":
            raise ValueError(
                f"`full_cov=True` is defined for `combination='bcm'` only: the "
                f"{self.combination!r} rule of Deisenroth & Ng (2015) weights each query point's "
                "experts separately and has marginals only. Pass `full_cov=False`, or build the "
                "model with `combination='bcm'` for joint predictions."
            )
        experts = self.expert_predictions(Xnew, full_cov=full_cov)
        prior_mean = self.mean_function(Xnew)
        if full_cov:
            with explain_cholesky_failure("K_** (the prior at Xnew)"):
                mean, cov = self._joint_bcm(Xnew, experts)
            num_outputs = tf.shape(mean)[-1]
            return mean + prior_mean, tf.tile(cov[None], [num_outputs, 1, 1])
        mean, var = self._marginal_rule(Xnew, experts)
        return mean + prior_mean, tf.tile(var[:, None], [1, tf.shape(mean)[-1]])

    @tf.autograph.experimental.do_not_convert
    def _marginal_rule(
        self, Xnew: tf.Tensor, experts: list[tuple[tf.Tensor, tf.Tensor]]
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """The combination rule at each query point alone: mean [N*, P], variance [N*]."""
        prior_var = self.kernel(Xnew, full_cov=False)
        p = float(len(experts))
        precisions = [1.0 / var for _, var in experts]
        if self.combination == "bcm":
            weights = [tf.ones_like(prior_var)] * len(experts)
            prior_weight = 1.0 - p
        elif self.combination == "rbcm":
            weights = [0.5 * (tf.math.log(prior_var) - tf.math.log(var)) for _, var in experts]
            prior_weight = 1.0 - tf.add_n(weights)
        elif self.combination == "poe":
            weights, prior_weight = [tf.ones_like(prior_var)] * len(experts), 0.0
        else:  # gpoe
            weights, prior_weight = [tf.ones_like(prior_var) / p] * len(experts), 0.0
        precision = prior_weight / prior_var + tf.add_n(
            [w * lam for w, lam in zip(weights, precisions)]
        )
        shift = tf.add_n(
            [(w * lam)[:, None] * mean for w, lam, (mean, _) in zip(weights, precisions, experts)]
        )
        var = 1.0 / precision
        return var[:, None] * shift, var

    @tf.autograph.experimental.do_not_convert
    def _joint_bcm(
        self, Xnew: tf.Tensor, experts: list[tuple[tf.Tensor, tf.Tensor]]
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """Tresp's rule over all query points jointly: mean [N*, P], covariance [N*, N*]."""
        num_new = tf.shape(Xnew)[-2]
        jitter = default_jitter() * tf.eye(num_new, dtype=default_float())
        prior = checked_cholesky(self.kernel(Xnew) + jitter, "K_** (the prior at Xnew)")
        identity = tf.eye(num_new, dtype=default_float())
        precision = -(len(experts) - 1.0) * tf.linalg.cholesky_solve(prior, identity)
        shift = 0.0
        for mean, cov in experts:
            factor = checked_cholesky(cov + jitter, "an expert's posterior covariance at Xnew")
            precision += tf.linalg.cholesky_solve(factor, identity)
            shift += tf.linalg.cholesky_solve(factor, mean)
        combined = checked_cholesky(precision, "the BCM precision at Xnew")
        cov = tf.linalg.cholesky_solve(combined, identity)
        # the combination is the BCM of the jittered prior K_** + εI, i.e. of f_* plus white
        # noise independent of the data; its covariance is removed again (exact for one expert)
        cov = 0.5 * (cov + tf.transpose(cov)) - jitter
        return tf.linalg.cholesky_solve(combined, shift), cov
