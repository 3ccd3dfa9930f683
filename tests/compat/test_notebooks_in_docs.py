"""
The integrations' notebooks (Trieste, GPflux) on their pinned stack: the site built here
(``GPFLOW_TIGHT_DOCS_NOTEBOOKS=compat``) executes them in full from the committed records of
their full runs, which they render into the committed tables; as scripts on their smoke
settings they train every model from scratch.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.site import build_site

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ("trieste_bo", "deep_gp")  # each writes to docs/_static/<its name>/


def test_the_integration_notebooks_run_in_the_site_build(tmp_path):
    pytest.importorskip("myst_nb", reason="the docs extra: pip install 'gpflow-tight[docs]'")
    tables = {
        name: (ROOT / "docs" / "_static" / name / "results.md").read_text() for name in NOTEBOOKS
    }
    build_site(tmp_path, GPFLOW_TIGHT_DOCS_EXECUTE="force", GPFLOW_TIGHT_DOCS_NOTEBOOKS="compat")
    for name in NOTEBOOKS:
        html = (tmp_path / "notebooks" / f"{name}.html").read_text()
        assert 'class="cell_output' in html and "<img" in html, name
        # the committed records were complete: the table rendered from them is the committed one
        table = (ROOT / "docs" / "_static" / name / "results.md").read_text()
        assert table == tables[name], name
        rows = [line for line in table.splitlines() if line.startswith("| ")]
        for cell in rows[2].split("|")[1:-1]:  # the first data row, printed by the notebook
            assert cell.strip() in html, (name, cell)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_the_integration_notebooks_train_on_their_smoke_settings(name):
    """
    Each notebook as a script with ``GPFLOW_TIGHT_QUICK=1``: it trains every model from scratch
    on a few steps (the site build above renders the committed full runs without training), and
    prints its results table.
    """
    env = {**os.environ, "GPFLOW_TIGHT_QUICK": "1", "MPLBACKEND": "Agg"}
    result = subprocess.run(
        [sys.executable, str(ROOT / "notebooks" / f"{name}.pct.py")],
        cwd=ROOT,  # where the notebook finds the repository (it writes to a temporary directory)
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-5000:]
    table = (ROOT / "docs" / "_static" / name / "results.md").read_text().splitlines()
    header = next(line for line in table if line.startswith("| "))  # the committed columns
    assert header in result.stdout, result.stdout[-3000:]
