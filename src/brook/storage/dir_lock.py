"""One broker per log dir: each dir's ``.lock`` file is held locked while a broker uses it.

Two brokers on the same dirs would write the same segments and checkpoints, and the one that
stops first would leave the clean-shutdown marker while the other still writes: after a crash
of the other, its logs would be loaded as clean and never recovered. Kafka refuses to start
on a dir another process holds; so does brook. The lock is an advisory ``flock`` on the open
file: the kernel drops it when the process ends, however it ends, so a crash leaves nothing
to clean up.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterable

LOCK_FILE = ".lock"


class LogDirInUseError(RuntimeError):
    """Another process (or another broker in this one) holds a log dir's lock."""


class LogDirLocks:
    """The locks of a broker's log dirs, taken together by `acquire` and given back by
    `release`."""

    def __init__(self, log_dirs: Iterable[str]) -> None:
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        self._fds: list[int] = []

    def acquire(self) -> None:
        """Lock every dir (creating it), or lock none and raise `LogDirInUseError`."""
        if self._fds:
            raise RuntimeError("the log dirs are locked already")
        try:
            for log_dir in self.log_dirs:
                os.makedirs(log_dir, exist_ok=True)
                fd = os.open(os.path.join(log_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    raise LogDirInUseError(
                        f"log dir {log_dir} is in use by another broker (its {LOCK_FILE} file "
                        f"is locked): stop that broker, or give this one other log.dirs"
                    ) from None
                except BaseException:
                    os.close(fd)
                    raise
                self._fds.append(fd)
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        fds, self._fds = self._fds, []
        for fd in fds:
            os.close(fd)  # closing the descriptor drops its lock

    @property
    def held(self) -> bool:
        return bool(self._fds)
