"""MkDocs hooks (mkdocs.yml ``hooks:``): the top-level README.md, BENCHMARKS.md, CONTRIBUTING.md and
CHANGELOG.md are pages of the site as they are, so each is written once.

``on_files`` adds them to the site (README.md is its home page); ``on_page_markdown`` rewrites
every relative link of every page from the checkout's layout (``docs/generator.md`` from the
README, ``../BENCHMARKS.md`` from a docs page) to the site's. A link to anything else outside
docs/ (a source file) is left as written, so ``mkdocs build --strict`` refuses it: the site has
no such page.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOCS = "docs/"
#: top-level file -> its page in the site
TOP_LEVEL_PAGES = {
    "README.md": "index.md",
    "BENCHMARKS.md": "benchmarks.md",
    "CONTRIBUTING.md": "contributing.md",
    "CHANGELOG.md": "changelog.md",
}

# ](target) or ](target "title"), target without a scheme or a leading / or #
_LINK = re.compile(r"\]\((?![a-z][a-z0-9+.-]*:|/|#)([^)\s#]+)(#[^)\s]*)?((?:\s+\"[^\"]*\")?)\)")


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for source, page in TOP_LEVEL_PAGES.items():
        files.append(File.generated(config, page, abs_src_path=str(ROOT / source)))
    return files


def checkout_path(site_path: str) -> str:
    """Where a site page's source sits in the checkout."""
    top = {page: source for source, page in TOP_LEVEL_PAGES.items()}
    return top.get(site_path, DOCS + site_path)


def site_link(page: str, target: str) -> str:
    """``target``, a link written in ``page``'s source (site path ``page``), as the site resolves it."""
    source_dir = posixpath.dirname(checkout_path(page))
    in_checkout = posixpath.normpath(posixpath.join(source_dir, target))
    if in_checkout in TOP_LEVEL_PAGES:
        site_target = TOP_LEVEL_PAGES[in_checkout]
    elif in_checkout.startswith(DOCS):
        site_target = in_checkout.removeprefix(DOCS)
    else:
        return target
    return posixpath.relpath(site_target, posixpath.dirname(page) or ".")


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    path = page.file.src_uri

    def rewrite(match: re.Match) -> str:
        return f"]({site_link(path, match.group(1))}{match.group(2) or ''}{match.group(3)})"

    return _LINK.sub(rewrite, markdown)
