"""
The Power-EP pseudo-point family of Bui, Yan & Turner, *A unifying framework for Gaussian
process pseudo-point approximations using Power Expectation Propagation* (JMLR 2017).

One class, :class:`PowerEPSGP`, covers the family through the power :math:`\\alpha`: FITC at
:math:`\\alpha = 1`, Titsias's VFE in the limit :math:`\\alpha \\to 0`, PITC with block factors,
a private power per data point or block, and inter-domain pseudo-points through GPflow's
``Kuu``/``Kuf`` dispatch. Regression is closed form
(:mod:`~gpflow_tight.models.power_ep_regression`); other likelihoods run Power-EP site updates
(:mod:`~gpflow_tight.models.power_ep_sites`). Predictions go through
:class:`~gpflow_tight.posteriors.PowerEPPosterior`.
"""

from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf
from check_shapes import check_shapes, inherit_check_shapes
from gpflow.base import InputData, MeanAndVariance, RegressionData
from gpflow.config import default_float
from gpflow.kernels import Kernel
from gpflow.likelihoods import Gaussian, Likelihood, ScalarLikelihood
from gpflow.mean_functions import MeanFunction
from gpflow.models import GPRFITC, SGPR, GPModel, InternalDataTrainingLossMixin
from gpflow.models.util import InducingVariablesLike, data_input_to_tensor, inducingpoint_wrapper
from gpflow.posteriors import PrecomputeCacheType

from ..posteriors import PowerEPPosterior
from ..validation import (
    check_count,
    check_inducing_variable,
    check_input_dim,
    check_kernel,
    check_noise_variance,
    check_regression_data,
    checked_indices,
    checked_test_data,
    checked_xnew,
    checks_arguments,
    explain_cholesky_failure,
    held_data,
    inducing_input_dim,
)
from .base import ConstructorOnly, InfiniteLossOnCholeskyFailure
from .power_ep_regression import (
    BlockPartition,
    CollapsedProblem,
    check_alpha,
    cluster_blocks,
    collapsed_log_marginal_likelihood,
    collapsed_posterior,
    partition,
    power_correction,
)
from .power_ep_sites import (
    SiteBatch,
    assign_sites,
    check_site_alpha,
    check_site_data,
    site_batch,
    site_log_marginal_likelihood,
    site_update,
    site_whitened_posterior,
)

__all__ = [
    "FLOAT32_MAX_ALPHA",
    "PowerEPSGP",
    "PowerEPPosterior",
    "FITC",
    "PITC",
    "VFE",
    "DTC",
    "cluster_blocks",
    "power_correction",
]


FLOAT32_MAX_ALPHA = 0.8
"""
The largest power whose optimum over the inducing inputs float32 training finds reliably: with
trainable inducing inputs, float32 training is refused above it, and for DTC (measured in
``docs/power_ep.md``, float32).
"""


@checks_arguments(checked_test_data, "data", "predict_log_density")
@checks_arguments(checked_xnew, "Xnew", "predict_f", "predict_y", "predict_f_samples")
class PowerEPSGP(
    ConstructorOnly, InfiniteLossOnCholeskyFailure, GPModel, InternalDataTrainingLossMixin
):
    """
    Sparse GP with the Power-EP pseudo-point approximation of :cite:t:`bui2017unifying`.

    Each likelihood factor :math:`p(y_n \\mid f_n)` is replaced by a Gaussian site on the
    pseudo-outputs :math:`t_n(\\mathbf u) = \\mathcal N(\\mathbf w_n^T \\mathbf u; g_n, v_n)`,
    :math:`\\mathbf w_n = K_{uu}^{-1}\\mathbf k_{un}`, fitted by Power EP with power
    :math:`\\alpha`. The objective is the negative Power-EP energy, an approximation of
    :math:`\\log p(\\mathbf y)`.

    **Gaussian likelihood** (``inference="closed_form"``, the default): the fixed point is
    closed form (§3.6) and the objective is eq. 128,

    .. math::
        \\log \\mathcal Z_\\alpha = \\log \\mathcal N(\\mathbf y; \\mathbf 0, Q_{ff} +
        \\alpha\\,\\mathrm{diag}(\\mathbf d) + \\sigma^2 I) - \\frac{1 - \\alpha}{2\\alpha}
        \\sum_n \\log\\Big(1 + \\frac{\\alpha d_n}{\\sigma^2}\\Big),

    computed in :math:`O(NM^2)`. ``alpha=1`` is FITC (``gpflow.models.GPRFITC``); ``alpha=0`` is
    the exact limit :math:`\\alpha \\to 0`, Titsias's bound (``gpflow.models.SGPR``). The
    objective is non-decreasing in :math:`\\alpha`. Extensions (§3.7): ``alpha`` may be an
    array with one power per data point (multi-power); ``blocks`` (a partition of the data rows)
    or ``block_size`` (a balanced partition of the inputs: k-means with a size cap,
    :func:`cluster_blocks`) give block factors, and then ``alpha``
    may hold one power per block; ``alpha=1`` with blocks is PITC. The structured objective uses
    the corrected sign of the paper's §3.7 (see ``docs/power_ep.md``). A heteroscedastic
    Gaussian likelihood (``variance_at``) gives per-point noise.

    **Other likelihoods** (``inference="sites"``, scalar likelihoods with one latent GP): the
    sites are state of the model (:attr:`site_precision` :math:`\\tau_n = 1 / v_n` and
    :attr:`site_shift` :math:`\\nu_n = g_n / v_n`, saved by ``tf.train.Checkpoint``), updated by
    :meth:`sweep` (damped parallel Power-EP updates, optionally on a minibatch of points) and
    held fixed by :meth:`log_marginal_likelihood`, the energy of eq. 110 in its vectorised
    :math:`O(NM^2)` form, whose gradient is the hyperparameter gradient at a fixed point. The
    tilted moments are closed form for a probit ``Bernoulli`` at ``alpha=1`` and use
    Gauss-Hermite quadrature otherwise. Use :func:`gpflow_tight.training.fit_power_ep` to
    alternate sweeps and optimiser steps. ``inference="sites"`` also works with a Gaussian
    likelihood, where it converges to the closed form.

    **Settings fixed at construction.** ``alpha``, ``inference`` and
    ``num_gauss_hermite_points`` decide the structure of the computation (which form of the power
    correction, which tilted moments, the shapes), so functions compiled from the model would
    keep their values. They are therefore not part of the saved state: assigning (or deleting)
    any of them after construction raises an ``AttributeError``, and the array ``alpha`` is
    read-only. For another power, build a new model, e.g. ``PowerEPSGP(data, kernel, Z,
    alpha=new_alpha)``, and copy the parameters over
    (``gpflow.utilities.multiple_assign(new, gpflow.utilities.parameter_dict(old))``).

    **State.** Everything else that defines the predictions is in ``tf.train.Checkpoint``: the
    parameters, the sites and, with blocks, the partition, :attr:`block_assignment` (a
    non-trainable ``tf.Variable``, the block of each data row; :attr:`blocks` reads it). The
    computation reads the partition from the variable, also in compiled functions, so a
    checkpoint restored into a model built with the same settings and data gives the saved
    model's predictions, bit for bit, whatever ``seed`` placed the k-means blocks of the new
    model. The padded block layout has a static shape fixed at construction (from N and
    ``block_size``, or the given blocks' number and largest size), so training steps also
    compile under XLA; a restored partition must fit it.

    **Data** are checked at construction (:mod:`gpflow_tight.validation`); real numbers of
    another dtype than ``gpflow.config.default_float()`` (integer 0/1 labels, integer inputs,
    float32 arrays under the float64 default) are cast to it with a one-time
    ``DtypeCastWarning``, and so are the inputs of predictions. In float32, training the
    inducing inputs is refused for DTC and powers above :data:`FLOAT32_MAX_ALPHA` (FITC, PITC;
    see :meth:`maximum_log_likelihood_objective`); float32 accuracy per preset:
    ``docs/power_ep.md``. Data held in ``tf.Variable`` objects of dynamic shape (as Trieste holds
    them) may be assigned more or fewer rows when nothing is laid out per row (closed form, one
    power, no blocks); otherwise the computation refuses the new rows with a message. As in
    GPflow's SGPR, ``num_data`` only reports the number of rows: Trieste replaces it with a
    variable it updates, and nothing computed reads it.

    :param data: ``(X, Y)``, ``X`` [N, D], ``Y`` [N, R] (R = 1 and labels in {0, 1} for
        ``Bernoulli``).
    :param alpha: the power, in [0, 1]: a number, an array [N] (one per point) or, with
        blocks, an array [number of blocks]. 0 (the VFE limit) needs a Gaussian likelihood.
    :param likelihood: defaults to ``gpflow.likelihoods.Gaussian(noise_variance)``.
    :param noise_variance: initial noise variance of the default Gaussian likelihood.
    :param blocks: a partition of ``range(N)`` into index arrays (Gaussian likelihood only).
    :param block_size: instead of ``blocks``: partition the inputs into
        :math:`\\lceil N / S \\rceil` blocks of nearby points of at most this size S.
    :param seed: of the k-means clustering for ``block_size``.
    :param inference: ``"closed_form"`` (Gaussian likelihoods) or ``"sites"``; by default the
        first when the likelihood is Gaussian.
    :param num_gauss_hermite_points: quadrature points for the tilted moments (more than
        GPflow's 20 by default: the energy divides their error by :math:`\\alpha`).
    """

    _constructor_only = (
        "alpha",
        "block_assignment",
        "_block_layout_shape",
        "inference",
        "num_gauss_hermite_points",
        "_num_rows",
    )
    _includes_power_correction = True  # False only for DTC, which is not a Power-EP energy
    # what posterior() builds from q(u); SoR and Nystrom predict otherwise from DTC's q(u)
    _posterior_class: type[PowerEPPosterior] = PowerEPPosterior

    def __init__(
        self,
        data: RegressionData,
        kernel: Kernel,
        inducing_variable: InducingVariablesLike,
        alpha: Any = 0.5,
        *,
        likelihood: Likelihood | None = None,
        noise_variance: float | None = None,
        mean_function: MeanFunction | None = None,
        blocks: Sequence[Any] | None = None,
        block_size: int | None = None,
        inference: str | None = None,
        num_gauss_hermite_points: int = 50,
        seed: int = 0,
        num_latent_gps: int | None = None,
    ) -> None:
        X, Y = check_regression_data(data)
        check_noise_variance(noise_variance)
        check_inducing_variable(inducing_variable)  # before GPflow wraps it
        check_kernel(kernel, X.shape[1])
        if num_latent_gps is not None and num_latent_gps != Y.shape[1]:
            raise ValueError(
                f"`num_latent_gps` must equal the number of columns of Y ({Y.shape[1]}): the "
                f"outputs share the kernel, one latent GP each; got {num_latent_gps}."
            )
        if likelihood is None:
            likelihood = Gaussian(1.0 if noise_variance is None else noise_variance)
        elif noise_variance is not None:
            raise ValueError(
                "Pass either `likelihood` or `noise_variance` (for the default Gaussian "
                "likelihood), not both."
            )
        inference = _check_inference(inference, likelihood)
        if inference == "sites":
            check_site_data(likelihood, Y)
        super().__init__(kernel, likelihood, mean_function, num_latent_gps=Y.shape[1])
        # data held in variables stays there, so that assigning new data takes effect
        self.data = data_input_to_tensor(held_data(data, (X, Y)))
        # the rows that sites, per-point powers and blocks are laid out for (fixed); ``num_data``
        # is only informational, as in SGPR: Trieste makes it a variable and updates it
        self._num_rows = int(X.shape[0])
        self.num_data = self._num_rows
        self.inducing_variable = inducingpoint_wrapper(inducing_variable)
        check_input_dim(X.shape, inducing_input_dim(self.inducing_variable), "data X")
        self.inference = inference
        self.num_gauss_hermite_points = check_count(
            num_gauss_hermite_points, "num_gauss_hermite_points"
        )

        if inference != "closed_form" and (blocks is not None or block_size is not None):
            raise ValueError(
                "Block (PITC-like) factors are implemented for Gaussian likelihoods with "
                "`inference='closed_form'` only; drop `blocks`/`block_size`."
            )
        layout = partition(X, blocks, block_size, seed)
        # state, not a setting: saved by checkpoints and read by the computation
        self.block_assignment: tf.Variable | None = (
            None
            if layout is None
            else tf.Variable(
                layout.labels, trainable=False, dtype=tf.int64, name="block_assignment"
            )
        )
        # the padded layout's static shape [blocks, rows per block], a setting: compiled functions
        # (also under XLA) know it at trace time; a restored partition must fit it
        self._block_layout_shape: tuple[int, int] | None = (
            None if layout is None else (layout.num_blocks, layout.capacity)
        )
        num_blocks = None if layout is None else layout.num_blocks
        self.alpha = check_alpha(alpha, self._num_rows, num_blocks)
        if inference == "sites":
            check_site_alpha(self.alpha)
            zeros = tf.zeros([self._num_rows], dtype=default_float())
            self.site_precision = tf.Variable(zeros, trainable=False, name="site_precision")
            self.site_shift = tf.Variable(zeros, trainable=False, name="site_shift")

    @property
    def blocks(self) -> tuple[np.ndarray, ...] | None:
        """
        The blocks of the data rows (one read-only, ascending index array per block), read from
        :attr:`block_assignment`; ``None`` without blocks.
        """
        partition = self._partition()
        return None if partition is None else partition.blocks

    @blocks.setter
    def blocks(self, value: Any) -> None:
        raise AttributeError(
            f"`blocks` of {type(self).__name__} is fixed at construction (it shapes the "
            "computation): build a new model with `blocks=...` instead and copy the parameters "
            "into it with `gpflow.utilities.multiple_assign(new, "
            "gpflow.utilities.parameter_dict(old))`."
        )

    @property
    def block_layout_shape(self) -> tuple[int, int] | None:
        """
        The static shape ``(blocks, rows per block)`` of the padded block layout, fixed at
        construction: :math:`(\\lceil N/S \\rceil, \\lceil N/B \\rceil)` for ``block_size``
        S, (number of blocks, largest block) for given ``blocks``; ``None`` without blocks.
        """
        return self._block_layout_shape

    def _partition(self) -> BlockPartition | None:
        if self.block_assignment is None or self._block_layout_shape is None:
            return None
        return BlockPartition(self.block_assignment, *self._block_layout_shape)

    def _checked_indices(self, indices: Any) -> tf.Tensor | None:
        """``indices`` of :meth:`sweep` and :meth:`log_marginal_likelihood`: a non-empty vector
        of data rows, checked."""
        if indices is None:
            return None
        indices = checked_indices(indices, self._num_rows, "indices", allow_empty=False)
        if indices.shape.rank not in (None, 1):
            raise ValueError(
                f"`indices` must be a vector [B] of data rows, got shape {indices.shape}."
            )
        return indices

    def _site_batch(self, indices: tf.Tensor | None) -> SiteBatch:
        return site_batch(
            self.kernel,
            self.inducing_variable,
            self.likelihood,
            self.mean_function,
            self._checked_data(),
            self.alpha,
            self.site_precision,
            self.site_shift,
            indices,
            self.num_gauss_hermite_points,
        )

    def _checked_data(self) -> RegressionData:
        """
        ``data``, whose number of rows may change (data held in variables) only where nothing
        of the model's structure is per data point.
        """
        if self.inference == "sites" or self.block_assignment is not None or self.alpha.ndim > 0:
            tf.debugging.assert_equal(
                tf.shape(self.data[0])[0],
                self._num_rows,
                message=(
                    "`data` changed its number of rows, but this model has a site, a power or a "
                    "block per data row (fixed at construction); build a new model for new data"
                ),
            )
        return self.data

    def _collapsed_problem(self) -> CollapsedProblem:
        """The closed-form regression problem (Gaussian likelihood) of this model's parts."""
        return CollapsedProblem(
            self.kernel,
            self.inducing_variable,
            self._checked_data(),
            self.likelihood,
            self.mean_function,
            self.alpha,
            self._partition(),
        )

    def sweep(
        self,
        indices: tf.Tensor | None = None,
        damping: float = 0.5,
        update: str = "full",
    ) -> dict[str, tf.Tensor]:
        """
        One parallel Power-EP sweep over the points ``indices`` (all when ``None``): every cavity
        is taken from the same current :math:`q(\\mathbf u)`, each site is projected (eqs.
        104-107) and updated, then damped: :math:`\\tau \\leftarrow \\rho\\tau' + (1 - \\rho)\\tau`
        with ``damping`` :math:`\\rho \\in (0, 1]`. The posterior is recomputed from all sites
        at the next use, :math:`O(NM^2)`.

        ``update="full"`` (default) is the Power-EP update :math:`t_n \\leftarrow (q /
        q_{\\setminus n})^{1/\\alpha}`; ``"fractional"`` is the paper's eqs. 108-109,
        :math:`t_n \\leftarrow t_n^{1-\\alpha} q / q_{\\setminus n}`. Both have the same fixed
        points, and ``"fractional"`` with damping :math:`\\rho` equals ``"full"`` with damping
        :math:`\\rho\\alpha`, so it converges slowly for small :math:`\\alpha` (at rate
        :math:`1 - \\alpha` for a Gaussian likelihood, where one undamped ``"full"`` sweep reaches
        the fixed point).
        A site whose update would give a negative precision (possible only for likelihoods that
        are not log-concave) or a non-finite value is left unchanged.

        :param indices: the data rows of the minibatch, a non-empty integer vector of rows in
            ``[0, N)``; all rows when ``None``.
        :return: ``max_change`` (the largest change of a site's natural parameters, relative to
            their scale) and ``num_skipped`` (sites left unchanged).
        """
        if self.inference != "sites":
            raise ValueError(
                "`sweep` needs `inference='sites'`; with a Gaussian likelihood the default "
                "closed form needs no site updates."
            )
        if update not in ("fractional", "full"):
            raise ValueError(f"`update` must be 'fractional' or 'full', got {update!r}.")
        if not 0 < damping <= 1:
            raise ValueError(f"`damping` must lie in (0, 1], got {damping!r}.")
        indices = self._checked_indices(indices)
        new = site_update(self._site_batch(indices), damping, update)
        assign_sites(self.site_precision, self.site_shift, new, indices)
        return {
            "max_change": new.max_change,
            "num_skipped": tf.reduce_sum(tf.cast(~new.valid, tf.int32)),
        }

    @check_shapes("return: []")
    def log_marginal_likelihood(self, indices: tf.Tensor | None = None) -> tf.Tensor:
        """
        The approximate log marginal likelihood, i.e. the negative Power-EP energy: eq. 128
        (and its block and multi-power forms) for ``inference="closed_form"``; the energy of eq.
        110 at the current sites for ``inference="sites"``, where ``indices`` (a non-empty int
        vector of data rows, as for :meth:`sweep`) gives the unbiased minibatch estimate of its
        data terms.
        """
        with explain_cholesky_failure():
            if self.inference == "closed_form":
                if indices is not None:
                    raise ValueError(
                        "The closed-form objective uses all data; `indices` is for "
                        "`inference='sites'`."
                    )
                return collapsed_log_marginal_likelihood(
                    self._collapsed_problem(),
                    include_power_correction=self._includes_power_correction,
                )
            indices = self._checked_indices(indices)
            batch = self._site_batch(indices)
            if indices is None:
                return site_log_marginal_likelihood(batch)
            dtype = batch.alpha.dtype
            scale = tf.cast(self._num_rows, dtype) / tf.cast(tf.size(indices), dtype)
            return site_log_marginal_likelihood(batch, scale)

    @inherit_check_shapes
    def maximum_log_likelihood_objective(self) -> tf.Tensor:  # type: ignore[override]
        """
        ``log_marginal_likelihood()``; ``training_loss()`` is −(this + log prior density).

        In float32, refused (``ValueError``) while the inducing variables are trainable for the
        objectives with little or no penalty on a vanishing noise, DTC and powers above
        ``FLOAT32_MAX_ALPHA`` = 0.8 (FITC and PITC among them): their optimum over the inducing
        inputs is (nearly) degenerate, the noise falls towards its lower bound and inducing
        inputs crowd together, and float32 cannot resolve it (``docs/power_ep.md``, float32).
        """
        self._check_float32_training()
        return self.log_marginal_likelihood()

    def _check_float32_training(self) -> None:
        dtype = self.data[0].dtype
        if self.inference != "closed_form" or dtype == tf.float64:
            return
        if self._includes_power_correction and np.max(self.alpha) <= FLOAT32_MAX_ALPHA:
            return
        if not self.inducing_variable.trainable_variables:
            return
        what = "DTC" if not self._includes_power_correction else f"alpha > {FLOAT32_MAX_ALPHA}"
        raise ValueError(
            f"{type(self).__name__} cannot be trained reliably in {dtype.name} while its "
            f"inducing variables are trainable: with {what} the optimum over the inducing "
            "inputs is (nearly) degenerate (the noise variance falls towards its lower bound, "
            "inducing inputs crowd together), which float32 round-off moves (measured: "
            "predictive variances off by up to 120-fold; docs/power_ep.md, 'float32'). "
            "Fix the inducing inputs with `gpflow.set_trainable(model.inducing_variable, "
            "False)`, train in float64 (`gpflow.config.set_default_float(np.float64)`), or use "
            f"VFE or alpha <= {FLOAT32_MAX_ALPHA}."
        )

    # Titsias's bounds on log p(y) and their parts, as gpflow.models.SGPR computes them, for code
    # written for SGPR (e.g. GPflow's upper-bound notebook). They are functions of the kernel,
    # inducing-variable and likelihood parameters only, not of the power.
    CommonTensors = SGPR.CommonTensors
    logdet_term = SGPR.logdet_term
    quad_term = SGPR.quad_term

    def _common_calculation(self) -> SGPR.CommonTensors:
        self._require_gaussian_likelihood("SGPR's bound terms")
        return SGPR._common_calculation(self)  # type: ignore[arg-type]

    @check_shapes("return: []")
    def elbo(self) -> tf.Tensor:
        """
        Titsias's (2009) collapsed lower bound on :math:`\\log p(\\mathbf y)` at this model's
        parameters, ``gpflow.models.SGPR.elbo``: the objective at ``alpha=0`` (VFE). At
        :math:`\\alpha > 0` the Power-EP objective, :meth:`log_marginal_likelihood`, is not a
        bound; this is, at every :math:`\\alpha`. Gaussian likelihoods only.
        """
        with explain_cholesky_failure():
            return SGPR.elbo(self)  # type: ignore[arg-type]

    @check_shapes("return: []")
    def upper_bound(self) -> tf.Tensor:
        """
        Titsias's (2014) upper bound on :math:`\\log p(\\mathbf y)` at this model's
        parameters, ``gpflow.models.SGPR.upper_bound``. Gaussian likelihoods only.
        """
        self._require_gaussian_likelihood("upper_bound")
        with explain_cholesky_failure():
            return SGPR.upper_bound(self)  # type: ignore[arg-type]

    def _require_gaussian_likelihood(self, what: str) -> None:
        if not isinstance(self.likelihood, Gaussian):
            raise ValueError(
                f"{what} needs a Gaussian likelihood; this model has a "
                f"{type(self.likelihood).__name__} likelihood."
            )

    # GPRFITC's objective and its parts, as gpflow.models.GPRFITC computes them, for code
    # written for GPRFITC: the alpha = 1 member with one factor per point, at this model's
    # kernel, inducing-variable and likelihood parameters, whatever its own alpha or blocks.
    @check_shapes("return: []")
    def fitc_log_marginal_likelihood(self) -> tf.Tensor:
        """
        FITC's objective (:cite:t:`snelson2006sparse`; Bui et al. 2017, Remark 2) at this
        model's parameters, ``gpflow.models.GPRFITC.fitc_log_marginal_likelihood``: equal to
        :meth:`log_marginal_likelihood` at ``alpha=1`` without blocks. Gaussian likelihoods only.
        """
        with explain_cholesky_failure():
            return GPRFITC.fitc_log_marginal_likelihood(self)  # type: ignore[arg-type]

    def common_terms(self) -> tuple[tf.Tensor, ...]:
        """The terms ``gpflow.models.GPRFITC.common_terms`` returns. Gaussian likelihoods only."""
        self._require_gaussian_likelihood("GPRFITC's objective terms")
        return GPRFITC.common_terms(self)  # type: ignore[arg-type]

    @check_shapes(
        "return[0]: [M, M]",
        "return[1]: [M, M]",
        "return[2]: [M, R]",
    )
    def whitened_posterior(self) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """
        ``(L, LB, c)`` with :math:`L L^T = K_{uu}`, :math:`q(\\mathbf u) = \\mathcal N(L L_B^{-T}
        \\mathbf c,\\; L (L_B L_B^T)^{-1} L^T)`: from the closed-form fixed point (eq. 18 and §3.6)
        or from the current sites (eqs. 119-120).
        """
        if self.inference == "closed_form":
            return collapsed_posterior(self._collapsed_problem())
        return site_whitened_posterior(
            self.kernel,
            self.inducing_variable,
            self._checked_data()[0],
            self.site_precision,
            self.site_shift,
        )

    @check_shapes(
        "return[0]: [M, R]",
        "return[1]: [M, M]",
    )
    def compute_qu(self) -> tuple[tf.Tensor, tf.Tensor]:
        """Mean and covariance of :math:`q(\\mathbf u)`, as ``gpflow.models.SGPR.compute_qu``."""
        with explain_cholesky_failure():
            L, LB, c = self.whitened_posterior()
            factor = tf.linalg.adjoint(tf.linalg.triangular_solve(LB, tf.linalg.adjoint(L)))
            mean = tf.linalg.matmul(L, tf.linalg.triangular_solve(LB, c, adjoint=True))
            return mean, tf.linalg.matmul(factor, factor, transpose_b=True)  # factor = L LB⁻ᵀ

    def posterior(
        self, precompute_cache: PrecomputeCacheType = PrecomputeCacheType.TENSOR
    ) -> PowerEPPosterior:
        """
        The posterior for (cached) predictions, built from the model's parts (see
        ``gpflow.models.SGPR.posterior``): its cache follows the kernel, likelihood and
        inducing-variable parameters and, for ``inference="sites"``, the site variables.
        """
        sites = None
        if self.inference == "sites":
            sites = (self.site_precision, self.site_shift)
        with explain_cholesky_failure():
            return self._posterior_class(
                self.kernel,
                self._checked_data(),
                self.inducing_variable,
                self.likelihood,
                self.num_latent_gps,
                self.mean_function,
                alpha=None if sites is not None else self.alpha,
                blocks=self._partition(),
                sites=sites,
                precompute_cache=precompute_cache,
            )

    @inherit_check_shapes
    def predict_f(
        self, Xnew: InputData, full_cov: bool = False, full_output_cov: bool = False
    ) -> MeanAndVariance:
        """Eq. 7 / 18: the exact test conditional under :math:`q(\\mathbf u)`."""
        with explain_cholesky_failure():
            return self.posterior(PrecomputeCacheType.NOCACHE).fused_predict_f(
                Xnew, full_cov=full_cov, full_output_cov=full_output_cov
            )


def _check_inference(inference: str | None, likelihood: Likelihood) -> str:
    gaussian = isinstance(likelihood, Gaussian)
    if inference is None:
        inference = "closed_form" if gaussian else "sites"
    if inference not in ("closed_form", "sites"):
        raise ValueError(f"`inference` must be 'closed_form' or 'sites', got {inference!r}.")
    if inference == "closed_form" and not gaussian:
        raise ValueError(
            f"`inference='closed_form'` needs a Gaussian likelihood, got "
            f"{type(likelihood).__name__}; use `inference='sites'` (Power-EP site updates)."
        )
    if inference == "sites" and not isinstance(likelihood, ScalarLikelihood):
        raise TypeError(
            "Power-EP site updates need a scalar likelihood with one latent GP "
            f"(a gpflow.likelihoods.ScalarLikelihood), got {type(likelihood).__name__}."
        )
    return inference


class FITC(PowerEPSGP):
    """
    FITC (Snelson & Ghahramani 2006): :class:`PowerEPSGP` with :math:`\\alpha = 1` (Bui et al.
    2017, Remark 2), the same objective and predictions as ``gpflow.models.GPRFITC``.
    """

    def __init__(self, data: RegressionData, kernel: Kernel, inducing_variable: Any, **kwargs: Any):
        super().__init__(data, kernel, inducing_variable, alpha=1.0, **kwargs)


class VFE(PowerEPSGP):
    """
    Titsias's variational free energy: the limit :math:`\\alpha \\to 0` of :class:`PowerEPSGP`
    (Remark 3), the same bound and predictions as ``gpflow.models.SGPR``.
    """

    def __init__(self, data: RegressionData, kernel: Kernel, inducing_variable: Any, **kwargs: Any):
        super().__init__(data, kernel, inducing_variable, alpha=0.0, **kwargs)


class PITC(PowerEPSGP):
    """
    PITC (Quiñonero-Candela & Rasmussen 2005): block factors with :math:`\\alpha_b = 1`
    (Remark 5), objective :math:`\\log \\mathcal N(\\mathbf y; \\mathbf 0, Q_{ff} +
    \\mathrm{blkdiag}(D_{bb}) + \\sigma^2 I)`. Needs ``blocks`` or ``block_size``.
    """

    def __init__(self, data: RegressionData, kernel: Kernel, inducing_variable: Any, **kwargs: Any):
        if kwargs.get("blocks") is None and kwargs.get("block_size") is None:
            raise ValueError("PITC needs `blocks` (a partition of the data rows) or `block_size`.")
        super().__init__(data, kernel, inducing_variable, alpha=1.0, **kwargs)


class DTC(PowerEPSGP):
    """
    Deterministic training conditional (Seeger et al. 2003; also PLV/PPA): objective
    :math:`\\log \\mathcal N(\\mathbf y; \\mathbf 0, Q_{ff} + \\sigma^2 I)`. Not a Power-EP
    energy: it lacks VFE's :math:`-\\mathrm{tr}(K_{ff} - Q_{ff}) / 2\\sigma^2` and is the
    :math:`\\alpha \\to 0` member of the :math:`\\alpha`-generative family (eq. 4). Its posterior
    and predictions are VFE's.
    """

    _includes_power_correction = False

    def __init__(self, data: RegressionData, kernel: Kernel, inducing_variable: Any, **kwargs: Any):
        super().__init__(data, kernel, inducing_variable, alpha=0.0, **kwargs)
