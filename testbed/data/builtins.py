"""The built-in datasets and partitioners: importing this module registers all of them.

The registries (:mod:`testbed.registry`) import it on first use. Each module below registers
its own plugins and imports only :mod:`testbed.data.datasets` and :mod:`testbed.data.partitions`
(which imports no other data module), so the data modules form no import circle.
"""

from testbed.data import (  # noqa: F401  (registration)
    datasets,
    distill,
    files,
    own_text,
    partitions,
    text,
)

__all__: list[str] = []
