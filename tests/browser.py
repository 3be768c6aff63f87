"""Test helper for the browser tests of ``objstore view``: Selenium driving Debian's ``chromium`` through its
``chromium-driver`` (never a downloaded browser). ``require()`` at a test module's top skips the module in one line
when one is missing, except under ``CI=true`` (``.ci/run`` installs them), where it raises; ``chrome()`` is one
headless browser with its console and network logs on."""

from __future__ import annotations

import json
import os
import shutil

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
except ImportError:
    webdriver = Service = By = None


def require() -> None:
    missing = [w for w, ok in (("pip selenium", webdriver is not None), ("chromium", CHROMIUM), ("chromium-driver", DRIVER)) if not ok]
    if not missing:
        return
    if os.environ.get("CI") == "true":
        raise RuntimeError(f"browser tests need {', '.join(missing)} (CI=true runs them: .ci/run installs them)")
    pytest.skip(f"browser tests skipped: {', '.join(missing)} missing (apt-get install -y chromium chromium-driver; "
                "pip install -e '.[test-all]')", allow_module_level=True)


def chrome():
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1500"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    return webdriver.Chrome(options=opts, service=Service(DRIVER))


def open_page(drv, path) -> None:
    """Load a page file, its console and network logs drained of what earlier pages left, once its script has run."""
    drv.get_log("browser")
    drv.get_log("performance")
    drv.get("file://" + str(path))
    drv.find_element(By.CSS_SELECTOR, "#attempts table, #attempts p")


def requests_made(drv) -> list[str]:
    """The URLs the browser requested since the logs were last read (its network log)."""
    urls = []
    for entry in drv.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg.get("method") == "Network.requestWillBeSent":
            urls.append(msg["params"]["request"]["url"])
    return urls


# The page's DOM as the browser built it, one line per element (tag, classes, the branch and kind hooks, a leaf's
# text), the script and data elements left out: what the DOM goldens of ``objstore view`` hold.
OUTLINE = r"""
var out = [];
(function walk(e, depth) {
  Array.prototype.forEach.call(e.children, function (c) {
    if (c.tagName === "SCRIPT") { return; }
    var name = c.tagName.toLowerCase() + (c.className ? "." + c.className.trim().split(/\s+/).join(".") : "");
    var attrs = ["data-branch", "data-kind"].filter(function (a) { return c.hasAttribute(a); })
      .map(function (a) { return "[" + a + "=" + c.getAttribute(a) + "]"; }).join("");
    var own = c.children.length ? "" : " " + JSON.stringify(c.textContent);
    out.push(Array(depth + 1).join("  ") + name + attrs + own);
    walk(c, depth + 1);
  });
})(document.body, 0);
return out.join("\n") + "\n";
"""
