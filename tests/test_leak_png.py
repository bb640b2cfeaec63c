"""Static PNG renditions of the leakage pictures (testbed.report.leak_png)."""

from __future__ import annotations

import io

import numpy as np
import pytest

from testbed.report import leak_png


def _image(png: bytes) -> np.ndarray:
    import matplotlib.image as mpimg

    assert png.startswith(b"\x89PNG")
    return mpimg.imread(io.BytesIO(png), format="png")


def _evidence(kind: str) -> dict:
    rng = np.random.default_rng(0)
    if kind == "digits":
        orig = rng.uniform(0, 1, size=(4, 64))
        return {"orig": orig, "recon": orig + 0.1, "dist": np.full(4, 0.8), "image_side": 8}
    if kind == "cloud":
        return {
            "cloud_private": rng.normal(size=(50, 2)),
            "cloud_recon": rng.normal(size=(20, 2)),
            "pca_explained": np.array([0.4, 0.2]),
        }
    if kind == "roc":
        f = np.linspace(0, 1, 11)
        return {
            "fpr": f,
            "tpr": np.sqrt(f),
            "baseline_fpr": f,
            "baseline_tpr": f,
            "n_nonmembers": 40,
        }
    if kind == "histogram":
        return {"inferred": np.array([0.5, 0.3, 0.2]), "true": np.array([0.6, 0.2, 0.2])}
    return {"words": np.array(["a", "river", "bank", "x"]), "hits": np.array([0, 1, 1, 0], bool)}


@pytest.mark.parametrize(
    "fn,kind",
    [
        (leak_png.digits_png, "digits"),
        (leak_png.cloud_png, "cloud"),
        (leak_png.roc_png, "roc"),
        (leak_png.histogram_png, "histogram"),
        (leak_png.words_png, "words"),
    ],
)
def test_each_leakage_picture_is_a_drawn_png(fn, kind):
    # Execute
    img = _image(fn(_evidence(kind), f"{kind} — caption"))
    # Assert: a real picture, not a blank canvas
    assert img.shape[0] > 50 and img.shape[1] > 100
    assert np.ptp(img[..., :3]) > 0.3


def test_digits_png_shows_the_pixels():
    # Prepare: two runs differing only in one reconstructed digit
    ev = _evidence("digits")
    other = {**ev, "recon": ev["recon"].copy()}
    other["recon"][0] = 0.0
    # Execute / Assert: the picture changes with the data it shows
    assert not np.array_equal(
        _image(leak_png.digits_png(ev, "t")), _image(leak_png.digits_png(other, "t"))
    )
