"""Write ``tests/vectors/sealed-blob.json``: sealed-blob test vectors (docs/ledger-format.md §6.1).

Each vector is a content and a fixed salt (``SHA-256("prompt-ledger sealed blob test salt
<n>")``) with the stored bytes and the address they give. ``tests/ledger/test_sealed.py``
regenerates the file byte for byte and checks the writer (``ledger``) and the verifier (``verify``)
against it. Run: ``python scripts/make_sealed_vectors.py``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ledger import seal

OUT = Path(__file__).resolve().parent.parent / "tests" / "vectors" / "sealed-blob.json"
CONTENTS = [b"", b"B", b"yes", b'[{"answer":"no","correct":false}]']


def vectors() -> bytes:
    """The file's bytes."""
    out = []
    for n, content in enumerate(CONTENTS):
        salt = hashlib.sha256(f"prompt-ledger sealed blob test salt {n}".encode()).digest()
        stored = seal(content, salt)
        out.append(
            {
                "content_hex": content.hex(),
                "salt_hex": salt.hex(),
                "stored_hex": stored.hex(),
                "address": hashlib.sha256(stored).hexdigest(),
                "plain_sha256": hashlib.sha256(content).hexdigest(),
            }
        )
    return (
        json.dumps({"magic_hex": seal(b"", bytes(32))[:8].hex(), "vectors": out}, indent=2) + "\n"
    ).encode()


if __name__ == "__main__":
    OUT.write_bytes(vectors())
    print(f"wrote {OUT}")
