"""
Loaders for the benchmark data in ``../shared/data`` (never shipped with the package) and
generators for data of the same kind, for machines without it.

The data directory is, in order: the ``data_dir`` argument, the ``GPFLOW_TIGHT_DATA`` environment
variable, then ``../shared/data`` next to the current directory or next to this repository.
"""

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "DataNotFoundError",
    "RegressionSplit",
    "CLASSIFICATION_SETS",
    "UCI_GAL_SETS",
    "find_data_dir",
    "load_classification",
    "load_snelson",
    "make_snelson_like",
    "load_uci_gal",
    "load_uci_wilson",
    "snelson_or_generated",
]

ENV_VAR = "GPFLOW_TIGHT_DATA"


class DataNotFoundError(FileNotFoundError):
    """The benchmark data directory or one of its files is missing."""


@dataclass(frozen=True)
class RegressionSplit:
    """A train/test split; ``name`` says where the data came from."""

    X_train: np.ndarray
    Y_train: np.ndarray
    X_test: np.ndarray
    Y_test: np.ndarray
    name: str


def find_data_dir(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """The benchmark data directory; raises :class:`DataNotFoundError` when there is none."""
    if data_dir is not None:
        candidates = [Path(data_dir)]
    elif os.environ.get(ENV_VAR):
        candidates = [Path(os.environ[ENV_VAR])]
    else:
        repository = Path(__file__).resolve().parents[1]
        candidates = [Path.cwd().parent / "shared" / "data", repository.parent / "shared" / "data"]
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    raise DataNotFoundError(
        f"No benchmark data directory at {', '.join(map(str, candidates))}. Pass `data_dir` or "
        f"set {ENV_VAR} to the folder that holds snelson/, uci_wilson/, ..."
    )


def _require(path: Path) -> Path:
    if not path.exists():
        raise DataNotFoundError(f"Missing data file {path}.")
    return path


def load_snelson(data_dir: str | os.PathLike[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Snelson & Ghahramani's 1-D data: X [200, 1], Y [200, 1]."""
    folder = find_data_dir(data_dir) / "snelson"
    X = np.loadtxt(_require(folder / "snelson_train_inputs.dat"))[:, None]
    Y = np.loadtxt(_require(folder / "snelson_train_outputs.dat"))[:, None]
    return X, Y


def make_snelson_like(num_data: int = 200, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """
    A 1-D problem of the same kind as Snelson's: inputs on [0, 6] with a gap, a smooth wiggly
    function and noise of standard deviation 0.3.
    """
    rng = np.random.default_rng(seed)
    X = np.concatenate(
        [rng.uniform(0.0, 2.5, num_data // 2), rng.uniform(3.2, 6.0, num_data - num_data // 2)]
    )
    X = np.sort(X)[:, None]
    f = np.sin(2.2 * X) + 0.6 * np.cos(5.1 * X) - 0.15 * X
    return X, f + 0.3 * rng.standard_normal(X.shape)


def snelson_or_generated(
    data_dir: str | os.PathLike[str] | None = None,
    test_fraction: float = 0.2,
    seed: int = 0,
) -> RegressionSplit:
    """
    Snelson's data when the data directory has it, otherwise :func:`make_snelson_like`, split at
    random into training and test points (Snelson's test inputs come without outputs).
    """
    if not 0 <= test_fraction < 1:
        raise ValueError(f"`test_fraction` must be in [0, 1), got {test_fraction!r}.")
    try:
        X, Y = load_snelson(data_dir)
        name = "Snelson 1-D (200 points)"
    except DataNotFoundError:
        X, Y = make_snelson_like(seed=seed)
        name = "generated Snelson-like 1-D (200 points; ../shared/data not found)"
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(X))
    num_test = int(round(test_fraction * len(X)))
    if num_test == len(X):
        raise ValueError(f"`test_fraction` {test_fraction!r} leaves no training points.")
    test, train = np.sort(order[:num_test]), np.sort(order[num_test:])
    return RegressionSplit(X[train], Y[train], X[test], Y[test], name)


def load_uci_wilson(
    name: str,
    split: int = 0,
    data_dir: str | os.PathLike[str] | None = None,
    standardize: bool = True,
) -> RegressionSplit:
    """
    One of the ten 90/10 splits of a set of the Wilson / Yang et al. (2015) UCI collection
    (``uci_wilson/<name>``). With ``standardize`` the inputs and targets are scaled with the
    training statistics (constant input columns are left unscaled).
    """
    folder = find_data_dir(data_dir) / "uci_wilson" / name
    table = np.loadtxt(_require(folder / "data.csv.gz"), delimiter=",", ndmin=2)
    masks = np.loadtxt(_require(folder / "test_mask.csv.gz"), delimiter=",", dtype=bool, ndmin=2)
    if not 0 <= split < masks.shape[1]:
        raise ValueError(f"`split` must be in [0, {masks.shape[1]}), got {split}.")
    X, Y = table[:, :-1], table[:, -1:]
    test = masks[:, split]
    return _make_split(X[~test], Y[~test], X[test], Y[test], f"{name} split {split}", standardize)


def _make_split(
    X_train: np.ndarray,
    Y_train: np.ndarray,
    X_test: np.ndarray,
    Y_test: np.ndarray,
    name: str,
    standardize: bool,
) -> RegressionSplit:
    """A :class:`RegressionSplit`, optionally scaled with the training statistics."""
    if standardize:
        x_mean, x_std = X_train.mean(0), X_train.std(0)
        x_std[x_std == 0] = 1.0
        y_mean, y_std = Y_train.mean(0), Y_train.std(0)
        X_train, X_test = (X_train - x_mean) / x_std, (X_test - x_mean) / x_std
        Y_train, Y_test = (Y_train - y_mean) / y_std, (Y_test - y_mean) / y_std
    return RegressionSplit(X_train, Y_train, X_test, Y_test, name)


UCI_GAL_SETS = (
    "bostonHousing",
    "concrete",
    "energy",
    "kin8nm",
    "naval-propulsion-plant",
    "power-plant",
    "protein-tertiary-structure",
    "wine-quality-red",
    "yacht",
)
_UCI_GAL_ALIASES = {
    "boston": "bostonHousing",
    "naval": "naval-propulsion-plant",
    "power": "power-plant",
    "protein": "protein-tertiary-structure",
    "wine": "wine-quality-red",
}


def load_uci_gal(
    name: str,
    split: int = 0,
    data_dir: str | os.PathLike[str] | None = None,
    standardize: bool = True,
) -> RegressionSplit:
    """
    One of the standard 90/10 splits (20 per set, 5 for protein) of the UCI regression sets
    used by Hernández-Lobato & Adams (2015) and Gal & Ghahramani (2016) (``uci_gal/<name>``,
    ``name`` one of :data:`UCI_GAL_SETS`, or the short names boston, naval, power, protein,
    wine). The files hold raw UCI values; with ``standardize`` the inputs and targets are scaled
    with the training statistics (constant input columns are left unscaled).
    """
    name = _UCI_GAL_ALIASES.get(name, name)
    if name not in UCI_GAL_SETS:
        raise ValueError(f"Unknown uci_gal set {name!r}; one of {UCI_GAL_SETS}.")
    folder = find_data_dir(data_dir) / "uci_gal" / name
    num_splits = int(np.loadtxt(_require(folder / "n_splits.txt")))
    if not 0 <= split < num_splits:
        raise ValueError(f"`split` must be in [0, {num_splits}), got {split}.")
    table = np.loadtxt(_require(folder / "data.txt"), ndmin=2)
    features = np.loadtxt(_require(folder / "index_features.txt"), dtype=np.int64, ndmin=1)
    target = int(np.loadtxt(_require(folder / "index_target.txt"), dtype=np.int64))
    train = np.loadtxt(_require(folder / f"index_train_{split}.txt"), dtype=np.int64, ndmin=1)
    test = np.loadtxt(_require(folder / f"index_test_{split}.txt"), dtype=np.int64, ndmin=1)
    X, Y = table[:, features], table[:, [target]]
    return _make_split(X[train], Y[train], X[test], Y[test], f"{name} split {split}", standardize)


CLASSIFICATION_SETS = ("australian", "breast", "crabs", "ionosphere", "pima", "sonar", "banana")


def load_classification(
    name: str, data_dir: str | os.PathLike[str] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """
    A binary classification set of ``classification/<name>`` (the raw public versions of the
    sets of Bui, Yan & Turner 2017, plus banana): inputs X [N, D] (unscaled) and labels
    Y [N, 1] in {0, 1}, ready for ``gpflow.likelihoods.Bernoulli``. Make your own splits.

    The positive class (label 1) is: australian +1; breast malignant (the 16 rows with missing
    values and the id column are dropped: 683 x 9); crabs species B (inputs FL, RW, CL, CW,
    BD); ionosphere 'g' (all 34 columns; column 1 is constant); pima 1; sonar 'M' (mine);
    banana +1 (the 400 training and 4900 test points stacked: 5300 x 2). ``iono`` is accepted
    for ``ionosphere``.
    """
    name = {"iono": "ionosphere"}.get(name, name)
    if name not in CLASSIFICATION_SETS:
        raise ValueError(f"Unknown classification set {name!r}; one of {CLASSIFICATION_SETS}.")
    folder = find_data_dir(data_dir) / "classification" / name
    if name == "australian":
        table = np.loadtxt(_require(folder / "australian.dat"))
        X, positive = table[:, :-1], table[:, -1] == 1
    elif name == "breast":
        table = np.genfromtxt(_require(folder / "breast-cancer-wisconsin.data"), delimiter=",")
        table = table[~np.isnan(table).any(axis=1)]
        X, positive = table[:, 1:10], table[:, 10] == 4
    elif name == "crabs":
        path = _require(folder / "crabs.csv")
        records: Any = np.genfromtxt(path, delimiter=",", names=True, dtype=None, encoding="utf-8")
        X = np.stack([records[key] for key in ("FL", "RW", "CL", "CW", "BD")], axis=1)
        positive = records["sp"] == "B"
    elif name in ("ionosphere", "sonar"):
        path = _require(folder / f"{name}.csv")
        columns = 34 if name == "ionosphere" else 60
        X = np.loadtxt(path, delimiter=",", usecols=range(columns))
        labels = np.loadtxt(path, delimiter=",", usecols=[columns], dtype=str)
        positive = labels == ("g" if name == "ionosphere" else "M")
    elif name == "pima":
        table = np.loadtxt(_require(folder / "pima-indians-diabetes.csv"), delimiter=",")
        X, positive = table[:, :-1], table[:, -1] == 1
    else:  # banana
        parts = [
            (
                np.loadtxt(_require(folder / f"banana_{part}_x.txt"), delimiter=","),
                np.loadtxt(_require(folder / f"banana_{part}_y.txt"), delimiter=","),
            )
            for part in ("train", "test")
        ]
        X = np.concatenate([x for x, _ in parts])
        positive = np.concatenate([y for _, y in parts]) == 1
    return np.asarray(X, dtype=np.float64), positive.astype(np.float64)[:, None]
