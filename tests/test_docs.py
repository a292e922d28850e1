"""The docs: the site under docs/ builds with `mkdocs build --strict` (a broken link or anchor,
or a page left out of `nav`, fails it: mkdocs.yml's `validation`), and the README stays a front
door (under 300 lines, the quick start's two commands, a picture of the TUI, links that resolve)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _nav_pages(text: str) -> list[str]:
    return re.findall(r"^\s*-\s+(?:[^:\n]+:\s+)?([\w/.-]+\.md)\s*$", text, re.M)


def _build(root: Path, site: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                           "-f", str(root / "mkdocs.yml"), "-d", str(site)],
                          cwd=root, env=env, capture_output=True, text=True, timeout=240)


@pytest.mark.slow
def test_mkdocs_builds_strictly(tmp_path):
    pytest.importorskip("mkdocs", reason="mkdocs-material is in the test extra")
    site = tmp_path / "site"
    r = _build(ROOT, site)
    assert r.returncode == 0, r.stderr[-3000:]
    pages = _nav_pages((ROOT / "mkdocs.yml").read_text())
    assert len(pages) >= 15
    for page in pages:
        html = site / (page[:-3] + ("/index.html" if not page.endswith("index.md") else ".html"))
        assert html.is_file(), f"{page} was not built ({html})"


@pytest.mark.slow
@pytest.mark.parametrize("breakage", ["link", "anchor", "orphan"])
def test_strict_build_fails_on_a_broken_link(tmp_path, breakage):
    """The same configuration on a copy of the docs with one thing broken: the build fails."""
    pytest.importorskip("mkdocs", reason="mkdocs-material is in the test extra")
    root = tmp_path / "copy"
    shutil.copytree(ROOT / "docs", root / "docs")
    shutil.copy2(ROOT / "mkdocs.yml", root / "mkdocs.yml")
    index = root / "docs" / "index.md"
    if breakage == "link":
        index.write_text(index.read_text() + "\n[gone](no-such-page.md)\n")
        named = "no-such-page.md"
    elif breakage == "anchor":
        index.write_text(index.read_text() + "\n[gone](commands.md#no-such-heading)\n")
        named = "#no-such-heading"
    else:
        (root / "docs" / "not-in-nav.md").write_text("# Not in nav\n")
        named = "not-in-nav.md"
    r = _build(root, tmp_path / "site")
    assert r.returncode != 0
    warnings = [line for line in r.stderr.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1 and (named in warnings[0] or named in r.stderr), r.stderr[-2000:]


def test_readme_is_a_front_door():
    text = README.read_text()
    assert len(text.splitlines()) <= 300
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    # the quick start: one command sets up and diagnoses, one sets up and runs the tests
    # (.ci/run calls the same script)
    assert any("diag diagnose" in b and "pip install" in b for b in blocks)
    assert "bash scripts/test.sh\n" in blocks
    assert "bash scripts/test.sh" in (ROOT / ".ci" / "run").read_text()
    for heading in ("## Quick start", "## Commands", "## Exit codes", "## Documentation"):
        assert heading in text


def test_readme_picture_is_a_textual_export():
    pics = [p for p in LINK.findall(README.read_text()) if p.endswith(".svg")]
    assert pics, "the README shows no picture of the TUI"
    svg = (ROOT / pics[0]).read_text()
    assert svg.startswith("<svg") and "Generated with Rich" in svg
    assert "Overview" in svg and "Fixes" in svg  # the app's own tabs


def test_readme_and_docs_links_resolve():
    """Relative links of the README (GitHub renders them; mkdocs does not see the README)."""
    bad = []
    for target in LINK.findall(README.read_text()):
        if re.match(r"[a-z]+://", target) or target.startswith("#"):
            continue
        if not (ROOT / target.split("#")[0]).exists():
            bad.append(target)
    assert not bad, bad
