"""The service's page as headless Chromium renders it, for the tests that read it."""

from __future__ import annotations

import subprocess
import urllib.parse
from pathlib import Path

from tests.assets.webserver import chromium


def page_url(base: str, question: str, entity: str | None = None) -> str:
    """The page asking ``question`` (and opening ``entity``'s panel), as a link to it names them."""
    fragment = {"q": question, **({"entity": entity} if entity else {})}
    return f"{base}/#" + urllib.parse.urlencode(fragment, quote_via=urllib.parse.quote)


def rendered(url: str, profile: Path, screenshot: Path | None = None) -> str:
    """The DOM of the page at ``url`` once its scripts have run (and its screenshot, when asked),
    in a browser profile of its own; the page must have said it is ready."""
    browser = chromium()
    assert browser is not None, "the caller skips without Chromium"
    command = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
               f"--user-data-dir={profile}", "--window-size=1400,1000", "--virtual-time-budget=15000",
               *([f"--screenshot={screenshot}"] if screenshot is not None else []), "--dump-dom", url]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert 'data-ready="true"' in done.stdout, done.stdout[-2000:]
    return done.stdout
