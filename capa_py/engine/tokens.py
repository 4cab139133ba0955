"""Client tokens derived from the owning object's uid and the resource's role.

The same object and role always give the same token, across restarts and processes, so a create retried
after a crash is the same request to AWS; different objects or roles never share one. AWS allows up to 64
ASCII characters; a SHA-256 digest fits and does not reveal the uid.
"""

from __future__ import annotations

import hashlib

MAX_TOKEN_LENGTH = 64


def client_token(owner_uid: str, role: str) -> str:
    if not owner_uid:
        raise ValueError("a client token needs the owning object's uid")
    digest = hashlib.sha256(f"capa-py:{owner_uid}:{role}".encode()).hexdigest()
    return digest[:MAX_TOKEN_LENGTH]
