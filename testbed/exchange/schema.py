"""The typed channel: what a protocol may send and release, declared up front.

A protocol declares a closed set of message kinds, each with the schema of its payload and
``meta`` (:class:`Message`), and the schema of what its result releases (``released``: its
estimates, history, outputs, diagnostics and detection scores). The bus checks every message
against it at send time (:meth:`Channel.check`), and the run checks the result
(:meth:`Channel.check_released`): anything outside the schema (a free string, an undeclared
key or kind, bytes, a mapping key that is not a declared name, a dtype or a length the schema
does not allow) is refused on one line naming the protocol, the kind and the field, before a
defense, the guard or the transcript sees it. Every number that leaves a party is then in a
numeric field (an array, a scalar, a Measure) that the guard reads whole.

The schema language (fields nest; a shape is a tuple of dimensions, each an ``int``, a name
or ``"*"``):

- :class:`Num`: one number (``"f"`` real, ``"i"`` integer, ``"b"`` boolean);
- :class:`Array`: a numeric array (dtype kind, shape rule); a list of numbers is read as one;
- :class:`MeasureOf`: a Measure (atoms, dimension);
- :class:`Choice`: a short string from a declared set;
- :class:`Record`: a mapping with declared keys only (a key may name every party at once:
  ``"distance_{party}"``); :class:`PerParty`: a mapping keyed by the run's participants;
- :class:`Party` / :class:`Parties`: one participant's name, a list of them;
- :class:`Maybe`: ``None`` or the field.

A dimension's name is ``d`` (the data's dimension), ``parties`` (how many), ``n_sender`` or
``n_receiver`` (that party's public number of rows), or an integer parameter of the protocol's
config (dotted: ``fedwad.support_size``); ``"*"`` is any length (the protocol chooses it:
docs/reference/trust.md counts it among what remains possible).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from testbed.errors import PluginFault
from testbed.measure import Measure

__all__ = [
    "Array",
    "Channel",
    "Choice",
    "Maybe",
    "MeasureOf",
    "Message",
    "MessageSchemaError",
    "Num",
    "Parties",
    "Party",
    "PerParty",
    "Record",
    "Text",
]

_INT64 = 1 << 63


class MessageSchemaError(PluginFault):
    """A protocol sent or released something its declared schema does not allow: the
    protocol's fault at run time (exit 1), one line naming protocol, kind and field."""


class _Bad(Exception):
    """A value outside its field, raised from inside a check; ``path`` is filled on the way
    out."""

    def __init__(self, path: str, why: str):
        super().__init__(why)
        self.path, self.why = path, why


def _what(x) -> str:
    """A value's type, never the value itself (a refusal must not print what it refuses)."""
    if isinstance(x, np.ndarray):
        return f"an array of dtype {x.dtype.str!r} and shape {x.shape}"
    return f"a value of type {type(x).__name__}"


# ----------------------------------------------------------------------------- fields
class Field:
    """One node of a schema. ``check(x, ctx, path)`` raises :class:`_Bad` when ``x`` is not
    allowed; ``ctx`` holds the run's names and dimensions and the message's routing."""

    def check(self, x, ctx: _Ctx, path: str) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


_KINDS = {"f": "fiu", "i": "iu", "b": "b", "c": "c"}
_KIND_NAMES = {"f": "real", "i": "integer", "b": "boolean", "c": "complex"}


def _kind(kind: str) -> str:
    if not kind or any(k not in _KINDS for k in kind):
        raise ValueError(f"schema: dtype kinds {kind!r} are not among {', '.join(_KINDS)}")
    return kind


def _accepts(kind: str) -> str:
    """The numpy dtype kinds a declared kind (or several, e.g. ``"fc"``) accepts."""
    return "".join(_KINDS[k] for k in kind)


def _kind_name(kind: str) -> str:
    return " or ".join(_KIND_NAMES[k] for k in kind)


@dataclass(frozen=True)
class Num(Field):
    """One number: ``"f"`` real (an integer is accepted), ``"i"`` integer, ``"b"`` boolean."""

    kind: str = "f"

    def __post_init__(self):
        if len(_kind(self.kind)) != 1:
            raise ValueError("schema: a Num has one kind")

    def check(self, x, ctx, path):
        t = type(x)
        if t is float and self.kind == "f":  # the common case first
            return
        if isinstance(x, (bool, np.bool_)):
            if self.kind == "b":
                return
        elif isinstance(x, (int, np.integer)):
            if self.kind in "fi":
                if isinstance(x, int) and not -_INT64 <= x < _INT64:
                    raise _Bad(path, "an integer wider than 64 bits")
                return
        elif isinstance(x, (float, np.floating)):
            if self.kind == "f":
                return
        elif isinstance(x, (complex, np.complexfloating)) and self.kind == "c":
            return
        raise _Bad(path, f"{_what(x)}, not a {_KIND_NAMES[self.kind]} number")


def _dims(shape) -> tuple | None:
    if shape is None:
        return None
    out = []
    for s in shape:
        if not isinstance(s, (int, str)) or isinstance(s, bool):
            raise ValueError(f"schema: a dimension is an int, a name or '*', got {s!r}")
        out.append(s)
    return tuple(out)


def _check_shape(shape: tuple, rule: tuple | None, ctx: _Ctx, path: str) -> None:
    if rule is None or ctx.loose_shapes:
        return
    if len(shape) != len(rule):
        raise _Bad(path, f"{len(shape)} dimensions, the schema declares {len(rule)}")
    for i, (n, r) in enumerate(zip(shape, rule)):
        if r == "*":
            continue
        want = r if isinstance(r, int) else ctx.dim(r)
        if n != want:
            raise _Bad(path, f"length {n} on axis {i}, the schema declares {r!r} = {want}")


@dataclass(frozen=True)
class Array(Field):
    """A numeric array: dtype ``kind`` (``"f"`` real, integers accepted; ``"i"``; ``"b"``;
    ``"c"``; several at once: ``"fc"``) and ``shape`` (a tuple of dimensions, or None: any shape). A list or tuple of
    numbers is read as the array it makes (a released history); ragged or non-numeric lists
    are refused."""

    kind: str = "f"
    shape: tuple | None = ("*",)

    def __post_init__(self):
        _kind(self.kind)
        object.__setattr__(self, "shape", _dims(self.shape))

    def check(self, x, ctx, path):
        if isinstance(x, (list, tuple)):
            try:
                a = np.asarray(x)
            except (ValueError, TypeError, OverflowError):
                raise _Bad(path, "a ragged list, not an array") from None
            if a.dtype.kind == "O":
                raise _Bad(path, "a list of mixed or nested values, not an array of numbers")
        elif isinstance(x, np.ndarray):
            a = x
        else:
            raise _Bad(path, f"{_what(x)}, not an array")
        if a.dtype.kind not in _accepts(self.kind) or a.dtype.fields is not None:
            raise _Bad(path, f"{_what(a)}, not {_kind_name(self.kind)}")
        if a.dtype.kind == "u" and a.dtype.itemsize > 8:  # pragma: no cover - numpy has none
            raise _Bad(path, f"{_what(a)}")
        _check_shape(a.shape, self.shape, ctx, path)


@dataclass(frozen=True)
class MeasureOf(Field):
    """A Measure of ``atoms`` atoms in dimension ``dim`` (each a dimension of a shape rule)."""

    atoms: int | str = "*"
    dim: int | str = "d"

    def check(self, x, ctx, path):
        if not isinstance(x, Measure):
            raise _Bad(path, f"{_what(x)}, not a Measure")
        try:
            _check_shape(x.support.shape, (self.atoms, self.dim), ctx, path)
        except _Bad as bad:
            bad.path = _join(bad.path, "support")
            raise


@dataclass(frozen=True)
class Choice(Field):
    """A string from a declared set (declared with the class, before any data exists)."""

    values: tuple[str, ...]

    def __init__(self, *values: str):
        if not values or not all(isinstance(v, str) for v in values):
            raise ValueError("schema: Choice takes one or more strings")
        object.__setattr__(self, "values", tuple(values))

    def check(self, x, ctx, path):
        if type(x) is not str and not isinstance(x, np.str_):
            raise _Bad(path, f"{_what(x)}, not one of the declared strings")
        if str(x) not in self.values:
            raise _Bad(path, f"a string not among the {len(self.values)} declared")


@dataclass(frozen=True)
class Party(Field):
    """One participant's name (a party of the run, or a sender the protocol declares)."""

    def check(self, x, ctx, path):
        if type(x) is not str or x not in ctx.names:
            raise _Bad(
                path, f"{_what(x) if type(x) is not str else 'a string'} that names no participant"
            )


@dataclass(frozen=True)
class Parties(Field):
    """A list of participants' names."""

    def check(self, x, ctx, path):
        if not isinstance(x, (list, tuple)):
            raise _Bad(path, f"{_what(x)}, not a list of names")
        for i, v in enumerate(x):
            _within(Party(), v, ctx, path, i)


@dataclass(frozen=True)
class Maybe(Field):
    """``None``, or a value of ``inner``."""

    inner: Field

    def check(self, x, ctx, path):
        if x is not None:
            self.inner.check(x, ctx, path)


_PARTY = "{party}"


class Record(Field):
    """A mapping whose keys are declared names (string keys only; a key may be left out). A
    name holding ``{party}`` stands for one key per participant (``"distance_{party}"``)."""

    def __init__(self, fields: Mapping[str, Field] | None = None, /, **kw: Field):
        fields = {**(fields or {}), **kw}
        for k, v in fields.items():
            if not isinstance(k, str) or not isinstance(v, Field):
                raise ValueError(f"schema: Record field {k!r} must be a str naming a Field")
        # read-only once made: a protocol cannot widen its declared schema while it runs
        templates = tuple(
            (k.split(_PARTY, 1)[0], k.split(_PARTY, 1)[1], v)
            for k, v in fields.items()
            if _PARTY in k
        )
        object.__setattr__(self, "fields", MappingProxyType(dict(fields)))
        object.__setattr__(self, "templates", templates)

    def __setattr__(self, name, value):
        raise AttributeError("a Record is read-only")

    def __repr__(self):
        return f"Record({self.fields!r})"

    def __eq__(self, other):
        return isinstance(other, Record) and other.fields == self.fields

    __hash__ = None  # type: ignore[assignment]

    def field_of(self, k: str, ctx: _Ctx) -> Field | None:
        f = self.fields.get(k)
        if f is None:
            for pre, suf, tf in self.templates:
                if k.startswith(pre) and k.endswith(suf) and len(k) > len(pre) + len(suf):
                    if k[len(pre) : len(k) - len(suf)] in ctx.names:
                        return tf
        return f

    def check(self, x, ctx, path):
        t = type(x)  # a frozen payload's mapping first: an ABC's isinstance costs more
        if t is not MappingProxyType and t is not dict and not isinstance(x, Mapping):
            raise _Bad(path, f"{_what(x)}, not a mapping")
        fields = self.fields
        for k, v in x.items():
            f = fields.get(k) if type(k) is str else None
            if f is None:
                if type(k) is not str:
                    raise _Bad(path, f"a key of type {type(k).__name__}, not a declared name")
                f = self.field_of(k, ctx)
                if f is None:
                    raise _Bad(_join(path, _safe(k)), "not a declared name" + _declared(fields))
            try:
                f.check(v, ctx, "")
            except _Bad as bad:
                bad.path = _join(_join(path, k), bad.path)
                raise


@dataclass(frozen=True)
class PerParty(Field):
    """A mapping keyed by participants' names, each value a ``value``."""

    value: Field

    def check(self, x, ctx, path):
        if not isinstance(x, Mapping):
            raise _Bad(path, f"{_what(x)}, not a mapping by participant")
        for k, v in x.items():
            if type(k) is not str or k not in ctx.names:
                raise _Bad(path, "a key that names no participant")
            _within(self.value, v, ctx, path, k)


#: a released text (``mode``, ``deviations``): no digit but ASCII's (a full-width or
#: Arabic-Indic digit, a superscript), no ``_`` beside a digit, no control character: every
#: number Python would read in it is one the guard's reading of text finds
_UNDERSCORED = re.compile(r"\d_|_\d")


def _plain_text(x: str) -> bool:
    for c in x:
        if c.isnumeric() and not ("0" <= c <= "9"):
            return False
        if not c.isprintable():
            return False
    return not _UNDERSCORED.search(x)


@dataclass(frozen=True)
class Text(Field):
    """Released prose (a result's ``mode`` and ``deviations``, never a message): at most
    ``max_len`` printable characters, numbers only in ASCII digits and never with ``_`` beside a
    digit; the numbers written in it are read by the guard (docs/reference/trust.md)."""

    max_len: int = 400

    def check(self, x, ctx, path):
        if type(x) is not str:
            raise _Bad(path, f"{_what(x)}, not text")
        if len(x) > self.max_len or not _plain_text(x):
            raise _Bad(
                path, "text too long, with a non-ASCII digit, a control character or '_' by a digit"
            )


def _within(f: Field, v, ctx, path: str, key) -> None:
    """``f.check`` of the item ``key`` of the value at ``path``; the item's path is written only
    when it is refused (a check runs for every message: no string is built on the way)."""
    try:
        f.check(v, ctx, "")
    except _Bad as bad:
        bad.path = _join(_join(path, str(key)), bad.path)
        raise


def _join(a: str, b: str) -> str:
    return f"{a}/{b}" if a and b else a or b


def _safe(k: str) -> str:
    """A refused key, shown only when it is a plain short identifier (else ``<key>``): the
    refusal must not print what a protocol tried to smuggle."""
    return k if re.fullmatch(r"[A-Za-z_][A-Za-z_.]{0,39}", k) else "<key>"


def _declared(fields: Mapping[str, Field]) -> str:
    names = sorted(fields)
    return f" (declared: {', '.join(names)})" if names else " (none declared)"


# ----------------------------------------------------------------------------- messages
@dataclass(frozen=True)
class Message:
    """One kind of message: its ``payload`` field and its ``meta`` fields (numbers, booleans,
    choices or arrays; none by default)."""

    payload: Field
    meta: Mapping[str, Field] = field(default_factory=dict)

    def __post_init__(self):
        if not isinstance(self.payload, Field):
            raise ValueError("schema: Message payload must be a Field")
        for k, v in self.meta.items():
            if not isinstance(v, (Num, Array, Choice, Maybe)):
                raise ValueError(f"schema: meta field {k!r} must be a Num, Array or Choice")
        object.__setattr__(self, "meta", Record(dict(self.meta)))


#: the ``meta`` key a defense adds (:meth:`defenses._base.Defense.marked`)
DEFENDED_BY = "defended_by"
_RESULT_FIELDS = ("estimates", "history", "outputs", "diagnostics", "detection")


@dataclass
class Channel:
    """One run's typed channel: the protocol's declared messages and releases, and the names
    and dimensions their rules refer to. Built by the testbed before the protocol runs (the
    protocol's declarations are read once, then never again)."""

    protocol: str
    messages: Mapping[str, Message]
    released: Mapping[str, Field]
    names: frozenset[str]
    defenses: frozenset[str] = frozenset()
    dims: Mapping[str, int] = field(default_factory=dict)
    rows: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, protocol, names, rows, dim: int, defenses=()) -> Channel:
        """The channel of ``protocol`` (an instance) in a run with participants ``names``,
        each party's public number of ``rows`` and data dimension ``dim``."""
        tp = type(protocol)
        messages = tp.messages  # declared by protocols.Protocol
        if not isinstance(messages, Mapping) or not messages:
            raise MessageSchemaError(
                f"protocol {tp.name!r} declares no message schema (its class attribute "
                "`messages`: kind -> Message; docs/guide/plugins.md)"
            )
        for k, m in messages.items():
            if not isinstance(k, str) or not isinstance(m, Message):
                raise MessageSchemaError(
                    f"protocol {tp.name!r}: `messages` maps each kind (a str) to a Message"
                )
        released = dict(tp.released or {})
        bad = sorted(set(released) - set(_RESULT_FIELDS))
        if bad or not all(isinstance(v, Field) for v in released.values()):
            raise MessageSchemaError(
                f"protocol {tp.name!r}: `released` maps {', '.join(_RESULT_FIELDS)} to fields"
            )
        dims = {"d": int(dim), "parties": len(rows)}
        dims.update(_config_dims(getattr(protocol, "config", None)))
        return cls(
            protocol=tp.name,
            messages=dict(messages),
            released=released,
            names=frozenset(names),
            defenses=frozenset(defenses),
            dims=dims,
            rows=dict(rows),
        )

    def _refuse(self, kind: str, bad: _Bad) -> MessageSchemaError:
        where = f" field {bad.path}" if bad.path else ""
        return MessageSchemaError(
            f"protocol {self.protocol!r}: message {kind!r}{where}: {bad.why}; refused by the "
            "declared schema (docs/guide/plugins.md)"
        )

    def check(self, sender, receiver, kind, round, meta) -> None:
        """Refuse (:class:`MessageSchemaError`) a message whose kind, routing (participants'
        names), round or meta is outside the schema (its payload: :meth:`check_payload`)."""
        if type(kind) is not str or kind not in self.messages:
            shown = kind if type(kind) is str and re.fullmatch(r"[a-z_.]{1,60}", kind) else "<kind>"
            raise MessageSchemaError(
                f"protocol {self.protocol!r}: message kind {shown!r} is not a declared kind "
                f"(declared: {', '.join(sorted(self.messages))})"
            )
        try:
            for who, role in ((sender, "sender"), (receiver, "receiver")):
                if type(who) is not str or who not in self.names:
                    raise _Bad(role, "a name that is no participant of the run")
            if type(round) is not int or round < 0:
                raise _Bad("round", f"{_what(round)}, not an integer >= 0")
            if meta is not None:
                self.messages[kind].meta.check(meta, _Ctx(self, sender, receiver, False), "meta")
        except _Bad as bad:
            raise self._refuse(kind, bad) from None

    def check_payload(self, env) -> None:
        """Refuse an envelope whose (frozen) payload is outside its kind's schema."""
        try:
            ctx = _Ctx(self, env.sender, env.receiver, False)
            self.messages[env.kind].payload.check(env.payload, ctx, "payload")
        except _Bad as bad:
            raise self._refuse(env.kind, bad) from None

    def unfrozen(self, kind: str, exc: Exception) -> MessageSchemaError:
        """The refusal of a payload the bus cannot even freeze (bytes, objects)."""
        return self._refuse(kind, _Bad("payload", "not a payload the bus can freeze and hash"))

    def check_defended(self, env, defense: str) -> None:
        """A message a defense replaced: its payload has the declared types (lengths may
        change: a subsampled measure) and its meta adds only ``defended_by``, the names of the
        run's defenses."""
        try:
            ctx = _Ctx(self, env.sender, env.receiver, True)
            m = self.messages[env.kind]
            m.payload.check(env.payload, ctx, "payload")
            meta = dict(env.meta)
            marks = meta.pop(DEFENDED_BY, None)
            if marks is not None:
                names = (marks,) if type(marks) is str else marks
                if not isinstance(names, (list, tuple)) or not all(
                    type(n) is str and n in self.defenses for n in names
                ):
                    raise _Bad("meta/defended_by", "not a list of the run's defense names")
            if meta:
                m.meta.check(meta, ctx, "meta")
        except _Bad as bad:
            raise MessageSchemaError(
                f"defense {defense!r} on message {env.kind!r} of protocol {self.protocol!r}: "
                f"field {bad.path}: {bad.why}; refused by the declared schema"
            ) from None

    def check_released(self, result) -> None:
        """Refuse a result that releases anything outside ``released`` (each result field not
        declared must be empty), or a ``mode`` or deviation that is not :class:`Text`."""
        ctx = _Ctx(self, "", "", False)
        try:
            for name in _RESULT_FIELDS:
                value = getattr(result, name, None)
                if not value:
                    continue
                f = self.released.get(name)
                if f is None:
                    raise _Bad(name, "not empty, and the protocol declares no schema for it")
                f.check(value, ctx, name)
            Text().check(getattr(result, "mode", ""), ctx, "mode")
            for i, t in enumerate(getattr(result, "deviations", ()) or ()):
                Text().check(t, ctx, f"deviations/{i}")
        except _Bad as bad:
            raise MessageSchemaError(
                f"protocol {self.protocol!r}: released {bad.path}: {bad.why}; refused by the "
                "declared schema (docs/guide/plugins.md)"
            ) from None


class _Ctx:
    """What one check reads: the channel's names and dimensions, the message's routing, and
    whether lengths are free (a message a defense replaced)."""

    __slots__ = ("names", "dims", "rows", "sender", "receiver", "loose_shapes")

    def __init__(self, ch: Channel, sender: str, receiver: str, loose: bool):
        self.names, self.dims, self.rows = ch.names, ch.dims, ch.rows
        self.sender, self.receiver, self.loose_shapes = sender, receiver, loose

    def dim(self, name: str) -> int:
        if name == "n_sender" or name == "n_receiver":
            who = self.sender if name == "n_sender" else self.receiver
            if who in self.rows:
                return self.rows[who]
            raise _Bad("", f"{name}: {who!r} holds no rows")
        if name not in self.dims:
            raise _Bad("", f"the schema's dimension {name!r} is not a known one")
        return self.dims[name]


def _config_dims(config) -> dict[str, int]:
    """Every integer parameter of a protocol's config, by dotted name."""
    if config is None or not hasattr(config, "model_dump"):
        return {}
    out: dict[str, int] = {}

    def walk(x: Any, prefix: str) -> None:
        if isinstance(x, Mapping):
            for k, v in x.items():
                walk(v, f"{prefix}{k}.")
        elif isinstance(x, int) and not isinstance(x, bool):
            out[prefix[:-1]] = x

    walk(config.model_dump(), "")
    return out
