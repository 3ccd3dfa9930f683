"""
Serving: every model of tests/model_zoo.py, exported with
``gpflow_tight.serving.export_predictions``, loads in a fresh process that imports TensorFlow
only, and its predictions there equal the model's.
"""

import subprocess
import sys

import numpy as np
from check_shapes import ShapeCheckingState, set_enable_check_shapes

from gpflow_tight.serving import export_predictions
from tests.model_zoo import MODEL_FACTORIES, prediction_inputs

LOAD_WITHOUT_GPFLOW = """
import pathlib, sys, numpy as np, tensorflow as tf
for case in sorted(pathlib.Path(sys.argv[1]).glob("*.npz")):
    inputs = np.load(case)
    loaded = tf.saved_model.load(str(case.with_suffix("")))
    X, Y = inputs["X"], inputs["Y"]
    f_mean, f_var = loaded.predict_f(X)
    y_mean, y_var = loaded.predict_y(X)
    density = loaded.predict_log_density(X, Y)
    np.savez(case.with_suffix(".out.npz"), f_mean=f_mean, f_var=f_var, y_mean=y_mean,
             y_var=y_var, log_density=density)
assert "gpflow" not in sys.modules and "gpflow_tight" not in sys.modules
"""


def test_exported_predictions_load_without_gpflow(tmp_path):
    """Every model's predictions reload and agree in a process that imports TensorFlow only."""
    # Tracing with shape checks on takes four times longer; they are tested elsewhere.
    set_enable_check_shapes(ShapeCheckingState.DISABLED)
    expected = {}
    for name, make in sorted(MODEL_FACTORIES.items()):
        model, _ = make(np.random.default_rng(5))
        Xnew, Ynew = prediction_inputs(name, np.random.default_rng(6))
        export_predictions(model, str(tmp_path / name), input_dim=Xnew.shape[1])
        np.savez(tmp_path / f"{name}.npz", X=Xnew, Y=Ynew)
        expected[name] = (
            *model.predict_f(Xnew),
            *model.predict_y(Xnew),
            model.predict_log_density((Xnew, Ynew)),
        )

    script = tmp_path / "load.py"
    script.write_text(LOAD_WITHOUT_GPFLOW)
    subprocess.run([sys.executable, str(script), str(tmp_path)], check=True)
    keys = ("f_mean", "f_var", "y_mean", "y_var", "log_density")
    for name, values in expected.items():
        got = np.load(tmp_path / f"{name}.out.npz")
        for key, value in zip(keys, values):
            np.testing.assert_allclose(got[key], value, rtol=1e-10, err_msg=f"{name} {key}")
