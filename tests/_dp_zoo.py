"""A zoo of broken twins of ``gaussian_measure_noise``: each has ONE bug of a kind DP libraries
have shipped (noise scaled from the wrong sensitivity, clipping skipped, noise reused or seeded
from public values, releases not charged, ...), and each tells the ledger exactly what the
correct mechanism would. The audit must flag every one (tests/test_mechanism_audit.py) and pass
the correct twin. Registered by the tests that use them, never at import."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import numpy as np

from defenses.gaussian_measure_noise import GaussianMeasureNoise
from testbed.measure import Measure


class _Twin(GaussianMeasureNoise):
    """The correct mechanism, with the steps a bug may change as methods."""

    def noise(self, env, rng, shape, sigma, path):
        return rng.normal(0.0, sigma, shape)

    def charge(self, env, events):
        return events

    def extra_meta(self, env, payload) -> dict:
        return {}

    def on_send(self, env, rng, ledger):
        z = self.multiplier()
        events = []

        def noisy(p, path):
            if isinstance(p, Measure):
                delta = self.support_sensitivity(p.n, p.weights)
                sigma = z * delta
                events.append(self._event(env, z, delta, sigma, env.kind, path + "support"))
                support = self.bounded_support(p.support)
                return Measure(
                    support + self.noise(env, rng, support.shape, sigma, path), p.weights
                )
            if isinstance(p, float) and self.config.noise_distances:
                delta = self.distance_sensitivity()
                sigma = z * delta
                events.append(self._event(env, z, delta, sigma, env.kind, path))
                return self.release_distance(p, float(self.noise(env, rng, (), sigma, path)))
            if isinstance(p, Mapping):
                return {k: noisy(v, f"{path}{k}/") for k, v in p.items()}
            return p

        payload = noisy(env.payload, "")
        events = self.charge(env, events)
        if ledger is not None:
            for e in events:
                ledger.record(e)
        return self.marked(env, payload, **self.extra_meta(env, env.payload))

    def release_distance(self, p, n):
        return max(0.0, self.bounded_distance(p) + n)


class CorrectTwin(_Twin):
    name = "zoo_correct"


class HalfSigma(_Twin):
    """Noise std from half the sensitivity."""

    name = "zoo_half_sigma"

    def noise(self, env, rng, shape, sigma, path):
        return rng.normal(0.0, sigma / 2, shape)


class TenthSigma(_Twin):
    """Noise std from a tenth of the sensitivity."""

    name = "zoo_tenth_sigma"

    def noise(self, env, rng, shape, sigma, path):
        return rng.normal(0.0, sigma / 10, shape)


class NoSqrtS(_Twin):
    """The √S factor of the support's sensitivity dropped in the noise (not in the ledger)."""

    name = "zoo_no_sqrt_s"

    def noise(self, env, rng, shape, sigma, path):
        s = shape[0] if len(shape) == 2 else 1
        return rng.normal(0.0, sigma / np.sqrt(s), shape)


class HalfSigmaDistances(_Twin):
    """The distances' noise from half their sensitivity (the supports' is right)."""

    name = "zoo_half_sigma_distances"

    def noise(self, env, rng, shape, sigma, path):
        return rng.normal(0.0, sigma / 2 if shape == () else sigma, shape)


class SkipClip(_Twin):
    """Rows beyond the clip norm are not clipped, while the ledger assumes they are."""

    name = "zoo_skip_clip"

    def prepare_party(self, data):
        return data


class ReusedNoise(_Twin):
    """The first release's noise draw re-added at every later release."""

    name = "zoo_reused_noise"

    def noise(self, env, rng, shape, sigma, path):
        store = self.__dict__.setdefault("_drawn", {})
        key = (env.sender, path, shape)
        if key not in store:
            store[key] = rng.normal(0.0, sigma, shape)
        return store[key]


class PublicSeed(_Twin):
    """Noise seeded from the message's public fields (kind, round, sender)."""

    name = "zoo_public_seed"

    def noise(self, env, rng, shape, sigma, path):
        h = hashlib.sha256(f"{env.kind}|{env.round}|{env.sender}|{path}".encode()).digest()
        return np.random.default_rng(int.from_bytes(h[:8], "little")).normal(0.0, sigma, shape)


class SharedAtomNoise(_Twin):
    """One noise vector added to every atom of a support."""

    name = "zoo_shared_atom_noise"

    def noise(self, env, rng, shape, sigma, path):
        if len(shape) == 2:
            return np.broadcast_to(rng.normal(0.0, sigma, shape[1]), shape).copy()
        return rng.normal(0.0, sigma, shape)


class FirstRoundOnly(_Twin):
    """Noise in the first release of each kind only; the later ones are charged but raw."""

    name = "zoo_first_round_only"

    def noise(self, env, rng, shape, sigma, path):
        seen = self.__dict__.setdefault("_seen", set())
        key = (env.sender, env.kind, path)
        if key in seen:
            return np.zeros(shape)
        seen.add(key)
        return rng.normal(0.0, sigma, shape)


class RawDistances(_Twin):
    """Distances charged but sent raw."""

    name = "zoo_raw_distances"

    def release_distance(self, p, n):
        return p


class MetaLeak(_Twin):
    """The noised support is sent, and the raw one rides along in the meta ("for debugging")."""

    name = "zoo_meta_leak"

    def extra_meta(self, env, payload):
        if isinstance(payload, Measure):
            return {"debug_support": payload.support.tolist()}
        return {}


class ChargeOneInFour(_Twin):
    """Only one release in four is charged to the ledger."""

    name = "zoo_charge_one_in_four"

    def charge(self, env, events):
        n = self.__dict__.get("_calls", 0)
        self.__dict__["_calls"] = n + 1
        return events if n % 4 == 0 else []


class NoPushClip(_Twin):
    """Every support charged as a barycentric push of public atoms (2 C λ √S, tight where it
    applies) and no atom clipped, whatever the protocol's structure: the calibration before
    issue 47's FedBary fix, where FedBary's γ_i mixes the server's atoms by a plan that moves
    with the private row."""

    name = "zoo_no_push_clip"

    def pushes(self):
        return True

    def bounded_distance(self, value):
        return value

    def distance_sensitivity(self):
        return 2.0 * self.config.clip_norm / np.sqrt(self.config.min_rows)


class NoRowFloor(_Twin):
    """The tight calibration with the row floor switched off: rows clipped, too few accepted."""

    name = "zoo_no_row_floor"

    def prepare_party(self, data):
        return self.prepare_rows(data)


#: every broken twin, with the bug it carries
BROKEN = (
    HalfSigma,
    TenthSigma,
    NoSqrtS,
    HalfSigmaDistances,
    SkipClip,
    ReusedNoise,
    PublicSeed,
    SharedAtomNoise,
    FirstRoundOnly,
    RawDistances,
    MetaLeak,
    ChargeOneInFour,
)
