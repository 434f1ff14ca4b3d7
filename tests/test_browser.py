"""The report in a real browser: headless Chromium (Debian's `chromium` package) loads it
with no console errors, and its screenshot is saved as a test artifact under
fp8check-out/ (git-ignored).  Without chromium the test fails under CI=true and skips with
the reason elsewhere."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from test_report_html import report_document

from fp8check.reports.html import write_html

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "fp8check-out"  # the screenshot, for a person to look at (ignored by git)
WIDTH, HEIGHT = 1280, 2000
# Chromium logs page console messages as `... CONSOLE(line)] "text", source: ...` (or
# `:CONSOLE:` in newer builds) on stderr with --enable-logging=stderr --v=0.
_CONSOLE = re.compile(r"CONSOLE")


def _chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        why = "chromium is not installed (apt-get install -y chromium)"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    return exe


def _open(page: Path, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    """Load `page` in a fresh headless profile; `extra` adds e.g. --screenshot=PATH."""
    profile = tmp_path / f"profile-{len(list(tmp_path.iterdir()))}"
    cmd = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
           "--no-first-run", "--disable-background-networking", "--disable-component-update",
           "--disable-sync", f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
           f"--window-size={WIDTH},{HEIGHT}", *extra, page.as_uri()]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def _console_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if _CONSOLE.search(line)]


def test_console_capture_sees_page_errors(tmp_path):
    """Negative control: a page that logs an error and throws is caught, so a clean run
    of the report means something."""
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><body><p>x</p><script>"
                   "console.error('fp8check-marker'); undefined_function();</script></body></html>")
    proc = _open(bad, tmp_path, "--dump-dom")
    lines = _console_lines(proc.stderr)
    assert any("fp8check-marker" in line for line in lines), proc.stderr[-2000:]
    assert any("undefined_function" in line for line in lines), proc.stderr[-2000:]


def test_report_renders_without_console_errors(tmp_path):
    page = tmp_path / "report.html"
    write_html(page, report_document())
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "browser-report.png"
    shot.unlink(missing_ok=True)
    proc = _open(page, tmp_path, f"--screenshot={shot}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _console_lines(proc.stderr) == [], "\n".join(_console_lines(proc.stderr))
    img = np.asarray(Image.open(shot).convert("RGB"))
    assert img.shape == (HEIGHT, WIDTH, 3)
    # something was drawn: the failure cards' red, the plots' blue, text on the background
    assert img.std() > 20
    red = (img[..., 0] > 150) & (img[..., 1] < 60) & (img[..., 2] < 80)
    assert red.sum() > 500, "no failure colour on the first screen: failures are not first"
    dom = _open(page, tmp_path, "--dump-dom").stdout
    assert "fp8check gate:" in dom and 'id="failures"' in dom
