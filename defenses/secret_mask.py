"""Secret isometry masking of sent measures (our defense, aimed at TriangleWad's server).

Every defended measure's support is mapped :math:`x \\mapsto Q x + b` before it leaves the party,
with :math:`Q` a random orthogonal matrix (QR of a Gaussian matrix, signs fixed) and :math:`b` a
random shift, both derived from a secret ``key`` that the server never learns (in a deployment: a
key the clients agree on among themselves; the testbed keeps it in the defense's config, which no
attack receives).

Who knows what decides whether it works:

- ``mode: shared`` — the clients apply the *same* :math:`(Q, b)`. The squared-Euclidean cost is
  invariant under a common isometry, so the server's :math:`W(Q\\eta_\\mu + b, Q\\eta_\\nu + b) =
  W(\\eta_\\mu, \\eta_\\nu)` — TriangleWad's estimate, and its detection scores, are unchanged
  (tested to 1e-9). The server no longer sees :math:`\\eta` in :math:`\\gamma`'s frame, so the
  measure inversion that recovers every row (papers/README.md, fact 5) no longer lines up; what is
  left is a *blind* inversion that must estimate :math:`(Q, b)` from the masked measures and public
  information (``attacks/blind_mask_inversion.py``).
- ``mode: per_party`` — each client its own :math:`(Q_p, b_p)`. The server then compares measures
  in different frames and the distance is meaningless: this mode **fails** on accuracy and is
  shipped to show it.

No formal privacy claim (nothing is recorded in the ledger): the mask hides the frame, not the
shape, and its protection is exactly what the strongest blind attack fails to recover.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Literal

import numpy as np
from pydantic import Field

from defenses._base import MEASURE_PROTOCOLS, Defense, DefenseConfig
from testbed.exchange.bus import Envelope
from testbed.exchange.ledger import PrivacyLedger
from testbed.measure import Measure
from testbed.registry import DEFENSES

__all__ = ["SecretIsometryMask", "SecretIsometryMaskConfig", "secret_isometry"]


def secret_isometry(
    key: int, d: int, shift_scale: float, who: str = ""
) -> tuple[np.ndarray, np.ndarray]:
    """``(Q, b)``: a Haar-random orthogonal d x d matrix and a N(0, shift_scale^2 I) shift, from
    ``key`` (and ``who`` for per-party masks)."""
    h = hashlib.sha256(f"{int(key)}|{who}|{int(d)}".encode()).digest()
    g = np.random.default_rng(int.from_bytes(h[:8], "little"))
    A = g.normal(size=(d, d))
    Q, R = np.linalg.qr(A)
    Q = Q * np.sign(np.diag(R))  # Haar measure: fix the signs of the QR factorisation
    return Q, g.normal(0.0, shift_scale, size=d)


class SecretIsometryMaskConfig(DefenseConfig):
    kinds: list[str] = Field(
        default_factory=lambda: ["triangle_wad.eta"],
        description="message kinds (globs) whose measures are masked",
    )
    mode: Literal["shared", "per_party"] = Field(
        "shared", description="one mask for all clients (W preserved) or one per client (fails)"
    )
    key: int = Field(0, ge=0, description="the clients' secret (never sent, not public)")
    shift_scale: float = Field(10.0, ge=0, description="std of the secret shift b")


@DEFENSES.register
class SecretIsometryMask(Defense):
    """Map every sent support x -> Qx + b with a secret orthogonal Q and shift b (no DP claim)."""

    name = "secret_isometry_mask"
    Config = SecretIsometryMaskConfig
    #: triangle_wad first (the contract fixture); it masks any sent measure (``kinds``)
    protocols = ("triangle_wad", *(p for p in MEASURE_PROTOCOLS if p != "triangle_wad"))
    contract_scenario = "contract_tiny_triangle_wad.yaml"

    def on_send(
        self, env: Envelope, rng: np.random.Generator, ledger: PrivacyLedger | None
    ) -> Envelope:
        c = self.config
        who = env.sender if c.mode == "per_party" else ""

        def rec(p):
            if isinstance(p, Measure):
                Q, b = secret_isometry(c.key, p.d, c.shift_scale, who)
                return Measure(p.support @ Q.T + b, p.weights)
            if isinstance(p, Mapping):
                return {k: rec(v) for k, v in p.items()}
            return p

        return self.marked(env, rec(env.payload))
