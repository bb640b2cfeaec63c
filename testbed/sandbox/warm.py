"""Imported last by the attacks' forkserver (:func:`testbed.sandbox.isolation._context`): asks,
once and outside the sandbox, the questions about this machine that libraries the attacks use
ask, and that the sandbox hides. Every attack process forks from the server and inherits the
answers; nothing here reads private data.

- joblib's loky counts physical cores by running ``lscpu`` (scikit-learn asks, for example in
  ``NearestNeighbors``). Inside the sandbox ``lscpu`` sees no CPU, so loky found "0 physical
  cores" and printed a ``UserWarning`` and a traceback on the user's screen for every attack
  that used scikit-learn's neighbours (``support_membership``, say). Asked here, the count is
  cached in loky's module and the attack never runs ``lscpu``.
"""

from __future__ import annotations

import sys
import warnings


def warm() -> None:
    if "joblib" not in sys.modules:  # the attacks do not use it: nothing to ask
        return
    try:
        from joblib import cpu_count  # joblib: only if an attack loaded it

        with warnings.catch_warnings():  # where lscpu fails here too, loky caches "not found"
            warnings.simplefilter("ignore")  # and falls back to the logical count, silently
            cpu_count(only_physical_cores=True)
    except Exception:
        pass


warm()
