"""
VNNGP: the variational nearest-neighbour Gaussian process of Wu, Pleiss & Cunningham,
*Variational nearest neighbor Gaussian process* (ICML 2022).
"""

from typing import Any

import gpflow
import numpy as np
import tensorflow as tf
from check_shapes import check_shapes, inherit_check_shapes
from gpflow.base import InputData, MeanAndVariance, Parameter
from gpflow.config import default_float, default_jitter
from gpflow.kernels import Kernel
from gpflow.likelihoods import Likelihood
from gpflow.mean_functions import MeanFunction
from gpflow.models import ExternalDataTrainingLossMixin, GPModel
from gpflow.posteriors import PrecomputeCacheType
from gpflow.utilities import positive

from ..neighbors import (
    graph_find_rows,
    graph_nearest_neighbors,
    lexicographic_order,
    nearest_neighbors,
    sequential_nearest_neighbors,
)
from ..posteriors import VNNGPPosterior
from ..validation import (
    as_checked_batch,
    check_count,
    check_kernel,
    check_num_data,
    check_regression_data,
    check_shape,
    checked_batch,
    checked_indices,
    checked_inputs,
    checked_xnew,
    checks_arguments,
    explain_cholesky_failure,
    inducing_input_dim,
    is_checked_batch,
    require,
)
from .base import ConstructorOnly, InfiniteLossOnCholeskyFailure

__all__ = ["VNNGP", "VNNGPPosterior"]

Q_FAMILIES = ("mean_field", "nearest_neighbor")  # VNNGP's variational families of q(u)
KL_ESTIMATES = ("inducing_batch", "data_batch")  # how VNNGP.elbo estimates the KL


def _checked_batch(model: "VNNGP", data: Any, allow_empty: bool = False) -> tuple[Any, ...]:
    """
    A batch ``(X, Y)`` or ``(X, Y, neighbors)``, checked and cast
    (:func:`~gpflow_tight.validation.checked_batch`); ``neighbors`` must be integer rows [B, K]
    of inducing points (in [0, M)), one row per row of X.
    """
    if is_checked_batch(data):  # e.g. training_loss -> elbo: checked once
        return tuple(data)
    checked = checked_batch(
        data,
        input_dim=inducing_input_dim(model.inducing_variable),
        cast_integer_labels=isinstance(model.likelihood, gpflow.likelihoods.Gaussian),
        allow_empty=allow_empty,
    )
    if len(checked) > 2:
        neighbors = tf.convert_to_tensor(checked[2])
        rows = checked[0].shape[0]
        if (
            not neighbors.dtype.is_integer
            or neighbors.shape.rank != 2
            or neighbors.shape[1] == 0
            or None not in (rows, neighbors.shape[0])
            and rows != neighbors.shape[0]
        ):
            raise ValueError(
                "`data` neighbors must be integer rows [N, K] (K >= 1) of inducing points, one "
                f"row per row of X ({rows}), got dtype {neighbors.dtype.name} and shape "
                f"{tuple(neighbors.shape)}; build `data` with `model.training_data(X, Y)`."
            )
        num_inducing = int(model.inducing_variable.Z.shape[0])
        neighbors = checked_indices(neighbors, num_inducing, "data neighbors", size_name="M")
        checked = as_checked_batch(*checked[:2], neighbors, *checked[3:])
    return checked


def _checked_test_data(model: "VNNGP", data: Any) -> tuple[Any, ...]:
    return _checked_batch(model, data, allow_empty=True)


@checks_arguments(_checked_test_data, "data", "predict_log_density")
@checks_arguments(checked_xnew, "Xnew", "predict_f", "predict_y", "predict_f_samples", "predict_g")
@checks_arguments(
    _checked_batch, "data", "training_loss", "maximum_log_likelihood_objective", "elbo"
)
class VNNGP(InfiniteLossOnCholeskyFailure, ConstructorOnly, GPModel, ExternalDataTrainingLossMixin):
    """
    Variational nearest-neighbour GP :cite:p:`wu2022variational`: a mean-field
    :math:`q(\\mathbf u) = \\prod_j \\mathcal N(u_j; m_j, s_j)` against the nearest-neighbour
    (Vecchia) prior :math:`p(\\mathbf u) \\approx \\prod_j p(u_j \\mid \\mathbf u_{n(j)})`, where
    :math:`n(j)` holds the ``num_neighbors`` nearest inducing points among those earlier in a
    (random) ordering, and :math:`p(f_i \\mid \\mathbf u) \\approx p(f_i \\mid \\mathbf u_{n(i)})`
    with :math:`n(i)` the nearest inducing points of :math:`\\mathbf x_i`. The ELBO (eq. 12)

    .. math::
        \\sum_i \\mathbb E_{q(f_i)}[\\log p(y_i \\mid f_i)] - \\sum_j \\mathbb E_{q(\\mathbf
        u_{n(j)})} \\mathrm{KL}[q(u_j) \\,\\|\\, p(u_j \\mid \\mathbf u_{n(j)})]

    factorises over data and inducing points (eqs. 13-16, 25, 28), so a step costs
    :math:`O((B + B_u) K^3)` for a data batch of size B and an inducing batch of size
    :math:`B_u`, whatever N and M. Inducing points are usually the training inputs (M = N).

    - Data batches are ``(X, Y)`` or ``(X, Y, neighbors)``, where ``neighbors`` [B, K] are the
      rows of ``model.neighbors(X)``, computed once for the training inputs (with
      ``scipy.spatial.cKDTree``; use :meth:`training_data` to build the triple). Without them the
      nearest inducing points are found in the graph by
      :func:`~gpflow_tight.neighbors.graph_nearest_neighbors`, :math:`O(BMD)` time and
      :math:`O(BK)` memory; both searches break ties towards the lower row of Z.
    - A data point that is an inducing input (Z = X) reads :math:`q(f_i) = q(u_j)` exactly, with
      no kernel work and no jitter (``p(f_i | u_{n(i)})`` is a point mass there); plain
      ``(X, Y)`` batches find such rows in Z by
      :func:`~gpflow_tight.neighbors.graph_find_rows`, :math:`O(BD \\log M)`, and search
      neighbours only when some row is not one.
    - Repeated inducing inputs (one inducing point per training row, repeats included, as
      GPyTorch keeps them; ``from_data(..., inducing_inputs="rows")``) need a positive
      ``jitter``, which keeps their covariance non-singular; each repeat is its own
      :math:`u_j`. Training batches are then :meth:`training_data` triples, whose neighbour rows
      start with each row's own inducing point; plain ``(X, Y)`` batches are refused.
    - The KL of a step (``kl_estimate``): by default (``"inducing_batch"``) the exact KL, or,
      with ``inducing_batch_size``, an unbiased estimate (eq. 19) on that many inducing points
      drawn uniformly with replacement, independently of the data batch. ``"data_batch"``
      estimates it on the data batch's own inducing points, as GPyTorch's
      ``NNVariationalStrategy`` does at Z = X: every row of a batch must be an inducing input,
      row i contributes :math:`\\mathrm{KL}_{j(i)} / c_{j(i)}` (``data_multiplicity``
      :math:`c_j`: how many training rows sit at :math:`\\mathbf z_j`, 1 by default), scaled
      by ``num_data / B``. That is unbiased for any batch drawn uniformly from the training
      rows and exact for the whole training set; the KL pull on :math:`q(u_j)` then arrives in
      the same step as its data term. An explicit ``inducing_indices`` argument of
      :meth:`elbo` overrides either.
    - Predictions (:meth:`posterior`, a :class:`~gpflow_tight.posteriors.VNNGPPosterior`) use
      the ``num_neighbors_predict`` (default ``num_neighbors``) nearest inducing points of each
      test input (eqs. 9, 25), found by the same graph search eagerly, under ``tf.function`` and
      in an exported SavedModel, in chunks of ``prediction_batch_size`` rows.
    - The same jitter :math:`\\epsilon` (``jitter``; by default GPflow's
      ``gpflow.config.default_jitter()``, read when a loss or prediction is computed or
      traced, as GPflow's models do) is added to every neighbour block and to :math:`F_j`, so
      the prior is exactly the Vecchia approximation of :math:`K_{ZZ} + \\epsilon I`. With
      M = N on dense, smooth data GPflow's 1e-6 makes the conditional variances :math:`F_j`
      tiny and the KL stiff, which slows Adam badly; :meth:`from_data` uses 1e-3, GPyTorch's
      ``jitter_val`` with which the paper's results were made
      (``benchmarks/results/vnngp_uci_paper.md``).

    - ``q="nearest_neighbor"`` (the paper's Appendix B, with the spec's errata) replaces the
      mean-field q by :math:`q(\\mathbf u) = \\mathcal N(\\mathbf m, \\tilde L\\tilde L^\\top)` with
      a sparse lower-triangular factor on the prior's pattern: row j of :math:`\\tilde L` holds
      ``q_sqrt[j]`` (positive) on the diagonal and ``q_sqrt_offdiag[j, k]`` in column
      ``prior_neighbors[j, k]`` (k < K; -1 marks padding, whose entries are ignored). The ELBO
      still factorises over data and inducing points: :math:`q(f_i)` has variance
      :math:`c_i + \\mathbf a_i^\\top S_{n(i)n(i)}\\mathbf a_i` and the KL is
      :math:`\\tfrac12\\sum_j[\\log F_j - \\log\\tilde L_{jj}^2 - 1 + (\\mathbf w_j^\\top
      S_{[j][j]}\\mathbf w_j + (\\mathbf w_j^\\top(\\mathbf m - \\boldsymbol\\mu)_{[j]})^2)/F_j]`
      with :math:`[j] = \\{j\\} \\cup n(j)` and :math:`\\mathbf w_j = (1, -\\mathbf b_j)`. Each
      quadratic form :math:`\\|\\sum_r w_r\\tilde L_{r,:}\\|^2` gathers K + 1 rows of the factor,
      so a step still costs :math:`O((B + B_u)K^3)` and touches only the rows it uses.

    With ``num_neighbors = M - 1`` the KL is the full SVGP KL for a diagonal q(u) (for a full
    one with ``q="nearest_neighbor"``); with also ``num_neighbors_predict = M`` the model equals
    ``gpflow.models.SVGP(q_diag=True, whiten=False)`` (``q_diag=False`` with the factor's
    Cholesky form). If the inducing inputs move, call :meth:`update_neighbors` (and recompute
    the data neighbours).

    ``num_neighbors``, ``num_neighbors_predict``, ``inducing_batch_size``,
    ``prediction_batch_size``, ``num_data``, ``ordering``, ``q``, ``jitter``, ``kl_estimate`` and
    ``data_multiplicity`` are fixed at construction:
    compiled functions would keep the values they were traced with, so assigning them raises
    an ``AttributeError`` (and the ``ordering`` array is read-only); build a new model instead.
    Every batch a loss sees and every ``Xnew`` is checked first (:mod:`gpflow_tight.validation`:
    a ``ValueError``/``TypeError`` naming ``data`` or ``Xnew``, or inside a compiled step a
    graph assertion with the same message); data of another real dtype are cast to GPflow's
    default float, once noted.

    GPflow's ``print_summary``, ``freeze``, ``deepcopy``, ``set_trainable`` and
    ``parameter_dict``/``multiple_assign`` work as for ``SVGP``.

    :param inducing_variable: inducing inputs [M, D] (an array or ``InducingPoints``); they are
        not trained by default (``trainable=False``), as in the paper.
    :param num_neighbors: K, 1 ≤ K ≤ M - 1.
    :param ordering: ``"random"`` (the paper; a permutation drawn with ``seed``) or ``"given"``.
    :param q_mu: initial means [M, L] (default 0); ``q_sqrt``: standard deviations [M, L]
        (default 1), the diagonal of the factor for ``q="nearest_neighbor"``.
    :param q: ``"mean_field"`` (the paper's eq. 10) or ``"nearest_neighbor"`` (Appendix B).
    :param q_sqrt_offdiag: initial off-diagonal entries [M, K, L] of the factor, in the columns
        of :attr:`prior_neighbors` (default 0: the mean-field q); ``q="nearest_neighbor"`` only.
    :param jitter: :math:`\\epsilon`, added to every neighbour covariance block and conditional
        variance (≥ 0; ``None``, the default: ``gpflow.config.default_jitter()`` whenever it is
        used).
    :param kl_estimate: ``"inducing_batch"`` (the exact KL, or ``inducing_batch_size`` inducing
        points drawn uniformly) or ``"data_batch"`` (the data batch's own inducing points).
    :param data_multiplicity: for ``kl_estimate="data_batch"``, the number of training rows at
        each inducing input, integers [M] ≥ 1 summing to ``num_data`` (default: one each, Z = X
        with distinct rows; without ``num_data`` every batch must have that many rows, the
        whole training set); :meth:`from_data` sets it.
    """

    _constructor_only = (
        "num_neighbors",
        "num_neighbors_predict",
        "inducing_batch_size",
        "prediction_batch_size",
        "num_data",
        "ordering",
        "q",
        "jitter",
        "kl_estimate",
        "data_multiplicity",
    )

    def __init__(
        self,
        kernel: Kernel,
        likelihood: Likelihood,
        inducing_variable: Any,
        num_neighbors: int,
        *,
        mean_function: MeanFunction | None = None,
        num_latent_gps: int = 1,
        q_mu: np.ndarray | None = None,
        q_sqrt: np.ndarray | None = None,
        num_data: int | None = None,
        num_neighbors_predict: int | None = None,
        inducing_batch_size: int | None = None,
        prediction_batch_size: int = 10_000,
        ordering: str = "random",
        seed: int = 0,
        q: str = "mean_field",
        q_sqrt_offdiag: np.ndarray | None = None,
        jitter: float | None = None,
        kl_estimate: str = "inducing_batch",
        data_multiplicity: np.ndarray | None = None,
    ) -> None:
        check_num_data(num_data)
        if jitter is not None:
            if isinstance(jitter, bool) or not isinstance(jitter, float | int | np.floating):
                raise TypeError(f"`jitter` must be a float or None, got {jitter!r}.")
            if not np.isfinite(jitter) or jitter < 0:
                raise ValueError(f"`jitter` must be finite and non-negative, got {jitter}.")
            jitter = float(jitter)
        if not isinstance(q, str) or q not in Q_FAMILIES:
            raise ValueError(
                f"`q` must be one of {', '.join(map(repr, Q_FAMILIES))} (the variational family "
                f"of q(u)), got {q!r}."
            )
        if q_sqrt_offdiag is not None and q != "nearest_neighbor":
            raise ValueError(
                "`q_sqrt_offdiag` (the off-diagonal entries of q(u)'s factor) needs "
                "`q='nearest_neighbor'`; a mean-field q has none."
            )
        super().__init__(kernel, likelihood, mean_function, num_latent_gps)
        if isinstance(inducing_variable, gpflow.inducing_variables.InducingPoints):
            Z = inducing_variable.Z.numpy()
        elif isinstance(inducing_variable, gpflow.inducing_variables.InducingVariables):
            raise TypeError(
                "`inducing_variable` of VNNGP must be inducing points, an array [M, D] or "
                "`gpflow.inducing_variables.InducingPoints`: its prior conditions each f(z_j) "
                f"on the values at its nearest neighbours; got {type(inducing_variable).__name__}."
            )
        else:
            Z = np.asarray(inducing_variable, dtype=float)
        # rows distinct in the model's dtype, or repeats kept apart by the jitter
        self._repeated_inputs = _check_inducing_inputs(
            Z.astype(default_float()), allow_repeats=jitter is not None and jitter > 0
        )
        check_kernel(kernel, Z.shape[1])
        num_inducing = len(Z)
        self.num_neighbors = check_count(
            num_neighbors,
            "num_neighbors",
            maximum=num_inducing - 1,
            hint=" (K = M - 1 already gives the exact prior)",
        )
        self.num_neighbors_predict = check_count(
            num_neighbors if num_neighbors_predict is None else num_neighbors_predict,
            "num_neighbors_predict",
            maximum=num_inducing,
        )
        if inducing_batch_size is not None:
            inducing_batch_size = check_count(inducing_batch_size, "inducing_batch_size")
        self.inducing_batch_size = inducing_batch_size
        self.prediction_batch_size = check_count(prediction_batch_size, "prediction_batch_size")
        self.num_data = num_data
        self.jitter = jitter
        self.kl_estimate = kl_estimate
        self.data_multiplicity = _checked_multiplicity(
            kl_estimate, data_multiplicity, inducing_batch_size, num_inducing, num_data
        )
        if self.data_multiplicity is not None:  # each inducing input's KL weight 1 / c_j
            self._kl_weights = tf.constant(1 / self.data_multiplicity, dtype=default_float())
        # Created untrainable rather than by `gpflow.set_trainable` afterwards: under a
        # tf.distribute strategy the mirrored variable would stay trainable.
        self.inducing_variable = gpflow.inducing_variables.InducingPoints(
            Parameter(Z, trainable=False, dtype=default_float())
        )

        if ordering == "random":
            order = np.random.default_rng(seed).permutation(num_inducing)
        elif ordering == "given":
            order = np.arange(num_inducing)
        else:
            raise ValueError(f"`ordering` must be 'random' or 'given', got {ordering!r}.")
        order.setflags(write=False)  # fixed at construction, also in place
        self.ordering = order
        self.q = q
        self.q_sqrt_offdiag: Any = None  # set below for q="nearest_neighbor"
        # One int64 table, padded with -1 (no boolean mask variable: GPflow's print_summary
        # rounds every variable's value, which numpy refuses for booleans).
        self._prior_table = tf.Variable(
            tf.fill([num_inducing, self.num_neighbors], tf.constant(-1, tf.int64)),
            trainable=False,
        )
        # Z's rows in lexicographic order, for finding data rows that are inducing inputs.
        self._sorted_rows = tf.Variable(tf.range(num_inducing, dtype=tf.int64), trainable=False)
        self.update_neighbors()
        self._sampler = tf.random.Generator.from_seed(seed)

        shape = (num_inducing, num_latent_gps)
        q_mu = np.zeros(shape) if q_mu is None else np.asarray(q_mu, dtype=float)
        q_sqrt = np.ones(shape) if q_sqrt is None else np.asarray(q_sqrt, dtype=float)
        check_shape(q_mu, shape, "q_mu", "[M, L]")
        check_shape(q_sqrt, shape, "q_sqrt", "[M, L]")
        if not np.all(np.isfinite(q_mu)) or not np.all(np.isfinite(q_sqrt)) or np.any(q_sqrt <= 0):
            raise ValueError("`q_mu` must be finite and `q_sqrt` finite and strictly positive.")
        self.q_mu = Parameter(q_mu, dtype=default_float())
        self.q_sqrt = Parameter(q_sqrt, transform=positive())
        if q == "nearest_neighbor":
            shape_off = (num_inducing, self.num_neighbors, num_latent_gps)
            if q_sqrt_offdiag is None:
                q_sqrt_offdiag = np.zeros(shape_off)
            q_sqrt_offdiag = np.array(q_sqrt_offdiag, dtype=float)
            check_shape(q_sqrt_offdiag, shape_off, "q_sqrt_offdiag", "[M, K, L]")
            if not np.all(np.isfinite(q_sqrt_offdiag)):
                raise ValueError("`q_sqrt_offdiag` must be finite.")
            q_sqrt_offdiag[self._prior_table.numpy() < 0] = 0.0  # padding: no column
            self.q_sqrt_offdiag = Parameter(q_sqrt_offdiag, dtype=default_float())

    @classmethod
    def from_data(
        cls,
        data: Any,
        kernel: Kernel,
        likelihood: Likelihood,
        num_neighbors: int,
        *,
        q_sqrt_scale: float = 0.1,
        inducing_inputs: str = "distinct",
        **kwargs: Any,
    ) -> "VNNGP":
        """
        The paper's set-up for training data ``data = (X, Y)``: one inducing input per distinct
        row of X (or per row, ``inducing_inputs="rows"``, below), ``num_data = N`` and, for a
        Gaussian likelihood, q(u) started at the data: ``q_mu`` the mean target of the rows at
        each inducing input, ``q_sqrt`` = ``q_sqrt_scale`` times the standard deviation of each
        target column. With M = N, :math:`u_j` is the function at
        :math:`\\mathbf x_j`, so the targets are a guess the data term agrees with at once;
        the constructor's default (q_mu = 0, q_sqrt = 1, as in the paper) must first learn all
        N means through the KL's coupling, which takes far more epochs
        (``benchmarks/results/vnngp_init.md``). Other likelihoods keep the constructor's start.

        The jitter defaults to 1e-3, GPyTorch's ``jitter_val``, with which the paper's results
        were made, rather than GPflow's 1e-6: with M = N on dense, smooth data the Vecchia
        conditional variances :math:`F_j` of :math:`K_{ZZ} + \\epsilon I` are then bounded below
        by ε, and the KL is far less stiff. At the paper's size (pol, 300 epochs) this took the
        test NLL from -0.75 to -1.07, past GPyTorch's -1.00 at the same settings
        (``benchmarks/results/vnngp_uci_paper.md``). Pass ``jitter=`` to choose another.

        The KL is estimated on each data batch's own inducing points (``kl_estimate=
        "data_batch"``, with ``data_multiplicity`` the number of rows at each distinct input),
        as GPyTorch does: exact for the whole training set, unbiased for minibatches at
        :math:`O(BK^3)` a step. Against 256 inducing points drawn uniformly it took the test
        NLL on kin40k from -0.38 to -0.45 (GPyTorch -0.46;
        ``benchmarks/results/vnngp_uci_paper.md``). Given ``inducing_batch_size``, the KL is
        on that many points drawn uniformly instead (``kl_estimate="inducing_batch"``).

        ``inducing_inputs="rows"`` keeps an inducing point per training row, repeats of an
        input included, as GPyTorch's ``NNVariationalStrategy`` does at Z = X: each repeat is
        its own :math:`u_i`, kept apart from the others by the jitter (which must be positive),
        and each row's data term reads its own :math:`q(u_i)`, so training batches must be
        :meth:`training_data` triples (plain ``(X, Y)`` batches are refused: an input alone
        cannot say which repeat it is). On the KEGG sets, where a third of the rows are
        distinct, it took the test NLL from -0.940, -0.999 and -1.002 to -0.957, -1.104 and
        -1.085 on three splits, about GPyTorch's (-0.968, -1.103, -1.088), at 1.2-1.8 times the
        training time; on KEGGU it changed nothing (two splits). Those runs moved the k-th
        repeat by k × 1e-7 instead: the same model up to the moves' first-order change of the
        kernel values (a test checks it; ``benchmarks/results/vnngp_uci_paper.md``, "The
        inducing set"). Without repeated inputs the two settings differ only in the order of Z
        (``"distinct"`` sorts it), and so in the random ordering of the prior.

        :param q_sqrt_scale: the initial standard deviations of q(u) as a fraction of each
            target column's standard deviation (Gaussian likelihood only).
        :param inducing_inputs: ``"distinct"`` (one inducing point per distinct input, the
            default) or ``"rows"`` (one per training row).
        :param kwargs: the constructor's other keyword arguments (``num_data`` defaults to N,
            ``jitter`` to 1e-3, ``kl_estimate`` as above); ``q_mu``, ``q_sqrt``,
            ``num_latent_gps`` and ``data_multiplicity`` are set here.
        """
        for name in ("q_mu", "q_sqrt", "num_latent_gps", "data_multiplicity"):
            if name in kwargs:
                raise TypeError(
                    f"`VNNGP.from_data` sets `{name}` from the data; build the model with "
                    f"`VNNGP(...)` to give your own `{name}`."
                )
        if not np.isfinite(q_sqrt_scale) or q_sqrt_scale <= 0:
            raise ValueError(f"`q_sqrt_scale` must be finite and positive, got {q_sqrt_scale}.")
        X, Y = check_regression_data(data, "data")
        if inducing_inputs == "rows":
            Z, rows = X, np.arange(len(X))
        elif inducing_inputs == "distinct":
            Z, rows = np.unique(X, axis=0, return_inverse=True)
            rows = rows.reshape(-1)
        else:
            raise ValueError(
                f"`inducing_inputs` must be 'distinct' or 'rows', got {inducing_inputs!r}."
            )
        kwargs.setdefault("num_data", len(X))
        kwargs.setdefault("jitter", FROM_DATA_JITTER)
        uniform = kwargs.get("inducing_batch_size") is not None
        kwargs.setdefault("kl_estimate", "inducing_batch" if uniform else "data_batch")
        counts = np.bincount(rows, minlength=len(Z))
        if kwargs["kl_estimate"] == "data_batch":
            if kwargs["num_data"] not in (None, len(X)):
                raise ValueError(
                    f"`num_data` ({kwargs['num_data']}) must be N = {len(X)}, the rows of `data`, "
                    "for kl_estimate='data_batch' (the KL of each row's own inducing input); "
                    "pass `kl_estimate='inducing_batch'` to scale to another N."
                )
            kwargs["data_multiplicity"] = counts
        shape = (len(Z), Y.shape[1])
        q_mu, q_sqrt = np.zeros(shape), np.ones(shape)
        if isinstance(likelihood, gpflow.likelihoods.Gaussian):
            np.add.at(q_mu, rows, Y)
            q_mu /= counts[:, None]
            spread = Y.std(axis=0)
            q_sqrt = q_sqrt * q_sqrt_scale * np.where(spread > 0, spread, 1.0)
        return cls(kernel, likelihood, Z, num_neighbors, num_latent_gps=Y.shape[1], q_mu=q_mu,
                   q_sqrt=q_sqrt, **kwargs)  # fmt: skip

    # ---------------------------------------------------------------------------------------
    # neighbours

    @property
    def prior_neighbors(self) -> np.ndarray:
        """
        The prior neighbour table [M, K]: row j holds the rows of Z in :math:`n(j)` (the nearest
        among those earlier in the ordering), padded with -1; for ``q="nearest_neighbor"`` also
        the columns of ``q_sqrt_offdiag[j]`` in the factor of q(u).
        """
        return np.asarray(tf.convert_to_tensor(self._prior_table))

    def update_neighbors(self) -> None:
        """
        Recompute the prior neighbour table :math:`n(j)` from the current inducing inputs. For
        ``q="nearest_neighbor"`` an off-diagonal entry of q(u)'s factor keeps its value where its
        column is still a neighbour of its row, and is set to 0 where it is not.
        """
        if not isinstance(self._prior_table, tf.Variable):
            raise TypeError(
                "update_neighbors() needs a model whose neighbour table is a variable; this "
                "one is a constant (a model from `gpflow.utilities.freeze`, whose inducing "
                "inputs cannot move either). Call it on the original model and freeze that again."
            )
        Z = self.inducing_variable.Z.numpy()
        _check_inducing_inputs(Z, allow_repeats=self._repeated_inputs)
        index, mask = sequential_nearest_neighbors(Z[self.ordering], self.num_neighbors)
        table = np.empty_like(index)
        table[self.ordering] = np.where(mask, self.ordering[index], -1)  # positions to rows of Z
        if isinstance(self.q_sqrt_offdiag, Parameter):
            old_table = self._prior_table.numpy()
            values = self.q_sqrt_offdiag.numpy()
            moved = np.zeros_like(values)
            for start in range(0, len(table), 4096):  # O(chunk K^2) memory
                rows = slice(start, start + 4096)
                same = (table[rows, :, None] == old_table[rows, None, :]) & (
                    table[rows, :, None] >= 0
                )
                moved[rows] = np.einsum("mkc,mcl->mkl", same, values[rows])
            self.q_sqrt_offdiag.assign(moved)
        self._prior_table.assign(table)
        self._sorted_rows.assign(lexicographic_order(Z))

    def neighbors(self, X: np.ndarray, k: int | None = None) -> np.ndarray:
        """
        Rows [N, k] of the ``k`` (default ``num_neighbors_predict``) nearest inducing inputs,
        nearest first, from a k-d tree (eagerly, once); the same as the graph search's.

        With repeated inducing inputs (one inducing point per training row), X equal to the
        inducing inputs row for row gets row i's own inducing point first in row i, where its
        data term reads :math:`q(u_i)` (:meth:`_q_g`); other inputs that equal a repeated
        inducing input are refused, since which repeat they are is unknown.
        """
        k = self.num_neighbors_predict if k is None else k
        queries = checked_inputs(X, input_dim=inducing_input_dim(self.inducing_variable), name="X")
        if len(queries.shape) != 2:
            raise ValueError(f"`X` must be a 2-D array [N, D], got shape {tuple(queries.shape)}.")
        Z, queries = self.inducing_variable.Z.numpy(), queries.numpy()
        found = nearest_neighbors(Z, queries, k)
        if not self._repeated_inputs:
            return found
        if queries.shape == Z.shape and np.array_equal(queries, Z):
            own = np.arange(len(Z))[:, None]
            # the own row is among the nearest (distance 0) or ties with the first: put it first
            first = np.where(found == own, found[:, :1], found)
            return np.concatenate([own, first[:, 1:]], axis=1)
        _, copy_of, copies = np.unique(Z, axis=0, return_inverse=True, return_counts=True)
        nearest = found[:, 0]
        repeated = np.all(queries == Z[nearest], axis=1) & (
            copies[copy_of.reshape(-1)[nearest]] > 1
        )
        if np.any(repeated):
            raise ValueError(
                "`X`: some rows equal a repeated inducing input (this model has one inducing "
                "point per training row), and which repeat a row is cannot be told from its "
                "input: give the whole training set in the order of `model.inducing_variable.Z` "
                "(`training_data`) and slice the triple for minibatches; predict with "
                "`predict_f`."
            )
        return found

    def training_data(self, X: np.ndarray, Y: np.ndarray) -> tuple[np.ndarray, ...]:
        """
        ``(X, Y, neighbors)`` for :meth:`elbo`: the neighbours are looked up once
        (:meth:`neighbors`; with repeated inducing inputs, X must be the inducing inputs row for
        row). X and Y are checked (:func:`~gpflow_tight.validation.check_regression_data`) and
        cast to GPflow's default float.
        """
        X, Y = check_regression_data(
            (X, Y), "data", input_dim=inducing_input_dim(self.inducing_variable)
        )
        return X, Y, self.neighbors(X)

    # ---------------------------------------------------------------------------------------
    # conditionals

    def _q_rows(self, indices: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """
        :math:`m_j - \\mu(\\mathbf z_j)` and :math:`s_j` for the inducing points ``indices``
        (any shape; the result has a trailing latent axis). Only these rows are transformed,
        so a step does no O(M) work.
        """
        flat = tf.reshape(indices, [-1])
        residual = tf.gather(self.q_mu, flat) - self.mean_function(
            tf.gather(self.inducing_variable.Z, flat)
        )
        q_sqrt = self.q_sqrt
        if isinstance(q_sqrt, Parameter) and q_sqrt.transform is not None:
            std = q_sqrt.transform.forward(tf.gather(q_sqrt.unconstrained_variable, flat))
        else:  # a constant (`gpflow.utilities.freeze`) or a parameter without a transform
            std = tf.gather(tf.convert_to_tensor(q_sqrt), flat)
        shape = tf.concat([tf.shape(indices), [-1]], axis=0)
        if self.q_sqrt_offdiag is not None:  # the variances S_jj = ‖L̃_{j,:}‖²
            _, off_diagonal, columns = self._factor_rows(flat)
            off_diagonal = off_diagonal * tf.cast(columns >= 0, std.dtype)[..., None]
            variances = tf.square(std) + tf.reduce_sum(tf.square(off_diagonal), axis=-2)
            return tf.reshape(residual, shape), tf.reshape(variances, shape)
        return tf.reshape(residual, shape), tf.reshape(tf.square(std), shape)

    def _factor_rows(self, indices: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """
        Rows ``indices`` (any shape) of q(u)'s factor for ``q="nearest_neighbor"``: the
        diagonal [..., L], the off-diagonal entries [..., K, L] and their columns [..., K] (-1
        for padding). Only these rows are gathered and transformed.
        """
        q_sqrt = self.q_sqrt
        if isinstance(q_sqrt, Parameter) and q_sqrt.transform is not None:
            diagonal = q_sqrt.transform.forward(tf.gather(q_sqrt.unconstrained_variable, indices))
        else:
            diagonal = tf.gather(tf.convert_to_tensor(q_sqrt), indices)
        off = self.q_sqrt_offdiag
        if isinstance(off, Parameter) and off.transform is not None:
            off_diagonal = off.transform.forward(tf.gather(off.unconstrained_variable, indices))
        elif isinstance(off, Parameter):
            off_diagonal = tf.gather(off.unconstrained_variable, indices)
        else:
            off_diagonal = tf.gather(tf.convert_to_tensor(off), indices)
        return diagonal, off_diagonal, tf.gather(self._prior_table, indices)

    def _factor_quadratic_form(self, rows: tf.Tensor, weights: tf.Tensor) -> tf.Tensor:
        """:math:`\\mathbf w^\\top S_{\\mathbf r\\mathbf r}\\mathbf w` [B, L] for rows [B, R]."""
        diagonal, off_diagonal, columns = self._factor_rows(rows)
        return VNNGPPosterior.factor_quadratic_form(rows, weights, diagonal, off_diagonal, columns)

    def _q_g(self, X: tf.Tensor, neighbors: tf.Tensor) -> MeanAndVariance:
        """
        Eq. 25 without the mean function at X: the marginals of q(f) - μ(X), [B, L] each.

        A row of X that equals one of its neighbours' inducing inputs :math:`\\mathbf z_j`
        (bit for bit; the first such neighbour where Z has repeated rows, which
        :meth:`training_data` makes the row's own) reads :math:`q(f_i) = q(u_j)` exactly:
        :math:`p(f_i \\mid \\mathbf u_{n(i)})` is then a point mass at :math:`u_j`, which eq. 25
        only approaches through :math:`K_{nn} + \\epsilon I`.
        This is GPyTorch's data term at Z = X. When every row is such a row (a batch of
        training inputs with Z = X) no kernel is evaluated at all.
        """
        Z = self.inducing_variable.Z
        nearest = neighbors[:, 0]
        nearest_is_x = tf.reduce_all(tf.equal(X, tf.gather(Z, nearest)), axis=-1)  # [B]

        def from_q_u() -> MeanAndVariance:  # every row is its nearest inducing input
            return self._q_rows(nearest)

        def conditional() -> MeanAndVariance:
            a, c = VNNGPPosterior.conditional_on_neighbors(
                self.kernel, Z, X, neighbors, jitter=self.jitter
            )
            residual, variances = self._q_rows(neighbors)  # [B, K, L]
            mean = tf.einsum("bk,bkl->bl", a, residual)
            if self.q_sqrt_offdiag is None:
                var = c[:, None] + tf.einsum("bk,bkl->bl", tf.square(a), variances)
            else:  # a_iᵀ S_{n(i)n(i)} a_i with the factor's rows
                var = c[:, None] + self._factor_quadratic_form(neighbors, a)
            # rows equal to any of their neighbours (neighbour rows in any order)
            column, found = self._equal_neighbor(X, neighbors)
            where = found[:, None]
            exact_mean = tf.gather(residual, column, axis=1, batch_dims=1)  # [B, L]
            exact_var = tf.gather(variances, column, axis=1, batch_dims=1)
            return tf.where(where, exact_mean, mean), tf.where(where, exact_var, var)

        return tf.cond(tf.reduce_all(nearest_is_x), from_q_u, conditional)

    def _q_f(self, X: tf.Tensor, neighbors: tf.Tensor) -> MeanAndVariance:
        """Eq. 25: the marginals of q(f) at X, [B, L] each."""
        mean, var = self._q_g(X, neighbors)
        return mean + self.mean_function(X), var

    def _inducing_rows(self, X: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """The row of Z each row of X equals, and whether there is one (:math:`O(BD \\log M)`,
        :func:`~gpflow_tight.neighbors.graph_find_rows`)."""
        return graph_find_rows(self.inducing_variable.Z, self._sorted_rows, X)

    def _equal_neighbor(self, X: tf.Tensor, neighbors: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """The column of the first of its ``neighbors`` [B, K] whose inducing input each row
        of X equals (bit for bit), and whether there is one (:math:`O(BKD)`)."""
        equal = tf.reduce_all(
            tf.equal(X[:, None, :], tf.gather(self.inducing_variable.Z, neighbors)), axis=-1
        )
        column = tf.argmax(tf.cast(equal, tf.int32), axis=1, output_type=tf.int32)
        return column, tf.reduce_any(equal, axis=1)

    def _rows_among_neighbors(
        self, X: tf.Tensor, neighbors: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """The inducing point of :meth:`_equal_neighbor` and whether there is one: with repeated
        inducing inputs, the row's own in :meth:`training_data`'s triples."""
        column, found = self._equal_neighbor(X, neighbors)
        rows = tf.gather(neighbors, column, axis=1, batch_dims=1)
        return tf.cast(rows, tf.int64), found

    def _refuse_unlocated(self, what: str) -> None:
        """With repeated inducing inputs, an input alone cannot say which of them is its row."""
        if self._repeated_inputs:
            raise ValueError(
                f"`data`: this model has repeated inducing inputs (one inducing point per "
                f"training row), so {what} cannot say which of them a row is: train on "
                "`model.training_data(X, Y)`, whose neighbour rows start with each row's own "
                "inducing point (slice the triple together for minibatches)."
            )

    def _q_f_searched(self, X: tf.Tensor, rows: tf.Tensor, found: tf.Tensor) -> MeanAndVariance:
        """
        Eq. 25 at X without given neighbours; ``rows, found`` from :meth:`_inducing_rows`. When
        every row of X is an inducing input, the marginals are read off q(u) with no neighbour
        search; otherwise the nearest inducing inputs are searched
        (:func:`~gpflow_tight.neighbors.graph_nearest_neighbors`, :math:`O(BMD)`) and the rows
        that are inducing inputs still read q(u) (:meth:`_q_g`).
        """
        Z = self.inducing_variable.Z

        def from_q_u() -> MeanAndVariance:
            residual, variances = self._q_rows(rows)
            return residual + self.mean_function(X), variances

        def searched() -> MeanAndVariance:
            return self._q_f(X, graph_nearest_neighbors(Z, X, self.num_neighbors_predict))

        return tf.cond(tf.reduce_all(found), from_q_u, searched)

    def predict_g(self, Xnew: InputData) -> MeanAndVariance:
        """The marginals of q(f*) - μ(x*) (eq. 25 without the mean function), [N*, L] each."""
        return self.posterior(PrecomputeCacheType.NOCACHE)._conditional_fused(Xnew)

    # ---------------------------------------------------------------------------------------
    # objective

    @check_shapes("indices: [B_u]", "weights: [B_u]", "return: []")
    def prior_kl_terms(self, indices: tf.Tensor, weights: tf.Tensor | None = None) -> tf.Tensor:
        """
        :math:`\\sum_{j} w_j \\mathrm{KL}_j` over the inducing points ``indices`` (eq. 28;
        ``weights`` default 1): each is :math:`\\tfrac12[\\log F_j - \\log s_j - 1 + (s_j +
        \\sum_l b_{jl}^2 s_{n(j)_l} + (m_j - \\mu_j - \\mathbf b_j^T(\\mathbf m_{n(j)} -
        \\boldsymbol\\mu_{n(j)}))^2) / F_j]`, summed over latent GPs.
        """
        Z = self.inducing_variable.Z
        table = tf.gather(self._prior_table, indices)
        mask = table >= 0  # rows with fewer than K predecessors are padded with -1
        neighbors = tf.where(mask, table, tf.zeros_like(table))
        epsilon = default_jitter() if self.jitter is None else self.jitter
        b, F = VNNGPPosterior.conditional_on_neighbors(
            self.kernel, Z, tf.gather(Z, indices), neighbors, mask, jitter=epsilon
        )
        F = F + epsilon  # the same ε: the Vecchia conditional of K_ZZ + εI
        b = b * tf.cast(mask, b.dtype)
        if self.q_sqrt_offdiag is not None:
            return self._factor_kl_terms(indices, neighbors, b, F, weights)
        neighbor_residual, neighbor_variances = self._q_rows(neighbors)  # [B_u, K, L]
        residual, s_j = self._q_rows(indices)  # [B_u, L]
        predicted = tf.einsum("bk,bkl->bl", b, neighbor_residual)
        spread = tf.einsum("bk,bkl->bl", tf.square(b), neighbor_variances)
        quadratic = s_j + spread + tf.square(residual - predicted)
        terms = tf.math.log(F)[:, None] - tf.math.log(s_j) - 1 + quadratic / F[:, None]
        return _weighted_half_sum(terms, weights)

    def _factor_kl_terms(
        self,
        indices: tf.Tensor,
        neighbors: tf.Tensor,
        b: tf.Tensor,
        F: tf.Tensor,
        weights: tf.Tensor | None,
    ) -> tf.Tensor:
        """
        The KL terms of ``q="nearest_neighbor"`` (Appendix B, eqs. 33-40 as corrected in the
        spec): with :math:`\\boldsymbol\\ell_j = F_j^{-1/2}\\mathbf w_j` the non-zeros of row j of
        the prior precision's factor on :math:`[j] = \\{j\\} \\cup n(j)`,
        :math:`\\tfrac12[\\log F_j - \\log\\tilde L_{jj}^2 - 1 + \\boldsymbol\\ell_j^\\top
        S_{[j][j]}\\boldsymbol\\ell_j + (\\boldsymbol\\ell_j^\\top(\\mathbf m -
        \\boldsymbol\\mu)_{[j]})^2]`, the cross terms of :math:`S` included.
        """
        indices = tf.cast(indices, neighbors.dtype)
        rows = tf.concat([indices[:, None], neighbors], axis=1)  # [B_u, K + 1]
        w = tf.concat([tf.ones_like(b[:, :1]), -b], axis=1)  # w_j = (1, -b_j)
        residual = self._q_residual(rows)  # [B_u, K + 1, L]
        innovation = tf.einsum("bk,bkl->bl", w, residual)
        diagonal, _, _ = self._factor_rows(indices)
        quadratic = self._factor_quadratic_form(rows, w) + tf.square(innovation)
        terms = tf.math.log(F)[:, None] - tf.math.log(tf.square(diagonal)) - 1
        return _weighted_half_sum(terms + quadratic / F[:, None], weights)

    def _q_residual(self, indices: tf.Tensor) -> tf.Tensor:
        """:math:`m_j - \\mu(\\mathbf z_j)` for the inducing points ``indices`` (any shape)."""
        flat = tf.reshape(indices, [-1])
        residual = tf.gather(self.q_mu, flat) - self.mean_function(
            tf.gather(self.inducing_variable.Z, flat)
        )
        return tf.reshape(residual, tf.concat([tf.shape(indices), [-1]], axis=0))

    def prior_kl(self) -> tf.Tensor:
        """The full KL, :math:`O(M K^3)`."""
        return self.prior_kl_terms(tf.range(self.inducing_variable.Z.shape[0], dtype=tf.int64))

    def elbo(self, data: Any, inducing_indices: tf.Tensor | None = None) -> tf.Tensor:
        """
        The ELBO (eq. 12), or its unbiased minibatch estimate (eq. 19): the data term scaled by
        ``num_data / B``; the KL exact, or from ``inducing_indices`` (or ``inducing_batch_size``
        points drawn uniformly with replacement) scaled by :math:`M / B_u`, or, for
        ``kl_estimate="data_batch"``, from the batch's own inducing points
        (:meth:`data_batch_kl`).

        :param data: ``(X, Y)`` or ``(X, Y, neighbors)`` with ``neighbors`` from
            :meth:`neighbors` (with repeated inducing inputs, only the triple, from
            :meth:`training_data`: a row equal to several inducing inputs reads the first of
            them among its neighbours).
        """
        X, Y = data[0], data[1]
        if len(data) > 2:
            mean, var = self._q_f(X, data[2])
        else:
            self._refuse_unlocated("a plain (X, Y) batch")
            located = self._inducing_rows(X)
            mean, var = self._q_f_searched(X, *located)
        expected = tf.reduce_sum(self.likelihood.variational_expectations(X, mean, var, Y))
        if self.num_data is not None:
            batch = tf.cast(tf.shape(X)[0], expected.dtype)
            expected *= tf.cast(self.num_data, expected.dtype) / batch
        num_inducing = self.inducing_variable.Z.shape[0]
        if inducing_indices is not None:
            inducing_indices = checked_indices(
                inducing_indices, num_inducing, "inducing_indices", size_name="M", allow_empty=False
            )
        if inducing_indices is None and self.kl_estimate == "data_batch":
            if len(data) > 2 and self._repeated_inputs:  # its own, first among its neighbours
                located = self._rows_among_neighbors(X, data[2])
            elif len(data) > 2:
                located = self._inducing_rows(X)
            return expected - self._data_batch_kl(X, *located)
        if inducing_indices is None and self.inducing_batch_size is not None:
            inducing_indices = self._sampler.uniform(
                [self.inducing_batch_size], 0, num_inducing, dtype=tf.int64
            )
        if inducing_indices is None:
            kl = self.prior_kl()
        else:
            size = tf.cast(tf.shape(inducing_indices)[0], expected.dtype)
            kl = self.prior_kl_terms(inducing_indices) * tf.cast(num_inducing, size.dtype) / size
        return expected - kl

    @check_shapes("X: [B, D]", "return: []")
    def data_batch_kl(self, X: tf.Tensor) -> tf.Tensor:
        """
        The KL estimated on the inducing points of a batch X of training inputs:
        :math:`\\tfrac{N}{B}\\sum_{i} \\mathrm{KL}_{j(i)} / c_{j(i)}` with :math:`\\mathbf
        z_{j(i)} = \\mathbf x_i` and :math:`c_j` the ``data_multiplicity`` (N = ``num_data``;
        without it, 1 and the batch must be the whole training set). Over the N training rows
        :math:`\\sum_i \\mathrm{KL}_{j(i)} / c_{j(i)} = \\sum_j \\mathrm{KL}_j`, so the
        estimate is exact for the whole set and unbiased for a batch drawn uniformly from it.
        Every row of X must be an inducing input, and without ``num_data`` X must have as many
        rows as ``data_multiplicity`` counts: eagerly a ``ValueError``, compiled a graph
        assertion.
        """
        self._refuse_unlocated("an input batch X")
        return self._data_batch_kl(X, *self._inducing_rows(X))

    def _data_batch_kl(self, X: tf.Tensor, rows: tf.Tensor, found: tf.Tensor) -> tf.Tensor:
        """:meth:`data_batch_kl` with ``rows, found`` from :meth:`_inducing_rows` (or, with
        repeated inducing inputs, :meth:`_rows_among_neighbors`)."""
        assertions = [
            require(
                found,
                "`data`: kl_estimate='data_batch' estimates the KL on the inducing points of "
                "the batch, so every row of X must be an inducing input (a training input with "
                "Z = X; with neighbour rows, one of its neighbours); evaluate other inputs with "
                "predict_log_density, or build the model with kl_estimate='inducing_batch'.",
            )
        ]
        if self.num_data is None and self.data_multiplicity is not None:
            total = int(self.data_multiplicity.sum())
            assertions.append(
                require(
                    tf.equal(tf.shape(X, out_type=tf.int64)[0], total),
                    f"`data`: without `num_data` the batch must be the whole training set, "
                    f"the {total} rows `data_multiplicity` counts; give `num_data` (N) to "
                    "train on minibatches (`VNNGP.from_data` sets it).",
                )
            )
        with tf.control_dependencies([a for a in assertions if a is not None]):
            weights = tf.gather(self._kl_weights, rows)
        kl = self.prior_kl_terms(rows, weights)
        if self.num_data is None:
            return kl
        batch = tf.cast(tf.shape(X)[0], kl.dtype)
        return kl * tf.cast(self.num_data, kl.dtype) / batch

    def maximum_log_likelihood_objective(self, data: Any) -> tf.Tensor:  # type: ignore[override]
        """The ELBO on ``data``; ``training_loss(data)`` is −(this + log prior density)."""
        return self.elbo(data)

    # ---------------------------------------------------------------------------------------
    # prediction

    def posterior(
        self, precompute_cache: PrecomputeCacheType = PrecomputeCacheType.TENSOR
    ) -> VNNGPPosterior:
        """
        The posterior (eqs. 11, 25) from the model's parts: kernel, inducing inputs, ``q_mu``,
        the standard deviations ``q_sqrt`` and mean function, with ``num_neighbors_predict``
        neighbours per test input. Its cache holds :math:`Z`, :math:`\\mathbf m - \\mu(Z)` and
        :math:`\\mathbf s`; see :class:`~gpflow_tight.posteriors.VNNGPPosterior`.
        """
        return VNNGPPosterior(
            self.kernel,
            self.inducing_variable,
            self.q_mu,
            self.q_sqrt,
            self.mean_function,
            num_neighbors=self.num_neighbors_predict,
            precompute_cache=precompute_cache,
            prediction_batch_size=self.prediction_batch_size,
            q_sqrt_offdiag=self.q_sqrt_offdiag,
            prior_neighbors=None if self.q_sqrt_offdiag is None else self._prior_table,
            jitter=self.jitter,
        )

    @inherit_check_shapes
    def predict_f(
        self, Xnew: InputData, full_cov: bool = False, full_output_cov: bool = False
    ) -> MeanAndVariance:
        """
        The marginals of q(f*) (eq. 25): ``self.posterior(NOCACHE).fused_predict_f``; a failed
        factorisation raises :class:`~gpflow_tight.CholeskyError`.
        """
        with explain_cholesky_failure():  # the check names the matrix that failed
            return self.posterior(PrecomputeCacheType.NOCACHE).fused_predict_f(
                Xnew, full_cov=full_cov, full_output_cov=full_output_cov
            )


FROM_DATA_JITTER = 1e-3
"""The jitter of :meth:`VNNGP.from_data`: GPyTorch's ``NNVariationalStrategy`` default."""


def _check_inducing_inputs(Z: np.ndarray, allow_repeats: bool) -> bool:
    """Whether the inducing inputs [M, D] have repeated rows (a ValueError unless
    ``allow_repeats``: a model with a positive jitter, which keeps them non-singular)."""
    if Z.ndim != 2 or len(Z) < 2:
        raise ValueError(
            f"`inducing_variable` must be an array [M, D] with M ≥ 2, got shape {Z.shape}."
        )
    if not np.all(np.isfinite(Z)):
        raise ValueError("`inducing_variable` contains NaN or infinite values.")
    repeats = len(Z) - len(np.unique(Z, axis=0))
    if repeats and not allow_repeats:
        raise ValueError(
            f"`inducing_variable` has {repeats} duplicated row(s): their neighbour covariance "
            "is singular. Remove duplicates (e.g. `np.unique(Z, axis=0)`), or build the model "
            "with `jitter` > 0 to keep one inducing point per training row (GPyTorch's set; "
            "`VNNGP.from_data(..., inducing_inputs='rows')`)."
        )
    return bool(repeats)


def _checked_multiplicity(
    kl_estimate: Any,
    multiplicity: Any,
    inducing_batch_size: int | None,
    num_inducing: int,
    num_data: int | None,
) -> np.ndarray | None:
    """``data_multiplicity`` for ``kl_estimate`` as a read-only int64 array [M] (or None)."""
    if not isinstance(kl_estimate, str) or kl_estimate not in KL_ESTIMATES:
        raise ValueError(
            f"`kl_estimate` must be one of {', '.join(map(repr, KL_ESTIMATES))}, got "
            f"{kl_estimate!r}."
        )
    if kl_estimate == "inducing_batch":
        if multiplicity is not None:
            raise ValueError(
                "`data_multiplicity` weights the KL on the data batch's inducing points; it "
                "needs `kl_estimate='data_batch'`."
            )
        return None
    if inducing_batch_size is not None:
        raise ValueError(
            "`inducing_batch_size` samples the KL's inducing points independently of the data; "
            "with `kl_estimate='data_batch'` they are the batch's own. Give one or the other."
        )
    if multiplicity is None:
        multiplicity = np.ones(num_inducing, np.int64)
    values = np.asarray(multiplicity)
    if (
        values.shape != (num_inducing,)
        or not np.issubdtype(values.dtype, np.integer)
        or np.any(values < 1)
    ):
        raise ValueError(
            f"`data_multiplicity` must be integers [M] = [{num_inducing}], each ≥ 1 (the number "
            f"of training rows at each inducing input), got dtype {values.dtype} and shape "
            f"{values.shape}."
        )
    if num_data is not None and int(values.sum()) != num_data:
        raise ValueError(
            f"`data_multiplicity` counts {int(values.sum())} training rows but `num_data` is "
            f"{num_data}: with kl_estimate='data_batch' the inducing inputs must be the distinct "
            "training inputs, each counted as often as it occurs (`VNNGP.from_data` sets this "
            "up)."
        )
    values = values.astype(np.int64)
    values.setflags(write=False)  # fixed at construction, also in place
    return values


def _weighted_half_sum(terms: tf.Tensor, weights: tf.Tensor | None) -> tf.Tensor:
    """:math:`\\tfrac12\\sum_{j,l} w_j t_{jl}` for terms [B_u, L] (weights default 1)."""
    if weights is None:
        return 0.5 * tf.reduce_sum(terms)
    return 0.5 * tf.reduce_sum(tf.cast(weights, terms.dtype)[:, None] * terms)
