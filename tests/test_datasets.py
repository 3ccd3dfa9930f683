import numpy as np
import pytest

from gpflow_tight import datasets


def test_generated_snelson_like_is_reproducible():
    X1, Y1 = datasets.make_snelson_like(seed=3)
    X2, Y2 = datasets.make_snelson_like(seed=3)
    np.testing.assert_array_equal(X1, X2)
    np.testing.assert_array_equal(Y1, Y2)
    assert X1.shape == Y1.shape == (200, 1)
    assert np.all(np.diff(X1[:, 0]) >= 0)


def test_missing_data_dir_falls_back_to_generated_data(tmp_path):
    split = datasets.snelson_or_generated(data_dir=tmp_path / "nowhere")
    assert "generated" in split.name
    assert len(split.X_train) == 160 and len(split.X_test) == 40
    with pytest.raises(datasets.DataNotFoundError, match="GPFLOW_TIGHT_DATA"):
        datasets.find_data_dir(tmp_path / "nowhere")
    for fraction in (-0.2, 1.0, 1.5):
        with pytest.raises(ValueError, match="`test_fraction` must be in"):
            datasets.snelson_or_generated(data_dir=tmp_path / "nowhere", test_fraction=fraction)


def _data_dir_or_skip():
    try:
        return datasets.find_data_dir()
    except datasets.DataNotFoundError as error:
        pytest.skip(f"benchmark data not available: {error}")


def test_load_snelson():
    data_dir = _data_dir_or_skip()
    X, Y = datasets.load_snelson(data_dir)
    assert X.shape == Y.shape == (200, 1)
    split = datasets.snelson_or_generated(data_dir)
    assert split.name.startswith("Snelson")


def test_load_uci_wilson_split_and_standardisation():
    data_dir = _data_dir_or_skip()
    split = datasets.load_uci_wilson("wine", split=2, data_dir=data_dir)
    assert split.X_train.shape[1] == 11
    assert len(split.X_train) + len(split.X_test) == 1599
    np.testing.assert_allclose(split.Y_train.mean(), 0.0, atol=1e-12)
    np.testing.assert_allclose(split.Y_train.std(), 1.0, rtol=1e-12)
    with pytest.raises(ValueError, match="split"):
        datasets.load_uci_wilson("wine", split=10, data_dir=data_dir)


@pytest.mark.parametrize(
    "name, shape, positives",
    [
        ("australian", (690, 14), 307),
        ("breast", (683, 9), 239),
        ("crabs", (200, 5), 100),
        ("ionosphere", (351, 34), 225),
        ("pima", (768, 8), 268),
        ("sonar", (208, 60), 111),
        ("banana", (5300, 2), 2376),
    ],
)
def test_load_classification(name, shape, positives):
    data_dir = _data_dir_or_skip()
    X, Y = datasets.load_classification(name, data_dir)
    assert X.shape == shape and Y.shape == (shape[0], 1)
    assert X.dtype == Y.dtype == np.float64
    assert np.all(np.isfinite(X))
    assert set(np.unique(Y)) == {0.0, 1.0}
    assert int(Y.sum()) == positives


def test_load_classification_names(tmp_path):
    with pytest.raises(ValueError, match="Unknown classification set"):
        datasets.load_classification("iris", tmp_path)
    with pytest.raises(datasets.DataNotFoundError):
        datasets.load_classification("iono", tmp_path / "nowhere")


def test_load_uci_gal_split_and_standardisation():
    data_dir = _data_dir_or_skip()
    split = datasets.load_uci_gal("concrete", split=3, data_dir=data_dir)
    assert split.X_train.shape == (927, 8) and split.Y_train.shape == (927, 1)
    assert split.X_test.shape == (103, 8) and split.Y_test.shape == (103, 1)
    assert split.name == "concrete split 3"
    np.testing.assert_allclose(split.X_train.mean(0), 0.0, atol=1e-12)
    np.testing.assert_allclose(split.Y_train.mean(), 0.0, atol=1e-12)
    np.testing.assert_allclose(split.Y_train.std(), 1.0, rtol=1e-12)
    raw = datasets.load_uci_gal("concrete", split=3, data_dir=data_dir, standardize=False)
    np.testing.assert_allclose(
        (raw.Y_test - raw.Y_train.mean()) / raw.Y_train.std(), split.Y_test, rtol=1e-12
    )
    with pytest.raises(ValueError, match="split"):
        datasets.load_uci_gal("concrete", split=20, data_dir=data_dir)


@pytest.mark.parametrize(
    "name, folder, num_train, num_test, dim",
    [
        ("boston", "bostonHousing", 455, 51, 13),
        ("naval", "naval-propulsion-plant", 10741, 1193, 16),
        ("power", "power-plant", 8611, 957, 4),
        ("wine-quality-red", "wine-quality-red", 1439, 160, 11),
        ("yacht", "yacht", 277, 31, 6),
    ],
)
def test_load_uci_gal_sets(name, folder, num_train, num_test, dim):
    data_dir = _data_dir_or_skip()
    split = datasets.load_uci_gal(name, data_dir=data_dir)
    assert split.name == f"{folder} split 0"
    assert split.X_train.shape == (num_train, dim) and split.X_test.shape == (num_test, dim)
    assert np.all(np.isfinite(split.X_train)) and np.all(np.isfinite(split.Y_test))


def test_load_uci_gal_names(tmp_path):
    with pytest.raises(ValueError, match="Unknown uci_gal set"):
        datasets.load_uci_gal("iris", data_dir=tmp_path)
    with pytest.raises(datasets.DataNotFoundError):
        datasets.load_uci_gal("yacht", data_dir=tmp_path / "nowhere")
    with pytest.raises(datasets.DataNotFoundError):
        datasets.load_uci_gal("yacht", data_dir=tmp_path)
