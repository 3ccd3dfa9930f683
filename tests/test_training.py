import numpy as np

from gpflow_tight.training import minibatches


def test_full_batch_stream_is_the_whole_data_every_step():
    X = np.arange(10.0)[:, None]
    for batch_size in (10, 50):
        batches = iter(minibatches((X, X), batch_size))
        for _ in range(3):
            np.testing.assert_array_equal(next(batches)[0].numpy(), X)


def test_minibatches_cover_each_epoch_once():
    X = np.arange(12.0)[:, None]
    batches = iter(minibatches((X, X), 4, seed=1))
    for _ in range(2):
        epoch = np.concatenate([next(batches)[0].numpy() for _ in range(3)])
        np.testing.assert_array_equal(np.sort(epoch[:, 0]), X[:, 0])
