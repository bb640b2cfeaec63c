"""The mechanism audit: the testbed drives a party's defenses itself, on neighbouring datasets it
chooses, and reads every number of every release before and after the noise.

Why a second scope beside the canary games (:mod:`testbed.run.audit`,
:mod:`testbed.run.audit_one_run`): a canary is one row of hundreds, so a defense that adds half,
or a tenth, of the noise it charges hides in the gap between what one row moves and what the
claim charges for. Here the audit is white-box, as audits of DP-SGD that read the gradients are:

* **Neighbouring datasets, worst cases included.** Three pairs that differ in one row of the
  audited party: its real rows with one replaced by a row on the clip sphere; ``m`` rows (the
  claim's ``min_rows``, at least 1) at :math:`+Cu` against the same with one row at
  :math:`-Cu`, which moves every atom of a barycentric push by the whole sensitivity; and the
  same with the row at :math:`-10Cu`, beyond the clip norm (a defense whose claim assumes a norm
  bound must enforce it: :meth:`~defenses._base.Defense.prepare_party`); and, when ``m`` > 1,
  one row at :math:`+Cu` against :math:`-Cu`: fewer rows than the claim assumes, which the
  defense must refuse at the party (then the pair is not run) or else cover.
* **Replayed inputs, coupled noise.** In each trial the first dataset of a pair runs the real
  protocol; the second runs it again with every message the audited party *receives* replaced by
  the first run's (the adaptive adversary's queries held fixed, as composition theorems assume)
  and with the same defense seeds, so the two releases differ by exactly what the private row
  moves: the shift is measured without noise, not estimated.
* **The whole envelope.** Every numeric field of every message the party sends (payload arrays,
  scalars, numbers in the meta; :func:`~testbed.exchange.payload.numeric_leaves`),
  compared before and after the defenses.

Checks (each a VIOLATION when it fails): the noise at each charged field is at least the σ the
ledger was told (:func:`~testbed.scoring.mechanism_checks.noise_scale_test`); noise is fresh
across trials with the same public inputs, and independent across rounds and across atoms
(:func:`~testbed.scoring.mechanism_checks.correlation_z`); every field that moves with the private
row, or that a defense noised, is charged to the ledger; no charged field moves by more than
its charged sensitivity; and the μ-GDP the measured shifts and noise make, composed over the
releases, stays within the claim. The statistical tests share the audit's α (Bonferroni); the
shift checks are exact.

Scope: defenses that change messages and charge the ledger. Noise drawn inside a protocol (the
DP baselines) is not visible before it is added, so such a party is "not audited" here; the
protocol scope audits it.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np

from testbed.errors import TestbedError
from testbed.exchange.bus import Bus
from testbed.exchange.ledger import PrivacyLedger
from testbed.exchange.payload import numeric_leaves
from testbed.run.audit_mechanism_judge import STATISTICAL, MechanismAudit, Release, judge
from testbed.run.roster import Roster
from testbed.seeding import component_rng

__all__ = ["MechanismAudit", "mechanism_audit"]


class _Diverged(Exception):
    """The replayed run sent another message than the run it replays."""


class _AuditBus(Bus):
    """A bus that records the audited party's releases (before and after the defenses, with the
    ledger events each made) and, given ``forced``, delivers every message that party did not
    send as the replayed run delivered it."""

    def __init__(self, defenses, ledger, parties, party: str, forced=None):
        super().__init__(defenses, ledger=ledger, parties=parties, local_threads=1)
        self._party = party
        self._forced = forced
        self.releases: list[Release] = []
        self.received: list = []
        self.sent: list[tuple] = []  # the party's sends as the protocol made them (replays)

    def send(self, sender, receiver, kind, payload, round=0, meta=None):
        n0 = len(self.ledger.events)
        env = super().send(sender, receiver, kind, payload, round=round, meta=meta)
        if sender == self._party:
            self.sent.append((receiver, kind, payload, round, meta))
            pre = env.with_payload(payload)  # before the noise: with the clips the defenses apply
            for defense, _ in self._defenses:
                if defense.applies_to(pre):
                    pre = pre.with_payload(defense.bounded(pre))
            self.releases.append(
                Release(
                    kind,
                    round,
                    numeric_leaves(pre.payload, meta),
                    numeric_leaves(env.payload, env.meta),
                    tuple(self.ledger.events[n0:]),
                )
            )
            return env
        self.received.append(env)
        if self._forced is None:
            return env
        i = len(self.received) - 1
        if i >= len(self._forced) or self._forced[i].kind != kind:
            raise _Diverged(f"message #{i} ({kind}) differs from the replayed run's")
        return env.with_payload(self._forced[i].payload)


def _pairs(world, party: str, defenses) -> dict[str, tuple]:
    """The neighbouring datasets: name -> (D0, D1 or a list of D1s sharing D0)."""
    data = world.parties[party]
    X = np.asarray(data.X, dtype=np.float64)
    C = max([float(getattr(d.config, "clip_norm", 0.0)) for d in defenses] or [0.0])
    if C <= 0:
        C = float(np.linalg.norm(X, axis=1).max())
    mean = X.mean(axis=0)
    nm = float(np.linalg.norm(mean))
    u = -mean / nm if nm > 1e-12 else np.eye(X.shape[1])[0]
    m = max([int(getattr(d.config, "min_rows", 1)) for d in defenses] or [1])
    m = min(max(m, 1), X.shape[0])
    far = int(np.argmax(np.linalg.norm(X - C * u, axis=1)))
    full1 = X.copy()
    full1[far] = C * u
    small0 = np.tile(C * u, (m, 1))
    small1 = small0.copy()
    small1[0] = -C * u
    beyond = small0.copy()
    beyond[0] = -10.0 * C * u
    y = None if data.y is None else np.asarray(data.y)
    ys = None if y is None else y[:m]

    def pd(rows, labels):
        out = replace(data, X=rows, y=labels, source_index=None)
        for d in defenses:  # a copy: what a defense notes of the rows stays the run's
            out = copy.deepcopy(d).prepare_party(out)
        return out

    pairs = {
        "real rows, one replaced at the clip norm": (pd(X, y), [pd(full1, y)]),
        f"{m} row(s) at +C u, one moved to -C u and to -10 C u (beyond the clip norm)": (
            pd(small0, ys),
            [pd(small1, ys), pd(beyond, ys)],
        ),
    }
    if m > 1:  # fewer rows than the claim's min_rows: a defense must refuse them, or hold
        try:
            pairs[f"1 row (fewer than min_rows = {m}) at +C u, moved to -C u"] = (
                pd(small0[:1], None if ys is None else ys[:1]),
                [pd(small1[:1], None if ys is None else ys[:1])],
            )
        except TestbedError:  # refused at the party: no release to compare
            pass
    return pairs


#: numbers the replays of one pair hold at most (pre and post of every field of every release)
_REPLAY_NUMBERS = 400_000


def _replays(world, party: str, sent: list, pair: int, tag: str = "replay") -> list:
    """The defenses alone, run again on what the party sent in a pair's first trial, in order
    (fresh copies of the defenses, fresh noise streams each time): many more noise samples than
    protocol runs give, for a fraction of their cost. As many as fit :data:`_REPLAY_NUMBERS`, at
    most 500."""
    size = sum(a.size for s in sent for a in numeric_leaves(s[2], s[4]).values())
    count = int(min(500, max(20, _REPLAY_NUMBERS // max(2 * size, 1))))
    seed = world.scenario.seed
    out = []
    for j in range(count):
        defs = [
            (copy.deepcopy(d), component_rng(seed, "audit", tag, pair, j, k))
            for k, d in enumerate(world.defenses)
        ]
        bus = _AuditBus(defs, PrivacyLedger(), {}, party)
        for receiver, kind, payload, rnd, meta in sent:
            bus.send(party, receiver, kind, payload, round=rnd, meta=meta)
        out.append((bus.releases, []))
    return out


def _run(world, parties, party, defs, forced=None):
    """One protocol run on ``parties`` with the defenses' noise streams ``defs``; the
    protocol's own randomness is the same in every run (the server's choice: the observer
    knows it)."""
    ledger = PrivacyLedger()
    # each run gets its own copies, as each real run builds its own: state a defense keeps
    # (a counter, a stored draw) starts afresh
    defs = [(copy.deepcopy(d), rng) for d, rng in defs]
    bus = _AuditBus(defs, ledger, parties, party, forced)
    rng = component_rng(world.scenario.seed, "audit", "protocol")
    world.protocol.run(Roster.of(parties), bus, rng)
    return bus, ledger


def mechanism_audit(
    world,
    party: str,
    trials: int = 4,
    delta: float = 1e-5,
    confidence: float = 0.95,
    progress=None,
    disabled=frozenset(),
) -> MechanismAudit:
    """Audit the mechanisms of ``world``'s defenses on ``party`` (module docstring).
    ``disabled``: see :func:`~testbed.run.audit_mechanism_judge.judge` (tests only)."""
    if party not in world.parties:
        raise TestbedError(f"audit: unknown party {party!r}; parties: {', '.join(world.parties)}")
    defenses = [d for d in world.defenses if d.changes_messages and d.protects(party)]
    if not defenses:
        return MechanismAudit(
            party,
            "not audited",
            "no defense acts on what it sends (noise drawn inside a protocol is audited at the "
            "protocol scope)",
            delta=delta,
        )
    if trials < 4:
        raise TestbedError("audit: the mechanism audit needs at least 4 trials")
    seed = world.scenario.seed
    runs: dict[str, list] = {}  # pair -> per trial: (world-0 releases, [world-1 releases, ...])
    first: dict[str, list] = {}  # pair -> what the party sent in the pair's first trial
    notes: list[str] = []
    pairs = _pairs(world, party, defenses)
    claimed = None
    for t in range(trials):

        def defs(i, t=t):  # the same noise streams for both datasets of pair i: coupled
            return [
                (d, component_rng(seed, "audit", "mechanism", t, i, k))
                for k, d in enumerate(world.defenses)
            ]

        for i, (name, (d0, d1s)) in enumerate(pairs.items()):
            if name in runs and runs[name] is None:
                continue  # skipped
            try:
                bus0, ledger = _run(world, {**world.parties, party: d0}, party, defs(i))
                ones = [
                    _run(world, {**world.parties, party: d1}, party, defs(i), bus0.received)[
                        0
                    ].releases
                    for d1 in d1s
                ]
            except (_Diverged, TestbedError) as e:
                if t == 0 and i == 0 and not isinstance(e, _Diverged):
                    raise  # the real rows: the protocol's own failure
                runs[name] = None
                why = "not compared" if isinstance(e, _Diverged) else "the protocol failed on it"
                notes.append(f"{name}: {why} ({e})")
                continue
            if claimed is None and i == 0:
                if not bus0.releases:
                    return MechanismAudit(
                        party,
                        "not audited",
                        f"{party} sends no message of its own (what others send computed from "
                        "its rows is audited at the protocol scope)",
                        delta=delta,
                    )
                claimed = float(ledger.epsilon(party, delta))
            runs.setdefault(name, []).append((bus0.releases, ones))
            first.setdefault(name, bus0.sent)
        if progress is not None:
            progress(t)
    runs = {k: v for k, v in runs.items() if v is not None}
    for i, name in enumerate(pairs):
        if name in runs:
            more = _replays(world, party, first[name], i)
            runs[name].extend(more)
    if runs:
        n = sum(len(v) - trials for v in runs.values())
        notes.append(
            f"{trials} coupled trials per pair, and {n} replays of the defenses alone on the "
            "releases the protocol made in the first (more samples for the noise tests)"
        )
    result = judge(party, runs, claimed, delta, confidence, trials, notes, disabled)
    flagged = set(result.failed) & STATISTICAL
    if not flagged:
        return result
    # a statistical finding stands only when an independent batch of replays repeats it: a
    # correct mechanism is then flagged in at most α² of audits, a broken one as before
    fresh = {
        name: _replays(world, party, first[name], i, "confirm")
        for i, name in enumerate(pairs)
        if name in runs
    }
    again = judge(party, fresh, claimed, delta, confidence, trials, [], disabled)
    gone = flagged - set(again.failed)
    if gone:
        notes.append(
            f"not confirmed by a second batch of replays, so not reported: {', '.join(sorted(gone))}"
        )
    return judge(party, runs, claimed, delta, confidence, trials, notes, disabled | gone)
