"""The dashboard still shows every recent EchelonFlow when there are more than one page of them: it
follows ``next_cursor`` (``controller/ui/app.js``).  Debian's chromium loads ``/ui/`` from a real API
server (no fabric: nothing is enforced, the page only reads) holding 60 running EchelonFlows."""

from __future__ import annotations

import os
import shutil
import tempfile
import time

import pytest

from controller.paging import MAX_HEAVY_LIMIT
from tests.api_helpers import ServedApi
from tests.conftest import CHROMEDRIVER, CHROMIUM

pytestmark = [pytest.mark.browser]
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--window-size=1500,1000")


def test_the_page_shows_more_echelonflows_than_a_page_holds(tmp_path, require_browser):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    served = ServedApi(tmp_path)  # on the wall clock: the page shows times relative to its own
    jobs = MAX_HEAVY_LIMIT + 10
    profile = tempfile.mkdtemp(prefix="echelon-chromium-")
    try:
        for j in range(jobs):
            served.unix.register_job(f"j{j}")
            served.unix.register_echelon(f"j{j}", "e", [{"flow_id": "f", "src": "h1", "dst": "h5",
                                                        "size_bytes": 10**6}])
            served.unix.flow_started(f"j{j}", "f", 20000 + j, 5201)
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for flag in (*FLAGS, f"--user-data-dir={profile}"):
            options.add_argument(flag)
        driver = webdriver.Chrome(service=Service(CHROMEDRIVER, log_output=os.devnull), options=options)
        try:
            driver.get(f"http://127.0.0.1:{served.server.port}/ui/")
            deadline = time.monotonic() + 20
            shown: list[str] = []
            while time.monotonic() < deadline and len(shown) < jobs:
                time.sleep(0.5)
                # read in the page's own script, in one go: the page re-renders its table as it polls,
                # and rows found first and read after could be gone (a stale element; CI run 45)
                shown = driver.execute_script(
                    "return Array.from(document.querySelectorAll('#flows tbody tr'), "
                    "row => row.getAttribute('data-flow'));")
            assert sorted(shown) == sorted(f"j{j}/f" for j in range(jobs))
        finally:
            driver.quit()
    finally:
        served.stop()
        shutil.rmtree(profile, ignore_errors=True)
