"""The report in a real browser: headless Chromium from the system packages (/usr/bin/chromium;
``.ci/run`` installs it) driven by Playwright loads each report file and checks that there is
no console error, no network request, every declared figure rendered by plotly, and a
screenshot that is not blank."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.report.helpers import png_stats

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def browser() -> Any:
    if not (Path(CHROMIUM).exists() or shutil.which("chromium")):
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (apt-get install "
                    f"chromium; .ci/run does) to run the browser tests")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.mark.parametrize("name", ["plan-only", "full", "real-sweep", "loop"])
def test_report_renders_offline_without_errors(browser: Any, reports: Any, name: str) -> None:
    path, answer = reports[name]
    url = path.resolve().as_uri()
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    errors: list[str] = []
    requests: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))

    def route(r: Any) -> None:
        if r.request.url == url or r.request.url.startswith(("data:", "blob:")):
            r.continue_()
        else:
            r.abort()

    page.route("**/*", route)
    page.goto(url)
    page.wait_for_selector("body[data-rendered]", timeout=45_000)
    declared = int(page.get_attribute("body", "data-figures"))
    assert declared == answer["figures"] > 0
    assert page.get_attribute("body", "data-rendered") == str(declared)
    plots = page.query_selector_all("div.plot")
    assert len(plots) == declared
    assert all(p.query_selector(".main-svg") is not None for p in plots)
    assert errors == []
    assert [u for u in requests if u != url and not u.startswith(("data:", "blob:"))] == []
    # the hostile labels stayed text: no element was made of them, no script ran
    assert page.evaluate("window.__pwned === undefined")
    assert page.evaluate("document.querySelectorAll('img').length") == 0
    w, h, colours, inked = png_stats(page.screenshot(full_page=False))
    assert (w, h) == (1300, 900)
    assert colours > 30 and inked > 0.05
    page.close()
