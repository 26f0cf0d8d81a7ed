"""The soak's event log: every fault, call, loss, join, with its time; the last lines are what a failure shows."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from pathlib import Path


class EventLog:
    """Timestamped lines (seconds since the soak began): events (faults, joins, losses, interrupts, slow
    calls), the last ``keep`` in memory and all in ``path`` if given; and one line per call with what each
    slot showed, the last ``keep_calls`` in memory (in ``path`` too if ``trace``)."""

    def __init__(
        self, started: float, path: Path | None = None, keep: int = 4000, keep_calls: int = 100, trace: bool = False
    ) -> None:
        self.started = started
        self.lines: deque[str] = deque(maxlen=keep)
        self.calls: deque[str] = deque(maxlen=keep_calls)
        self.trace = trace
        self.lock = threading.Lock()
        self.file = open(path, "a", buffering=1) if path is not None else None  # noqa: SIM115 - closed by close()

    def _line(self, kind: str, text: str) -> str:
        return f"{time.monotonic() - self.started:10.3f} {threading.current_thread().name[:8]:8} {kind:9} {text}"

    def add(self, kind: str, text: str) -> None:
        line = self._line(kind, text)
        with self.lock:
            self.lines.append(line)
            if self.file is not None:
                self.file.write(line + "\n")

    def call(self, text: str) -> None:
        line = self._line("rows", text)
        with self.lock:
            self.calls.append(line)
            if self.file is not None and self.trace:
                self.file.write(line + "\n")

    def tail(self, count: int) -> str:
        with self.lock:
            return "\n".join(list(self.lines)[-count:]) + "\nthe last calls' rows:\n" + "\n".join(self.calls)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


class LibraryLog(logging.Handler):
    """The library's own log (joins, losses, refusals at INFO) into the event log."""

    def __init__(self, log: EventLog) -> None:
        super().__init__(logging.INFO)
        self.log = log

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.log.add("library", record.getMessage())
        except Exception:  # a log line must never break the soak
            self.handleError(record)
