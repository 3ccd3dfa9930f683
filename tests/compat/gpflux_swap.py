"""
A pytest plugin (``-p gpflux_swap``, with ``tests/compat`` on ``PYTHONPATH``) that runs
GPflux's own tests with :class:`gpflow_tight.deep.TightGPLayer` wherever GPflux's code or tests
name ``GPLayer``. The
relaxation the swapped layer uses by default is ``GPFLOW_TIGHT_GPFLUX_RELAXATION`` (``"none"``
or ``"beta"``).
"""

import os
import sys

import gpflux  # noqa: F401  (its modules are imported before the swap)
import gpflux.architectures
import gpflux.layers
import gpflux.models

from gpflow_tight.deep import TightGPLayer

RELAXATION = os.environ.get("GPFLOW_TIGHT_GPFLUX_RELAXATION", "beta")
ORIGINAL = gpflux.layers.GPLayer


class SwappedGPLayer(TightGPLayer):
    """``TightGPLayer`` with the relaxation of this run, under GPflux's name."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("relaxation", RELAXATION)
        super().__init__(*args, **kwargs)


for module in list(sys.modules.values()):
    if getattr(module, "__name__", "").startswith("gpflux") and (
        getattr(module, "GPLayer", None) is ORIGINAL
    ):
        module.GPLayer = SwappedGPLayer
