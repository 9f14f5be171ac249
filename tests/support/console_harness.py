"""The web console as the tests run it: `brook console` as a real process (ConsoleProcess), and
Debian's headless Chromium driven by Selenium through chromium-driver (chromium_driver)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
_URL = re.compile(r"brook console: (http://\S+/)")
OFFSETS_PARTITIONS = 5  # offsets.topic.num.partitions of the console tests' brokers


def chromium_available() -> str | None:
    """Why the browser tests cannot run here, or None when they can."""
    if not os.path.exists(CHROMIUM) and not shutil.which("chromium"):
        return "Debian's chromium is not installed (make browser installs it)"
    if not os.path.exists(CHROMEDRIVER) and not shutil.which("chromedriver"):
        return "Debian's chromium-driver is not installed (make browser installs it)"
    return None


def chromium_driver(width: int = 1300, height: int = 1000, dark: bool = False):
    """A Selenium WebDriver on a new headless Chromium."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM if os.path.exists(CHROMIUM) else shutil.which("chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--window-size={width},{height}", "--disable-extensions",
                "--no-first-run", "--disable-background-networking"):
        opts.add_argument(arg)
    if dark:
        opts.add_argument("--force-dark-mode")
        opts.add_argument("--blink-settings=preferredColorScheme=0")
    service = Service(CHROMEDRIVER if os.path.exists(CHROMEDRIVER) else shutil.which("chromedriver"))
    driver = webdriver.Chrome(options=opts, service=service)
    driver.set_page_load_timeout(30)
    return driver


class ConsoleProcess:
    """`python -m brook -b BOOTSTRAP console --listen 127.0.0.1:0 [args]`: it picks a free port
    and names its URL on stderr, which goes to console.stderr.log in `data_dir`."""

    def __init__(self, data_dir: str | os.PathLike[str], bootstrap: str, *args: str,
                 start_timeout: float = 30.0) -> None:
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.bootstrap = bootstrap
        self.args = list(args)
        self.start_timeout = start_timeout
        self.stderr_path = self.data_dir / "console.stderr.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    def command(self) -> list[str]:
        return [sys.executable, "-m", "brook", "-b", self.bootstrap, "console", "--listen",
                "127.0.0.1:0", *self.args]

    def start(self) -> "ConsoleProcess":
        with open(self.stderr_path, "ab") as err:
            self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=err,
                                         stderr=err, start_new_session=True)
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            m = _URL.search(self.stderr())
            if m:
                self.url = m.group(1)
                return self
            if self.proc.poll() is not None:
                raise AssertionError(f"brook console exited with {self.proc.returncode}:\n"
                                     f"{self.stderr()}")
            time.sleep(0.05)
        self.close()
        raise AssertionError(f"brook console did not start:\n{self.stderr()}")

    def stderr(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def __enter__(self) -> "ConsoleProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
