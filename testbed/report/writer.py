"""The leakage-vs-accuracy report: renders a run directory's results, never recomputes them.

``write_report(run_dir)`` reads ``results.jsonl`` (a sweep: one row per cell) or ``results.json``
(a single run) and writes

- ``report.html`` — one self-contained file: a headline (per protocol the best accuracy at each
  leakage level, the worst leak found, by which attack and observer, a one-sentence verdict), then
  interactive plotly figures (plotly's JavaScript inlined once; no network request), tables;
- ``report.md`` — the same tables in Markdown, static matplotlib plots in ``plots/*.png``;
- ``results.csv`` — tidy long format: one row per cell x number (setting fields as columns);
- ``summary.csv`` — per setting x number: seeds, mean and 95 % interval.

Every file is written atomically with the user's usual permissions (0666 minus the umask).

Everything shown comes from the files (:mod:`testbed.report.model` gathers them). The page is a
list of sections, each a function ``section(doc, data)`` in its own module: a new section is one
more function and one more line in :data:`SECTIONS`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

from testbed.errors import TestbedError
from testbed.report.audit_section import audit_section
from testbed.report.csv_writer import write_csv, write_summary_csv
from testbed.report.doc import Doc
from testbed.report.files import write_public
from testbed.report.headline import headline_section, title_section
from testbed.report.model import ReportData, gather
from testbed.report.population import population_section
from testbed.report.records import records_section
from testbed.report.tables import (
    deviations_section,
    epsilon_section,
    observer_section,
    protocol_tables,
    provenance_section,
)
from testbed.report.threats import coverage_section, recovered_section
from testbed.report.tradeoff import tradeoff_section

__all__ = ["SECTIONS", "write_report"]

#: the report's sections in page order
SECTIONS: list[Callable[[Doc, ReportData], None]] = [
    title_section,
    headline_section,
    population_section,
    recovered_section,
    records_section,
    coverage_section,
    tradeoff_section,
    protocol_tables,
    epsilon_section,
    audit_section,
    observer_section,
    deviations_section,
    provenance_section,
]


#: piped, the progress lines start once the report has taken this long (a quick report stays
#: silent, as ``testbed run``'s own progress does: docs/guide/scenarios.md)
PIPED_AFTER_S = 5.0


class _Progress:
    """``report: <step> (i/n, 12 s)`` on stderr while the report renders (it can take minutes
    on a busy machine after a sweep's last cell): one line rewritten in place on a terminal, a
    line per step when piped once :data:`PIPED_AFTER_S` have passed; nothing when off."""

    def __init__(self, on: bool, total: int):
        self.on, self.total, self.i = on, total, 0
        self.start = time.monotonic()
        self.tty = on and sys.stderr.isatty()

    def step(self, what: str) -> None:
        if not self.on:
            return
        self.i += 1
        took = time.monotonic() - self.start
        if not self.tty and took < PIPED_AFTER_S:
            return
        line = f"report: {what} ({self.i}/{self.total}, {took:.0f} s)"
        end = "" if self.tty else "\n"
        print(("\r\033[K" if self.tty else "") + line, end=end, file=sys.stderr, flush=True)

    def done(self) -> None:
        if self.tty:
            print(file=sys.stderr, flush=True)


def _step_name(section: Callable) -> str:
    """A section function's name as the progress line says it (``observer_section`` ->
    ``observer``)."""
    return section.__name__.removesuffix("_section").replace("_", " ")


def write_report(run_dir: str | Path, progress: bool = False) -> Path:
    """Render ``report.html``, ``report.md``, ``results.csv`` and ``summary.csv`` into
    ``run_dir``; static figures into ``run_dir/plots/``. ``progress``: a line on stderr per
    step (reading, each section, writing)."""
    bar = _Progress(progress, len(SECTIONS) + 2)
    bar.step("reading the results")
    data = gather(run_dir)
    run_dir = data.run_dir
    if (run_dir / "plots").exists() and not (run_dir / "plots").is_dir():
        raise TestbedError(
            f"{run_dir / 'plots'}: is a file, not the folder of figures; move it away"
        )
    if (run_dir / "plots").is_symlink():  # before any file: figures would land in its target
        raise TestbedError(
            f"{run_dir / 'plots'}: a symlink; the report writes only inside the run directory "
            "(remove it)"
        )
    write_csv(run_dir / "results.csv", data.rows)
    write_summary_csv(run_dir / "summary.csv", data.rows)
    doc = Doc()
    for section in SECTIONS:
        bar.step(_step_name(section))
        section(doc, data)
    bar.step("writing report.html, report.md and plots/")
    write_public(run_dir / "report.html", doc.html(data.title).encode())
    _write_plots(run_dir / "plots", doc.files())
    write_public(run_dir / "report.md", doc.markdown().encode())
    bar.done()
    return run_dir / "report.html"


def _write_plots(plots: Path, files: dict[str, bytes]) -> None:
    """Write the static figures; remove those an earlier render wrote that no longer exist
    (files the testbed did not write stay)."""
    for name, data in files.items():
        write_public(plots / name, data)
    written = sorted(files)
    manifest = plots / ".written-by-testbed"
    earlier = manifest.read_text().split() if manifest.is_file() else []
    for name in set(earlier) - set(written):
        if "/" not in name and (plots / name).is_file():
            (plots / name).unlink()
    write_public(manifest, ("\n".join(written) + "\n").encode())
