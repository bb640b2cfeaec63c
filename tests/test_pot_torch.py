"""POT without torch (testbed.ot.NO_TORCH, set by the testbed command and this suite) and its torch
backend registered where a solve needs it (testbed.ot.pot_on_torch)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHECK = """
import sys
import numpy as np
import ot
assert "torch" not in sys.modules, "import ot imported torch"
import torch
try:
    ot.emd2(torch.ones(2) / 2, torch.ones(2) / 2, torch.ones(2, 2))
except ValueError as exc:
    print("before:", exc)
from testbed.ot import pot_on_torch
assert pot_on_torch() is ot
pot_on_torch()  # once only
rng = np.random.default_rng(0)
X, Y = rng.normal(size=(5, 2)), rng.normal(size=(4, 2))
a, b = np.full(5, 0.2), np.full(4, 0.25)
Z = torch.tensor(X, requires_grad=True)
cost = ot.emd2(torch.tensor(a), torch.tensor(b), ot.dist(Z, torch.tensor(Y)))
cost.backward()
np.testing.assert_allclose(float(cost), ot.emd2(a, b, ot.dist(X, Y)), rtol=1e-12)
assert Z.grad is not None and bool(torch.isfinite(Z.grad).all())
print("solved on torch")
"""


def test_pot_imported_without_torch_solves_on_torch_tensors_once_registered():
    got = subprocess.run(
        [sys.executable, "-c", CHECK],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "POT_BACKEND_DISABLE_PYTORCH": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert got.returncode == 0, got.stdout + got.stderr
    assert "before: Unknown type of non implemented backend" in got.stdout, got.stdout
    assert "solved on torch" in got.stdout
