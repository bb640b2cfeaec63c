"""Static renditions (300 dpi PNG, PDF, SVG) of the leakage pictures (testbed.report.leak_png)."""

from __future__ import annotations

import io

import numpy as np
import pytest

from testbed.report import leak_png


def _image(files: dict[str, bytes]) -> np.ndarray:
    """The PNG of a rendered figure; its PDF and SVG twins are vector files beside it."""
    import matplotlib.image as mpimg

    png = files["png"]
    assert png.startswith(b"\x89PNG")
    assert files["pdf"].startswith(b"%PDF") and b"<svg" in files["svg"][:2000]
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
    # Assert: a real picture at print resolution, not a blank canvas
    assert img.shape[0] > 300 and img.shape[1] > 1200  # 300 dpi
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


def test_a_figure_renders_to_the_same_bytes_twice():
    # a re-render of an unchanged run leaves plots/ byte-identical (no dates in PDF or SVG)
    ev = _evidence("histogram")
    assert leak_png.histogram_png(ev, "t") == leak_png.histogram_png(ev, "t")
