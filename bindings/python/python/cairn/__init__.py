"""Cairn, an LSM-tree storage engine for ledger state, from Python.

>>> import cairn, tempfile
>>> with cairn.Session(tempfile.mkdtemp()) as s:
...     t = s.table("accounts")
...     t[b"alice"] = b"100"
...     t[b"alice"]
b'100'

Sessions are context managers; tables are mappings of ``bytes`` to ``bytes`` with batched
``get_many``/``update_many``/``delete_many`` (one engine call each, the GIL released), ordered
iteration (``items``, ``keys``, ``values``), and, for authenticated tables, state roots and
proofs checked by :func:`verify`. Errors are subclasses of :class:`CairnError`.
"""

from ._cairn import (
    CairnError,
    ClosedError,
    CorruptError,
    Entries,
    Error,
    InvalidArgumentError,
    LockedError,
    NotFoundError,
    ReadOnlyError,
    Session,
    Table,
    VerifyError,
    verify,
)

__all__ = [
    "CairnError",
    "ClosedError",
    "CorruptError",
    "Entries",
    "Error",
    "InvalidArgumentError",
    "LockedError",
    "NotFoundError",
    "ReadOnlyError",
    "Session",
    "Table",
    "VerifyError",
    "verify",
]
