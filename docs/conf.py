"""
Sphinx configuration of the gpflow-tight documentation site: ``make docs`` builds it into
``docs/_build/html`` (``index.html`` there opens the site).

The source directory is the repository root, so that the pages are the same markdown files that
GitHub shows, with the same relative links: the README, the method pages ``docs/*.md``, the
notebooks ``notebooks/*.pct.py`` (Jupytext percent format, executed by myst-nb and rendered with
their outputs) and the committed benchmark reports ``benchmarks/README.md`` and
``benchmarks/results/*.md``. The API reference (``docs/api.rst``) is autodoc over the docstrings.

MathJax is served with the site, never from a CDN, so that the equations render offline: the
``docs`` extra installs ``django-static-mathjax`` (MathJax 3.2.2's browser components as package
data; Django itself is not needed), and ``copy_mathjax`` copies the TeX-to-CommonHTML component,
with the extensions, fonts and menu it loads on demand, into the site's ``_static/mathjax``.
``tests/integration/test_site.py`` opens its pages in headless Chromium and checks them.

Environment switches: ``GPFLOW_TIGHT_DOCS_EXECUTE`` is myst-nb's execution mode (``cache`` by
default, so that notebooks rerun only when they change; ``force`` or ``off``); ``GPFLOW_CI=1``
runs the notebooks on their short test settings; ``GPFLOW_TIGHT_DOCS_NOTEBOOKS=compat`` executes
only the integrations' notebooks (Trieste, GPflux), which run only where both are installed.
"""

import importlib.util
import os
import re
import shutil
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
    "CHANGELOG.md",
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
# Notebooks of the integrations (Trieste, GPflux) run where Trieste and GPflux are installed (the
# second environment of `make test-compat`, which builds the site with them executed); elsewhere
# the site shows their code and committed figures. GPFLOW_TIGHT_DOCS_NOTEBOOKS=compat executes
# only them.
COMPAT_MARKER = "#     environment: compat"  # in the Jupytext header's `gpflow_tight:`
ROOT = DOCS.parent
NOTEBOOKS = {
    str(path.relative_to(ROOT)): COMPAT_MARKER in path.read_text().splitlines()[:8]
    for path in sorted(ROOT.glob("notebooks/*.pct.py"))
}
INTEGRATIONS = all(importlib.util.find_spec(name) for name in ("trieste", "gpflux"))
ONLY_COMPAT = os.environ.get("GPFLOW_TIGHT_DOCS_NOTEBOOKS", "all") == "compat"
nb_execution_excludepatterns = [
    path
    for path, compat in NOTEBOOKS.items()
    if (compat and not INTEGRATIONS) or (ONLY_COMPAT and not compat)
]
nb_execution_cache_path = str(DOCS / "_build" / ".jupyter_cache")
nb_execution_timeout = 3600
nb_execution_raise_on_error = True  # a notebook that fails fails the build
nb_merge_streams = True
nb_output_stderr = "remove"  # TensorFlow's start-up log and tqdm bars

autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_mock_imports = ["trieste", "gpflux"]  # the integrations' modules, documented unrun
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented"  # types of the documented parameters

bibtex_bibfiles = ["references.bib"]
bibtex_reference_style = "author_year"

html_theme = "furo"
html_title = f"gpflow-tight {release}"
html_static_path = ["_static"]
html_css_files = ["math.css"]
html_extra_path = ["_static_root"]  # index.html at the site root, pointing to docs/index

# MathJax served with the site (see the module docstring): the component the pages load, and the
# directories it loads from on demand: TeX extensions (input/), fonts and the menu's SVG renderer
# (output/), the menu (ui/), accessibility and speech (a11y/, sre/).
MATHJAX_COMPONENT = "tex-chtml.js"
MATHJAX_ON_DEMAND = ["input", "output", "ui", "a11y", "sre"]
mathjax_path = f"mathjax/{MATHJAX_COMPONENT}"  # relative, so under the site's _static/


def mathjax_package() -> Path:
    """The installed MathJax distribution (``LICENSE``, ``es5/`` with the browser components)."""
    spec = importlib.util.find_spec("mathjax")
    package = Path(spec.origin).parent / "static" / "mathjax" if spec and spec.origin else None
    if package is None or not (package / "es5" / MATHJAX_COMPONENT).is_file():
        raise RuntimeError(
            f"MathJax's es5/{MATHJAX_COMPONENT} not found ({package or 'no mathjax package'}), "
            "so the site could not show its equations offline: install the docs dependencies "
            "with `pip install -e '.[docs]'` (they include django-static-mathjax 3.x)"
        )
    return package


MATHJAX = mathjax_package()


def copy_mathjax(app, exception) -> None:
    """``build-finished`` handler: copy MathJax into the built site's ``_static/mathjax``."""
    if exception is not None or app.builder.format != "html":
        return
    target = Path(app.outdir) / "_static" / "mathjax"
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy2(MATHJAX / "LICENSE", target / "LICENSE")
    shutil.copy2(MATHJAX / "es5" / MATHJAX_COMPONENT, target / MATHJAX_COMPONENT)
    for directory in MATHJAX_ON_DEMAND:
        shutil.copytree(MATHJAX / "es5" / directory, target / directory, dirs_exist_ok=True)


GPFLOW_DOCS = "https://gpflow.github.io/GPflow/develop/"


def link_gpflow_pages(app, what, name, obj, options, lines) -> None:
    """
    ``autodoc-process-docstring`` handler: GPflow's docstrings, which the package's checked
    methods keep (``predict_y`` wrapped by ``validation.checks_arguments``), refer to GPflow's own
    pages with relative ``:doc:`` roles; link them to GPflow's site instead.
    """

    def link(match: re.Match) -> str:  # an anonymous link: the same page may be named twice
        page = match[1]
        return f"`GPflow's {page.rsplit('/', 1)[-1]} notebook <{GPFLOW_DOCS}{page}.html>`__"

    for i, line in enumerate(lines):
        lines[i] = re.sub(r":doc:`(?:\.\./)+([^`]+)`", link, line)


def setup(app) -> None:
    app.connect("build-finished", copy_mathjax)
    app.connect("autodoc-process-docstring", link_gpflow_pages)
