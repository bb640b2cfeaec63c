"""A run directory's manifest: the digest of every file a run wrote, optionally signed.

``manifest.json`` lists every evidence file of a run directory (recursively: a sweep's cells
too) with the digest of its bytes. Files that are not evidence are left out: the lock file, the
manifest and its signature, and what ``testbed report`` renders (``report.html``, ``report.md``,
``results.csv``, ``summary.csv``, ``plots/``), which can be rendered again from the evidence at any time.

Unsigned, the manifest shows that the files are the ones the run wrote unless someone rewrote
the manifest too (see docs/reference/trust.md). Signed (``testbed run --sign KEYFILE``), ``manifest.sig``
holds an Ed25519 signature (the ``cryptography`` package) over the manifest's exact bytes and
the signer's public key; whoever holds the public key (``testbed verify RUN --pubkey PUB``)
detects any change to any listed file, and any evidence file added, made without the private key.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from testbed.errors import TestbedError
from testbed.exchange.payload import (
    _U64,
    DIGEST_ALGORITHM,
    digest_algorithm,
    finish_digest,
    new_hasher,
)
from testbed.exchange.transcript import atomic_write_bytes
from testbed.run.rundir import JOURNAL_NAME, LOCK_NAME, is_sweep, is_temp_name

__all__ = [
    "MANIFEST_NAME",
    "SIGNATURE_NAME",
    "check_manifest",
    "check_signer",
    "evidence_files",
    "file_digest",
    "is_signed",
    "keygen",
    "load_private_key",
    "signing_key_id",
    "sweep_of",
    "write_manifest",
]

MANIFEST_NAME = "manifest.json"
SIGNATURE_NAME = "manifest.sig"
MANIFEST_FORMAT = "testbed-manifest/1"
#: top-level names that are not evidence (rendered views of it, or this bookkeeping)
_NOT_EVIDENCE = {
    MANIFEST_NAME,
    SIGNATURE_NAME,
    JOURNAL_NAME,
    "report.html",
    "report.md",
    "results.csv",
    "summary.csv",
    "plots",
}
#: what `testbed report` renders into a directory: not evidence in a sweep's cell either
_RENDERED = {"report.html", "report.md", "results.csv", "summary.csv", "plots"}
_CHUNK = 1 << 22


def _cell_root(rel: Path) -> bool:
    """Whether ``rel`` (relative to a run directory) is a sweep cell's own directory."""
    return len(rel.parts) == 2 and rel.parts[0] == "cells"


def evidence_files(directory: str | Path) -> list[str]:
    """Every evidence file under ``directory`` (relative POSIX paths, sorted): all files but the
    lock files, the testbed's temporary files (exactly its own ``.NAME.testbed-XXXX.tmp`` names,
    :func:`testbed.run.rundir.is_temp_name`), the top-level non-evidence names and what
    ``testbed report`` renders into a sweep's cell."""
    directory = Path(directory)
    out = []
    for root, dirs, files in os.walk(directory):
        rel = Path(root).relative_to(directory)
        top = rel == Path(".")
        if top:
            dirs[:] = [d for d in dirs if d not in _NOT_EVIDENCE]
        elif _cell_root(rel):  # `testbed report CELL` renders into a sweep's cell
            dirs[:] = [d for d in dirs if d not in _RENDERED]
        dirs[:] = sorted(d for d in dirs if not is_temp_name(d))
        for f in files:
            if f == LOCK_NAME or is_temp_name(f) or (top and f in _NOT_EVIDENCE):
                continue
            if not top and _cell_root(rel) and f in _RENDERED:
                continue
            out.append((rel / f).as_posix())
    return sorted(out)


def linked_dirs(directory: str | Path) -> list[str]:
    """Every symlink to a directory under ``directory`` (relative POSIX paths, sorted), the
    non-evidence names included: the testbed writes none, ``os.walk`` does not follow them (so
    :func:`evidence_files` cannot list what is behind one), and a writer would write through
    one into its target."""
    directory = Path(directory)
    out = []
    for root, dirs, _ in os.walk(directory):
        rel = Path(root).relative_to(directory)
        out += [(rel / d).as_posix() for d in dirs if os.path.islink(os.path.join(root, d))]
        dirs[:] = [d for d in dirs if not is_temp_name(d)]
    return sorted(out)


def file_digest(path: str | Path, algorithm: str | None = None) -> str:
    """Digest of a file's bytes (the canonical encoding of a byte string, streamed)."""
    h = new_hasher(algorithm)
    with open(path, "rb") as f:
        h.update(b"Y" + _U64.pack(os.fstat(f.fileno()).st_size))
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return finish_digest(h, algorithm)


def _manifest_bytes(directory: Path) -> bytes:
    files = {name: file_digest(directory / name) for name in evidence_files(directory)}
    doc = {"format": MANIFEST_FORMAT, "files": files}
    return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()


def write_manifest(directory: str | Path, key_file: str | Path | None = None) -> Path:
    """Write ``manifest.json`` (and, with ``key_file``, ``manifest.sig``) for ``directory``.
    Without a key an earlier signature is removed: it would sign other bytes."""
    directory = Path(directory)
    data = _manifest_bytes(directory)
    sig = directory / SIGNATURE_NAME
    if key_file is not None:
        key = load_private_key(key_file)
        from cryptography.hazmat.primitives import serialization  # cryptography: signing only

        pub = key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        doc = {"algorithm": "ed25519", "public_key": pub.hex(), "signature": key.sign(data).hex()}
    atomic_write_bytes(directory / MANIFEST_NAME, data)
    if key_file is not None:
        atomic_write_bytes(sig, (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode())
    elif sig.exists():
        sig.unlink()
    return directory / MANIFEST_NAME


def is_signed(directory: str | Path) -> bool:
    return (Path(directory) / SIGNATURE_NAME).is_file()


# ----------------------------------------------------------------------------- keys
def keygen(path: str | Path) -> tuple[Path, Path]:
    """A new Ed25519 key pair: the private key at ``path`` (PKCS#8 PEM, mode 0600) and the public
    key at ``path.pub`` (PEM). An existing file is never overwritten."""
    from cryptography.hazmat.primitives import serialization  # cryptography: signing only
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,  # cryptography: signing only
    )

    path = Path(path)
    if not path.name or str(path).endswith("/"):
        raise TestbedError(f"{str(path)!r}: not a key file name (e.g. testbed keygen keys/signer)")
    pub_path = path.with_name(path.name + ".pub")
    try:
        for p in (path, pub_path):
            if p.exists():
                raise TestbedError(f"{p}: exists; choose another key file name")
    except OSError as exc:  # e.g. KEYFILE.pub is a name too long
        raise TestbedError(f"{path}: cannot write the key pair ({exc.strerror or exc})") from None
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    written: list[Path] = []  # both files or neither: a failed .pub takes the key with it
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        for p, data, mode in ((path, private, 0o600), (pub_path, public, 0o666)):
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            written.append(p)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
    except OSError as exc:
        for p in written:
            p.unlink(missing_ok=True)
        if isinstance(exc, FileExistsError):  # made since the check, or a dangling symlink
            raise TestbedError(f"{exc.filename}: exists; choose another key file name") from None
        raise TestbedError(f"{path}: cannot write the key pair ({exc.strerror or exc})") from None
    return path, pub_path


def load_private_key(path: str | Path):
    from cryptography.hazmat.primitives import serialization  # cryptography: signing only
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,  # cryptography: signing only
    )

    try:
        key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise TestbedError(f"{path}: not a readable unencrypted private key ({exc})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise TestbedError(f"{path}: not an Ed25519 private key (make one: testbed keygen)")
    return key


def load_public_key(path: str | Path):
    from cryptography.hazmat.primitives import serialization  # cryptography: signing only
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PublicKey,  # cryptography: signing only
    )

    try:
        key = serialization.load_pem_public_key(Path(path).read_bytes())
    except (OSError, ValueError, TypeError) as exc:
        raise TestbedError(f"{path}: not a readable public key ({exc})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise TestbedError(f"{path}: not an Ed25519 public key")
    return key


# ----------------------------------------------------------------------------- checking
def _read_signature(sig_path: Path) -> tuple[bytes, bytes]:
    try:
        doc = json.loads(sig_path.read_text())
        pub, signature = bytes.fromhex(doc["public_key"]), bytes.fromhex(doc["signature"])
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise TestbedError(f"{sig_path}: not a signature file ({type(exc).__name__})") from None
    if len(pub) != 32 or len(signature) != 64:
        raise TestbedError(f"{sig_path}: not a signature file (not an Ed25519 key and signature)")
    return pub, signature


def signing_key_id(directory: str | Path) -> str | None:
    """The first 16 hex digits of the public key ``manifest.sig`` names (the sweep's for a
    sweep's cell), as ``testbed verify`` prints it; None when the run is not signed."""
    directory = Path(directory)
    where = sweep_of(directory) or directory
    if not is_signed(where):
        return None
    pub, _ = _read_signature(where / SIGNATURE_NAME)
    return pub.hex()[:16]


def _check_signature(directory: Path, data: bytes, pubkey, label=None) -> str:
    """Check ``manifest.sig`` over ``data``: against ``pubkey`` (a public key file, or a key
    object named ``label``), or with ``pubkey=None`` only against the key the file names (which
    shows the manifest was not changed after signing, not who signed it)."""
    from cryptography.exceptions import InvalidSignature  # cryptography: signing only
    from cryptography.hazmat.primitives import serialization  # cryptography: signing only
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PublicKey,  # cryptography: signing only
    )

    if isinstance(pubkey, (str, Path)):
        want, label = load_public_key(pubkey), pubkey
    else:
        want = pubkey
    sig_path = directory / SIGNATURE_NAME
    if not sig_path.is_file():
        raise TestbedError(f"{sig_path}: missing (the run was not signed, or the file was removed)")
    pub, signature = _read_signature(sig_path)
    if want is None:
        want = Ed25519PublicKey.from_public_bytes(pub)
    raw = want.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    if pub != raw:
        raise TestbedError(f"{sig_path}: signed by another key than {label}")
    try:
        want.verify(signature, data)
    except InvalidSignature:
        raise TestbedError(
            f"{directory / MANIFEST_NAME}: the signature does not match (the manifest was "
            "changed after it was signed)"
        ) from None
    if label is None:
        return (
            f"the run is signed ({SIGNATURE_NAME}, key {pub.hex()[:16]}); the signature matches "
            "the key it names, but who signed was not checked: --pubkey KEY.pub checks it"
        )
    return f"Ed25519 signature of {MANIFEST_NAME} by {label}"


def check_signer(directory: str | Path, key_file) -> None:
    """Before a command signs ``directory``'s manifest again with ``key_file``: the key must
    load (checked before any work), and when the run is already signed its signature must verify
    with this key's public key — a command never signs over another signer's run, nor over a
    manifest changed after it was signed. The caller verifies the files as well (verify_run)."""
    directory = Path(directory)
    key = load_private_key(key_file)
    if is_signed(directory):
        path = directory / MANIFEST_NAME
        if not path.is_file():
            raise TestbedError(f"{path}: missing (not a run directory of this testbed, or removed)")
        _check_signature(directory, path.read_bytes(), key.public_key(), key_file)


def _missing_manifest(directory: Path, path: Path) -> str:
    """Why ``path`` is missing, in one line: a sweep that stopped before its end (a cell
    failed, Ctrl-C, a time limit) writes its manifest only when every cell is done."""
    if (directory / "sweep.json").is_file():
        try:
            done = sum(1 for ln in (directory / "results.jsonl").read_text().splitlines() if ln)
        except OSError:
            done = 0
        return (
            f"{path}: missing: the sweep did not finish ({done} cell row(s) in results.jsonl); "
            "run its scenario again to finish it (finished cells are kept and not recomputed), "
            "then report it"
        )
    return f"{path}: missing (not a run directory of this testbed, or removed)"


def check_manifest(
    directory: str | Path, pubkey_file=None, pending: frozenset[str] = frozenset()
) -> list[str]:
    """Check ``manifest.json`` (and with ``pubkey_file`` its signature) against the files:
    every listed file present with its digest, no evidence file unlisted. Returns what was
    checked; the first mismatch is a one-line :class:`TestbedError`. ``pending``: files an
    interrupted ``testbed attack`` announced in its journal (testbed/run/journal.py), which may
    be new, changed or absent; every other file is checked."""
    directory = Path(directory)
    path = directory / MANIFEST_NAME
    if not path.is_file():
        raise TestbedError(_missing_manifest(directory, path))
    data = path.read_bytes()
    checked = []
    if pubkey_file is not None or is_signed(directory):  # unchecked signer: a note, see above
        checked.append(_check_signature(directory, data, pubkey_file))
    try:
        doc = json.loads(data)
        files = dict(doc["files"])
        ok = doc.get("format") == MANIFEST_FORMAT
    except (ValueError, KeyError, TypeError) as exc:
        raise TestbedError(f"{path}: not a manifest ({type(exc).__name__})") from None
    if not ok:
        raise TestbedError(f"{path}: unknown manifest format {doc.get('format')!r}")
    evidence = set(evidence_files(directory))
    for name, want in sorted(files.items()):
        p = directory / name
        if name in pending:
            continue
        if name not in evidence:  # absent, or no evidence file of this directory (an absolute
            # path, "..", a temporary or non-evidence name): never read from outside the run
            if Path(name).is_absolute() or ".." in Path(name).parts or p.exists():
                raise TestbedError(
                    f"{path}: lists {name!r}, which is not an evidence file of this run directory"
                )
            raise TestbedError(f"{p}: missing (listed in {MANIFEST_NAME})")
        try:
            got = file_digest(p, digest_algorithm(want))
        except ValueError as exc:
            raise TestbedError(f"{path}: {name}: {exc}") from None
        if got != want:
            raise TestbedError(
                f"{p}: changed since the run wrote it (digest differs from {path.name})"
            )
    extra = sorted(evidence - set(files) - pending)
    if extra:
        raise TestbedError(f"{directory / extra[0]}: not listed in {MANIFEST_NAME} (added later)")
    links = linked_dirs(directory)
    if links:
        raise TestbedError(
            f"{directory / links[0]}: a symlink, not listed in {MANIFEST_NAME} (added later)"
        )
    checked.append(f"{len(files)} files against {MANIFEST_NAME} ({DIGEST_ALGORITHM})")
    return checked


def sweep_of(cell: str | Path) -> Path | None:
    """The sweep directory ``cell`` is a cell of (``SWEEP/cells/<hash>``, a sweep with a
    manifest), else None: a command that adds files to the cell refreshes the sweep's manifest
    too, which lists the cell's."""
    parent = Path(cell).resolve().parent
    if parent.name != "cells" or not is_sweep(parent.parent):
        return None
    return parent.parent if (parent.parent / MANIFEST_NAME).is_file() else None
