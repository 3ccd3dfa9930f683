"""
Classic sparse approximations that share DTC's training objective, :math:`\\log\\mathcal
N(\\mathbf y; \\mathbf 0, Q_{ff} + \\sigma^2 I)`, and differ in their predictive (spec §4.1,
§4.2, §4.9; Quiñonero-Candela & Rasmussen 2005, Williams & Seeger 2001):

* :class:`SoR`, the subset of regressors: DTC's mean with the degenerate variance
  :math:`K_{*u}\\Sigma K_{u*}`, which vanishes away from the inducing inputs;
* :class:`Nystrom`, the Nyström GP: the exact GP predictive with :math:`K_{ff}` replaced by
  :math:`Q_{ff}` inside the inverse, whose variance can be negative.

Both are :class:`~gpflow_tight.DTC` with another posterior
(:class:`~gpflow_tight.posteriors.SoRPosterior`,
:class:`~gpflow_tight.posteriors.NystromPosterior`), so ``posterior().predict_f``,
``predict_f``, ``predict_y`` and ``predict_log_density`` agree.
"""

from gpflow.base import RegressionData
from gpflow.kernels import Kernel
from gpflow.likelihoods import Gaussian
from gpflow.mean_functions import MeanFunction
from gpflow.models.util import InducingVariablesLike

from ..posteriors import NystromPosterior, SoRPosterior
from ..validation import check_gaussian_likelihood
from .power_ep import DTC

__all__ = ["SoR", "Nystrom"]


class _DTCObjective(DTC):
    """
    DTC's objective and :math:`q(\\mathbf u)` with GPflow's SGPR constructor; the subclasses set
    the posterior class (``_posterior_class``) that ``posterior()`` and the predictions use.
    """

    def __init__(
        self,
        data: RegressionData,
        kernel: Kernel,
        inducing_variable: InducingVariablesLike,
        *,
        mean_function: MeanFunction | None = None,
        num_latent_gps: int | None = None,
        noise_variance: float | None = None,
        likelihood: Gaussian | None = None,
    ) -> None:
        check_gaussian_likelihood(
            likelihood, f"{type(self).__name__}'s objective and predictive are closed form"
        )
        super().__init__(
            data,
            kernel,
            inducing_variable,
            mean_function=mean_function,
            num_latent_gps=num_latent_gps,
            noise_variance=noise_variance,
            likelihood=likelihood,
        )


class SoR(_DTCObjective):
    """
    The subset of regressors (Silverman 1985; :cite:t:`quinonero2005unifying`, §4; spec §4.1),
    a drop-in for ``gpflow.models.SGPR``: the finite-rank prior
    :math:`f(\\mathbf x) = \\mathbf k_{\\mathbf x u}K_{uu}^{-1}\\mathbf u`,
    :math:`\\mathbf u \\sim \\mathcal N(\\mathbf 0, K_{uu})`.

    **Objective**: its marginal likelihood, DTC's,
    :math:`\\log\\mathcal N(\\mathbf y; \\mathbf 0, Q_{ff} + \\sigma^2 I)`
    (Quiñonero-Candela & Rasmussen 2005, §4; spec §4.1), :math:`O(NM^2)`
    (:meth:`maximum_log_likelihood_objective`, :meth:`log_marginal_likelihood`).

    **Predictive** (spec §4.1, §4.5): DTC's mean :math:`\\sigma^{-2}K_{*u}\\Sigma
    K_{uf}\\mathbf y` and the covariance :math:`K_{*u}\\Sigma K_{u*}`, :math:`\\Sigma =
    (K_{uu} + \\sigma^{-2}K_{uf}K_{fu})^{-1}`: DTC's covariance minus :math:`K_{**} - Q_{**}
    \\succeq 0`. Far from the inducing inputs :math:`\\mathbf k_{*u} \\to \\mathbf 0`, so
    the variance falls to 0 where DTC's returns to the prior's: SoR is overconfident where it
    has no inducing input (``docs/classic.md`` has a figure). :class:`~gpflow_tight.DTC` keeps
    the non-degenerate predictive. ``predict_y`` adds the noise variance.

    Gaussian likelihoods only (``noise_variance`` or a ``gpflow.likelihoods.Gaussian``,
    heteroscedastic ones included). :meth:`compute_qu` gives the shared :math:`q(\\mathbf u)`.
    """

    _posterior_class = SoRPosterior


class Nystrom(_DTCObjective):
    """
    The Nyström GP of :cite:t:`williams2001nystrom` (spec §4.2), SGPR's constructor: the
    inducing inputs are usually a subset of the data, :math:`K_{uu} = K(Z, Z)` and
    :math:`K_{uf} = K(Z, X)`. The exact GP predictive with :math:`K_{ff}` replaced by its rank-M
    Nyström approximation :math:`Q_{ff} = K_{fu}K_{uu}^{-1}K_{uf}` inside the inverse only,

    .. math::
        \\mu_* = \\mathbf k_{*f}(Q_{ff} + \\sigma^2 I)^{-1}\\mathbf y,\\qquad
        \\Sigma_* = K_{**} - K_{*f}(Q_{ff} + \\sigma^2 I)^{-1}K_{f*},

    computed with the Woodbury identity in :math:`O(NM^2)` once and :math:`O(NM)` per test
    input, without an :math:`N \\times N` matrix
    (:class:`~gpflow_tight.posteriors.NystromPosterior`).

    **Objective**: the Nyström marginal likelihood :math:`\\log\\mathcal N(\\mathbf y;
    \\mathbf 0, Q_{ff} + \\sigma^2 I)`, which is DTC's (and SoR's); Williams & Seeger train the
    hyperparameters of the exact GP instead, which costs :math:`O(N^3)`.

    **Negative variances.** :math:`Q_{ff} \\preceq K_{ff}`, so :math:`\\Sigma_*` is at most the
    exact GP's (elementwise on the diagonal), and it can be negative, mostly with a small noise
    variance. Predictions return it **unclipped** and, when any test point's variance is
    negative, show a :class:`~gpflow_tight.posteriors.NegativeVarianceWarning` naming how many
    and which rows of ``Xnew``, and the fixes: more or better-placed inducing points, a larger
    noise variance, or :class:`~gpflow_tight.DTC` / ``gpflow.models.SGPR``. This happens
    wherever predictions are made (``predict_f``, ``predict_y``, ``predict_log_density``,
    ``posterior().predict_f``), when they run eagerly. Under ``tf.function`` the predictions are
    the same numbers, but a check would need a host round trip (``tf.py_function``) or an op
    XLA does not compile (``tf.print``), so none is made: the warning is shown when the
    function is traced, saying that its results are not checked. Training never checks.

    Gaussian likelihoods only. :meth:`compute_qu` gives DTC's :math:`q(\\mathbf u)`, which the
    Nyström predictive does not use: it is not of the form :math:`\\int p(\\mathbf f_* \\mid
    \\mathbf u) q(\\mathbf u) d\\mathbf u` (spec §4.9).
    """

    _posterior_class = NystromPosterior
