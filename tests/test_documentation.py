"""The README's example and the notebooks run as written."""

import re
import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_readme_example_runs():
    readme = (ROOT / "README.md").read_text()
    assert readme.startswith("```bash\nmake demo")
    example = re.findall(r"```python\n(.*?)```", readme, re.S)[0]
    namespace: dict = {}
    exec(compile(example, "README.md", "exec"), namespace)
    assert namespace["model"].elbo().numpy() > -1e6


@pytest.mark.parametrize("notebook", sorted((ROOT / "notebooks").glob("*.pct.py")), ids=str)
def test_notebook_runs(notebook, monkeypatch):
    monkeypatch.setenv("GPFLOW_CI", "1")  # gpflow.ci_utils.reduce_in_tests shortens loops
    runpy.run_path(str(notebook), run_name="__main__")
