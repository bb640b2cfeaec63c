"""Progress of a sweep over its cells and of one run over its rounds: a tqdm bar on a terminal
(with its ETA when the total is known); piped or redirected (a CI log, a file), a line at every
tenth instead of the bar's carriage-return frames."""

from __future__ import annotations

import sys
import time

__all__ = ["CellProgress", "RoundProgress"]


class CellProgress:
    """``update(n, label)`` after each finished cell (``n``: the cells it counts for)."""

    def __init__(self, total: int, done: int, name: str):
        self.total, self.done, self.name = total, done, name
        self.bar = None
        self._shown = done * 10 // max(total, 1)  # tenths already passed
        if sys.stderr.isatty():
            from tqdm import tqdm  # lazy: keeps refused input fast

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


class RoundProgress:
    """One run's progress over its messages and rounds; call it with each sent envelope.

    ``rounds``: the rounds the run is expected to take (a protocol's ``iterations`` + 1 for
    its final round), or None when unknown. On a terminal: a bar over the rounds with its ETA
    (over the messages, without an ETA, when the total is unknown). Piped: a line at each tenth
    of the rounds with the time so far and the ETA, once the run has taken ``after`` seconds (a
    short run prints none; nothing when the total is unknown)."""

    def __init__(self, desc: str, rounds: int | None = None, stream=None, after: float = 5.0):
        self.desc, self.rounds, self.after = desc, rounds, after
        self.stream = sys.stderr if stream is None else stream
        self.bar = None
        self.round = 0
        self.messages = 0
        self._tenth = 0
        self._t0 = time.monotonic()
        if self.stream.isatty():
            from tqdm import tqdm  # lazy: keeps refused input fast

            unit = "round" if rounds else "msg"
            self.bar = tqdm(
                desc=desc,
                total=rounds,
                unit=unit,
                leave=False,
                dynamic_ncols=True,
                file=self.stream,
            )

    def __call__(self, env) -> None:
        self.messages += 1
        r = int(env.round)
        if self.bar is not None and not self.rounds:
            self.bar.set_postfix_str(f"round {r}", refresh=False)
            self.bar.update(1)
            return
        if r <= self.round or not self.rounds:
            return
        self.round = r
        finished = min(r - 1, self.rounds)  # a round is done when the next one starts
        if self.bar is not None:
            self.bar.update(finished - self.bar.n)
            return
        tenth = finished * 10 // self.rounds
        if tenth > self._tenth and time.monotonic() - self._t0 >= self.after:
            self._tenth = tenth
            self._line(finished)

    def _line(self, finished: int) -> None:
        spent = time.monotonic() - self._t0
        eta = spent / finished * (self.rounds - finished)
        print(
            f"{self.desc}: round {finished}/{self.rounds} done, {self.messages} messages, "
            f"{spent:.0f} s, ETA {eta:.0f} s",
            file=self.stream,
            flush=True,
        )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
