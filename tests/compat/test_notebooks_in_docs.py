"""
The integrations' notebooks (Trieste, GPflux) run in the documentation build on their pinned
stack: the site built here (``GPFLOW_TIGHT_DOCS_NOTEBOOKS=compat``) executes them in full from
the committed records of their full runs, which they render into the committed tables.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ("trieste_bo", "deep_gp")  # each writes to docs/_static/<its name>/

pytest.importorskip("myst_nb", reason="the docs extra: pip install 'gpflow-tight[docs]'")


def test_the_integration_notebooks_run_in_the_site_build(tmp_path):
    tables = {
        name: (ROOT / "docs" / "_static" / name / "results.md").read_text() for name in NOTEBOOKS
    }
    env = {**os.environ, "GPFLOW_TIGHT_DOCS_EXECUTE": "force"}
    env["GPFLOW_TIGHT_DOCS_NOTEBOOKS"] = "compat"
    command = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html"]
    result = subprocess.run(
        [*command, "-c", str(ROOT / "docs"), str(ROOT), str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-5000:]
    for name in NOTEBOOKS:
        html = (tmp_path / "notebooks" / f"{name}.html").read_text()
        assert 'class="cell_output' in html and "<img" in html, name
        # the committed records were complete: the table rendered from them is the committed one
        table = (ROOT / "docs" / "_static" / name / "results.md").read_text()
        assert table == tables[name], name
        rows = [line for line in table.splitlines() if line.startswith("| ")]
        for cell in rows[2].split("|")[1:-1]:  # the first data row, printed by the notebook
            assert cell.strip() in html, (name, cell)
