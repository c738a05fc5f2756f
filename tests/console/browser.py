"""Debian's chromium, headless, driven by Playwright, for the console tests.

The console serves from the test's reactor, so a browser session runs in one pool thread (Playwright's sync
objects belong to the thread that made them): ``await deferToThread(in_chromium, steps)``. Screenshots are kept
in ``artifacts/console-cluster/`` (or ``$CONSOLE_SCREENSHOTS``) as test artefacts.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SHOTS = Path(os.environ.get("CONSOLE_SCREENSHOTS", ROOT / "artifacts" / "console-cluster"))

needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="Debian's chromium is not installed (scripts/test installs it)"
)

T = TypeVar("T")


def in_chromium(steps: Callable[..., T]) -> T:
    """Run ``steps(page)`` in a fresh headless Chromium (one page, its own cookies); its result."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(20_000)
            return steps(page)
        finally:
            browser.close()


def shot(page: object, name: str) -> Path:
    """A full-page screenshot ``name``.png of ``page``; its path (asserted non-trivial)."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)  # type: ignore[attr-defined]
    assert path.stat().st_size > 1000
    return path
