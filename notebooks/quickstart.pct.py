# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Quickstart: swap SGPR for TightSGPR and SVGP for TightSVGP
#
# `gpflow_tight` models are drop-in replacements for GPflow's. This notebook fits the same
# problem with the standard and the tighter bounds (Bui, Ashman & Turner, 2025) and compares
# the bounds, which are lower bounds on the same log marginal likelihood: higher is tighter.

# %%
import gpflow
import numpy as np
import tensorflow as tf
from gpflow.ci_utils import reduce_in_tests
from gpflow.keras import tf_keras

import gpflow_tight

rng = np.random.default_rng(0)
X = rng.uniform(0, 10, (1000, 1))
Y = np.sin(X) + 0.5 * np.cos(3 * X) + 0.2 * rng.standard_normal(X.shape)
Z = np.linspace(0, 10, 8)[:, None]

# %% [markdown]
# ## Collapsed: SGPR → TightSGPR

# %%
sgpr = gpflow.models.SGPR((X, Y), gpflow.kernels.SquaredExponential(), Z.copy())
tight_sgpr = gpflow_tight.TightSGPR((X, Y), gpflow.kernels.SquaredExponential(), Z.copy())
for model in (sgpr, tight_sgpr):
    gpflow.optimizers.Scipy().minimize(model.training_loss, model.trainable_variables)
    print(f"{type(model).__name__:10s} bound {model.elbo().numpy():9.2f}")

# %% [markdown]
# ## Uncollapsed with minibatches: SVGP → TightSVGP
#
# Both train with Keras's `fit` on a `tf.data` dataset through
# `gpflow_tight.keras.KerasGPModel`, which works for any model whose training loss takes the
# data (GPflow's SVGP included).

# %%
data = tf.data.Dataset.from_tensor_slices((X, Y)).repeat().shuffle(1000, seed=0).batch(100)
likelihood = gpflow.likelihoods.Gaussian
svgp = gpflow.models.SVGP(
    gpflow.kernels.SquaredExponential(), likelihood(), Z.copy(), num_data=len(X)
)
tight_svgp = gpflow_tight.TightSVGP(
    gpflow.kernels.SquaredExponential(), likelihood(), Z.copy(), num_data=len(X)
)


def train_with_keras(model):
    """Keras compile()/fit(): callbacks such as EarlyStopping or TensorBoard work as usual."""
    keras_model = gpflow_tight.keras.KerasGPModel(model)
    keras_model.compile(optimizer=tf_keras.optimizers.Adam(0.02))
    history = keras_model.fit(
        data, epochs=reduce_in_tests(15), steps_per_epoch=reduce_in_tests(100), verbose=0
    )
    return history.history["loss"]


for model in (svgp, tight_svgp):
    losses = train_with_keras(model)
    print(
        f"{type(model).__name__:10s} bound {model.elbo((X, Y)).numpy():9.2f} "
        f"(mean minibatch loss in the last epoch: {losses[-1]:.2f})"
    )

# %% [markdown]
# Predictions work exactly as in GPflow: `predict_f`, `predict_y`, `predict_log_density` and
# `posterior()`. The tighter models only change the training objective.

# %%
mean, var = tight_svgp.predict_y(np.linspace(0, 10, 5)[:, None])
print(np.hstack([mean, var]))
gpflow.utilities.print_summary(tight_svgp)
