"""
Multi-worker training with ``tf.distribute.MultiWorkerMirroredStrategy``: a recipe.

Start one copy of this script per worker, every copy with the same cluster and its own index in
the ``TF_CONFIG`` environment variable, for example on two machines (or two processes of one)::

    TF_CONFIG='{"cluster": {"worker": ["host0:12345", "host1:12345"]},
                "task": {"type": "worker", "index": 0}}' python multi_worker_training.py
    TF_CONFIG='{"cluster": {"worker": ["host0:12345", "host1:12345"]},
                "task": {"type": "worker", "index": 1}}' python multi_worker_training.py

Without ``TF_CONFIG`` it trains on this machine alone, with the same global batches, and reaches
the same parameters: ``tests/integration/test_distribute.py`` runs both and compares them. The
steps:

1. Create the strategy first, before any other TensorFlow call.
2. Build the model and compile the Keras adaptor inside ``strategy.scope()``; parameters that
   must not train are created with ``trainable=False`` there (``gpflow.set_trainable`` has no
   effect on distributed variables).
3. Give every worker the same ``tf.data`` pipeline, batched with the *global* batch size and
   shuffled with the same seed; Keras splits each global batch between the workers' replicas
   (``AutoShardPolicy.DATA``: in-memory data has no files to shard by).
4. ``fit`` with a fixed ``steps_per_epoch`` (the dataset repeats forever).
5. Every worker saves a checkpoint, as TensorFlow's guide asks; only the chief's is kept (the
   ``chief`` task if the cluster has one, else worker 0).
"""

import argparse
import json
import os
import shutil
import tempfile

import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()  # step 1: reads TF_CONFIG

import gpflow  # noqa: E402
import numpy as np  # noqa: E402
from gpflow.keras import tf_keras  # noqa: E402

import gpflow_tight  # noqa: E402
from gpflow_tight.keras import KerasGPModel  # noqa: E402


def make_data(num_data: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The same generated regression data on every worker."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, (num_data, 1))
    return X, np.sin(2 * X) + 0.2 * rng.standard_normal(X.shape)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", default="multi_worker_output", help="checkpoint directory")
    parser.add_argument("--num-data", type=int, default=2000)
    parser.add_argument("--global-batch-size", type=int, default=200)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--steps-per-epoch", type=int, default=10)
    args = parser.parse_args()

    X, Y = make_data(args.num_data)
    with strategy.scope():  # step 2
        model = gpflow_tight.TightSVGP(
            gpflow.kernels.SquaredExponential(),
            gpflow.likelihoods.Gaussian(),
            inducing_variable=np.linspace(-3, 3, 20)[:, None],
            num_data=args.num_data,
        )
        keras_model = KerasGPModel(model)
        keras_model.compile(optimizer=tf_keras.optimizers.Adam(0.01))

    options = tf.data.Options()  # step 3
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    dataset = (
        tf.data.Dataset.from_tensor_slices((X, Y))
        .shuffle(args.num_data, seed=0)
        .repeat()
        .batch(args.global_batch_size)
        .with_options(options)
    )
    history = keras_model.fit(  # step 4
        dataset, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, verbose=2
    )

    is_chief = strategy.extended.should_checkpoint  # step 5: the chief, or worker 0 without one
    directory = args.output if is_chief else tempfile.mkdtemp()
    path = tf.train.Checkpoint(model=model).write(os.path.join(directory, "model"))
    if not is_chief:
        shutil.rmtree(directory)
    else:
        summary = {
            "replicas": strategy.num_replicas_in_sync,
            "loss": history.history["loss"],
            "checkpoint": path,
        }
        print(json.dumps(summary))


if __name__ == "__main__":
    main()
