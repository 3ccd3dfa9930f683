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
import tensorflow as tf

from tests.test_keras import EXTERNAL

ROOT = Path(__file__).resolve().parents[1]

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
for name in sys.argv[2:]:
    runs = []
    for scope in (strategy.scope(), tf.distribute.get_strategy().scope()):
        with scope:
            model, data = MODEL_FACTORIES[name](np.random.default_rng(0))
            keras_model = KerasGPModel(model)
            # plain SGD, so that a wrongly scaled gradient shows (VNNGP's loss is of order 1e5
            # here: a smaller rate keeps its steps stable)
            rate = 1e-8 if name == "VNNGP" else 1e-3
            keras_model.compile(optimizer=tf_keras.optimizers.SGD(rate))
        dataset = tf.data.Dataset.from_tensor_slices(tuple(data)).batch(20)
        history = keras_model.fit(dataset, epochs=2, verbose=0).history["loss"]
        runs.append((history, [v.numpy() for v in model.trainable_variables]))
    (loss_a, params_a), (loss_b, params_b) = runs
    np.testing.assert_allclose(loss_a, loss_b, rtol=1e-10, err_msg=name)
    for a, b in zip(params_a, params_b):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12, err_msg=name)
    print(name, "ok")
"""


def test_mirrored_strategy_equals_a_single_device(tmp_path):
    """fit() under MirroredStrategy on two logical CPUs takes the single-device steps (each
    replica's loss divided by the number of replicas) for every external-data model."""
    script = tmp_path / "mirrored.py"
    script.write_text(MIRRORED)
    result = subprocess.run(
        [sys.executable, str(script), str(ROOT), *EXTERNAL], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count(" ok") == len(EXTERNAL)


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
    processes = []
    for config in tf_configs:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        env.pop("TF_CONFIG", None)
        if config is not None:
            env["TF_CONFIG"] = json.dumps(config)
        processes.append(
            subprocess.Popen(
                [sys.executable, str(script), "--output", str(output)],
                cwd=cwd,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    outputs = [process.communicate(timeout=300) for process in processes]
    for process, (_, stderr) in zip(processes, outputs):
        assert process.returncode == 0, stderr[-3000:]
    return json.loads(outputs[0][0].strip().splitlines()[-1])


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
