"""The defense tutorial of docs/guide/plugins.md works as written: its defense module, scenario and
contract test, taken verbatim from the page and put in a scaffolded package (on sys.path and
registered through the registry's API, as its entry point would be), run; the run prints the
table the page shows, records the defense where the page says, and the quoted error lines are
the testbed's own."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from testbed.cli.main import main
from testbed.registry import DEFENSES
from tests._outside import outside_package

DOC = Path(__file__).resolve().parents[1] / "docs" / "guide" / "plugins.md"
NAME, CLS = "grid_rounding", "GridRounding"
PARTIES = ("alice", "bob")


def _part() -> str:
    """The page's defense half."""
    return DOC.read_text().split("# Writing a defense plugin outside the repository", 1)[1]


def _blocks(text: str) -> list[tuple[str, str]]:
    """Every fenced block as ``(language, body)``, a block inside a list item dedented."""
    out, lang, indent, body = [], None, 0, []
    for line in text.splitlines():
        fence = re.fullmatch(r"( *)```(\w*)\s*", line)
        if fence and lang is None:
            lang, indent, body = fence[2], len(fence[1]), []
        elif fence:
            out.append((lang, "".join(body)))
            lang = None
        elif lang is not None:
            body.append(line[indent:] + "\n")
    return out


def _block(lang: str, marker: str) -> str:
    """The first fenced block of ``lang`` in the defense half that holds ``marker``."""
    return next(b for ln, b in _blocks(_part()) if ln == lang and marker in b)


def _inline(text: str) -> str:
    """Markdown inline text as one line (the page wraps long quotes)."""
    return re.sub(r"\s+", " ", text)


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    """`testbed new-defense grid_rounding DIR`, then the page's defense.py, scenario and test."""
    root = tmp_path_factory.mktemp("tutorial") / NAME
    assert main(["new-defense", NAME, str(root)]) == 0
    (root / "src" / NAME / "defense.py").write_text(_block("python", f"class {CLS}("))
    (root / "my_rounding.yaml").write_text(_block("yaml", "name: my_rounding"))
    (root / "tests" / f"test_{NAME}.py").write_text(_block("python", "def test_contract"))
    with outside_package(root, f"{NAME}.defense", CLS, DEFENSES) as cls:
        yield root, cls


def test_the_page_shows_the_scaffolded_defense_and_its_test_verbatim():
    from testbed.plugins.scaffold import DEFENSE, DEFENSE_TEST

    fields = {"name": NAME, "cls": CLS, "dist": NAME.replace("_", "-")}
    src = DEFENSE.format(**fields)
    assert _block("python", f"class {CLS}(").strip() == src[src.index("from __future__") :].strip()
    test = DEFENSE_TEST.format(**fields)
    body = test[test.index('"""\n', 3) + 4 :]  # the docstring aside, as the page says
    assert _block("python", "def test_contract").strip() == body.strip()


def _table(text: str) -> list[list[str]]:
    """The rows of a `testbed run` sweep table (setting, then the figures), header and rule
    left out."""
    rows = []
    for line in text.splitlines():
        if line.startswith("fedwad "):
            rows.append(re.split(r"\s{2,}", line.strip())[1:])
    return rows


def _same_figures(got: list[str], want: list[str]) -> bool:
    """Figures as the summary writes them, equal to 2 % (the page rounds to 3 significant
    digits; a BLAS difference may move the last one)."""
    if got[0] != want[0] or len(got) != len(want):
        return False
    for g, w in zip(got[1:], want[1:]):
        if g == w:
            continue
        try:
            gv, wv = float(g.rstrip(" %")), float(w.rstrip(" %"))
        except ValueError:
            return False
        if not np.isclose(gv, wv, rtol=0.02, atol=1e-12):
            return False
    return True


def test_the_tutorial_scenario_prints_the_pages_table_and_records_the_defense(
    package, tmp_path, monkeypatch, capsys
):
    """The page's `testbed run` (its report aside: the slow test below renders it)."""
    from testbed.exchange.transcript import Transcript
    from testbed.measure import Measure

    root, _ = package
    monkeypatch.chdir(root.parent)  # the page's commands run from the package's parent
    monkeypatch.setattr("testbed.cli.run.write_report", lambda out_dir, **kw: None)
    out = tmp_path / "rounding"
    assert main(["run", f"{NAME}/my_rounding.yaml", "--out", str(out), "-q"]) == 0
    printed = _table(capsys.readouterr().out)
    shown = _table(_block("", "fedwad    no defense"))
    assert [r[0] for r in printed] == [r[0] for r in shown]  # the settings, in the page's order
    for got, want in zip(printed, shown):
        assert _same_figures(got, want), (got, want)
    # results.jsonl: each setting's defenses with resolved params; no ledger event
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    quoted = json.loads(
        _inline(re.search(r'`(\{"name": "grid_rounding".*?\})`', _part(), flags=re.S)[1])
    )
    steps = {}
    for r in rows:
        res = r["results"]
        assert res["privacy"] == {}
        if not res["defenses"]:
            steps[r["cell"]] = None
            continue
        (d,) = res["defenses"]
        assert d["name"] == NAME and set(d["params"]) == set(quoted["params"])
        if d["params"]["step"] == 1.0 and d["params"]["stochastic"]:
            assert d == quoted
        steps[r["cell"]] = d["params"]["step"]
    assert sorted(steps.values(), key=lambda s: -1 if s is None else s) == [None, 1.0, 1.0, 4.0]
    # each setting's transcript: the clients' supports on the grid, marked; the server's not
    for cell, step in steps.items():
        envs = list(Transcript.load(out / "cells" / cell))
        sent = [e for e in envs if e.sender in PARTIES and isinstance(e.payload, Measure)]
        assert sent
        for e in envs:
            marked = tuple(e.meta.get("defended_by", ()))
            assert marked == ((NAME,) if step is not None and e.sender in PARTIES else ()), e
        grid = step or 1.0
        on_grid = [
            np.allclose(e.payload.support / grid, np.round(e.payload.support / grid)) for e in sent
        ]
        assert all(on_grid) if step is not None else not any(on_grid)


def test_the_tutorial_contract_test_passes_from_any_directory(package, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ns: dict = {}
    exec(compile(_block("python", "def test_contract"), "test_contract", "exec"), ns)
    ns["test_contract"]()  # check_plugin raises AssertionError listing every failed check


def test_the_pages_error_lines_are_the_testbeds(package, tmp_path, monkeypatch, capsys):
    from testbed.errors import PluginFault
    from testbed.exchange.bus import Bus
    from testbed.exchange.ledger import MechanismEvent
    from testbed.measure import Measure

    _, cls = package
    # validate refuses the defense on a protocol that sends no Measure, at its line
    scenario = _block("yaml", "name: my_rounding")
    fedwad = "protocol: {name: fedwad, params: {support_size: 10, iterations: 5, t: 0.5}}"
    assert fedwad in scenario
    (tmp_path / "my_rounding.yaml").write_text(
        scenario.replace(fedwad, "protocol: {name: dp_gaussian_moments}")
    )
    monkeypatch.chdir(tmp_path)
    assert main(["validate", "my_rounding.yaml"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    quoted = _block("", "error: my_rounding.yaml:").strip()
    assert len(err) == 1
    assert re.fullmatch(re.escape(quoted).replace(re.escape("..."), ".*"), err[0]), err
    # on_send that returns the envelope it was given, or raises
    page = _inline(_part())

    class Same(cls):
        def on_send(self, env, rng, ledger):
            return env

    class Raises(cls):
        def on_send(self, env, rng, ledger):
            raise ValueError("bad step")

    said = []
    for wrong in (Same, Raises):
        bus = Bus(defenses=[(wrong(), np.random.default_rng(0))])
        with pytest.raises(PluginFault) as exc:
            bus.send("alice", "server", "fedwad.xi_mu", Measure(np.zeros((2, 2))))
        said.append(str(exc.value))
    assert f"`{said[0]}`" in page
    assert said[1] == "defense 'grid_rounding' failed in on_send: ValueError: bad step"
    assert "`defense 'grid_rounding' failed in on_send: ValueError: ...`" in page
    # the ledger event the page spells out has those fields
    call = re.search(r"`testbed\.exchange\.ledger\.MechanismEvent\((.*?)\)`", page)[1]
    named = set(re.findall(r"(\w+)=", call))
    assert named and named <= set(MechanismEvent.__dataclass_fields__), named


@pytest.mark.slow  # the report of four settings renders a dozen figures: 30-70 s on 2 busy cores
def test_the_tutorials_report_names_the_settings_as_the_page_says(package, tmp_path, monkeypatch):
    import csv

    root, _ = package
    monkeypatch.chdir(root.parent)
    assert main(["run", f"{NAME}/my_rounding.yaml", "--out", "runs/rounding", "-q"]) == 0
    assert main(["report", "runs/rounding"]) == 0
    report = (root.parent / "runs" / "rounding" / "report.md").read_text()
    headline = re.search(r"the headline reads\s+`(.*?)`", _part(), flags=re.S)[1]
    assert _inline(headline) in report
    assert "record_leakage **0.0833**" in report  # the leak without a defense, as the page says
    with open(root.parent / "runs" / "rounding" / "results.csv") as f:
        reader = csv.DictReader(f)
        table = list(reader)
    named = re.search(
        r"`results\.csv` carries the swept fields as columns: (.*?)\.\.\.", _inline(_part())
    )[1]
    for col in re.findall(r"`([\w.]+)`", named):
        assert col in reader.fieldnames, (col, reader.fieldnames)
    assert {"grid_rounding(step=1)", "none"} <= {r["setting"] for r in table}
