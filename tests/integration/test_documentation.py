"""The README's and the training guide's examples run as written (the site: ``test_site.py``)."""

import re
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


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
