"""
Sphinx configuration of the gpflow-tight documentation site: ``make docs`` builds it into
``docs/_build/html`` (``index.html`` there opens the site).

The source directory is the repository root, so that the pages are the same markdown files that
GitHub shows, with the same relative links: the README, the method pages ``docs/*.md``, the
notebooks ``notebooks/*.pct.py`` (Jupytext percent format, executed by myst-nb and rendered with
their outputs) and the committed benchmark reports ``benchmarks/README.md`` and
``benchmarks/results/*.md``. The API reference (``docs/api.rst``) is autodoc over the docstrings.

Environment switches: ``GPFLOW_TIGHT_DOCS_EXECUTE`` is myst-nb's execution mode (``cache`` by
default, so that notebooks rerun only when they change; ``force`` or ``off``); ``GPFLOW_CI=1``
runs the notebooks on their short test settings.
"""

import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # quiet TensorFlow here and in the kernels

import gpflow_tight  # noqa: E402

project = "gpflow-tight"
author = "the gpflow-tight developers"
copyright = "2026, the gpflow-tight developers"  # noqa: A001
release = gpflow_tight.__version__

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "sphinxcontrib.bibtex",
]

DOCS = Path(__file__).resolve().parent
root_doc = "docs/index"
include_patterns = [
    "README.md",
    "CONTRIBUTING.md",
    "docs/*.md",
    "docs/*.rst",
    "notebooks/*.pct.py",
    "benchmarks/README.md",
    "benchmarks/results/*.md",
]
exclude_patterns = [
    "docs/README.md",  # GitHub's index of docs/; the site's is docs/index.md
    "benchmarks/results/*_notes.md",  # appended to their reports by the benchmark scripts
]
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".pct.py": "myst-nb"}
suppress_warnings = ["myst.header"]  # the reports start at level-2 headings after a title

myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3

nb_custom_formats = {".pct.py": ["jupytext.reads", {"fmt": "py:percent"}]}
nb_execution_mode = os.environ.get("GPFLOW_TIGHT_DOCS_EXECUTE", "cache")
nb_execution_cache_path = str(DOCS / "_build" / ".jupyter_cache")
nb_execution_timeout = 3600
nb_execution_raise_on_error = True  # a notebook that fails fails the build
nb_merge_streams = True
nb_output_stderr = "remove"  # TensorFlow's start-up log and tqdm bars

autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented"  # types of the documented parameters

bibtex_bibfiles = ["references.bib"]
bibtex_reference_style = "author_year"

html_theme = "furo"
html_title = f"gpflow-tight {release}"
html_extra_path = ["_static_root"]  # index.html at the site root, pointing to docs/index
