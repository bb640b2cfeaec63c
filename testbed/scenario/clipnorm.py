"""A warning, never an error: a defense's ``clip_norm`` far from the data's row norms.

``gaussian_measure_noise`` clips every row of a party it protects to L2 norm ``clip_norm`` at the
party, before the protocol starts, and calibrates its noise to that norm. A ``clip_norm`` far
below the rows' norms (the default 1.0 on rows of norm 10) shortens most rows and distorts the
data the protocol computes on; one far above every row's norm adds noise for rows that do not
exist. Both are legal, so ``testbed validate`` and ``testbed run`` say so and go on. The rows are
read only where that is cheap (:attr:`~testbed.data.datasets.DatasetPlugin.light` datasets and
transforms: numpy only); for another dataset nothing is said here.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from testbed.data.datasets import PartyData
from testbed.registry import DATASETS, TRANSFORMS
from testbed.scenario.cells import expand_cells
from testbed.scenario.resolve import ResolvedScenario
from testbed.scenario.yamlloc import where
from testbed.seeding import component_rng

__all__ = ["FAR_ABOVE", "FAR_BELOW", "clip_norm_warnings", "far_from_norms"]

#: clip_norm below this share of the rows' median norm: most rows would be shortened a lot
FAR_BELOW = 0.5
#: clip_norm above this multiple of the largest row norm: noise for rows that do not exist
FAR_ABOVE = 4.0


def far_from_norms(clip: float, norms: np.ndarray) -> str | None:
    """What is wrong with ``clip`` for rows of L2 norms ``norms`` (None when it is near them)."""
    med, lo, hi = (float(x) for x in np.percentile(norms, [50, 5, 95]))
    top = float(norms.max())
    seen = (
        f"the rows' L2 norms: median {med:.3g}, 5-95 % {lo:.3g}-{hi:.3g}, max {top:.3g} "
        f"({norms.size} rows of the dataset)"
    )
    if clip < FAR_BELOW * med:
        share = float(np.mean(norms > clip))
        return (
            f"{clip:g} is far below {seen}; the defense clips every row of a party it protects "
            f"to clip_norm at the party, so {100 * share:.0f} % of the rows would be shortened (a median "
            f"row to {clip / med:.2g} of its length): the protocol would run on distorted data. "
            f"Choose clip_norm near the rows' norms (e.g. {hi:.3g})"
        )
    if clip > FAR_ABOVE * top:
        return (
            f"{clip:g} is far above {seen}; the noise is calibrated to clip_norm, "
            f"{clip / top:.3g}x what rows of these norms need. Choose clip_norm near {top:.3g}"
        )
    return None


def _row_norms(rs: ResolvedScenario, cache: dict[str, Any]) -> np.ndarray | None:
    """The L2 norms of the scenario's dataset rows (after its transform), when loading them
    needs numpy only; None otherwise. Loaded once per dataset and transform."""
    sc, cfg = rs.scenario, rs.configs
    tr = None if cfg.transform is None else [sc.data.transform.name, cfg.transform.model_dump()]
    key = json.dumps(
        [sc.data.dataset.name, cfg.dataset.model_dump(), tr], sort_keys=True, default=str
    )
    if key in cache:
        return cache[key]
    cache[key] = None
    ds_cls = DATASETS.get(sc.data.dataset.name)
    tr_cls = None if sc.data.transform is None else TRANSFORMS.get(sc.data.transform.name)
    if not ds_cls.light or not (tr_cls or ds_cls).light:
        return None
    X = ds_cls(cfg.dataset).load(component_rng(sc.seed, "data")).X
    if tr_cls is not None:
        tr = tr_cls(cfg.transform)
        X = tr.apply(PartyData("all", np.asarray(X, dtype=np.float64))).X
    norms = np.linalg.norm(np.asarray(X, dtype=np.float64), axis=1)
    cache[key] = norms if norms.size else None
    return cache[key]


def clip_norm_warnings(sc) -> list[str]:
    """One line per defense setting whose ``clip_norm`` is far from the rows' norms
    (``file:line: defenses[i].params.clip_norm: ...``), for the scenario or each sweep cell."""
    rs = ResolvedScenario.of(sc)
    cells = [c.rs for c in expand_cells(rs.scenario)] if rs.scenario.is_sweep else [rs]
    cache: dict[str, Any] = {}
    out: dict[str, None] = {}
    for crs in cells:
        cell = crs.scenario
        for i, (d, cfg) in enumerate(zip(cell.defenses, crs.configs.defenses)):
            clip = getattr(cfg, "clip_norm", None)
            if clip is None:
                continue
            norms = _row_norms(crs, cache)
            problem = None if norms is None or clip is None else far_from_norms(clip, norms)
            if problem:
                # a default has no line of its own: line_of stops at the defense's
                spot = where(cell._fname, cell._yaml_root, ["defenses", i, "params", "clip_norm"])
                default = "" if "clip_norm" in (d.params or {}) else " (the default)"
                out[f"{spot}: {problem.replace(' is far', default + ' is far', 1)}"] = None
    return list(out)
