"""``testbed keygen KEYFILE``: a new Ed25519 key pair for signing run manifests
(``testbed run --sign KEYFILE``; ``testbed verify RUN --pubkey KEYFILE.pub``)."""

from __future__ import annotations

from testbed.run.manifest import keygen

__all__ = ["run"]


def run(args) -> int:
    private, public = keygen(args.keyfile)
    print(f"private key: {private} (keep it secret; mode 0600)")
    print(f"public key:  {public} (give it to whoever checks your runs)")
    return 0
