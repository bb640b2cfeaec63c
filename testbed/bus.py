"""Import path kept for plugins written before the layout by stage: the message bus and what it
carries now live in :mod:`testbed.exchange` (``testbed.exchange.bus``); a plugin imports them
from :mod:`testbed.api`. Importing this module warns (``DeprecationWarning``)."""

import warnings

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

warnings.warn(
    "testbed.bus is deprecated: import SERVER, Bus, View and PublicInfo from testbed.api",
    DeprecationWarning,
    stacklevel=2,
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
