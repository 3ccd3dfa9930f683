"""
GPflow's own documentation notebooks with gpflow-tight's drop-ins swapped in: each notebook runs
top to bottom once with GPflow's classes ("none") and once per swap of
``tests/integration/gpflow_suite/gpflow_tight_swap.py`` that replaces a class it uses, each in a
fresh Python process; the final objective of every GPflow model the notebook builds is recorded
beside the unswapped run's.

The notebooks (jupytext ``.pct.py`` files) are read from a local git mirror of GPflow
(``--gpflow-repo``, ``--revision``): the notebook's folder is extracted with ``git archive`` into
a temporary directory, which is the working directory of the run and is on ``sys.path`` (as in a
Jupyter kernel), so that ``data/...`` files and helper modules such as ``FITCvsVFE.py`` are found.
IPython magics and shell escapes are stripped, matplotlib draws to the Agg backend and
``plt.show`` does nothing. The source is executed one top-level statement at a time in one
namespace; after each statement the namespace is scanned for ``gpflow.models.GPModel``
instances, so a model whose variable is later rebound (``model = ...`` three times) is still
found, labelled ``name (line L)``. The scalar values of top-level expression statements (what a
notebook cell would display) are recorded too. ``CI`` is unset (``--ci`` sets it) so that
``gpflow.ci_utils.reduce_in_tests(n)`` keeps the notebooks' own iteration counts.

    python benchmarks/gpflow_notebooks.py            # run the missing (notebook, swap) keys
    python benchmarks/gpflow_notebooks.py --render   # re-render results/gpflow_notebooks.md
    python benchmarks/gpflow_notebooks.py --quick    # two notebooks, none/tight, CI=1
"""

import ast
import builtins
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import harness
import numpy as np

NAME = "gpflow_notebooks"
BUDGET = 90.0
GPFLOW_REPO = Path("/work/.mirror/GPflow+GPflow/repo")
NOTEBOOK_ROOT = "doc/sphinx/notebooks"
SWAP_DIR = harness.HERE.parent / "tests" / "integration" / "gpflow_suite"
CHECKED = ("tight", "relaxed")  # swaps whose objective is a bound at least GPflow's
ORDER = ["none", "tight", "relaxed", "power_ep", "solve", "tight_solve"]  # of the report
ROUNDING = 1e-6  # |difference| below ROUNDING * max(1, |original|) is called rounding

# Per notebook: the GPflow classes it builds (a swap runs if it replaces one of them), the
# expression (in the notebook's final namespace) of the full training data that models with
# external data (the SVGP family) are evaluated on, and series the notebook computes itself.
NOTEBOOKS: dict[str, dict[str, Any]] = {
    "getting_started/large_data": dict(title="Large Data with SGPR", uses=["SGPR"]),
    "advanced/gps_for_big_data": dict(
        title="Stochastic Variational Inference for scalability with SVGP",
        uses=["SVGP"],
        data="data",
    ),
    "theory/upper_bound": dict(
        title="Discussion of the GP marginal likelihood upper bound",
        uses=["SGPR"],
        series=[
            dict(
                index="Ms",
                what="hyperparameters trained with each M",
                columns={"ELBO": "vfe_lml", "upper bound": "vupper_lml"},
                note="Every run starts each M from the same point (Z = the first M inputs, "
                "GPflow's default hyperparameters) and trains all parameters with L-BFGS-B.",
            ),
            dict(
                index="fMs",
                what="hyperparameters fixed at the last trained model's",
                columns={"ELBO": "fvfe_lml", "upper bound": "fvupper_lml"},
                note="Each run copies the hyperparameters of its own last model of the loop "
                "above (M = 19) and starts Z from that model's first M inducing points, then "
                "trains Z only with L-BFGS-B: the runs start from slightly different points "
                "(each its own M = 19 fit) and may end at different local optima, so a lower "
                "value here is not one bound below the other at equal parameters.",
            ),
        ],
    ),
    "theory/FITCvsVFE": dict(
        title="Comparing FITC approximation to VFE approximation", uses=["SGPR", "GPRFITC"]
    ),
    "advanced/GPLVM": dict(
        title="Bayesian GPLVM",
        uses=["BayesianGPLVM"],
        values={  # `_` holds the scipy result of the notebook's BFGS `opt.minimize(...)`
            "BFGS iterations": "_.nit",
            "BFGS final loss (-ELBO)": "_.fun",
            "BFGS success (1 = True)": "_.success",
            "BFGS message": "_.message",
        },
    ),
    "advanced/natural_gradients": dict(
        title="Natural gradients", uses=["SGPR", "SVGP"], data="data"
    ),
    "advanced/fast_predictions": dict(
        title="Faster predictions by caching", uses=["SVGP", "SGPR"], data="(X, Y)"
    ),
}
PRESETS = {
    "quick": dict(
        ci=True, notebooks=["theory/upper_bound", "advanced/fast_predictions"], swaps=["tight"]
    )
}


def arguments(parser):
    parser.add_argument("--notebooks", nargs="+", choices=list(NOTEBOOKS), default=list(NOTEBOOKS))
    parser.add_argument(
        "--swaps",
        nargs="+",
        default=None,
        help="only these swaps (default: every one that applies)",
    )
    parser.add_argument("--ci", action="store_true", help="set CI: reduce_in_tests shortens loops")
    parser.add_argument("--timeout", type=float, default=20.0, help="minutes per notebook run")
    parser.add_argument("--gpflow-repo", type=Path, default=GPFLOW_REPO, help="GPflow git mirror")
    parser.add_argument("--revision", default="HEAD", help="revision of the notebooks")


def setup(threads):
    """Nothing: every run is a subprocess that sets itself up."""


# ----------------------------------------------------------------------------------- plan


def _clean_env() -> dict[str, str]:
    """os.environ without CI switches and git's repository variables (for git -C and children)."""
    drop = ("CI", "DOCS", "GPFLOW_CI", "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE")
    return {k: v for k, v in os.environ.items() if k not in drop}


def _git(repo: Path, *command: str) -> bytes:
    command = ["git", "-C", str(repo), *command]
    return subprocess.run(command, capture_output=True, check=True, env=_clean_env()).stdout


def swap_classes() -> dict[str, list[str]]:
    """The GPflow classes each entry of ``SWAPS`` replaces, without importing gpflow_tight."""
    sys.path.insert(0, str(SWAP_DIR))
    import gpflow_tight_swap

    class Placeholders:  # stands in for the gpflow_tight module: any attribute is a class
        def __getattr__(self, name: str) -> type:
            return type(name, (), {})

    return {name: sorted(make(Placeholders())) for name, make in gpflow_tight_swap.SWAPS.items()}


def docs_version(args) -> str:
    """
    GPflow's version at the notebooks' revision, from the mirror; without the mirror, the one
    version the records were made at, so that the report still renders from the records alone.
    """
    try:
        return _git(args.gpflow_repo, "show", f"{args.revision}:VERSION").decode().strip()
    except (FileNotFoundError, subprocess.CalledProcessError) as error:
        store = harness.Store(NAME, Path(args.out or harness.RESULTS))
        versions = {record["key"]["docs"] for record in store.index.values()}
        if len(versions) != 1:
            raise SystemExit(
                f"gpflow_notebooks needs GPflow's git mirror at {args.gpflow_repo} (fetch "
                "github:GPflow/GPflow, or pass --gpflow-repo): " + str(error)
            ) from error
        return versions.pop()


def plan(args):
    docs = docs_version(args)
    replaces = swap_classes()
    keys = []
    for notebook in args.notebooks:
        uses = set(NOTEBOOKS[notebook]["uses"])
        swaps = ["none"] + [s for s, classes in replaces.items() if uses & set(classes)]
        swaps.sort(key=lambda s: ORDER.index(s) if s in ORDER else len(ORDER))
        for swap in swaps:
            if swap == "none" or args.swaps is None or swap in args.swaps:
                keys.append(harness.keyed(args, ["ci"], notebook=notebook, swap=swap, docs=docs))
    return keys


# ------------------------------------------------------------------------------------ run


def run(key, args):
    """Extract the notebook's folder, run it in a subprocess, return what the child recorded."""
    folder = f"{NOTEBOOK_ROOT}/{Path(key['notebook']).parent}"
    commit = _git(args.gpflow_repo, "rev-parse", args.revision).decode().strip()
    work = Path(tempfile.mkdtemp(prefix="gpflow_notebook_"))
    try:
        archive = _git(args.gpflow_repo, "archive", "--format=tar", commit, folder)
        subprocess.run(["tar", "-x", "-C", str(work)], input=archive, check=True)
        spec = dict(
            notebook=f"{Path(key['notebook']).name}.pct.py",
            swap=key["swap"],
            data=NOTEBOOKS[key["notebook"]].get("data"),
            series=[
                e
                for s in NOTEBOOKS[key["notebook"]].get("series", [])
                for e in [s["index"], *s["columns"].values()]
            ]
            + list(NOTEBOOKS[key["notebook"]].get("values", {}).values()),
            swap_dir=str(SWAP_DIR),
            out=str(work / "result.json"),
        )
        (work / "spec.json").write_text(json.dumps(spec))
        env = _clean_env()
        env.update(TF_CPP_MIN_LOG_LEVEL="2", MPLBACKEND="Agg")
        env["PYTHONPATH"] = os.pathsep.join([str(harness.HERE.parent), env.get("PYTHONPATH", "")])
        if key["ci"]:
            env["CI"] = "1"
        command = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--child",
            str(work / "spec.json"),
        ]
        start = time.perf_counter()
        try:
            done = subprocess.run(
                command,
                cwd=work / folder,
                env=env,
                capture_output=True,
                text=True,
                timeout=60 * args.timeout,
            )
            stderr, returncode = done.stderr, done.returncode
        except subprocess.TimeoutExpired as expired:
            stderr, returncode = str(expired.stderr or ""), None
        seconds = time.perf_counter() - start
        out = Path(spec["out"])
        result = json.loads(out.read_text()) if out.exists() else dict(models=[], outputs=[])
        if returncode is None:
            result.update(
                outcome="timeout",
                error=dict(
                    type="Timeout", message=f"no result after {args.timeout:g} min", line=None
                ),
            )
        elif not out.exists():
            result.update(
                outcome="crashed",
                error=dict(type="Crash", message=f"exit code {returncode}", line=None),
            )
        if result.get("outcome") != "ok":
            result["stderr_tail"] = stderr[-2000:]
        return dict(result, seconds=seconds, gpflow_docs=dict(commit=commit, folder=folder))
    finally:
        shutil.rmtree(work, ignore_errors=True)


# ---------------------------------------------------------------------------- the child


def strip_magics(source: str) -> tuple[str, int]:
    """IPython magics (``%...``) and shell escapes (``!...``) blanked, keeping line numbers."""
    lines, stripped = source.split("\n"), 0
    for i, line in enumerate(lines):
        if line.lstrip().startswith(("%", "!")):
            lines[i], stripped = "", stripped + 1
    return "\n".join(lines), stripped


def describe(error: BaseException, line: int | None = None) -> dict:
    """The exception's type, first lines of its message, the notebook line and the last frames."""
    message = "".join(traceback.format_exception_only(type(error), error)).strip()
    message = "\n".join(message.splitlines()[:6])[:1200]
    frames = traceback.extract_tb(error.__traceback__)[-4:]
    where = [f"{Path(f.filename).name}:{f.lineno} in {f.name}" for f in frames]
    return dict(type=type(error).__name__, message=message, line=line, frames=where)


def child(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    result: dict[str, Any] = dict(outcome="error", models=[], outputs=[], values={}, replaced={})
    try:
        _child(spec, result)
    except Exception as error:  # before the notebook ran: imports or the swap
        result["error"] = dict(describe(error), stage="setup")
    finally:
        Path(spec["out"]).write_text(json.dumps(result))


def _child(spec: dict, result: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.show = lambda *args, **kwargs: None
    import gpflow
    import tensorflow as tf
    from gpflow.models import GPModel
    from gpflow.models.training_mixins import ExternalDataTrainingLossMixin

    result.update(gpflow=gpflow.__version__, tensorflow=tf.__version__)
    if spec["swap"] != "none":
        sys.path.insert(0, spec["swap_dir"])
        import gpflow_tight_swap

        replaced = gpflow_tight_swap.swap(spec["swap"])
        result["replaced"] = {name: cls.__name__ for name, cls in replaced.items()}
        result["gpflow_tight"] = str(Path(sys.modules["gpflow_tight"].__file__).parent)
    sys.path.insert(0, os.getcwd())  # as in a Jupyter kernel: the notebook's folder imports

    path = spec["notebook"]
    source, result["stripped_lines"] = strip_magics(Path(path).read_text())
    tree = ast.parse(source, filename=path)
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    tracked: dict[int, dict] = {}  # id(model) -> model, names, first and last statement
    steps: list[tuple[float, set[str]]] = []  # per statement run: seconds, the names it uses

    def scalar(value: Any) -> float | None:
        if isinstance(value, bool | tf.Variable | tf.Module) or value is None:
            return None
        if isinstance(value, int | float | np.number) or (
            (isinstance(value, np.ndarray) or tf.is_tensor(value)) and np.size(value) == 1
        ):
            try:
                return float(np.asarray(value))
            except (TypeError, ValueError):
                return None
        return None

    start = time.perf_counter()
    result["statements"] = len(tree.body)
    for index, statement in enumerate(tree.body):
        begin = time.perf_counter()
        try:
            if isinstance(statement, ast.Expr):
                value = eval(compile(ast.Expression(statement.value), path, "eval"), namespace)
                if scalar(value) is not None:
                    text = ast.get_source_segment(source, statement) or ""
                    result["outputs"].append(
                        dict(line=statement.lineno, source=text, value=scalar(value))
                    )
            else:
                exec(compile(ast.Module([statement], type_ignores=[]), path, "exec"), namespace)
        except (Exception, SystemExit) as error:
            result["error"] = describe(error, statement.lineno)
        names = {node.id for node in ast.walk(statement) if isinstance(node, ast.Name)}
        steps.append((time.perf_counter() - begin, names))
        for name, value in list(namespace.items()):
            if isinstance(value, GPModel):
                info = tracked.setdefault(
                    id(value), dict(model=value, names=[], line=statement.lineno, first=index)
                )
                info["names"] += [name] if name not in info["names"] else []
                info["last"] = index
        if "error" in result:
            break
    else:
        result["outcome"] = "ok"
    result["statements_run"] = len(steps)
    result["notebook_seconds"] = time.perf_counter() - start

    def number(row: dict, field: str, compute: Any, *args: Any) -> None:
        try:
            row[field] = float(np.asarray(compute(*args)))
        except Exception as error:
            row.setdefault("errors", {})[field] = describe(error)["message"][:300]

    for info in tracked.values():
        model, names = info["model"], info["names"]
        label = (
            names[0] if namespace.get(names[0]) is model else f"{names[0]} (line {info['line']})"
        )
        used = [s for s, n in steps[info["first"] : info["last"] + 1] if n & set(names)]
        row = dict(
            label=label,
            names=names,
            line=info["line"],
            cls=type(model).__name__,
            module=type(model).__module__,
            seconds=sum(used),
        )
        if isinstance(model, ExternalDataTrainingLossMixin):
            if spec.get("data"):
                row["objective_of"] = f"elbo({spec['data']})"
                data = eval(spec["data"], namespace)
                number(row, "objective", model.elbo, data)
                row["elbo"] = row.get("objective")
            else:
                row["objective_of"] = "no data identified"
        else:
            row["objective_of"] = "maximum_log_likelihood_objective()"
            number(row, "objective", model.maximum_log_likelihood_objective)
            if hasattr(model, "elbo"):
                number(row, "elbo", model.elbo)
        if hasattr(model, "upper_bound"):
            number(row, "upper_bound", model.upper_bound)
        result["models"].append(row)

    for expression in spec.get("series", []):
        try:
            value = eval(expression, namespace)
        except Exception as error:
            result["values"][expression] = describe(error)["message"][:300]
            continue
        try:
            result["values"][expression] = np.asarray(value, float).tolist()
        except (TypeError, ValueError):
            result["values"][expression] = str(value)[:300]


# --------------------------------------------------------------------------------- report


def fmt(value: Any, spec: str = ".4f") -> str:
    if value is None:
        return "—"
    return f"{value:{spec}}" if np.isfinite(value) else str(value)


def rounding(difference: float, original: float) -> bool:
    return abs(difference) <= ROUNDING * max(1.0, abs(original))


def error_text(record: dict) -> str:
    e = record.get("error") or {}
    where = f" at line {e['line']}" if e.get("line") else ""
    where += f" ({e['stage']})" if e.get("stage") else ""
    return f"{e.get('type', record.get('outcome'))}{where}"


def comparisons(records: list[dict]) -> list[dict]:
    """
    Every model row beside the unswapped run's model of the same variable first seen after the
    same statement; none for a model built by the statement that raised (it is unfinished).
    """
    originals = {
        (r["key"]["notebook"], r["key"]["docs"], r["key"]["ci"]): r
        for r in records
        if r["key"]["swap"] == "none"
    }
    rows = []
    for r in records:
        k = r["key"]
        base = originals.get((k["notebook"], k["docs"], k["ci"]))
        before = {(m["names"][0], m["line"]): m for m in base["models"]} if base else {}
        stopped = (r.get("error") or {}).get("line")
        for m in r["models"]:
            unfinished = m["line"] == stopped
            o = {} if unfinished else before.get((m["names"][0], m["line"]), {})
            difference = None
            if m.get("objective") is not None and o.get("objective") is not None:
                difference = m["objective"] - o["objective"]
            swapped = m["cls"] in r.get("replaced", {}).values()
            rows.append(
                dict(
                    record=r,
                    model=m,
                    original=o,
                    difference=difference,
                    swapped=swapped,
                    unfinished=unfinished,
                    checked=swapped and k["swap"] in CHECKED,
                )
            )
    return rows


def render(report, records, missing, args):
    first = records[0] if records else {}
    docs = sorted({r["key"]["docs"] for r in records}) or ["?"]
    commits = sorted({r.get("gpflow_docs", {}).get("commit", "?")[:10] for r in records})
    installed = sorted({r.get("gpflow", "?") for r in records if r.get("gpflow")})
    ci = sorted({r["key"]["ci"] for r in records})
    mappings = {}
    for r in records:
        if r.get("replaced"):
            mappings.setdefault(r["key"]["swap"], {}).update(r["replaced"])
    protocol = [
        f"Notebooks: GPflow's documentation notebooks (jupytext `.pct.py`, `{NOTEBOOK_ROOT}/`) "
        f"of GPflow {', '.join(docs)} (git commit {', '.join(commits)} of a local mirror), run "
        f"against the installed GPflow {', '.join(installed) or '?'} (TensorFlow "
        f"{first.get('tensorflow', '?')}). The notebooks were written for the version they ship "
        "with; nothing in them was edited.",
        "Each (notebook, swap) runs in a fresh Python process, from a temporary copy of the "
        "notebook's folder (`git archive`) as working directory, on `sys.path` as in a Jupyter "
        "kernel (data files such as `data/snelson_*.dat` and helpers such as `FITCvsVFE.py` come "
        "from there; none of these notebooks downloads anything). IPython magics and shell "
        "escapes are blanked (in these files they are commented out already, so `%%timeit` "
        "cells run their statement once); matplotlib uses Agg and `plt.show` does nothing. The "
        "source runs one top-level statement at a time in one namespace, as a notebook's cells "
        "run top to bottom; a run stops at the first exception, which is recorded, and the "
        "models built until then are still evaluated.",
        "Iteration counts: "
        + (
            "`CI` set, so `gpflow.ci_utils.reduce_in_tests(n)` returns its small test value "
            "(2 unless stated) in every loop: a smoke run, not the notebooks' results."
            if ci == [True]
            else "`CI` and `DOCS` unset, so `gpflow.ci_utils.reduce_in_tests(n)` returns n: "
            "every notebook runs with its own iteration counts, nothing reduced or patched, "
            "identically for the unswapped and swapped runs."
        ),
        "Swaps (`tests/integration/gpflow_suite/gpflow_tight_swap.py`, `swap(name)`, which "
        "replaces the classes in `gpflow.models` and `gpflow.models.sgpr/svgp/gplvm` before the "
        "notebook runs): "
        + "; ".join(
            f"`{s}`: "
            + ", ".join(
                f"{a} → {b}"
                for a, b in sorted(m.items())
                if a in {"SGPR", "SVGP", "GPRFITC", "BayesianGPLVM"}
            )
            for s, m in mappings.items()
        )
        + ". A swap runs on a notebook if it replaces a class the notebook builds; `none` is "
        "GPflow's classes. `relaxed` is the relaxation 'none', which the swap module says must "
        "be GPflow's SGPR/SVGP exactly. The `solve` classes get an empty orthogonal set.",
        "Models: every `gpflow.models.GPModel` bound to a variable after some top-level "
        "statement, labelled by its variable, or `name (line L)` if the variable is later "
        "rebound (L = the statement after which it first appeared). They are evaluated after "
        "the last statement run: final objective = `maximum_log_likelihood_objective()` for "
        "models that hold their data (the log marginal likelihood of GPR and GPRFITC, the "
        "collapsed bound of SGPR and its drop-ins, the Power-EP objective of FITC/VFE, the "
        "ELBO of VGP and the GPLVMs); `elbo(data)` on the notebook's full training data (the "
        "variable named in the table) for the SVGP family. `elbo()` and `upper_bound()` where "
        "the model has them: for gpflow-tight's VFE/FITC these are Titsias's bounds at the "
        "model's parameters, and GPflow's GPRFITC inherits SGPR's `upper_bound()` (Titsias's "
        "upper bound at FITC's parameters, not a bound on FITC's objective).",
        "Δ = objective − the unswapped run's objective of the same model (same variable, first "
        "seen after the same statement; none for a model built by a statement that raised, "
        "which is unfinished). '≥ original' "
        f"(for {' and '.join(CHECKED)} swaps, on the models whose class was replaced) is the "
        "strict check objective ≥ original's; a failure with |Δ| ≤ "
        f"{ROUNDING:g}·max(1, |original|) is called rounding in the findings. The other swaps "
        "(Power EP's FITC is not a bound; SOLVE's objectives are on their own data layout) are "
        "reported without that claim.",
        "Time: wall-clock seconds on 2 cores shared with other jobs, under `nice`: per run, the "
        "whole subprocess (start-up and imports included) and the notebook alone; per model, "
        "the top-level statements that name one of its variables while it is bound to it "
        "(building, training, plotting it).",
    ]
    report.head(
        "GPflow's documentation notebooks with the drop-ins swapped in", records, protocol, missing
    )
    rows = comparisons(records)
    report.section("Findings")
    report.bullets(findings(records, rows))
    overview(report, records, rows)
    for notebook in dict.fromkeys(r["key"]["notebook"] for r in records):
        section(report, notebook, [r for r in records if r["key"]["notebook"] == notebook], rows)


def overview(report, records: list[dict], rows: list[dict]) -> None:
    """Notebook x swap: the outcome, and for the checked swaps how many models are >= GPflow's."""
    swaps = [s for s in ORDER if any(r["key"]["swap"] == s for r in records)]
    notebooks = list(dict.fromkeys(r["key"]["notebook"] for r in records))
    table = []
    for notebook in notebooks:
        cells = []
        for swap in swaps:
            r = next((r for r in records if r["key"]["notebook"] == notebook
                      and r["key"]["swap"] == swap), None)  # fmt: skip
            if r is None:
                cells.append("—")
                continue
            cell = "ok" if r.get("outcome") == "ok" else f"**{error_text(r)}**"
            for m, why in unevaluated(r):
                cell += f", **objective of `{m['label']}` not computable ({why})**"
            mine = [x for x in rows if x["record"] is r and x["checked"]]
            mine = [x for x in mine if x["difference"] is not None]
            if mine:
                cell += f", ≥ in {sum(x['difference'] >= 0 for x in mine)}/{len(mine)}"
            cells.append(cell + f", {r['seconds']:.0f} s")
        table.append([f"`{notebook}`", *cells])
    report.section("Overview")
    report.add(
        "Outcome of each run, for `tight` and `relaxed` the number of swapped models whose final "
        "objective is ≥ the unswapped run's (strictly, rounding included), and the process's "
        "wall time; — = the swap replaces no class the notebook uses.",
        "",
    )
    report.table(["notebook", *swaps], table)


def unevaluated(record: dict) -> list[tuple[dict, str]]:
    """The models of a run whose final objective raised, with the exception's type."""
    out = []
    for m in record.get("models", []):
        message = m.get("errors", {}).get("objective")
        if message:
            out.append((m, message.split(":")[0].split(".")[-1]))
    return out


def findings(records: list[dict], rows: list[dict]) -> list[str]:
    out = []
    ok = [r for r in records if r.get("outcome") == "ok"]
    failed = [r for r in records if r.get("outcome") != "ok"]
    out.append(
        f"{harness.of(len(ok), len(records), 'runs')} ran to the end"
        + (
            "; these stopped with an exception: "
            + "; ".join(
                f"{r['key']['notebook']} with `{r['key']['swap']}`: {error_text(r)}, "
                f"`{(r.get('error') or {}).get('message', '').splitlines()[0][:160]}`"
                for r in failed
            )
            if failed
            else ""
        )
        + "."
    )
    failed_models = [(r, m) for r in records for m in r.get("models", [])
                     if m.get("errors", {}).get("objective")]  # fmt: skip
    if failed_models:
        out.append(
            "Final objective not computable (the evaluation after the run raised): "
            + "; ".join(
                f"{r['key']['notebook']} with `{r['key']['swap']}`, `{m['label']}` ({m['cls']}): "
                f"`{' '.join(m['errors']['objective'].split())[:200]}`"
                for r, m in failed_models
            )
            + "."
        )
    for swap in CHECKED:
        checked = [x for x in rows if x["checked"] and x["difference"] is not None]
        checked = [x for x in checked if x["record"]["key"]["swap"] == swap]
        if not checked:
            continue
        below = [x for x in checked if x["difference"] < 0]
        real = [x for x in below if not rounding(x["difference"], x["original"]["objective"])]
        text = (
            f"`{swap}`: final objective ≥ the original's in "
            f"{harness.of(len(checked) - len(below), len(checked), 'swapped models')} (those "
            "with a final objective in both runs)"
        )
        if below:
            text += f"; below it in {len(below)} ({len(below) - len(real)} by rounding only): " + (
                "; ".join(
                    f"{x['record']['key']['notebook']} `{x['model']['label']}` "
                    f"({x['model']['cls']}) {x['model']['objective']:.6f} vs "
                    f"{x['original']['objective']:.6f} (Δ {x['difference']:+.3g})"
                    for x in below
                )
            )
        gains = [x["difference"] for x in checked]
        out.append(text + f". Δ ranges over {harness.span(gains, '+.4g')}.")
    unswapped = [
        x
        for x in rows
        if not x["swapped"] and x["record"]["key"]["swap"] != "none" and x["difference"] is not None
    ]
    if unswapped:
        worst = max(unswapped, key=lambda x: abs(x["difference"]))
        out.append(
            f"Models of classes no swap replaces (GPR, VGP, ...) in the swapped runs: "
            f"{len(unswapped)} rows, largest |Δ| to the unswapped run "
            f"{abs(worst['difference']):.3g} ({worst['record']['key']['notebook']} "
            f"`{worst['model']['label']}`, swap `{worst['record']['key']['swap']}`)."
        )
    missing = [x for x in rows if x["record"]["key"]["swap"] != "none" and not x["original"]]
    missing = [x for x in missing if not x["unfinished"]]
    if missing:
        out.append(
            "Without an unswapped counterpart (no model of that label in the `none` run): "
            + ", ".join(
                f"{x['record']['key']['notebook']} `{x['model']['label']}` "
                f"({x['record']['key']['swap']})"
                for x in missing
            )
            + "."
        )
    return out


def check_summary(checked: list[dict], swap: str) -> str:
    """'`swap` ≥ original in k of n swapped models', and how far below the others are."""
    below = [x for x in checked if x["difference"] < 0]
    real = [x for x in below if not rounding(x["difference"], x["original"]["objective"])]
    text = f"`{swap}` ≥ original in {harness.of(len(checked) - len(below), len(checked))} models"
    if below:
        worst = min(x["difference"] for x in below)
        text += f" ({len(below)} below, by at most {-worst:.3g}"
        text += f"; {len(real)} beyond rounding)" if real else ", rounding)"
    return text


def section(report, notebook: str, records: list[dict], rows: list[dict]) -> None:
    config = NOTEBOOKS.get(notebook, {})
    report.section(f"`{notebook}.pct.py`: {config.get('title', '')}")
    report.bullets(
        f"`{r['key']['swap']}`: "
        + ("ran to the end" if r.get("outcome") == "ok" else f"**{error_text(r)}**")
        + f", {r.get('statements_run', 0)} of {r.get('statements', '?')} top-level statements, "
        f"notebook {fmt(r.get('notebook_seconds'), '.1f')} s (process {r['seconds']:.1f} s)"
        + (f": `{' '.join(r['error']['message'].split())[:400]}`" if r.get("error") else "")
        for r in records
    )
    mine = [x for x in rows if x["record"]["key"]["notebook"] == notebook]
    table = []
    for x in mine:
        m, swap = x["model"], x["record"]["key"]["swap"]
        check = "—"
        if x["checked"] and x["difference"] is not None:
            check = "True" if x["difference"] >= 0 else "**False**"
            if x["difference"] < 0 and rounding(x["difference"], x["original"]["objective"]):
                check = "False (rounding)"
        outcome = "ok" if x["record"].get("outcome") == "ok" else error_text(x["record"])
        if x["unfinished"]:
            outcome += ", built by the statement that raised: no Δ"
        if m.get("errors"):
            outcome += "; " + "; ".join(
                f"{k}: {v.splitlines()[0][:80]}" for k, v in m["errors"].items()
            )
        of = m.get("objective_of", "")
        table.append(
            [
                swap,
                f"`{m['label']}`",
                m["cls"],
                fmt(m.get("objective")),
                "—" if swap == "none" else fmt(x["difference"], "+.3g"),
                fmt(m.get("elbo")),
                fmt(m.get("upper_bound")),
                f"{m['seconds']:.1f}",
                check,
                outcome + (f" ({of})" if of.startswith(("elbo", "no")) else ""),
            ]
        )
    if table:
        report.table(
            [
                "swap",
                "variable",
                "class",
                "final objective",
                "Δ vs none",
                "elbo",
                "upper_bound",
                "time s",
                "≥ original",
                "outcome",
            ],
            table,
        )
    else:
        report.add("No model was built.", "")
    checked = [x for x in mine if x["checked"] and x["difference"] is not None]
    if checked:
        report.add(
            "Check final objective ≥ original's: "
            + "; ".join(
                check_summary([x for x in checked if x["record"]["key"]["swap"] == swap], swap)
                for swap in CHECKED
                if any(x["record"]["key"]["swap"] == swap for x in checked)
            )
            + ".",
            "",
        )
    outputs(report, records)
    for group in config.get("series", []):
        series(report, records, group)
    if config.get("values"):
        swaps = [r["key"]["swap"] for r in records]
        report.add("Values from the notebook's namespace at the end of each run:", "")
        report.table(
            ["value", "expression", *swaps],
            [
                [
                    label,
                    f"`{expression}`",
                    *(cell(r.get("values", {}).get(expression)) for r in records),
                ]
                for label, expression in config["values"].items()
            ],
        )


def cell(value: Any) -> str:
    """A recorded value in a table cell: numbers to 6 significant digits, text on one line."""
    if value is None:
        return "— (not recorded)"
    if isinstance(value, float | int):
        return f"{value:.6g}"
    return " ".join(str(value).split())[:160].replace("|", "/")


def outputs(report, records: list[dict]) -> None:
    """The scalar values of top-level expression statements (a cell's output), per swap."""
    lines = {}
    for r in records:
        for o in r.get("outputs", []):
            lines.setdefault((o["line"], o["source"]), {}).setdefault(r["key"]["swap"], []).append(
                o["value"]
            )
    if not lines:
        return
    swaps = [r["key"]["swap"] for r in records]
    report.add("Scalar outputs of top-level expressions (what the cell displays):", "")
    report.table(
        ["line", "expression", *swaps],
        [
            [
                line,
                f"`{' '.join(text.split())[:70]}`",
                *(", ".join(f"{v:.4f}" for v in by.get(s, [])) or "—" for s in swaps),
            ]
            for (line, text), by in sorted(lines.items())
        ],
    )


def series(report, records: list[dict], group: dict) -> None:
    """Tables of lists the notebook computes itself (one value per index), one column per swap."""
    swaps = [r["key"]["swap"] for r in records]
    values = [r.get("values", {}) for r in records]
    index = next((v[group["index"]] for v in values if isinstance(v.get(group["index"]), list)), [])
    if not index:
        return
    report.add(f"Lists the notebook computes against `{group['index']}` ({group['what']}).")
    report.add(group.get("note", ""), "")
    for label, expression in group["columns"].items():
        columns = [v.get(expression) for v in values]
        columns = [c if isinstance(c, list) and len(c) == len(index) else None for c in columns]
        report.add(f"`{expression}` ({label}):", "")
        rows = [
            [f"{i:g}", *(fmt(c[j]) if c else "—" for c in columns)] for j, i in enumerate(index)
        ]
        report.table([group["index"], *swaps], rows)
        base = columns[swaps.index("none")] if "none" in swaps else None
        if label != "ELBO" or base is None:
            continue
        for swap in [s for s in CHECKED if s in swaps and columns[swaps.index(s)]]:
            d = np.subtract(columns[swaps.index(swap)], base)
            below = [j for j in range(len(d)) if d[j] < 0]
            real = [j for j in below if not rounding(d[j], base[j])]
            text = f"`{swap}` ≥ none at {harness.of(len(d) - len(below), len(d))} values"
            if below:
                text += f"; below at {len(below)}, {len(real)} of them beyond rounding"
                text += (": " if real else "") + ", ".join(
                    f"{group['index']} = {index[j]:g}: {columns[swaps.index(swap)][j]:.4f} vs "
                    f"{base[j]:.4f}"
                    for j in real
                )
            report.add(text + f" (Δ {harness.span(list(d), '+.4g')}).", "")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2])
    else:
        harness.main(__import__(__name__))
