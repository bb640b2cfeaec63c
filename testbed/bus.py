"""Import path kept for plugins written before the layout by stage: the message bus and what it
carries now live in :mod:`testbed.exchange` (``testbed.exchange.bus``)."""

from testbed.exchange.bus import (
    EAVESDROPPER,
    SERVER,
    Bus,
    Envelope,
    PrivacyGuard,
    PublicInfo,
    Transcript,
    View,
)

__all__ = [
    "EAVESDROPPER",
    "SERVER",
    "Bus",
    "Envelope",
    "PrivacyGuard",
    "PublicInfo",
    "Transcript",
    "View",
]
