"""``testbed run``'s attack lines for many parties: a distribution over the targets instead of a
line per target, and targets in natural order (client_2 before client_10)."""

from testbed.cli._common import print_attack_rows
from testbed.cli.summary import POPULATION_MIN


def _row(i: int, leak: bool) -> dict:
    row = {
        "attack": "gamma_inversion",
        "label": "gamma_inversion",
        "target": f"client_{i}",
        "observer": "server",
        "leakage": 0.5 + i / 1000,
        "coverage": 0.2,
        "coverage_population": 0.1,
        "record_p": 0.01 if leak else 0.5,
        "record_leak": leak,
    }
    if leak:
        row["record_leakage"] = 0.9 + i / 10000
    return row


def test_many_targets_read_as_a_population(capsys):
    # Prepare: 100 targets in string order; every third one leaks
    rows = sorted((_row(i, i % 3 == 0) for i in range(100)), key=lambda a: a["target"])
    # Execute
    print_attack_rows(rows)
    out = capsys.readouterr().out.splitlines()
    # Assert: a few lines, the count of leaking targets, quantiles, the worst by name
    assert len(out) <= 6, out
    assert out[0].startswith(
        "attack gamma_inversion (observer server) on 100 targets: 34 of 100 leak"
    )
    assert "record leak: 34" in out[0]
    assert any(line.strip().startswith("leakage over targets: min 0.5,") for line in out)
    assert any("record_leakage over targets" in line for line in out)
    worst = next(line for line in out if line.strip().startswith("worst:"))
    assert worst.strip().startswith("worst: client_99 (record leak")
    assert worst.index("client_99") < worst.index("client_96") < worst.index("client_93")


def test_few_targets_one_line_each_in_natural_order(capsys):
    rows = sorted((_row(i, False) for i in range(POPULATION_MIN)), key=lambda a: a["target"])
    print_attack_rows(rows)
    out = capsys.readouterr().out.splitlines()
    assert len(out) == POPULATION_MIN
    targets = [line.split(" on ", 1)[1].split(" ", 1)[0] for line in out]
    assert targets == [f"client_{i}" for i in range(POPULATION_MIN)]


def test_run_progress_piped_prints_a_line_per_tenth_with_an_eta():
    import io
    from types import SimpleNamespace

    from testbed.run.exchange import expected_rounds
    from testbed.run.progress import RoundProgress

    # Prepare: a protocol of 9 iterations (+ its final round); a pipe, not a terminal
    proto = SimpleNamespace(config=SimpleNamespace(iterations=9))
    stream = io.StringIO()
    bar = RoundProgress("fedbary_1000", expected_rounds(proto), stream=stream, after=0.0)
    short = io.StringIO()
    quiet = RoundProgress("short", 10, stream=short)  # a run shorter than 5 s prints nothing
    # Execute: 3 messages per round, rounds 1..10
    for r in range(1, 11):
        for _ in range(3):
            bar(SimpleNamespace(round=r))
            quiet(SimpleNamespace(round=r))
    bar.close()
    assert short.getvalue() == ""
    lines = stream.getvalue().splitlines()
    # Assert: one line per finished round (a tenth each), each with the time so far and an ETA
    assert len(lines) == 9
    assert lines[0].startswith("fedbary_1000: round 1/10 done, 4 messages, ")
    assert all(" ETA " in line for line in lines)
    assert expected_rounds(SimpleNamespace(config=SimpleNamespace())) is None
