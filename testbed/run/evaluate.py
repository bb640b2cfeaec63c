"""Stage 4: accuracy and task utility — the protocol's estimates against the central reference.

The reference is computed by the testbed on the pooled private data with exact POT solves
(``protocol.reference(parties)``); it is the testbed's side of the run, never sent on the bus.
"""

from __future__ import annotations

import hashlib
import math
import numbers
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

import numpy as np

from testbed.errors import PluginFault, TestbedError
from testbed.exchange.engines import reference_engine
from testbed.registry import plugin_phase
from testbed.run.roster import World
from testbed.scenario.headline import headline_patterns, headline_ranking
from testbed.scoring.accuracy import ranking_agreement
from testbed.scoring.metrics import detection_metrics, relative_error
from testbed.scoring.utility import task_utility

__all__ = ["Evaluation", "accuracy_of", "evaluate", "headline_accuracy", "score_detection"]


@dataclass(frozen=True)
class Evaluation:
    """The run's accuracy (estimate vs exact), detection scores and task utility."""

    reference: dict[str, Any]
    accuracy: dict[str, Any]
    detection: dict[str, Any]
    utility: dict[str, Any]
    evaluation: dict[str, Any]  # protocol.evaluate(): run quantities that need pooled data
    assumptions: list  # defenses' privacy assumptions, checked against the data
    headline: dict[str, Any] | None = None  # headline_accuracy()


_REFERENCE_CACHE: dict[str, dict] = {}


def reference(protocol, parties) -> dict:
    """``protocol.reference(parties)``, memoised in-process by protocol name, the protocol's
    ``reference_key()`` and a digest of the parties' data: sweep cells that share data (every
    defense setting and knob of a scenario) solve the central exact OT once. Exact POT solves are
    deterministic, so results are byte-identical with or without the cache."""
    h = hashlib.sha256(f"{protocol.name}|{protocol.reference_key()}".encode())
    for name in sorted(parties):
        d = parties[name]
        h.update(name.encode())
        h.update(np.ascontiguousarray(d.X).tobytes())
        h.update(str(d.X.shape).encode())
        if d.y is not None:
            h.update(np.ascontiguousarray(d.y).tobytes())
    key = h.hexdigest()
    if key not in _REFERENCE_CACHE:
        if len(_REFERENCE_CACHE) >= 64:
            _REFERENCE_CACHE.pop(next(iter(_REFERENCE_CACHE)))
        _REFERENCE_CACHE[key] = protocol.reference(parties)
    return dict(_REFERENCE_CACHE[key])


def accuracy_of(estimate, exact) -> dict:
    """Relative error of one estimate; arrays (e.g. a distance matrix) use the Frobenius norm and
    their signed error is that of the sum (the direction of an overall bias)."""
    if isinstance(estimate, np.ndarray) or isinstance(exact, np.ndarray):
        est, ex = np.asarray(estimate, dtype=np.float64), np.asarray(exact, dtype=np.float64)
        norm = float(np.linalg.norm(ex))
        return {
            "estimate": est,
            "exact": ex,
            "relative_error": float(np.linalg.norm(est - ex)) / norm if norm else math.nan,
            "signed_relative_error": float((est.sum() - ex.sum()) / ex.sum())
            if ex.sum()
            else math.nan,
        }
    return {
        "estimate": estimate,
        "exact": exact,
        "relative_error": relative_error(estimate, exact),
        # sign shows the direction of a bias (e.g. TriangleWad over-estimates for k > 1)
        "signed_relative_error": (estimate - exact) / exact if exact != 0 else math.nan,
    }


def _not_finite(value) -> str | None:
    """What is not finite in a number or numeric array (``'nan'``, ``'2 of 6 values: -inf,
    nan'``); None when all of it is finite, or when it is not a number (:func:`accuracy_of`
    names that)."""
    if isinstance(value, np.ndarray) and value.dtype.kind in "fc":
        bad = ~np.isfinite(value)
        n = int(bad.sum())
        if n == 0:
            return None
        kinds = sorted({str(x) for x in np.asarray(value)[bad].ravel()[:1000]})
        return f"{n} of {value.size} values: {', '.join(kinds)}"
    if isinstance(value, numbers.Real) and not math.isfinite(value):
        return str(float(value))
    return None


def _comparable(protocol: str, key: str, estimate, exact) -> None:
    """An estimate compared with its reference, and that reference, are finite: a NaN or an
    infinity would come out as a NaN relative error (written as null), not as a fault."""
    for what, value in (("estimate", estimate), ("reference", exact)):
        bad = _not_finite(value)
        if bad is not None:
            raise PluginFault(f"protocol {protocol!r}: its {what} {key!r} is not finite ({bad})")


def headline_accuracy(protocol, accuracy: dict[str, Any]) -> dict[str, Any] | None:
    """The run's headline accuracy: its one error, the x-axis of leakage against accuracy.

    ``protocol.headline_accuracy`` names the quantity it is about, as globs tried in order (the
    first that matches an accuracy quantity wins); a glob matching several quantities (FedBary's
    ``distance_*``, one distance per client) scores them as one vector, with the rule
    :func:`accuracy_of` applies to arrays: ``||est - exact||_2 / ||exact||_2``. A protocol
    that names none (or none that matches) is scored on its first accuracy quantity, as before
    the attribute existed. ``None`` when the run has no accuracy at all.

    A protocol whose users rely on a ranking (``protocol.headline_ranking``, FedBary's
    ``contribution_*``) is headlined by that ranking instead (:func:`_ranking_headline`), the
    error above kept under ``"secondary"``."""
    error = _error_headline(protocol, accuracy)
    ranking = _ranking_headline(protocol, accuracy)
    if ranking is None:
        return error
    return {**ranking, **({"secondary": error} if error else {})}


def _error_headline(protocol, accuracy: dict[str, Any]) -> dict[str, Any] | None:
    keys: list[str] = []
    name = ""
    for pattern in headline_patterns(protocol):
        keys = sorted(k for k in accuracy if fnmatchcase(k, pattern))
        if keys:
            name = pattern
            break
    if not keys:
        keys = list(accuracy)[:1]
        name = keys[0] if keys else ""
    if not keys:
        return None
    if len(keys) == 1:
        acc = accuracy[keys[0]]
    else:  # one vector of every matched quantity (arrays flattened into it)

        def flat(part):
            return np.concatenate(
                [np.ravel(np.asarray(accuracy[k][part], dtype=np.float64)) for k in keys]
            )

        acc = accuracy_of(flat("estimate"), flat("exact"))
    return {
        "quantity": name,
        "keys": keys,
        "relative_error": float(acc["relative_error"]),
        "signed_relative_error": float(acc["signed_relative_error"]),
    }


def _ranking_headline(protocol, accuracy: dict[str, Any]) -> dict[str, Any] | None:
    """The per-party scores ``protocol.headline_ranking`` names, ranked against the central
    scores (:func:`testbed.scoring.accuracy.ranking_agreement`): ``spearman``,
    ``top_k_overlap`` and ``top_k``; ``relative_error`` (the report's error axis, lower =
    better) is ``1 - spearman``, 0 when the federated ranking is the central one. None when the
    protocol names none, or fewer than two scores match (nothing to rank)."""
    pattern = headline_ranking(protocol)
    keys = sorted(k for k in accuracy if fnmatchcase(k, pattern)) if pattern else []
    if len(keys) < 2:
        return None
    rank = ranking_agreement(
        [float(accuracy[k]["estimate"]) for k in keys], [float(accuracy[k]["exact"]) for k in keys]
    )
    stem = pattern.rstrip("*_").replace("_", " ")
    return {
        "quantity": f"{stem} ranking",
        "label": f"{stem} ranking: 1 − Spearman ρ ({len(keys)} parties)",
        "keys": keys,
        "spearman": rank["spearman"],
        "top_k_overlap": rank["top_k_overlap"],
        "top_k": rank["top_k"],
        "relative_error": 1.0 - rank["spearman"],
    }


def score_detection(detection, noise_masks) -> dict:
    """Score a protocol's per-row detection scores against the noise masks (ground truth).

    ``{detector: {party: metrics}}``; a party without a noise mask counts as all clean. When a
    detector scores several parties, ``"pooled"`` scores all their rows together.
    """
    out: dict[str, dict] = {}
    for detector, per_party in detection.items():
        rows, scores, masks = {}, [], []
        for party, s in per_party.items():
            s = np.asarray(s, dtype=np.float64).reshape(-1)
            m = noise_masks.get(party)
            m = np.zeros(s.size, dtype=bool) if m is None else np.asarray(m, dtype=bool)
            if m.size != s.size:
                raise TestbedError(
                    f"detection {detector!r}: {s.size} scores for party {party!r} with {m.size} rows"
                )
            rows[party] = detection_metrics(s, m)
            scores.append(s)
            masks.append(m)
        if len(scores) > 1:
            rows["pooled"] = detection_metrics(np.concatenate(scores), np.concatenate(masks))
        out[detector] = rows
    return out


def evaluate(world: World, result: Any) -> Evaluation:
    """Reference, accuracy, detection and task utility of one protocol run (its
    :class:`~protocols.ProtocolResult`)."""
    sc = world.scenario
    with plugin_phase("protocol", world.protocol.name, "reference"):
        with reference_engine(sc.engine, sc.engine_params):  # its solves on the run's workers
            ref = reference(world.protocol, world.parties)
    # scoring side, like the reference: quantities of the run that need the pooled data
    with plugin_phase("protocol", world.protocol.name, "evaluate"):
        extra = world.protocol.evaluate(result, world.parties)
    scored = {**result.estimates, **extra}
    accuracy = {}
    for k in scored:
        if k in ref:
            _comparable(world.protocol.name, k, scored[k], ref[k])
            try:
                accuracy[k] = accuracy_of(scored[k], ref[k])
            except (TypeError, ValueError) as exc:
                raise PluginFault(
                    f"protocol {world.protocol.name!r}: its estimate {k!r} "
                    f"({type(scored[k]).__name__}) cannot be compared with the reference "
                    f"({type(ref[k]).__name__}): {exc}"
                ) from None
    if scored and ref and not accuracy:  # a renamed key: the run would report no accuracy
        raise PluginFault(
            f"protocol {world.protocol.name!r}: none of its estimates has a key of its "
            f"reference, so its accuracy cannot be measured: it estimated {sorted(scored)}, its "
            f"reference has {sorted(ref)}"
        )
    detection = score_detection(result.detection, world.noise_masks)
    assumptions = []
    for dfn in world.defenses:
        # a testbed diagnostic: checked against the data, never sent
        found = dfn.assumptions(world.parties, world.scenario.protocol.name, world.protocol.config)
        assumptions.extend(found or [])
    utility = task_utility(world.protocol, scored, ref, result.outputs, detection)
    headline = headline_accuracy(world.protocol, accuracy)
    return Evaluation(ref, accuracy, detection, utility, extra, assumptions, headline)
