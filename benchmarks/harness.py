"""
The machinery every benchmark study shares; a study script only says what to run on what.

A study module defines ``NAME``, ``plan(args)`` (the keys of its runs: one dict per (method,
dataset, split, setting) unit, in the order they run), ``run(key, args)`` (one unit's numbers, a
JSON-able dict) and ``render(report, records, args)`` (its report, from the records alone);
optionally ``arguments(parser)``, ``PRESETS`` (named argument sets; ``quick`` is the smoke run),
``BUDGET`` (the default time budget in minutes) and ``REPEATS`` (the key fields whose values
only repeat a unit, ``("split",)`` unless given: the time budget expects a run to take what its
recorded repeats took). ``main(study)`` gives every script the same command line::

    python benchmarks/NAME.py                 # run what is missing, then render the report
    python benchmarks/NAME.py --render        # only render results/NAME.md from the records
    python benchmarks/NAME.py --quick         # smoke run into a temporary folder
    python benchmarks/harness.py render all   # re-render every committed report
    python benchmarks/harness.py merge all --source OTHER/benchmarks/results  # see below
    python benchmarks/harness.py selftest     # check the record / resume / render path (no TF)

Records: ``results/NAME.jsonl``, one JSON object per line. ``{"env": {...}}`` lines describe a
session (date, command, machine, threads, versions, git revision, load); every finished unit
appends ``{"key": {...}, "session": i, ...numbers}``. A rerun skips the keys already there, so
an interrupted or budget-limited study resumes; the report renders from whatever is there and
lists what is missing. Two processes may fill one study at once (e.g. with disjoint plans, or
one plan in opposite orders): each rereads the records before a run and skips what the other
has finished. A study filled in another checkout (a git worktree, another machine) comes back
with ``merge``: its records this checkout lacks are appended with their sessions renumbered
(copying lines would point them at this file's sessions of the same number).
"""

import argparse
import importlib
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
STUDIES = [
    "cost", "snelson", "table1", "power_ep_cost", "power_ep_regression",
    "power_ep_classification", "vnngp_cost", "vnngp_structured_cost", "vnngp_uci", "gplvm_cost",
    "gplvm_oil_flow", "solve_cost", "solve_uci", "gpflow_notebooks", "float32", "tight_sgpr_cost",
    "step_flops", "tsvgp_bound", "trieste_loop", "classic_cost", "convolved_cost",
    "decoupled_cost", "power_ep_synthetic", "tsvgp_classification", "power_ep_banana",
    "gplvm_oil_flow_inits", "vnngp_neighbors", "vnngp_init", "tsvgp_initial_beta",
    "vnngp_search_cost",
]  # fmt: skip


# ------------------------------------------------------------------------------ environment


def setup(threads: int | None = None) -> None:
    """float64 for GPflow, quiet TensorFlow, and ``threads`` intra- and inter-op threads."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import gpflow
    import tensorflow as tf

    gpflow.config.set_default_float(np.float64)
    tf.get_logger().setLevel("ERROR")  # e.g. the retracing warnings of one step per model
    if threads:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)


def environment(threads: int | None = None) -> dict[str, Any]:
    """Date, command, machine, threads, library versions, git revision and load average."""
    cpu = platform.processor() or "unknown CPU"
    try:
        names = [line for line in Path("/proc/cpuinfo").read_text().splitlines()]
        cpu = next(n.split(":", 1)[1].strip() for n in names if n.startswith("model name"))
    except (OSError, StopIteration):
        pass
    versions = {}
    for package in ("gpflow", "tensorflow", "numpy", "scipy", "gpflow-tight"):
        try:
            versions[package.replace("-", "_")] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            pass
    versions["Python"] = platform.python_version()

    def git(*command: str) -> str:
        result = subprocess.run(["git", *command], cwd=HERE, capture_output=True, text=True)
        return result.stdout.strip()

    revision = git("rev-parse", "--short", "HEAD") or "unknown"
    if git("status", "--porcelain", "../gpflow_tight"):
        revision += " + uncommitted changes in gpflow_tight/"
    gpus = None  # not known without TensorFlow (the harness's self-test runs without it)
    if "tensorflow" in sys.modules:
        tf = sys.modules["tensorflow"]
        gpus = [device.name for device in tf.config.list_logical_devices("GPU")]
    return dict(
        date=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        gpus=gpus,
        command=" ".join([f"python benchmarks/{Path(sys.argv[0]).name}", *sys.argv[1:]]),
        cores=os.cpu_count(),
        cpu=cpu,
        threads=threads or "TensorFlow's default",
        versions=versions,
        git=revision,
        load=[round(x, 2) for x in os.getloadavg()],
    )


# ----------------------------------------------------------------------------- record store


def canonical(key: dict) -> str:
    return json.dumps(key, sort_keys=True)


class Store:
    """The JSON-lines records of one study (see the module docstring)."""

    def __init__(self, name: str, folder: Path = RESULTS, threads: int | None = None) -> None:
        self.path = Path(folder) / f"{name}.jsonl"
        self.threads, self.session = threads, None
        self.load()

    def load(self) -> None:
        """(Re)read the records: another process may be filling the same study."""
        self.sessions: list[dict] = []
        self.index: dict[str, dict] = {}  # canonical key -> record (the last one wins)
        if self.path.exists():
            for line in self.path.read_text().splitlines():
                if line.strip():
                    item = json.loads(line)
                    if "env" in item:
                        self.sessions.append(item["env"])
                    else:
                        self.index[canonical(item["key"])] = item

    def get(self, key: dict) -> dict | None:
        return self.index.get(canonical(key))

    def _append(self, item: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as handle:
            handle.write(json.dumps(item) + "\n")

    def add(self, key: dict, values: dict) -> dict:
        if self.session is None:  # the first record of this invocation opens a session
            self.load()
            self.session = len(self.sessions)
            self.sessions.append(environment(self.threads))
            self._append({"env": self.sessions[-1]})
        record = {"key": key, "session": self.session, **values}
        self._append(record)
        self.index[canonical(key)] = record
        return record

    def merge(self, path: Path) -> int:
        """
        Append the records of ``path`` (another copy of this study's records, such as a second
        checkout's that ran part of a study) whose keys this store lacks, each session they
        come from added once (sessions equal in every field are one) and their session numbers
        renumbered to it; returns how many. Failed runs' records come along like the others; a
        key this store has, failed or not, is kept as it is.
        """
        self.load()
        theirs: list[dict] = []
        ours: dict[int, int] = {}  # their session -> ours
        added = 0
        for line in Path(path).read_text().splitlines():
            item = json.loads(line) if line.strip() else {}
            if "env" in item:
                theirs.append(item["env"])
            elif "key" in item and self.get(item["key"]) is None:
                env = theirs[item["session"]]
                if item["session"] not in ours:
                    if env not in self.sessions:
                        self.sessions.append(env)
                        self._append({"env": env})
                    ours[item["session"]] = self.sessions.index(env)
                record = {**item, "session": ours[item["session"]]}
                self._append(record)
                self.index[canonical(item["key"])] = record
                added += 1
        return added

    def collect(self, plan: Sequence[dict]) -> tuple[list[dict], list[dict]]:
        """The records of the planned keys (in plan order) and the keys without one."""
        found = [self.get(key) for key in plan]
        return [r for r in found if r is not None], [k for k, r in zip(plan, found) if r is None]


def expected_seconds(store: Store, key: dict, repeats: Sequence[str]) -> float | None:
    """
    The mean ``seconds`` of the recorded repeats of ``key``: the records whose keys differ from
    it only in the ``repeats`` fields (e.g. the split); ``None`` if there are none.
    """

    def unit(k: dict) -> dict:
        return {name: value for name, value in k.items() if name not in repeats}

    wanted = canonical(unit(key))
    times = [
        r["seconds"]
        for r in store.index.values()
        if "seconds" in r and canonical(unit(r["key"])) == wanted
    ]
    return float(np.mean(times)) if times else None


def run_plan(
    store: Store,
    plan: Sequence[dict],
    run: Callable[[dict], dict],
    budget: float | None,
    repeats: Sequence[str] = ("split",),
) -> None:
    """
    Run every planned key without a record, in plan order, within ``budget`` minutes: no run
    starts after them, and none starts whose recorded repeats (see :func:`expected_seconds`)
    took longer on average than the time left; later, shorter runs still fill that time.
    """
    start = time.perf_counter()
    todo = [key for key in plan if store.get(key) is None]
    print(f"{store.path.name}: {len(plan) - len(todo)} of {len(plan)} runs done", flush=True)
    skipped = 0
    for i, key in enumerate(todo):
        left = None if budget is None else 60 * budget - (time.perf_counter() - start)
        if left is not None and left < 0:
            print(f"time budget of {budget:g} min reached; {len(todo) - i} runs left", flush=True)
            break
        store.load()
        if store.get(key) is not None:  # finished meanwhile by another process
            print(f"[{i + 1}/{len(todo)}] {short(key)}: recorded by another process", flush=True)
            continue
        expected = None if left is None else expected_seconds(store, key, repeats)
        if expected is not None and expected > left:
            skipped += 1
            print(
                f"[{i + 1}/{len(todo)}] {short(key)}: skipped, its repeats took "
                f"{expected / 60:.1f} min and {left / 60:.1f} min are left",
                flush=True,
            )
            continue
        begin = time.perf_counter()
        values = run(key)
        values.setdefault("seconds", time.perf_counter() - begin)
        store.add(key, values)
        print(f"[{i + 1}/{len(todo)}] {short(key)}: {values['seconds']:.1f} s", flush=True)
    if skipped:
        print(f"{skipped} runs skipped: they would not have finished within the budget", flush=True)


def history(result: Any) -> list[float] | None:
    """The loss after each iteration from ``fit_scipy``'s result (a list, or carried by it)."""
    if isinstance(result, list | tuple):
        return [float(x) for x in result]
    for name in ("history", "loss_history", "losses"):
        if getattr(result, name, None) is not None:
            return [float(x) for x in getattr(result, name)]
    return None


def iterations(result: Any) -> int:
    """The number of L-BFGS iterations of a ``fit_scipy`` call."""
    return int(getattr(result, "nit", None) or len(history(result) or []))


def keyed(args: argparse.Namespace, settings: Iterable[str], **identity: Any) -> dict:
    """A run key: its identity plus the settings (argument names) that change its numbers."""
    return {**identity, **{name: getattr(args, name) for name in settings}}


def short(key: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in key.items())


# ------------------------------------------------------------------------------ statistics


def mean_se(values: Iterable[float]) -> tuple[float, float]:
    """Mean and standard error of the mean (0 for one value)."""
    array = np.asarray(list(values), dtype=float)
    se = array.std(ddof=1) / np.sqrt(array.size) if array.size > 1 else 0.0
    return float(array.mean()), float(se)


def pm(values: Iterable[float], fmt: str = ".3f", spread: str = "se", sfmt: str = "") -> str:
    """'mean ± standard error' (or ± standard deviation), the mean alone for one value."""
    array = np.asarray([v for v in values if v is not None and np.isfinite(v)], dtype=float)
    if array.size == 0:
        return "—"
    mean, se = mean_se(array)
    if array.size == 1:
        return f"{mean:{fmt}}"
    return f"{mean:{fmt}} ± {array.std() if spread == 'std' else se:{sfmt or fmt}}"


class Paired:
    """Paired differences a - b where lower is better: wins of a, sign and Wilcoxon tests."""

    def __init__(self, a: Sequence[float], b: Sequence[float]) -> None:
        from scipy import stats

        self.diffs = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
        self.n = self.diffs.size
        self.mean, self.se = mean_se(self.diffs) if self.n else (float("nan"), 0.0)
        self.wins, self.losses = int(np.sum(self.diffs < 0)), int(np.sum(self.diffs > 0))
        self.ties = self.n - self.wins - self.losses
        decided = self.wins + self.losses
        self.p_sign = stats.binomtest(self.wins, decided).pvalue if decided else 1.0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # all differences zero, or too few
            try:
                self.p_wilcoxon = float(stats.wilcoxon(self.diffs).pvalue)
            except ValueError:
                self.p_wilcoxon = float("nan")

    def significant(self, level: float = 0.05) -> bool:
        return self.p_sign < level

    def sign(self) -> str:
        return f"sign test p = {self.p_sign:.2g}"


def ranks(table: np.ndarray) -> np.ndarray:
    """Rank of each column in each row (1 = lowest = best; ties share the mean rank)."""
    from scipy.stats import rankdata

    return np.array([rankdata(row) for row in table]).reshape(np.shape(table))


def beats(table: np.ndarray) -> np.ndarray:
    """[i, j]: fraction of rows where column i is lower than column j, ties counted 1/2."""
    lower = (table[:, :, None] < table[:, None, :]).mean(0)
    return lower + 0.5 * (table[:, :, None] == table[:, None, :]).mean(0)


def ratio(times: dict, name: str, reference: str) -> tuple[float, np.ndarray, Paired]:
    """Ratio of medians, per-round ratios and the paired comparison of two timed series."""
    t, r = np.asarray(times[name]), np.asarray(times[reference])
    return float(np.median(t) / np.median(r)), t / r, Paired(t, r)


def quartiles(values: np.ndarray, fmt: str = ".2f") -> str:
    q1, q2, q3 = np.percentile(values, [25, 50, 75])
    return f"{q2:{fmt}} [{q1:{fmt}}, {q3:{fmt}}]"


def span(values: Sequence[float], fmt: str = ".2f") -> str:
    if not len(values):
        return "—"
    low, high = f"{min(values):{fmt}}", f"{max(values):{fmt}}"
    return low if low == high else f"{low} to {high}"


def of(count: int, total: int, noun: str = "") -> str:
    return f"{count} of {total}" + (f" {noun}" if noun else "")


# ---------------------------------------------------------------------------------- timing


def step_function(model: Any, batches: Any = None, adam: float | None = None) -> Callable:
    """
    A compiled training step of ``model``: the loss and its gradient w.r.t. all trainable
    variables (plus an Adam update with learning rate ``adam``). ``batches`` is None (models
    that hold their data), one batch, or a list of batches used in turn. The returned callable
    blocks until the step is done and returns the loss.
    """
    import itertools

    import tensorflow as tf
    from gpflow.keras import tf_keras

    variables = model.trainable_variables
    optimizer = tf_keras.optimizers.Adam(adam) if adam else None
    if batches is None:
        cycle = itertools.repeat(())
    else:
        many = isinstance(batches, list)
        cycle = itertools.cycle(batches) if many else itertools.repeat(batches)

    @tf.function
    def step(*batch: tf.Tensor) -> tuple[tf.Tensor, list]:
        with tf.GradientTape() as tape:
            loss = model.training_loss(batch) if batch else model.training_loss()
        grads = tape.gradient(loss, variables)
        if optimizer is not None:
            optimizer.apply_gradients(zip(grads, variables))
            return loss, []
        return loss, [g.values if isinstance(g, tf.IndexedSlices) else g for g in grads]

    def call() -> float:
        loss, grads = step(*next(cycle))
        for grad in grads:
            grad.numpy()
        return float(loss.numpy())

    return call


def prediction_function(model: Any, Xnew: Any) -> Callable:
    """A compiled ``predict_f`` at ``Xnew``, blocking until the mean and variance are fetched."""
    import tensorflow as tf

    predict = tf.function(model.predict_f)
    Xnew = tf.constant(Xnew)

    def call() -> float:
        mean, var = predict(Xnew)
        return float(mean.numpy().sum() + var.numpy().sum())

    return call


def steps_and_predictions(models: dict[str, Any], Xnew: Any, rounds: int) -> dict[str, Any]:
    """
    Each model's compiled training step (models that hold their data) and compiled ``predict_f``
    at ``Xnew``, each traced and called once untimed, then timed in interleaved rounds: the
    seconds of both and the losses.
    """
    steps = {name: step_function(model) for name, model in models.items()}
    predictions = {name: prediction_function(model, Xnew) for name, model in models.items()}
    losses = {name: fn() for name, fn in steps.items()}  # traces and compiles
    for fn in predictions.values():
        fn()
    return dict(
        step=interleaved(steps, rounds, warmup=1),
        predict=interleaved(predictions, rounds, warmup=1),
        losses=losses,
    )


def interleaved(fns: dict[str, Callable], rounds: int, warmup: int = 2) -> dict[str, list]:
    """
    Seconds of each function over ``rounds`` rounds after ``warmup`` untimed calls (tracing);
    each round calls every function once, the order reversing between rounds, so drifting load
    affects all alike.
    """
    names = list(fns)
    for _ in range(warmup):
        for name in names:
            fns[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    for i in range(rounds):
        for name in names if i % 2 == 0 else names[::-1]:
            start = time.perf_counter()
            fns[name]()
            times[name].append(time.perf_counter() - start)
    return times


# ---------------------------------------------------------------------------------- report


def table(headers: Sequence[Any], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(map(str, headers)) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


class Report:
    """A markdown report and its figures, written next to each other."""

    def __init__(
        self, name: str, folder: Path, store: Store, repeats: Sequence[str] = ("split",)
    ) -> None:
        self.name, self.folder, self.store, self.repeats = name, Path(folder), store, repeats
        self.lines: list[str] = []
        self.figures: dict[str, Any] = {}

    def add(self, *lines: str) -> None:
        self.lines.extend(lines)

    def section(self, title: str, level: int = 2) -> None:
        self.lines += ([""] if self.lines and self.lines[-1] else []) + [
            f"{'#' * level} {title}",
            "",
        ]

    def bullets(self, items: Iterable[str]) -> None:
        self.lines += [f"- {item}" for item in items if item] + [""]

    def table(self, headers: Sequence[Any], rows: Iterable[Sequence[Any]]) -> None:
        self.lines += [table(headers, rows).rstrip("\n"), ""]

    def failures(self, records: list[dict], field: str = "error") -> None:
        """One line per record that failed (has ``field``): its key and the failure."""
        for r in records:
            if field in r:
                self.add(f"- Failed: {short(r['key'])}: {r[field]}")

    def figure(self, figure: Any, name: str, alt: str) -> None:
        self.figures[name] = figure
        self.lines += [f"![{alt}]({name})", ""]

    def old_figure(self, name: str, alt: str, why: str) -> None:
        """Link a figure an earlier run drew, when the records cannot redraw it."""
        if (self.folder / name).exists():
            self.lines += [f"![{alt}]({name})", "", why, ""]

    def head(
        self,
        title: str,
        records: list[dict],
        protocol: Sequence[str],
        missing: list,
        beside: Sequence[dict] = (),
    ) -> None:
        """Title, the sessions that produced ``records`` (the planned runs) and ``beside`` (other
        runs the report shows), the protocol and what is missing."""
        self.lines = [f"# {title}", ""]
        shown = list({canonical(r["key"]): r for r in [*records, *beside]}.values())
        used = sorted({r["session"] for r in shown}, key=lambda i: self.store.sessions[i]["date"])
        sessions = [self.store.sessions[i] for i in used]
        self.lines += session_lines(sessions, [sum(r["session"] == i for r in shown) for i in used])
        self.section("Protocol")
        self.bullets(protocol)
        if missing:
            keys = missing + [r["key"] for r in records]
            varying = [k for k in missing[0] if len({json.dumps(x.get(k)) for x in keys}) > 1]
            values = {
                k: list(dict.fromkeys(json.dumps(x.get(k), ensure_ascii=False) for x in missing))
                for k in varying
            }
            self.add(
                f"**Missing: {of(len(missing), len(keys))} planned runs have no record yet** ("
                + "; ".join(f"{k} {', '.join(v).replace(chr(34), '')}" for k, v in values.items())
                + "); rerunning the same command adds them and re-renders this report. "
                + self.cost(missing),
                "",
            )

    def cost(self, missing: list) -> str:
        """How long the missing runs would take, from their recorded repeats' mean times."""
        expected = [expected_seconds(self.store, key, self.repeats) for key in missing]
        known = [seconds for seconds in expected if seconds is not None]
        unknown = len(expected) - len(known)
        hours = sum(known) / 3600
        text = f"{hours:.1f} h" if hours >= 2 else f"{60 * hours:.0f} min"
        other = f"another {' or '.join(self.repeats)}"
        if not known:
            return f"None has a timed repeat (the same key on {other}) to estimate its time by."
        return (
            f"At the mean time of their timed repeats (the same key on {other}), "
            f"{of(len(known), len(missing))} would take about {text}"
            + (f"; {unknown} have no timed repeat." if unknown else ".")
        )

    def write(self, notes: bool = True) -> Path:
        """Write the report (with ``results/NAME_notes.md`` appended, if any) and its figures."""
        text = "\n".join(self.lines).rstrip() + "\n"
        notes_path = self.folder / f"{self.name}_notes.md"
        if notes and notes_path.exists():
            text += "\n" + notes_path.read_text()
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{self.name}.md"
        path.write_text(text)
        print(f"wrote {path}")
        for name, figure in self.figures.items():
            figure.savefig(self.folder / name, dpi=110)
            print(f"wrote {self.folder / name}")
        return path


def session_lines(sessions: list[dict], counts: list[int]) -> list[str]:
    """The header bullets: what every session shares once, what differs per session."""
    if not sessions:
        return ["No records yet.", ""]

    def shared(field: str) -> bool:
        return len({json.dumps(s.get(field)) for s in sessions}) == 1

    def describe(s: dict, fields: Sequence[str]) -> str:
        parts = []
        for field in fields:
            value = s.get(field)
            if field == "machine":
                gpus = ", ".join(s.get("gpus") or []) or "no GPU"  # early sessions: CPU only
                parts.append(
                    f"{s['cores']} CPU cores ({s['cpu']}), {gpus}, float64, threads: {s['threads']}"
                )
            elif field == "versions":
                parts.append(", ".join(f"{k} {v}" for k, v in s["versions"].items()))
            elif field == "git":
                parts.append(f"git {value}")
            elif field == "load" and value:
                parts.append("load average (1, 5, 15 min) " + ", ".join(f"{x:.2f}" for x in value))
            elif field == "note" and value:
                parts.append(value)
        return "; ".join(parts)

    fields = ["machine", "versions", "git", "load"]
    lines = []
    for s, count in zip(sessions, counts):
        own = [f for f in fields if not shared(f)] + ["note"]
        extra = describe(s, own)
        lines.append(
            f"- Run {s['date']}, `{s['command']}`: {count} record{'s' * (count != 1)}"
            + (f"; {extra}" if extra else "")
        )
    labels = {"machine": "Machine: ", "versions": "Versions: ", "git": "Code: ", "load": ""}
    for field in fields:
        if shared(field) and describe(sessions[0], [field]):
            text = labels[field] + describe(sessions[0], [field])
            lines.append(f"- {text[0].upper()}{text[1:]}")
    return lines + ["- The 2 cores may be shared with other jobs; see the load average.", ""]


# ------------------------------------------------------------------------------ command line


def main(study: Any, argv: Sequence[str] | None = None) -> Path:
    """The command line of a study script (see the module docstring)."""
    parser = argparse.ArgumentParser(description=(study.__doc__ or "").strip().split("\n\n")[0])
    parser.add_argument("--render", action="store_true", help="only render the report")
    parser.add_argument("--preset", choices=list(getattr(study, "PRESETS", {})), default=None)
    parser.add_argument("--quick", action="store_true", help="smoke run (preset 'quick')")
    parser.add_argument("--out", type=Path, help="folder of records and report (default results/)")
    parser.add_argument(
        "--time-budget",
        type=float,
        default=getattr(study, "BUDGET", None),
        help="minutes; no run starts after them, nor one whose recorded repeats (other splits) "
        "took longer than the time left (rerun to resume)",
    )
    if hasattr(study, "arguments"):
        study.arguments(parser)
    args = parser.parse_args(argv)
    preset = "quick" if args.quick else args.preset
    if preset:  # the preset's values replace the defaults; explicit arguments still win
        parser.set_defaults(**study.PRESETS[preset])
        args = parser.parse_args(argv)
    name = study.NAME + (f"_{preset}" if preset and preset != "quick" else "")
    folder = args.out or (Path(tempfile.gettempdir()) / "bench_quick" if args.quick else RESULTS)
    threads = getattr(args, "threads", None)
    store = Store(study.NAME, folder, threads)
    plan = study.plan(args)
    repeats = getattr(study, "REPEATS", ("split",))
    if not args.render and any(store.get(key) is None for key in plan):
        getattr(study, "setup", setup)(threads)
        run_plan(store, plan, lambda key: study.run(key, args), args.time_budget, repeats)
    records, missing = store.collect(plan)
    report = Report(name, folder, store, repeats)
    study.render(report, records, missing, args)
    return report.write()


def render_all(names: Sequence[str]) -> None:
    sys.path.insert(0, str(HERE))
    for name in STUDIES if list(names) == ["all"] else names:
        study = importlib.import_module(name)
        main(study, ["--render"])
        for preset in getattr(study, "RENDER_PRESETS", ()):
            main(study, ["--render", "--preset", preset])


# -------------------------------------------------------------------------------- selftest


def selftest() -> None:
    """A toy study in a temporary folder: a budget-limited run, a resumed run, the renders."""
    import types

    calls: list[dict] = []
    toy = types.ModuleType("toy")
    toy.NAME = "toy"
    toy.plan = lambda args: [{"method": m, "split": s} for s in range(2) for m in "AB"]

    def run(key: dict, args: argparse.Namespace) -> dict:
        calls.append(key)
        time.sleep(0.02)
        return {"error": 0.1 * (key["method"] == "B") + 0.01 * key["split"]}

    def render(report: Report, records: list[dict], missing: list, args: argparse.Namespace):
        report.head("Toy", records, ["A toy protocol."], missing)
        report.table(
            ["method", "split", "error"], [[*r["key"].values(), r["error"]] for r in records]
        )
        a = [r["error"] for r in records if r["key"]["method"] == "A"]
        b = [r["error"] for r in records if r["key"]["method"] == "B"]
        n = min(len(a), len(b))
        if n:
            report.add(f"A beats B on {of(Paired(a[:n], b[:n]).wins, n, 'splits')}.")

    toy.run, toy.render, toy.setup = run, render, lambda threads: None
    with tempfile.TemporaryDirectory() as folder:
        text = main(toy, ["--out", folder, "--time-budget", "0.0001"]).read_text()
        assert len(calls) == 1 and "Missing: 3 of 4" in text, text
        text = main(toy, ["--out", folder]).read_text()
        assert len(calls) == 4 and "Missing" not in text and "A beats B on 2 of 2" in text, text
        main(toy, ["--out", folder])
        assert len(calls) == 4, "a rerun must skip the recorded runs"
        again = main(toy, ["--out", folder, "--render"]).read_text()
        assert again == text, "rendering must depend on the records only"
        lines = Path(folder, "toy.jsonl").read_text().splitlines()
        assert sum('"env"' in line for line in lines) == 2 and len(lines) == 6, lines
    with tempfile.TemporaryDirectory() as folder:  # a second process finishes the last unit
        calls.clear()
        plan = toy.plan(None)

        def shared(key: dict, args: argparse.Namespace) -> dict:
            if not calls:
                Store("toy", Path(folder)).add(plan[-1], {"error": 0.5})
            return run(key, args)

        toy.run = shared
        text = main(toy, ["--out", folder]).read_text()
        assert len(calls) == 3 and plan[-1] not in calls and "Missing" not in text, calls
        lines = Path(folder, "toy.jsonl").read_text().splitlines()
        assert [json.loads(line).get("session") for line in lines] == [None, 0, None] + [1] * 3
    with tempfile.TemporaryDirectory() as folder:  # split 1 of A is expected to overrun
        calls.clear()
        toy.run = run
        store = Store("toy", Path(folder))
        store.add({"method": "A", "split": 0}, {"error": 0.0, "seconds": 600.0})
        store.add({"method": "B", "split": 0}, {"error": 0.1, "seconds": 0.02})
        text = main(toy, ["--out", folder, "--time-budget", "5"]).read_text()
        assert calls == [{"method": "B", "split": 1}] and "Missing: 1 of 4" in text, calls
        assert "(the same key on another split), 1 of 1 would take about 10 min" in text
    with tempfile.TemporaryDirectory() as folder:  # two more checkouts, each ran other units
        copies = [Path(folder, name) for name in ("a", "b", "c")]
        copies[0].mkdir()
        Store("toy", copies[0]).add(plan[0], {"error": 0.0})
        for copy in copies[1:]:
            shutil.copytree(copies[0], copy)
        Store("toy", copies[1], threads=1).add(plan[1], {"error": 0.1})  # sessions that differ
        Store("toy", copies[2], threads=2).add(plan[2], {"error": 0.2})
        Store("toy", copies[2], threads=3).add(plan[1], {"error": 0.3})  # also in b: b's is kept
        store = Store("toy", copies[0])
        assert [store.merge(copies[i] / "toy.jsonl") for i in (1, 2, 2)] == [1, 1, 0]
        merged = Store("toy", copies[0])
        for key, source in zip(plan[:3], (copies[0], copies[1], copies[2])):
            theirs, ours = Store("toy", source), merged.get(key)
            assert ours == {**theirs.get(key), "session": ours["session"]}
            assert merged.sessions[ours["session"]] == theirs.sessions[theirs.get(key)["session"]]
        assert [env["threads"] for env in merged.sessions][1:] == [1, 2], "each session once"
    print(
        "selftest passed: budget stop, resume, skip of recorded runs, deterministic render, "
        "two processes on one study, skip of runs expected to overrun the budget, merging "
        "another checkout's records"
    )


if __name__ == "__main__":
    command = argparse.ArgumentParser(
        description="Render benchmark reports, merge another checkout's records, or self-test."
    )
    command.add_argument("what", choices=["render", "merge", "selftest"])
    command.add_argument("names", nargs="*", default=["all"], help="studies, or all")
    command.add_argument("--source", type=Path, help="merge: the other checkout's results folder")
    parsed = command.parse_args()
    if parsed.what == "selftest":
        selftest()
    elif parsed.what == "render":
        render_all(parsed.names)
    elif parsed.source is None or not parsed.source.is_dir():
        command.error("merge needs --source, the results folder of the other checkout")
    else:
        for name in STUDIES if parsed.names == ["all"] else parsed.names:
            source = parsed.source / f"{name}.jsonl"
            added = Store(name).merge(source) if source.exists() else 0
            print(f"{name}: {added} record{'s' * (added != 1)} added")
