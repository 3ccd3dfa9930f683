"""Building the documentation site in a test: ``make docs`` into a temporary directory."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build_site(out: Path, **environment: str) -> None:
    """
    Build the site with Sphinx into ``out``, warnings as errors (``-W``), with ``environment``
    added to the process environment (``GPFLOW_TIGHT_DOCS_EXECUTE`` and the other switches of
    ``docs/conf.py``). A failed build fails the test with the end of Sphinx's output.
    """
    command = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html"]
    result = subprocess.run(
        [*command, "-c", str(ROOT / "docs"), str(ROOT), str(out)],
        env={**os.environ, **environment},
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-5000:]
