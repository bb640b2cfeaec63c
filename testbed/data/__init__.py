"""Data: datasets, partitions, transforms, text, OTDD features and the public prior.

``from testbed.data import PartyData, Dataset`` keeps working for plugins written before the
layout by stage; the definitions live in :mod:`testbed.data.datasets`."""

from testbed.data.datasets import Dataset, DatasetPlugin, PartyData

__all__ = ["Dataset", "DatasetPlugin", "PartyData"]
