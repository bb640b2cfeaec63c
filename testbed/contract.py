"""The plugin contract: every optional hook is declared once, as a member of its kind's base
class with a default (:class:`protocols.Protocol`, :class:`attacks.Attack`,
:class:`defenses.Defense`, :class:`testbed.data.datasets.DatasetPlugin`, ...), and the testbed
reads hooks only through those declarations — never through ``getattr(plugin, "name", default)``,
which would silently ignore a misspelt one.

Registration (:meth:`testbed.registry.Registry.register`) and the contract kit
(:mod:`testbed.testing`) refuse a plugin class that defines a public name close to a declared
hook but not equal to it (``knob_param`` for ``knob_params``), with the suggestion; other
helper names of a plugin's own are its business.
"""

from __future__ import annotations

import difflib

from testbed.errors import TestbedError

__all__ = ["MisspeltHookError", "declared_hooks", "misspelt_hooks", "check_hooks", "provides"]

#: how close a name must be to a declared hook to count as its misspelling (difflib ratio):
#: catches one or two letters dropped, doubled or swapped in names of 8+ letters
CUTOFF = 0.85


class MisspeltHookError(TestbedError):
    """A plugin class defines a name that looks like a misspelt hook of its base class."""


def declared_hooks(base: type) -> frozenset[str]:
    """The public names of ``base``: its hooks, attributes and methods, inherited ones included."""
    return frozenset(n for n in dir(base) if not n.startswith("_"))


def misspelt_hooks(cls: type, base: type) -> list[tuple[str, str]]:
    """``(name, hook)`` for each public name the plugin's own classes define that is not a member
    of ``base`` but is within :data:`CUTOFF` of one of its hooks."""
    hooks = declared_hooks(base)
    own: set[str] = set()
    for klass in cls.__mro__:
        if klass is base or issubclass(base, klass):
            continue  # the base and what it inherits declare, they do not misspell
        own.update(n for n in vars(klass) if not n.startswith("_"))
    out = []
    for name in sorted(own - hooks):
        close = difflib.get_close_matches(name, sorted(hooks), n=1, cutoff=CUTOFF)
        if close:
            out.append((name, close[0]))
    return out


def check_hooks(cls: type, base: type, kind: str) -> None:
    """Refuse ``cls`` (one line) when it defines a name that looks like a misspelt hook."""
    bad = misspelt_hooks(cls, base)
    if bad:
        name, hook = bad[0]
        raise MisspeltHookError(
            f"{kind} plugin {cls.__qualname__}: {name!r} is not a hook of "
            f"{base.__module__.split('._')[0]}.{base.__qualname__}; did you mean {hook!r}? "
            f"(a misspelt hook would be silently ignored; rename a helper of your own that "
            f"merely looks like one)"
        )


def provides(obj: object, hook: str) -> bool:
    """Whether ``obj`` (a plugin class or instance) overrides the default of ``hook``, declared
    by the topmost class of its hierarchy that defines it."""
    cls = obj if isinstance(obj, type) else type(obj)
    owners = [k for k in cls.__mro__ if hook in vars(k)]
    if not owners:
        raise AttributeError(f"{cls.__qualname__} declares no hook {hook!r}")
    return owners[0] is not owners[-1]
