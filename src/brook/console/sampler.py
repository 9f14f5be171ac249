"""The lag sampler: a thread that asks the cluster for every group's lag each interval and
keeps it in the lag history (Backend.sample), so that a group's chart has the last hour when
its page is opened. A failed round (the cluster unreachable) is logged once and retried."""

from __future__ import annotations

import logging
import threading

from ..cli.errors import CliError

log = logging.getLogger("brook.console")


class Sampler:
    def __init__(self, sample, interval: float) -> None:
        self._sample = sample
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.failure: str | None = None  # the last round's error, None after a good one

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="brook-console-lag",
                                            daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval + 15)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._sample()
                if self.failure is not None:
                    log.warning("console: lag sampling works again")
                self.failure = None
            except CliError as exc:
                if exc.message != self.failure:
                    log.warning("console: cannot sample lag: %s", exc.message)
                self.failure = exc.message
            except Exception as exc:  # noqa: BLE001 - the thread goes on
                log.exception("console: lag sampling failed")
                self.failure = f"{type(exc).__name__}: {exc}"
            self._stop.wait(self.interval)
