"""What several pages share: the repository root and the digits data."""

from __future__ import annotations

from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def digits() -> np.ndarray:
    from sklearn.datasets import load_digits

    return load_digits().data.astype(np.float64)
