"""
Covariances of this package's inducing variables, registered with GPflow's dispatchers and
laid out as GPflow's ``gpflow.covariances``: :mod:`~gpflow_tight.covariances.kuus` (``Kuu``),
:mod:`~gpflow_tight.covariances.kufs` (``Kuf``) and :mod:`~gpflow_tight.covariances.kuvs` (the
cross-covariance dispatcher ``Kuv`` between two inducing sets, and its registrations).

Importing this package (which ``import gpflow_tight`` does) performs every registration.
"""

from . import kufs, kuus, kuvs
from .kuvs import Kuv

__all__ = ["Kuv", "kufs", "kuus", "kuvs"]
