"""
Subset of data (SoD): exact GP regression on an active subset of the training rows, chosen at
random or greedily (lecture notes, Algorithm 8.1) with the differential-entropy score of the
informative vector machine :cite:p:`lawrence2003fast` or the information-gain criterion
:cite:p:`seeger2003fast`, in one class, :class:`SoD`.
"""

from typing import Any

import numpy as np
import tensorflow as tf
from gpflow.base import RegressionData
from gpflow.kernels import Kernel
from gpflow.likelihoods import Gaussian
from gpflow.mean_functions import MeanFunction
from gpflow.models import GPR
from gpflow.models.util import data_input_to_tensor

from ..validation import (
    check_count,
    check_kernel,
    check_noise_variance,
    check_regression_data,
    checked_batch,
    checked_inputs,
    checks_arguments,
    gaussian_likelihood,
)
from .base import ConstructorOnly, InfiniteLossOnCholeskyFailure

__all__ = ["SoD", "SELECTIONS", "greedy_active_set"]

SELECTIONS = ("random", "entropy", "information_gain")
"""The selection rules of :class:`SoD`."""


def greedy_active_set(
    kernel_column: Any,
    prior_variance: np.ndarray,
    residual: np.ndarray,
    noise_variance: np.ndarray,
    size: int,
    criterion: str,
    working_set_size: int | None = None,
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """
    Greedy forward selection (lecture notes, Algorithm 8.1) in :math:`O(N M^2)` time and
    :math:`O(N M)` memory; the criteria and the update are derived in :class:`SoD`.

    :param kernel_column: ``kernel_column(i)``, the prior covariances :math:`K_{:, i}` [N].
    :param prior_variance: :math:`K_{jj}` [N].
    :param residual: :math:`\\mathbf y - m(X)` [N, P] (used by ``"information_gain"``).
    :param noise_variance: :math:`\\sigma_j^2` [N].
    :param size: M, the number of points to select.
    :param criterion: ``"entropy"`` or ``"information_gain"``.
    :param working_set_size: if given, the scores of each step are computed on a random
        working set J of this many of the remaining rows (drawn with
        ``rng.choice(remaining, size, replace=False)``, ``remaining`` ascending), else on all.
    :return: the selected rows, int64 [M], in the order chosen (ties: the lowest row of J).
    """
    num_data = len(prior_variance)
    rng = np.random.default_rng(0) if rng is None else rng
    variance = np.array(prior_variance, dtype=np.float64)  # s_j, posterior given the chosen
    mean = np.zeros_like(residual, dtype=np.float64)  # posterior mean of f - m given the chosen
    rows = np.zeros((size, num_data))  # posterior covariance = K - rows^T rows
    remaining = np.ones(num_data, dtype=bool)
    chosen = np.zeros(size, dtype=np.int64)
    num_outputs = residual.shape[1]
    for step in range(size):
        candidates = np.flatnonzero(remaining)
        if working_set_size is not None and working_set_size < len(candidates):
            candidates = np.sort(rng.choice(candidates, working_set_size, replace=False))
        s = np.maximum(variance[candidates], 0.0)
        noise = noise_variance[candidates]
        ratio = s / noise
        if criterion == "entropy":
            score = 0.5 * np.log1p(ratio)
        else:
            squared = np.sum((residual[candidates] - mean[candidates]) ** 2, axis=1)
            score = 0.5 * num_outputs * (np.log1p(ratio) - ratio / (1.0 + ratio))
            score += 0.5 * s * squared / (s + noise) ** 2
        i = int(candidates[np.argmax(score)])
        column = kernel_column(i) - rows[:step].T @ rows[:step, i]  # Σ_{:, i}
        scale = np.sqrt(column[i] + noise_variance[i])
        rows[step] = column / scale
        mean += np.outer(rows[step], (residual[i] - mean[i]) / scale)
        variance -= rows[step] ** 2
        remaining[i] = False
        chosen[step] = i
    return chosen


def _checked_xnew(model: Any, Xnew: Any) -> tf.Tensor:
    return model._checked_xnew(Xnew)


def _checked_test_data(model: Any, data: Any) -> tuple[Any, ...]:
    return model._checked_test_data(data)


@checks_arguments(_checked_test_data, "data", "predict_log_density")
@checks_arguments(_checked_xnew, "Xnew", "predict_f", "predict_y", "predict_f_samples")
class SoD(ConstructorOnly, InfiniteLossOnCholeskyFailure, GPR):
    """
    Subset of data: ``gpflow.models.GPR`` on M of the N training rows, the *active set* (lecture
    notes, Algorithm 8.1; :cite:t:`quinonero2005unifying`, §3). A thin subclass of GPR
    whose ``data`` are the active rows: the objective (the exact log marginal likelihood of the
    subset), ``training_loss``, the predictions and ``posterior()`` are GPR's on
    ``(X[active_set], Y[active_set])``, in :math:`O(M^3)`. The full data are kept in
    :attr:`full_data` for the selection.

    **Selection** (``selection``), with the model's current hyperparameters:

    * ``"random"``: M rows drawn without replacement (``numpy.random.default_rng(seed)``),
      stored in ascending order.
    * ``"entropy"``, the differential-entropy score of the IVM (:cite:t:`lawrence2003fast`):
      greedily add the row :math:`j` whose observation most reduces the entropy of
      :math:`f_j`. With :math:`s_j` the variance of :math:`f_j` given the rows chosen so far
      and :math:`\\sigma_j^2` the noise, observing :math:`y_j = f_j + \\epsilon_j` leaves
      :math:`s_j^{\\rm new} = s_j\\sigma_j^2/(s_j + \\sigma_j^2)`, so with :math:`H =
      \\tfrac12 \\log(2\\pi e\\, s)`

      .. math::
          \\Delta_j = H[p(f_j)] - H[p^{\\rm new}(f_j)] = \\tfrac12 \\log \\frac{s_j}{s_j^{\\rm new}}
          = \\tfrac12 \\log\\Big(1 + \\frac{s_j}{\\sigma_j^2}\\Big).

    * ``"information_gain"`` (:cite:t:`seeger2003fast`): :math:`\\Delta_j = \\mathrm{KL}(
      p^{\\rm new}(f_j) \\,\\|\\, p(f_j))`, the KL between the marginal of :math:`f_j` after and
      before observing :math:`y_j`. With current mean :math:`\\mu_j`, the update gives
      :math:`\\mu_j^{\\rm new} - \\mu_j = s_j (y_j - \\mu_j)/(s_j + \\sigma_j^2)`; writing
      :math:`r_j = s_j / \\sigma_j^2`, :math:`s^{\\rm new}_j / s_j = 1/(1 + r_j)`, and the KL
      of two univariate Gaussians, :math:`\\tfrac12[s^{\\rm new}/s + (\\mu^{\\rm new} -
      \\mu)^2/s - 1 - \\log(s^{\\rm new}/s)]`, becomes

      .. math::
          \\Delta_j = \\tfrac12\\Big[\\log(1 + r_j) - \\frac{r_j}{1 + r_j}\\Big] + \\frac{s_j
          (y_j - \\mu_j)^2}{2 (s_j + \\sigma_j^2)^2}.

      Unlike the entropy score it reads the targets (residuals of the mean function); several
      output columns add their KLs (the variance term P times).

    Both follow Algorithm 8.1: start with :math:`I = \\emptyset`, :math:`R` all rows; at each
    step score a working set :math:`J \\subseteq R` (all of :math:`R`, or ``working_set_size``
    random rows of it), move the best row from :math:`R` to :math:`I`. The update costs
    :math:`O(Nk)` at step :math:`k`, :math:`O(NM^2)` overall, instead of recomputing every
    posterior variance (:math:`O(NM^3)`): the posterior covariance given :math:`I` is kept as
    :math:`K - V^T V` with one row of :math:`V` per chosen point. Adding row :math:`i`
    (a rank-one update, the incremental Cholesky factorisation of :math:`K_{II} + \\sigma^2 I`
    expressed on all N points):

    .. math::
        \\boldsymbol\\Sigma_{:,i} = K_{:,i} - V^T V_{:,i}, \\quad
        \\mathbf v = \\boldsymbol\\Sigma_{:,i} / \\sqrt{\\Sigma_{ii} + \\sigma_i^2}, \\quad
        s \\leftarrow s - \\mathbf v^2, \\quad
        \\boldsymbol\\mu \\leftarrow \\boldsymbol\\mu + \\mathbf v\\, (y_i - \\mu_i) /
        \\sqrt{\\Sigma_{ii} + \\sigma_i^2},

    and :math:`\\mathbf v` becomes the next row of :math:`V`. Greedy sets are stored in the
    order chosen (ties go to the lowest row of J).

    **When selection happens.** Once, at construction, with the initial hyperparameters. After
    training (or any change of the kernel, noise or mean function) call :meth:`reselect` to
    select again with the current values; training does not change the active set by itself.
    :attr:`active_set` gives the chosen rows (numpy int64 [M]); they are state: the
    non-trainable variables :attr:`active_indices` and the active rows (the GPR data,
    variables of fixed shape [M, D] and [M, P]) are saved by ``tf.train.Checkpoint``, and
    functions compiled from the model follow :meth:`reselect` and restores.

    :param data: ``(X, Y)``, ``X`` [N, D], ``Y`` [N, P]: all the training data.
    :param kernel: as in ``gpflow.models.GPR``.
    :param mean_function: as in ``gpflow.models.GPR``.
    :param noise_variance: as in ``gpflow.models.GPR`` (default 1.0).
    :param likelihood: as in ``gpflow.models.GPR``: a ``gpflow.likelihoods.Gaussian``, whose
        ``variance_at`` gives the per-row noise :math:`\\sigma_j^2` of the selection.
    :param active_set_size: M, between 1 and N (M = N is GPR on all the data).
    :param selection: ``"random"`` (default), ``"entropy"`` or ``"information_gain"``.
    :param working_set_size: greedy selections only: the size of the random working set J of
        each step (default: all remaining rows).
    :param seed: of the random subset or the working sets.
    """

    _constructor_only = ("selection", "active_set_size", "working_set_size")

    def __init__(
        self,
        data: RegressionData,
        kernel: Kernel,
        mean_function: MeanFunction | None = None,
        noise_variance: float | None = None,
        likelihood: Gaussian | None = None,
        *,
        active_set_size: int,
        selection: str = "random",
        working_set_size: int | None = None,
        seed: int = 0,
    ) -> None:
        X, Y = check_regression_data(data)
        check_noise_variance(noise_variance)
        check_kernel(kernel, X.shape[1])
        likelihood = gaussian_likelihood(likelihood, noise_variance, "SoD is exact GP regression")
        num_data = X.shape[0]
        if selection not in SELECTIONS:
            raise ValueError(
                f"`selection` must be one of {SELECTIONS} (random, the IVM entropy score, "
                f"Seeger's information gain), got {selection!r}."
            )
        rows = " (N, the number of data rows; `active_set_size=N` is GPR on all the data)"
        check_count(active_set_size, "active_set_size", maximum=num_data, hint=rows)
        if working_set_size is not None:
            check_count(working_set_size, "working_set_size", maximum=num_data, hint=rows)
        size = int(active_set_size)
        active = (
            tf.Variable(X[:size], trainable=False, name="active_X"),
            tf.Variable(Y[:size], trainable=False, name="active_Y"),
        )
        super().__init__(active, kernel, mean_function, likelihood=likelihood)
        self.full_data = data_input_to_tensor((X, Y))
        self.selection = selection
        self.active_set_size = size
        self.working_set_size = None if working_set_size is None else int(working_set_size)
        self.seed = seed
        self.active_indices = tf.Variable(
            np.arange(size, dtype=np.int64), trainable=False, name="active_indices"
        )
        self.reselect()

    @property
    def active_set(self) -> np.ndarray:
        """The rows of the full data in the active set, numpy int64 [M]."""
        return np.asarray(self.active_indices.numpy(), dtype=np.int64)

    def reselect(self, seed: int | None = None) -> np.ndarray:
        """
        Choose the active set again with the current hyperparameters (and ``seed``, default the
        constructor's) and make its rows the GPR data; returns :attr:`active_set`.
        """
        seed = self.seed if seed is None else seed
        X, Y = (np.asarray(t.numpy(), dtype=np.float64) for t in self.full_data)
        rng = np.random.default_rng(seed)
        if self.selection == "random":
            chosen = np.sort(rng.choice(len(X), self.active_set_size, replace=False))
        else:
            X_tf = self.full_data[0]

            def kernel_column(i: int) -> np.ndarray:
                return np.asarray(self.kernel(X_tf, X_tf[i : i + 1]).numpy()[:, 0], np.float64)

            residual = Y - np.asarray(self.mean_function(X_tf).numpy(), np.float64)
            noise = np.asarray(self.likelihood.variance_at(X_tf).numpy(), np.float64)
            chosen = greedy_active_set(
                kernel_column,
                np.asarray(self.kernel(X_tf, full_cov=False).numpy(), np.float64),
                residual,
                np.broadcast_to(noise.reshape(-1), (len(X),)),
                self.active_set_size,
                self.selection,
                self.working_set_size,
                rng,
            )
        self.active_indices.assign(chosen)
        self.data[0].assign(tf.gather(self.full_data[0], chosen))
        self.data[1].assign(tf.gather(self.full_data[1], chosen))
        return self.active_set

    def _checked_xnew(self, Xnew: Any) -> tf.Tensor:
        return checked_inputs(Xnew, input_dim=int(self.full_data[0].shape[-1]))

    def _checked_test_data(self, data: Any) -> tuple[Any, ...]:
        return checked_batch(data, input_dim=int(self.full_data[0].shape[-1]), allow_empty=True)
