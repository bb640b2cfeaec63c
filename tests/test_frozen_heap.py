"""A run's protocol exchange runs with the process's older objects frozen out of the garbage
collector's sight (a full collection over a run's ~260 000 objects costs about 0.12 s and lands
in whatever code allocates, most often the bus): frozen while the protocol runs, released after,
and nested blocks release only at the outermost end."""

from __future__ import annotations

import gc

import testbed.run.exchange as exchange_stage
from testbed.run.exchange import frozen_heap
from testbed.run.execute import execute
from testbed.scenario.loading import load_scenario


def test_frozen_heap_freezes_and_releases_once_nested_blocks_end():
    assert gc.get_freeze_count() == 0
    before = len(gc.get_objects())
    with frozen_heap():
        frozen = gc.get_freeze_count()
        assert frozen >= before // 2  # the objects that existed are out of the collector's sight
        with frozen_heap():
            pass
        assert gc.get_freeze_count() == frozen  # the inner block left them frozen
        made = [[i] for i in range(10)]  # made inside: collected as usual
        assert gc.is_tracked(made[0]) and gc.get_freeze_count() == frozen
    assert gc.get_freeze_count() == 0


def test_the_protocol_runs_on_a_frozen_heap_and_the_run_releases_it(
    scenarios_dir, tmp_path, monkeypatch
):
    seen = []
    real = exchange_stage.open_bus

    def spying_open_bus(*args, **kwargs):
        seen.append(gc.get_freeze_count())
        return real(*args, **kwargs)

    monkeypatch.setattr(exchange_stage, "open_bus", spying_open_bus)
    execute(load_scenario(scenarios_dir / "contract_tiny.yaml"), tmp_path / "run")
    assert seen and seen[0] > 0
    assert gc.get_freeze_count() == 0
