"""The README's example and the notebooks run as written."""

import re
import runpy
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_readme_examples_run():
    readme = (ROOT / "README.md").read_text()
    assert readme.startswith("```bash\nmake demo")
    first, *rest = re.findall(r"```python\n(.*?)```", readme, re.S)
    namespace: dict = {}
    exec(compile(first, "README.md", "exec"), namespace)
    assert namespace["model"].elbo().numpy() > -1e6
    for example in rest:  # later examples build on the first one's data
        exec(compile(example, "README.md", "exec"), namespace)
    assert np.isfinite(namespace["classifier"].log_marginal_likelihood().numpy())


@pytest.mark.parametrize("notebook", sorted((ROOT / "notebooks").glob("*.pct.py")), ids=str)
def test_notebook_runs(notebook, monkeypatch):
    monkeypatch.setenv("CI", "1")  # gpflow.ci_utils.reduce_in_tests shortens loops when CI is set
    monkeypatch.setenv("GPFLOW_CI", "1")  # the notebooks' own switch (data subsets, no files)
    runpy.run_path(str(notebook), run_name="__main__")
