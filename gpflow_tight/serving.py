"""
Export a trained model's predictions as a TensorFlow SavedModel that loads and predicts in a
process that imports neither GPflow nor gpflow_tight (GPflow's "saving and loading" recipe, as
one function for every model of the package).
"""

from typing import Any

import tensorflow as tf
from gpflow.config import default_float

from .validation import check_count

__all__ = ["export_predictions"]


def export_predictions(model: Any, path: str, input_dim: int, dtype: Any = None) -> None:
    """
    Save ``predict_f``, ``predict_y`` (marginal means and variances, [N, P] each) and
    ``predict_log_density`` of ``model`` to ``path`` with ``tf.saved_model.save``. Load them with
    ``loaded = tf.saved_model.load(path)`` and call ``loaded.predict_f(Xnew)``,
    ``loaded.predict_y(Xnew)`` and ``loaded.predict_log_density(Xnew, Ynew)``.

    The model's variables are saved with the functions, so the export holds the parameters at
    the time of the call.

    :param input_dim: the number of input columns D of ``Xnew`` (for a GPLVM, the latent
        dimension).
    :param dtype: of ``Xnew`` and ``Ynew``; GPflow's default float if ``None``.
    """
    input_dim = check_count(input_dim, "input_dim")
    dtype = default_float() if dtype is None else dtype
    inputs = tf.TensorSpec([None, input_dim], dtype)
    targets = tf.TensorSpec([None, None], dtype)
    module = tf.Module()
    module.model = model  # tracks every variable the functions read
    module.predict_f = tf.function(model.predict_f, input_signature=[inputs])
    module.predict_y = tf.function(model.predict_y, input_signature=[inputs])
    module.predict_log_density = tf.function(
        lambda X, Y: model.predict_log_density((X, Y)), input_signature=[inputs, targets]
    )
    tf.saved_model.save(module, path)
