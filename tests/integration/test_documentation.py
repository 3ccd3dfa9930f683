"""The README's examples run as written, and the documentation site builds."""

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

import gpflow_tight

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.pct.py"))
# docs/conf.py: notebooks the site shows unexecuted (their Jupytext header says so)
COMPAT_MARKER = "#     environment: compat"
INTEGRATIONS = all(importlib.util.find_spec(name) for name in ("trieste", "gpflux"))


def run_python_blocks(path):
    """Execute the page's python code blocks in order, in one namespace; return it."""
    text = path.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, path
    namespace: dict = {}
    for block in blocks:  # later blocks build on the earlier ones
        exec(compile(block, str(path), "exec"), namespace)
    return namespace


def test_readme_examples_run():
    assert (ROOT / "README.md").read_text().startswith("```bash\nmake demo")
    namespace = run_python_blocks(ROOT / "README.md")
    assert namespace["model"].elbo().numpy() > -1e6
    assert np.isfinite(namespace["classifier"].log_marginal_likelihood().numpy())


def test_training_guide_examples_run():
    namespace = run_python_blocks(ROOT / "docs" / "training.md")
    assert len(namespace["history"].history["loss"]) == 2  # the MirroredStrategy fit
    np.testing.assert_allclose(
        namespace["mean"], namespace["collapsed"].predict_y(namespace["X"][:5])[0]
    )


def test_site_builds_with_the_notebooks_executed(tmp_path):
    """
    ``make docs`` without warnings (``-W``): the API reference from the docstrings, the method
    pages, the benchmark reports, and every notebook executed in a Jupyter kernel on its short
    test settings. A notebook that raises fails the build, so this is the notebooks' test too.
    """
    env = {
        **os.environ,
        "CI": "1",  # gpflow.ci_utils.reduce_in_tests shortens loops when CI is set
        "GPFLOW_CI": "1",  # the notebooks' own switch (data subsets)
        "GPFLOW_TIGHT_DOCS_EXECUTE": "force",
    }
    command = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html"]
    result = subprocess.run(
        [*command, "-c", str(ROOT / "docs"), str(ROOT), str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-5000:]
    notebooks = sorted(path.name.removesuffix(".pct.py") for path in NOTEBOOKS)
    rendered = sorted(path.stem for path in (tmp_path / "notebooks").glob("*.html"))
    assert rendered == notebooks
    for notebook in NOTEBOOKS:  # rendered with their outputs, figures included
        page = tmp_path / "notebooks" / f"{notebook.name.removesuffix('.pct.py')}.html"
        html = page.read_text()
        if COMPAT_MARKER in notebook.read_text().splitlines()[:8] and not INTEGRATIONS:
            # run where Trieste and GPflux are (make test-compat): code and committed figures
            assert 'class="cell_output' not in html and "<img" in html, notebook.name
            continue
        assert 'class="cell_output' in html, notebook.name
        if "plt." in notebook.read_text():
            assert "<img" in html, notebook.name
    api = (tmp_path / "docs" / "api.html").read_text()
    exported = [getattr(gpflow_tight, name) for name in gpflow_tight.__all__]
    for cls in (obj for obj in exported if isinstance(obj, type)):  # every class has its entry
        assert f'id="{cls.__module__}.{cls.__qualname__}"' in api, cls
