"""``testbed keygen KEYFILE``: a new Ed25519 key pair for signing run manifests
(``testbed run --sign KEYFILE``; ``testbed verify RUN --pubkey KEYFILE.pub``)."""

from __future__ import annotations

__all__ = ["add_parser", "cmd_keygen"]


def cmd_keygen(args) -> int:
    from testbed.run.manifest import keygen

    private, public = keygen(args.keyfile)
    print(f"private key: {private} (keep it secret; mode 0600)")
    print(f"public key:  {public} (give it to whoever checks your runs)")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("keygen", help="make an Ed25519 key pair for signed run manifests")
    p.add_argument("keyfile", help="where the private key goes (the public key: KEYFILE.pub)")
    p.set_defaults(fn=cmd_keygen)
