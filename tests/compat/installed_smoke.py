"""
The installed package, run from outside the source tree (``make test-compat`` runs it in a
temporary directory after installing the wheel): it imports from site-packages, reports the
version its metadata declares, and its tighter bound is at least SGPR's on a small problem.
"""

import importlib.metadata
from pathlib import Path

import gpflow
import numpy as np

import gpflow_tight

location = Path(gpflow_tight.__file__).resolve()
assert "site-packages" in location.parts, f"imported from the source tree: {location}"
assert importlib.metadata.version("gpflow-tight") == gpflow_tight.__version__

rng = np.random.default_rng(0)
X = rng.uniform(0.0, 6.0, (40, 1))
Y = np.sin(X) + 0.1 * rng.standard_normal(X.shape)
Z = X[::8].copy()
tight = gpflow_tight.TightSGPR((X, Y), gpflow.kernels.SquaredExponential(), Z)
sgpr = gpflow.models.SGPR((X, Y), gpflow.kernels.SquaredExponential(), Z)
bound, baseline = tight.elbo().numpy(), sgpr.elbo().numpy()
assert bound >= baseline, (bound, baseline)
print(f"gpflow-tight {gpflow_tight.__version__} from {location.parent}: "
      f"TightSGPR {bound:.3f} >= SGPR {baseline:.3f}")  # fmt: skip
