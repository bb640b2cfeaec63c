"""A sweep's progress over its cells: a tqdm bar on a terminal; piped or redirected (a CI log, a
file), a line at every tenth of the cells instead of the bar's carriage-return frames."""

from __future__ import annotations

import sys

__all__ = ["CellProgress"]


class CellProgress:
    """``update(n, label)`` after each finished cell (``n``: the cells it counts for)."""

    def __init__(self, total: int, done: int, name: str):
        self.total, self.done, self.name = total, done, name
        self.bar = None
        self._shown = done * 10 // max(total, 1)  # tenths already passed
        if sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=done, desc=name, unit="cell", dynamic_ncols=True)

    def update(self, n: int, label: str) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
            self.bar.set_postfix_str(label[:60], refresh=False)
            return
        tenth = self.done * 10 // max(self.total, 1)
        if tenth > self._shown:
            self._shown = tenth
            print(f"{self.name}: {self.done}/{self.total} cells", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
