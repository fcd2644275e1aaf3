"""The documentation site: it builds strictly (every link, anchor and nav entry resolves) and,
opened in headless Chromium (Debian's package, installed by tools/bootstrap.sh), renders its
navigation with every page of mkdocs.yml's nav, each link leading to a built page."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
#: a root browser here has no sandbox, no GPU and no network but the package registries
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def nav_pages(entries) -> list[tuple[str, str]]:
    """(title, page) of every page in a mkdocs.yml nav, sections flattened."""
    pages = []
    for entry in entries:
        ((title, value),) = entry.items()
        pages += nav_pages(value) if isinstance(value, list) else [(title, value)]
    return pages


class PrimaryNav(HTMLParser):
    """The links (text, href) inside Material's primary navigation, and the <html> classes."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []
        self.html_classes: list[str] = []
        self._depth = 0  # nav elements open inside the primary one (1 = the primary itself)
        self._href: str | None = None
        self._text = ""

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        classes = (attributes.get("class") or "").split()
        if tag == "html":
            self.html_classes = classes
        if tag == "nav" and (self._depth or "md-nav--primary" in classes):
            self._depth += 1
        if tag == "a" and self._depth:
            self._href, self._text = attributes.get("href"), ""

    def handle_endtag(self, tag):
        if tag == "nav" and self._depth:
            self._depth -= 1
        if tag == "a" and self._href is not None:
            self.links.append((" ".join(self._text.split()), self._href))
            self._href = None

    def handle_data(self, data):
        if self._href is not None:
            self._text += data


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(folder)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, NO_MKDOCS_2_WARNING="1"),
    )
    assert result.returncode == 0, result.stderr
    return folder


def test_site_renders_its_navigation_in_headless_chromium(site, tmp_path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed (tools/bootstrap.sh installs Debian's chromium with apt-get as root)")
    index = site / "index.html"
    result = subprocess.run(
        [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", index.as_uri()],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    dom = PrimaryNav()
    dom.feed(result.stdout)
    assert "js" in dom.html_classes, "the theme's JavaScript did not run (<html> kept class no-js)"
    links = dict(dom.links)
    wanted = nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])
    missing = [title for title, _ in wanted if title not in links]
    assert not missing, f"not in the rendered navigation: {missing}; it has {sorted(links)}"
    for title, page in wanted:
        target = (site / links[title].split("#")[0]).resolve() if links[title] not in ("", ".") else index
        assert target.is_file(), f"nav entry {title!r} ({page}) links to {links[title]!r}, which was not built"
