"""
Training under ``tf.distribute``: MirroredStrategy over two logical CPUs for every external-data
model, and the MultiWorkerMirroredStrategy recipe of ``examples/multi_worker_training.py`` with
two worker processes on this machine. Each strategy must take the single-device steps.
"""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from tests.test_keras import EXTERNAL

ROOT = Path(__file__).resolve().parents[2]

MIRRORED = """
import sys
import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import numpy as np
from gpflow.keras import tf_keras

sys.path.insert(0, sys.argv[1])
from gpflow_tight.keras import KerasGPModel
from tests.model_zoo import MODEL_FACTORIES

strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
assert strategy.num_replicas_in_sync == 2


def build(name, scope_strategy):
    with scope_strategy.scope():
        model, data = MODEL_FACTORIES[name](np.random.default_rng(0))
        keras_model = KerasGPModel(model)
        # plain SGD, so that a wrongly scaled gradient shows
        keras_model.compile(optimizer=tf_keras.optimizers.SGD(1e-3))
    return model, keras_model, data


def summed_loss_and_gradients(keras_model, scope_strategy):
    # the sum over replicas of the weighted losses and of their gradients, on one batch

    def replica_step(replica_batch):  # what KerasGPModel.train_step applies
        loss, weight, gradients = keras_model.weighted_gradients(replica_batch)
        return weight * loss, [tf.convert_to_tensor(g) for g in gradients]

    @tf.function
    def run(distributed_batch):
        results = scope_strategy.run(replica_step, args=(distributed_batch,))
        return tf.nest.map_structure(
            lambda x: scope_strategy.reduce(tf.distribute.ReduceOp.SUM, x, axis=None), results
        )

    def on(batch):
        dataset = tf.data.Dataset.from_tensor_slices(batch).batch(len(batch[0]))
        loss, gradients = run(next(iter(scope_strategy.experimental_distribute_dataset(dataset))))
        return float(loss), [tf.convert_to_tensor(g).numpy() for g in gradients]

    return on


single_device = tf.distribute.get_strategy()
for name in sys.argv[2:]:
    # one model per strategy: the loss and gradient on batches of N - 1 points and of 1 point
    # (an odd batch splits unevenly between the replicas, a batch of one point leaves a replica
    # empty), then fit(): two epochs of SGD steps on those batches
    runs = []
    for scope_strategy in (strategy, single_device):
        model, keras_model, data = build(name, scope_strategy)
        initial = [v.numpy() for v in model.trainable_variables]
        num_data = len(data[0])
        on = summed_loss_and_gradients(keras_model, scope_strategy)
        batches = [
            on(tuple(np.asarray(x)[rows] for x in data))
            for rows in (np.arange(num_data - 1), np.array([num_data - 1]))
        ]
        dataset = tf.data.Dataset.from_tensor_slices(tuple(data)).batch(num_data - 1)
        history = keras_model.fit(dataset, epochs=2, verbose=0).history["loss"]
        runs.append((batches, history, [v.numpy() for v in model.trainable_variables]))
    (batches_a, loss_a, params_a), (batches_b, loss_b, params_b) = runs
    for (loss_a_i, gradients_a), (loss_b_i, gradients_b) in zip(batches_a, batches_b):
        np.testing.assert_allclose(loss_a_i, loss_b_i, rtol=1e-12, err_msg=name)
        assert len(gradients_a) == len(gradients_b) > 0, name
        scale = max(np.max(np.abs(g)) for g in gradients_b)  # round-off is relative to the largest
        assert scale > 0, name
        for a, b in zip(gradients_a, gradients_b):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-13 * scale, err_msg=name)
    assert len(loss_a) == 2 and np.all(np.isfinite(loss_a)), name
    np.testing.assert_allclose(loss_a, loss_b, rtol=1e-10, err_msg=name)
    assert len(params_a) == len(params_b) > 0, name
    assert any(not np.array_equal(a, i) for a, i in zip(params_a, initial)), name
    for a, b in zip(params_a, params_b):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12, err_msg=name)
    print(name, "ok")
"""


# two processes, so that pytest -n runs them side by side
@pytest.mark.parametrize("names", [EXTERNAL[0::2], EXTERNAL[1::2]], ids=["part 1", "part 2"])
def test_mirrored_strategy_equals_a_single_device(tmp_path, names):
    """fit() under MirroredStrategy on two logical CPUs takes the single-device steps (each
    replica's loss weighted by its share of the batch) for every external-data model; one step
    on a batch that splits unevenly, or leaves a replica empty, has the single-device loss and
    gradient."""
    script = tmp_path / "mirrored.py"
    script.write_text(MIRRORED)
    result = subprocess.run(
        [sys.executable, str(script), str(ROOT), *names], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count(" ok") == len(names)


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def run_recipe(output, tf_configs, cwd):
    """Start one process of the recipe per TF_CONFIG; return the chief's summary."""
    script = ROOT / "examples" / "multi_worker_training.py"
    processes, logs = [], []
    try:
        for index, config in enumerate(tf_configs):
            env = {**os.environ, "PYTHONPATH": str(ROOT)}
            env.pop("TF_CONFIG", None)
            if config is not None:
                env["TF_CONFIG"] = json.dumps(config)
            # output to files: a full pipe would block a worker while its peer waits for it
            logs.append(
                (
                    open(cwd / f"{output.name}_{index}.out", "w+"),
                    open(cwd / f"{output.name}_{index}.err", "w+"),
                )
            )
            processes.append(
                subprocess.Popen(
                    [sys.executable, str(script), "--output", str(output)],
                    cwd=cwd,
                    env=env,
                    stdout=logs[-1][0],
                    stderr=logs[-1][1],
                    text=True,
                )
            )
        for process in processes:
            process.wait(timeout=300)
    finally:
        for process in processes:
            process.kill()
    texts = []
    for (stdout, stderr), process in zip(logs, processes):
        stdout.seek(0), stderr.seek(0)
        texts.append(stdout.read())
        assert process.returncode == 0, stderr.read()[-3000:]
        stdout.close(), stderr.close()
    return json.loads(texts[0].strip().splitlines()[-1])


def checkpoint_values(path):
    reader = tf.train.load_checkpoint(path)
    names = [n for n in reader.get_variable_to_shape_map() if n.startswith("model/")]
    return {name: reader.get_tensor(name) for name in names}


def test_multi_worker_recipe_equals_a_single_worker(tmp_path):
    """Two workers of the recipe (one replica each, gRPC collectives on localhost) take the
    single-worker steps on the same global batches, and the chief's checkpoint holds the
    single-worker parameters."""
    single = run_recipe(tmp_path / "single", [None], tmp_path)
    cluster = {"worker": [f"localhost:{port}" for port in free_ports(2)]}
    multi = run_recipe(
        tmp_path / "multi",
        [{"cluster": cluster, "task": {"type": "worker", "index": i}} for i in range(2)],
        tmp_path,
    )
    assert (single["replicas"], multi["replicas"]) == (1, 2)
    np.testing.assert_allclose(multi["loss"], single["loss"], rtol=1e-10)
    expected = checkpoint_values(str(tmp_path / single["checkpoint"]))
    got = checkpoint_values(str(tmp_path / multi["checkpoint"]))
    assert got.keys() == expected.keys() and len(got) >= 4
    for name, value in expected.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-9, atol=1e-12, err_msg=name)
