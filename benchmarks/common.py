"""Helpers shared by the benchmark scripts: timing, markdown tables and the results header."""

import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def setup() -> None:
    """float64 everywhere and quiet TensorFlow logging; call before building models."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import gpflow

    gpflow.config.set_default_float(np.float64)


def cpu_name() -> str:
    """The CPU model name from /proc/cpuinfo (or platform's guess)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def git_revision() -> str:
    """Short commit hash of the repository, with '+ uncommitted changes' when the tree is dirty."""
    root = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "gpflow_tight"],
            cwd=root,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        return "unknown"
    return f"{commit} + uncommitted changes in gpflow_tight/" if dirty else commit


def header(title: str, protocol: Sequence[str]) -> str:
    """Markdown header: title, run date, machine, library versions and the protocol bullets."""
    import gpflow
    import tensorflow as tf

    import gpflow_tight

    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    script = Path(sys.argv[0]).name
    command = " ".join([f"benchmarks/{script}", *sys.argv[1:]])
    lines = [
        f"# {title}",
        "",
        f"- Run: {now}, `{Path(sys.executable).name} {command}`",
        f"- Machine: {os.cpu_count()} CPU cores ({cpu_name()}), no GPU, float64",
        f"- Versions: gpflow {gpflow.__version__}, tensorflow {tf.__version__}, "
        f"numpy {np.__version__}, gpflow_tight {gpflow_tight.__version__}, "
        f"Python {platform.python_version()}",
        f"- Code: git {git_revision()}",
        "- Load average (1, 5, 15 min) when the results were written: "
        + ", ".join(f"{x:.2f}" for x in os.getloadavg())
        + " (other jobs may share the 2 cores)",
        "",
        "## Protocol",
        "",
        *[f"- {item}" for item in protocol],
        "",
    ]
    return "\n".join(lines)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub markdown table; cells are converted with ``str``."""
    lines = [
        "| " + " | ".join(headers) + " |",
        "|" + "|".join("---" for _ in headers) + "|",
    ]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def time_call(fn: Callable[[], Any]) -> tuple[float, Any]:
    """Wall-clock seconds of one call of ``fn`` and its result."""
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def interleaved_times(
    fns: dict[str, Callable[[], Any]], rounds: int, warmup: int = 2
) -> dict[str, list[float]]:
    """
    Wall-clock seconds of each function over ``rounds`` rounds. Each round calls every function
    once, in an order that alternates between rounds, so drifting machine load affects all of
    them alike. ``warmup`` untimed calls of each function come first (e.g. to trace and compile
    a ``tf.function``). The functions must return only once their work is done (e.g. by calling
    ``.numpy()`` on their results).
    """
    names = list(fns)
    for _ in range(warmup):
        for name in names:
            fns[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    for i in range(rounds):
        for name in names if i % 2 == 0 else names[::-1]:
            times[name].append(time_call(fns[name])[0])
    return times


def mean_and_stderr(values: Sequence[float]) -> tuple[float, float]:
    """Mean and standard error of the mean (0 for a single value)."""
    array = np.asarray(values, dtype=float)
    if array.size < 2:
        return float(array.mean()), 0.0
    return float(array.mean()), float(array.std(ddof=1) / np.sqrt(array.size))


def write_result(name: str, text: str) -> Path:
    """Write ``text`` to ``benchmarks/results/<name>`` and return the path."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / name
    path.write_text(text)
    print(f"wrote {path}")
    return path
