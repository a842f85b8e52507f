"""A progress line on stderr for work that turns out slow: a rich spinner that appears only after
a delay (a 10 KB scan never shows it, nor pays for importing rich) and only on a terminal."""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import Any


class DelayedStatus:
    """`with DelayedStatus("scanning 3 file(s)"):` shows `⠋ diagnose: scanning 3 file(s) (1.2 s)` on
    stderr once the block has run `delay` seconds, and clears it when the block ends."""

    def __init__(self, label: str, delay: float = 1.0, enabled: bool = True) -> None:
        self.label = label
        self.delay = delay
        self.enabled = enabled
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.shown = False

    def __enter__(self) -> DelayedStatus:
        if self.enabled:
            self._started = time.monotonic()
            self._thread = threading.Thread(target=self._show, name="progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)

    def _show(self) -> None:
        if self._stop.wait(self.delay):
            return  # done before the delay: nothing shown
        from rich.console import Console
        from rich.text import Text

        console = Console(stderr=True, highlight=False, emoji=False)
        status: Any = console.status(self._text(Text), spinner="dots")
        status.start()
        self.shown = True
        try:
            while not self._stop.wait(0.1):
                status.update(self._text(Text))
        finally:
            status.stop()

    def _text(self, text_class: Any) -> Any:
        # A Text, not markup: the label may hold a file name with [brackets].
        return text_class(f"diagnose: {self.label} ({time.monotonic() - self._started:.1f} s)")
