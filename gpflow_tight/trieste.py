"""
Trieste wrappers for the orthogonally decoupled models (``pip install trieste``; not imported by
``import gpflow_tight``).

Every other model of the package works in Trieste's own GPflow wrappers unchanged: the
SGPR family (:class:`~gpflow_tight.TightSGPR`, :class:`~gpflow_tight.PowerEPSGP` and its
presets) in ``SparseGaussianProcessRegression`` and the SVGP family
(:class:`~gpflow_tight.TightSVGP`) in ``SparseVariational``. The SOLVE-GP models fit those
wrappers' training, data updates and predictions too, but Trieste's covariances between query
points and its decoupled trajectory sampler rebuild the posterior from ``inducing_variable.Z``
and :math:`q(\\mathbf u)` alone, which leaves out the orthogonal set. The wrappers here give
Trieste the same posterior over the union of both sets instead:

with :math:`L` the block Cholesky factor of the jittered covariance of
:math:`[\\mathbf u; \\mathbf v]` (:func:`gpflow_tight.orthogonal.orthogonal_factors`),
:math:`[\\mathbf u; \\mathbf v] = L\\,[\\tilde{\\mathbf u}; \\tilde{\\mathbf v}]` where
:math:`\\tilde{\\mathbf u}` and :math:`\\tilde{\\mathbf v}` are the whitened regular and
orthogonal variables. So :math:`q(\\mathbf u)\\,q(\\mathbf v_\\perp)` is the whitened
:math:`q` of an SVGP whose inducing points are :math:`Z_u \\cup Z_v`, with mean
:math:`[\\tilde{\\mathbf m}_u; \\tilde{\\mathbf m}_v]` and block-diagonal square root
:math:`\\mathrm{diag}(R_u, R_v)`, and that SVGP's predictive equals SOLVE-GP's (Shi, Titsias
& Mnih 2020, eq. 7). ``get_inducing_variables()`` returns exactly this.

``VNNGP`` has no Trieste wrapper: its :math:`q(\\mathbf u)` is diagonal or, with
``q="nearest_neighbor"``, a sparse factor on the neighbour pattern (Trieste's
``SparseVariational`` requires a full ``q_sqrt``), and its predictive conditions each point on
its nearest inducing points, not on all of them as Trieste's covariance and sampler formulas do.
"""

from typing import Any

import tensorflow as tf
from gpflow.inducing_variables import InducingPoints

try:
    from trieste.models.gpflow import SparseGaussianProcessRegression, SparseVariational
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError(
        "gpflow_tight.trieste needs Trieste: `pip install trieste` (tested with 4.6.1)."
    ) from error

from .models.solve import SOLVEGP, SOLVEGPR
from .orthogonal import LatentBlock, orthogonal_factors
from .validation import explain_cholesky_failure

__all__ = ["SOLVESparseRegression", "SOLVESparseVariational"]


def _block_diagonal(upper: tf.Tensor, lower: tf.Tensor) -> tf.Tensor:
    """``diag(upper, lower)`` for [L, M_u, M_u] and [L, M_v, M_v] (either may have L = 1)."""
    num_latent = tf.maximum(tf.shape(upper)[0], tf.shape(lower)[0])
    m_u, m_v = tf.shape(upper)[-1], tf.shape(lower)[-1]
    upper = tf.broadcast_to(upper, tf.stack([num_latent, m_u, m_u]))
    lower = tf.broadcast_to(lower, tf.stack([num_latent, m_v, m_v]))
    zeros = tf.zeros(tf.stack([num_latent, m_u, m_v]), dtype=upper.dtype)
    return tf.concat(
        [
            tf.concat([upper, zeros], axis=-1),
            tf.concat([tf.linalg.adjoint(zeros), lower], axis=-1),
        ],
        axis=-2,
    )


class _UnionOfInducingSets:
    """
    ``get_inducing_variables()`` over :math:`Z_u \\cup Z_v` (see the module docstring). The
    union's locations live in one variable that every call refreshes, so a trajectory sampler
    built before training follows the trained inducing points, as it follows ``Z`` for SVGP.
    """

    model: Any

    def _check_orthogonal_model(self, model: Any, model_class: type) -> None:
        if not isinstance(model, model_class):
            raise TypeError(
                f"`model` must be a {model_class.__name__} (or a subclass), got "
                f"{type(model).__name__}: use Trieste's own wrapper for it."
            )
        block = self._block(model)
        for name, points in (("regular", block.inducing_variable.regular),
                             ("orthogonal", block.inducing_variable.orthogonal)):  # fmt: skip
            if not isinstance(points, InducingPoints):
                raise NotImplementedError(
                    f"Trieste's covariances and trajectories need inducing points; the {name} "
                    f"set is {type(points).__name__}. Use InducingPoints for both sets."
                )
        self._union_points = tf.Variable(self._union(block), trainable=False, name="union_points")

    @staticmethod
    def _union(block: LatentBlock) -> tf.Tensor:
        sets = block.inducing_variable
        return tf.concat([sets.regular.Z, sets.orthogonal.Z], axis=0)

    @staticmethod
    def _block(model: Any) -> LatentBlock:
        if isinstance(model, SOLVEGPR):
            return LatentBlock(model.kernel, model.orthogonal_inducing_variable, slice(None))
        blocks = model.latent_blocks()
        if len(blocks) != 1:
            raise NotImplementedError(
                "Trieste's wrappers take one kernel shared by every latent GP; this model has "
                f"{len(blocks)} kernels (a SeparateIndependent or coregionalised kernel)."
            )
        return blocks[0]

    def _whitened_q(self, block: LatentBlock) -> tuple[tf.Tensor, ...]:
        with explain_cholesky_failure():
            factors = orthogonal_factors(block.inducing_variable, block.kernel)
            if isinstance(self.model, SOLVEGPR):
                return tuple(self.model.whitened_optimal_q(factors))
            return tuple(self.model.whitened_q(block, factors))

    def get_inducing_variables(self) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, bool]:
        """
        The union of both sets' locations [M_u + M_v, D], the whitened mean
        :math:`[\\tilde{\\mathbf m}_u; \\tilde{\\mathbf m}_v]` [M_u + M_v, L], the
        block-diagonal square root [L, M_u + M_v, M_u + M_v] and ``True`` (whitened).
        """
        block = self._block(self.model)
        self._union_points.assign(self._union(block))
        m_u, R_u, m_v, R_v = self._whitened_q(block)
        if R_v is None:  # ODVGP / ODGPR: S_v = C_vv, the whitened identity
            R_v = tf.eye(tf.shape(m_v)[0], dtype=m_v.dtype)[None]
        return self._union_points, tf.concat([m_u, m_v], axis=0), _block_diagonal(R_u, R_v), True


class SOLVESparseRegression(_UnionOfInducingSets, SparseGaussianProcessRegression):
    """
    Trieste's ``SparseGaussianProcessRegression`` for :class:`~gpflow_tight.SOLVEGPR` and
    :class:`~gpflow_tight.TightSOLVEGPR` (same constructor). An inducing-point selector
    chooses :math:`M_u + M_v` points: the first :math:`M_u` become the regular set, the rest
    the orthogonal one (the optimal :math:`q` follows from the data).
    """

    def __init__(self, model: SOLVEGPR, *args: Any, **kwargs: Any) -> None:
        self._check_orthogonal_model(model, SOLVEGPR)
        super().__init__(model, *args, **kwargs)

    def _update_inducing_variables(self, new_inducing_points: tf.Tensor) -> None:
        sets = self._block(self.model).inducing_variable
        num_regular = tf.shape(sets.regular.Z)[0]
        tf.debugging.assert_equal(
            tf.shape(new_inducing_points)[0],
            num_regular + tf.shape(sets.orthogonal.Z)[0],
            message="the selector must return M_u + M_v points",
        )
        sets.regular.Z.assign(new_inducing_points[:num_regular])
        sets.orthogonal.Z.assign(new_inducing_points[num_regular:])


class SOLVESparseVariational(_UnionOfInducingSets, SparseVariational):
    """
    Trieste's ``SparseVariational`` for :class:`~gpflow_tight.SOLVEGP` and
    :class:`~gpflow_tight.TightSOLVEGP` (same constructor, without an inducing-point
    selector: moving the inducing points would need :math:`q` re-projected onto the new sets,
    and a joint Gaussian over both sets is not of SOLVE-GP's independent form
    :math:`q(\\mathbf u)\\,q(\\mathbf v_\\perp)`).
    """

    def __init__(self, model: SOLVEGP, *args: Any, **kwargs: Any) -> None:
        self._check_orthogonal_model(model, SOLVEGP)
        # SparseVariational(model, optimizer, num_rff_features, inducing_point_selector)
        selector = args[2] if len(args) >= 3 else kwargs.get("inducing_point_selector")
        if selector is not None:
            raise NotImplementedError(
                "SOLVESparseVariational takes no `inducing_point_selector`: SOLVE-GP's "
                "q(u) q(v_perp) cannot hold the joint posterior re-projected onto new inducing "
                "points. Train the inducing points with the model instead, or use TightSVGP."
            )
        super().__init__(model, *args, **kwargs)
