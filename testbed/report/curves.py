"""Which curve of a trade-off figure a setting is drawn on: settings of one protocol and one
defense that differ only by their target epsilon (a swept ``target_epsilon``, in a defense's
label or in the protocol's) form one curve, each point labelled with its epsilon, so a privacy
frontier reads as a curve per mechanism (``scenarios/frontier_dp.yaml``: tight and worst-case
Gaussian noise beside the DP baselines). Every other setting keeps its protocol's series."""

from __future__ import annotations

import math
import re

__all__ = ["curve_of", "eps_value"]

_EPS = re.compile(r"target_epsilon=([^,)]+)")
# the swept target epsilon, with the comma that joins it to its neighbours
_EPS_PARAM = re.compile(r",?target_epsilon=[^,)]+|target_epsilon=[^,)]+,?")
# whole-spec fields a point is labelled by: shown by their value alone in a curve's name
_SPEC_FIELD = re.compile(r"(?:^|(?<=, ))(?:data|defenses)=")


def _dataset_only(label: str) -> str:
    """A data spec's label (``{dataset=digits,parties=...}``, nested braces and all) shortened
    to its dataset's name (``digits``)."""
    out, i = [], 0
    while True:
        j = label.find("{dataset=", i)
        if j < 0:
            return "".join(out) + label[i:]
        depth, k = 0, j
        for k in range(j, len(label)):
            depth += {"{": 1, "}": -1}.get(label[k], 0)
            if depth == 0:
                break
        name = re.match(r"\{dataset=([A-Za-z0-9_]+)", label[j:]).group(1)
        out.append(label[i:j] + name)
        i = k + 1


def curve_of(key: tuple[str, str]) -> tuple[str, str | None]:
    """(curve name, epsilon label) of a setting ``(series, point)``: the series itself and None
    when neither names a ``target_epsilon``; else the series and point without it (a data
    spec shown by its dataset's name) and ``"ε=<value>"``."""
    series, point = key
    m = _EPS.search(point) or _EPS.search(series)
    if not m:
        return series, None

    def strip(s: str) -> str:
        return _EPS_PARAM.sub("", s).replace("()", "")

    name = strip(series)
    rest = _dataset_only(_SPEC_FIELD.sub("", strip(point)))
    if rest not in ("", "base", "none"):
        name += f" · {rest}"
    return name, f"ε={m.group(1)}"


def eps_value(label: str | None) -> float:
    """The number of an epsilon label (``ε=0.5`` -> 0.5); NaN for none."""
    try:
        return float(label.split("=", 1)[1]) if label else math.nan
    except ValueError:
        return math.nan
