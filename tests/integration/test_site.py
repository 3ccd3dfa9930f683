"""
The documentation site: ``make docs`` builds it without warnings with every notebook executed,
and it works offline.

One test, one site build (the slowest step of the suite, so that ``pytest -n`` never runs it
twice). The build (``-W``) executes every notebook in a Jupyter kernel on its short test
settings, so a notebook that raises fails it: this is the notebooks' test too. The site then
shows each notebook with its outputs, documents every exported class, and works offline:
MathJax is served with the site (``docs/conf.py``), so its pages, opened in a headless browser
that may reach nothing but the site, show typeset equations, not LaTeX source. The browser is
Debian's Chromium (``make test`` installs it with apt-get when it is missing) driven by
playwright from the ``test`` extra; ``GPFLOW_TIGHT_CHROMIUM`` names another binary.
"""

import contextlib
import functools
import http.server
import importlib.util
import os
import re
import threading
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

import pytest

import gpflow_tight
from tests.site import build_site

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path(os.environ.get("GPFLOW_TIGHT_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
METHOD_PAGE = "docs/tight.html"
# a script or stylesheet that a page would load from elsewhere than the site
REMOTE_ASSET = re.compile(r"<(?:script|link)\b[^>]*\b(?:src|href)=[\"'](?:https?:)?//[^>]*>", re.I)
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.pct.py"))
# docs/conf.py: notebooks the site shows unexecuted (their Jupytext header says so)
COMPAT_MARKER = "#     environment: compat"
INTEGRATIONS = all(importlib.util.find_spec(name) for name in ("trieste", "gpflux"))


@pytest.fixture
def browser(tmp_path):
    """Headless Chromium with a new empty profile; checked before anything is built."""
    if not CHROMIUM.is_file():
        pytest.fail(
            f"Chromium not found at {CHROMIUM}: the docs test opens the site in headless "
            "Chromium. Install it with `sudo apt-get install -y chromium` (Debian/Ubuntu; "
            "`make test` does this when it can), or point GPFLOW_TIGHT_CHROMIUM to a Chromium "
            "or Chrome binary. Do not run `playwright install`.",
            pytrace=False,
        )
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail(
            "playwright is not installed: `pip install -e '.[test]'` (or `pip install "
            "playwright`; the browser is the system's Chromium, no `playwright install`)",
            pytrace=False,
        )
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path / "chromium_profile"),
            executable_path=str(CHROMIUM),
            args=CHROMIUM_ARGS,
            headless=True,
            viewport={"width": 1280, "height": 1000},
        )
        try:
            yield context
        finally:
            context.close()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 (the base class's signature)
        pass


@contextlib.contextmanager
def serve(directory):
    """Serve ``directory`` over HTTP on a free local port; yields the base URL."""
    handler = functools.partial(QuietHandler, directory=str(directory))
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as httpd:
        thread = threading.Thread(target=httpd.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{httpd.server_address[1]}"
        finally:
            httpd.shutdown()
            thread.join()


def offline_page(browser):
    """
    A new tab that can reach only 127.0.0.1 (anything else is aborted, as it would fail
    offline), with the lists of the URLs it asked for and of its failed responses.
    """
    page = browser.new_page()
    requested, failed = [], []

    def route(route):
        requested.append(route.request.url)
        if urlsplit(route.request.url).hostname == "127.0.0.1":
            route.continue_()
        else:
            route.abort()

    def response(response):
        if response.status >= 400:
            failed.append(f"{response.status} {response.url}")

    page.route("**/*", route)
    page.on("response", response)
    return page, requested, failed


def typeset(page, url):
    """Open ``url`` and wait until MathJax has typeset the page."""
    page.goto(url)
    page.wait_for_function("() => window.MathJax?.startup?.promise !== undefined")
    page.evaluate("() => MathJax.startup.promise")  # resolves when the first typeset is done


def check_notebooks_and_api(site):
    """Every notebook rendered with its outputs (figures included), every class documented."""
    notebooks = sorted(path.name.removesuffix(".pct.py") for path in NOTEBOOKS)
    rendered = sorted(path.stem for path in (site / "notebooks").glob("*.html"))
    assert rendered == notebooks
    for notebook in NOTEBOOKS:
        html = (site / "notebooks" / f"{notebook.name.removesuffix('.pct.py')}.html").read_text()
        if COMPAT_MARKER in notebook.read_text().splitlines()[:8] and not INTEGRATIONS:
            # run where Trieste and GPflux are (make test-compat): code and committed figures
            assert 'class="cell_output' not in html and "<img" in html, notebook.name
            continue
        assert 'class="cell_output' in html, notebook.name
        if "plt." in notebook.read_text():
            assert "<img" in html, notebook.name
    api = (site / "docs" / "api.html").read_text()
    exported = [getattr(gpflow_tight, name) for name in gpflow_tight.__all__]
    for cls in (obj for obj in exported if isinstance(obj, type)):  # every class has its entry
        assert f'id="{cls.__module__}.{cls.__qualname__}"' in api, cls


def test_site_builds_with_the_notebooks_executed_and_works_offline(browser, tmp_path):
    site = tmp_path / "site"
    build_site(
        site,
        CI="1",  # gpflow.ci_utils.reduce_in_tests shortens loops when CI is set
        GPFLOW_CI="1",  # the notebooks' own switch (data subsets)
        GPFLOW_TIGHT_DOCS_EXECUTE="force",
    )
    check_notebooks_and_api(site)
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 20  # the whole site: method pages, notebooks, reports, API reference

    # no page loads a script or a stylesheet from elsewhere; MathJax and its fonts are served
    remote = {str(path.relative_to(site)): REMOTE_ASSET.findall(path.read_text()) for path in pages}
    assert {page: tags for page, tags in remote.items() if tags} == {}
    assert 'src="../_static/mathjax/tex-chtml.js"' in (site / METHOD_PAGE).read_text()
    assert (site / "_static" / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2").is_dir()

    with serve(site) as server:
        # the method page: every equation typeset by the served MathJax, with the served fonts,
        # and no LaTeX source left in its text; the screenshot is tmp_path/tight.png
        page, requested, failed = offline_page(browser)
        typeset(page, f"{server}/{METHOD_PAGE}")
        page.evaluate("() => document.fonts.ready.then(() => true)")
        page.screenshot(path=str(tmp_path / "tight.png"), full_page=True)
        assert [url for url in requested if urlsplit(url).hostname != "127.0.0.1"] == []
        assert failed == []
        fonts = [url for url in requested if url.endswith(".woff")]
        assert fonts and all("/_static/mathjax/output/chtml/fonts/" in url for url in fonts)
        inline = page.locator("article span.math").count()  # Sphinx's inline maths
        display = page.locator("article div.math").count()  # and display maths
        assert inline > 30 and display >= 3  # the page's maths; a parse change would show here
        assert page.locator("article span.math mjx-container").count() == inline
        assert page.locator("article div.math mjx-container[display='true']").count() == display
        assert page.locator("mjx-merror").count() == 0  # no TeX error (unknown macro, syntax)
        text = page.locator("article").inner_text()
        for source in ("$$", "\\(", "\\[", "\\begin{", "\\frac", "\\mathbf"):
            assert source not in text, source
        assert (tmp_path / "tight.png").stat().st_size > 50_000

        # every page with maths (method pages, notebooks, the API reference's docstrings):
        # each equation typeset, none a TeX error, by the MathJax version the site ships
        with_maths = [path for path in pages if 'class="math' in path.read_text()]
        assert len(with_maths) >= 8
        wrong = {}
        for path in with_maths:
            typeset(page, f"{server}/{path.relative_to(site).as_posix()}")
            equations = page.locator(".math").count()
            rendered = page.locator(".math mjx-container").count()
            errors = page.locator("mjx-merror").all_inner_texts()
            if rendered != equations or errors:
                wrong[str(path.relative_to(site))] = (equations, rendered, errors[:5])
        assert wrong == {}
        assert [url for url in requested if urlsplit(url).hostname != "127.0.0.1"] == []
        assert failed == []

        # the navigation sidebar (furo's, the same on every page) names each page once, under
        # a title of its own: a report listed twice, or two under one title, would show here
        page.goto(f"{server}/docs/index.html")
        links = page.locator(".sidebar-tree a.reference")
        hrefs = links.evaluate_all("links => links.map(link => link.getAttribute('href'))")
        titles = [title.strip() for title in links.all_inner_texts()]
        assert len(hrefs) > 20
        assert [href for href, n in Counter(hrefs).items() if n > 1] == []
        assert [title for title, n in Counter(titles).items() if n > 1] == []
        reports = sorted(path.stem for path in (site / "benchmarks" / "results").glob("*.html"))
        listed = sorted(Path(href).stem for href in hrefs if "/benchmarks/results/" in href)
        assert listed == reports
