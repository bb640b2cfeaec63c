"""Pictures of leakage: small arrays the report draws, saved beside a run's results.

The scorer holds the ground truth; the report renders only. So, on the scoring side, each
attack row gets a few arrays that show what the attack recovered, written to ``leakage.npz``
in the run directory (atomically, after the attacks ran):

- ``points``: the private rows best recovered (up to :data:`PAIRS`; ``row``: their indices among
  the target's rows) and, for each, the nearest reconstructed point; a 2-D PCA projection (fitted on the private rows) of up to
  :data:`CLOUD` private and reconstructed points; ``image_side`` = 8 for the 8x8 digits;
- ``scores``: the membership ROC curve (sklearn's ``roc_curve``) of the attack and, when it has
  one, of its prior-only baseline; the :data:`PAIRS` candidates of highest score (``top_index``,
  ``top_score``) and whether each is a member (``top_member``);
- ``words``: the retrieved words and whether each is in the target's private document;
- ``histogram``: the inferred and the true label histogram.

Keys are ``"<row>/<field>"`` with ``row`` the index of the attack row in ``results["attacks"]``.
The file holds a handful of private rows of the target, as the report shows them: treat a run
directory as the auditor's, not as something to publish.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np

from testbed.exchange.bus import atomic_write_bytes
from testbed.scoring.metrics import membership_labels

__all__ = ["CLOUD", "PAIRS", "leakage_evidence", "load_evidence", "write_evidence"]

#: private rows shown beside their nearest reconstruction
PAIRS = 8
#: points of each cloud in the 2-D projection (evenly strided subsample)
CLOUD = 400


def _stride(n: int, k: int) -> np.ndarray:
    return np.unique(np.linspace(0, n - 1, num=min(n, k)).round().astype(int))


def _points(out, X: np.ndarray, dataset: str) -> dict[str, np.ndarray]:
    from sklearn.decomposition import PCA  # sklearn: report and transcript import scoring

    P = np.asarray(out.points, dtype=np.float64)
    X = np.asarray(X, dtype=np.float64)
    if P.ndim != 2 or X.ndim != 2 or P.shape[1] != X.shape[1] or not len(P) or not len(X):
        return {}
    # nearest reconstruction of every private row (squared distances, chunked for memory)
    best = np.empty(len(X))
    arg = np.empty(len(X), dtype=int)
    for s in range(0, len(X), 512):
        d2 = ((X[s : s + 512, None, :] - P[None, :, :]) ** 2).sum(-1)
        arg[s : s + 512] = d2.argmin(1)
        best[s : s + 512] = d2.min(1)
    order = np.argsort(best, kind="stable")[:PAIRS]
    ev = {
        "orig": X[order],
        "recon": P[arg[order]],
        "dist": np.sqrt(best[order]),
        "row": order,  # each one's index among the target's rows (the report's record table)
    }
    if X.shape[1] >= 2 and len(X) >= 2:
        pca = PCA(n_components=2, svd_solver="full").fit(X)
        ev["cloud_private"] = pca.transform(X[_stride(len(X), CLOUD)])
        ev["cloud_recon"] = pca.transform(P[_stride(len(P), CLOUD)])
        ev["pca_explained"] = pca.explained_variance_ratio_
    if dataset == "digits" and X.shape[1] == 64:
        ev["image_side"] = np.array(8)
    return ev


def _scores(out, baseline, truth) -> dict[str, np.ndarray]:
    from sklearn.metrics import roc_curve  # sklearn: report and transcript import scoring

    if "candidates" in (out.meta or {}):
        member = membership_labels(out.meta["candidates"], out.target, truth)
    else:
        member = truth.membership.get(out.target)
    if member is None:
        return {}
    member = np.asarray(member, dtype=bool)
    if member.all() or not member.any():
        return {}
    ev = {}
    fpr, tpr, _ = roc_curve(member, np.asarray(out.scores, dtype=np.float64))
    ev["fpr"], ev["tpr"] = fpr, tpr
    if baseline is not None and baseline.scores is not None:
        bf, bt, _ = roc_curve(member, np.asarray(baseline.scores, dtype=np.float64))
        ev["baseline_fpr"], ev["baseline_tpr"] = bf, bt
    # the candidates the attack is surest of, with their truth (the report's record table)
    scores = np.asarray(out.scores, dtype=np.float64)
    top = np.argsort(-scores, kind="stable")[:PAIRS]
    ev["top_index"], ev["top_score"], ev["top_member"] = top, scores[top], member[top]
    ev["n_members"] = np.array(int(member.sum()))
    ev["n_nonmembers"] = np.array(int((~member).sum()))
    return ev


def _words(out, truth) -> dict[str, np.ndarray]:
    tokens = truth.tokens
    party = truth.parties[out.target]
    if tokens is None or party.source_index is None or not out.words:
        return {}
    doc = {tokens[i] for i in party.source_index}
    words = [str(w) for w in out.words]
    return {"words": np.array(words, dtype=str), "hits": np.array([w in doc for w in words])}


def _histogram(out, truth) -> dict[str, np.ndarray]:
    y = truth.parties[out.target].y
    if y is None or out.histogram is None:
        return {}
    h = np.asarray(out.histogram, dtype=np.float64)
    true = np.bincount(np.asarray(y, dtype=int), minlength=len(h)).astype(np.float64)
    return {"inferred": h, "true": true[: len(h)] / max(true.sum(), 1.0)}


def leakage_evidence(row: int, out, baseline, truth, dataset: str = "") -> dict[str, np.ndarray]:
    """The arrays the report draws for one scored attack output (scoring side only: ``truth``
    is the run's :class:`~testbed.scoring.truth.GroundTruth`, ``dataset`` the dataset's name)."""
    if out.kind == "points" and out.points is not None:
        ev = _points(out, truth.parties[out.target].X, dataset)
    elif out.kind == "scores" and out.scores is not None:
        ev = _scores(out, baseline, truth)
    elif out.kind == "words":
        ev = _words(out, truth)
    elif out.kind == "histogram":
        ev = _histogram(out, truth)
    else:
        ev = {}
    return {f"{row}/{k}": np.asarray(v) for k, v in ev.items()}


def write_evidence(directory: str | Path, arrays: dict[str, np.ndarray]) -> None:
    """Write ``leakage.npz`` atomically (nothing when no attack produced a picture)."""
    if not arrays:
        return
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    atomic_write_bytes(Path(directory) / "leakage.npz", buf.getvalue())


def load_evidence(directory: str | Path) -> dict[int, dict[str, Any]]:
    """``leakage.npz`` of a run directory -> {attack row: {field: array}} ({} if absent)."""
    path = Path(directory) / "leakage.npz"
    if not path.is_file():
        return {}
    out: dict[int, dict[str, Any]] = {}
    with np.load(path, allow_pickle=False) as z:
        for key in z.files:
            row, field = key.split("/", 1)
            out.setdefault(int(row), {})[field] = z[key]
    return out
