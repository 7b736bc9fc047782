"""Type stubs of the cairn package (the native module cairn._cairn)."""

import os
import pathlib
from types import TracebackType
from typing import final, Iterable, Iterator, List, Mapping, Optional, Tuple, Type, TypeVar, Union, overload

_BytesLike = Union[bytes, bytearray, memoryview]
_T = TypeVar("_T")

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

class CairnError(Exception):
    """The base class of every error the engine raises."""

Error = CairnError

class LockedError(CairnError):
    """Another live session holds the directory's lock."""

class ClosedError(CairnError):
    """The session, table or iterator was closed."""

class CorruptError(CairnError):
    """Damage found on disk."""

class ReadOnlyError(CairnError):
    """A write in a session opened with read_only=True."""

class InvalidArgumentError(CairnError):
    """A key, value, name or table configuration refused."""

class NotFoundError(CairnError):
    """A session directory or snapshot that does not exist."""

class VerifyError(CairnError):
    """A proof that does not verify the claims against the root."""

@final
class Entries(Iterator[_T]):
    """An iterator over a table's entries in key order."""
    def __iter__(self) -> "Entries[_T]": ...
    def __next__(self) -> _T: ...
    def close(self) -> None:
        """Closes the cursor early."""

@final
class Table:
    """A sorted map from bytes keys to bytes values."""
    @property
    def name(self) -> Optional[str]: ...
    @property
    def durable(self) -> bool: ...
    @property
    def authenticated(self) -> bool: ...
    def __getitem__(self, key: _BytesLike, /) -> bytes: ...
    def __setitem__(self, key: _BytesLike, value: _BytesLike, /) -> None: ...
    def __delitem__(self, key: _BytesLike, /) -> None: ...
    def __contains__(self, key: _BytesLike, /) -> bool: ...
    def __iter__(self) -> Entries[bytes]: ...
    @overload
    def get(self, key: _BytesLike) -> Optional[bytes]: ...
    @overload
    def get(self, key: _BytesLike, default: _T) -> Union[bytes, _T]: ...
    def get_many(self, keys: Iterable[_BytesLike]) -> List[Optional[bytes]]:
        """The values of keys (None for absent ones): one batched lookup, GIL released."""
    def update_many(
        self,
        pairs: Union[
            Mapping[_BytesLike, Optional[_BytesLike]],
            Iterable[Tuple[_BytesLike, Optional[_BytesLike]]],
        ],
    ) -> None:
        """Applies (key, value) pairs as one batch; a value of None deletes the key."""
    def delete_many(self, keys: Iterable[_BytesLike]) -> None:
        """Deletes every key as one batch."""
    def items(
        self,
        start: Optional[_BytesLike] = None,
        end: Optional[_BytesLike] = None,
        prefix: Optional[_BytesLike] = None,
    ) -> Entries[Tuple[bytes, bytes]]:
        """(key, value) pairs in key order: start <= key < end, or keys with prefix."""
    def keys(
        self,
        start: Optional[_BytesLike] = None,
        end: Optional[_BytesLike] = None,
        prefix: Optional[_BytesLike] = None,
    ) -> Entries[bytes]: ...
    def values(
        self,
        start: Optional[_BytesLike] = None,
        end: Optional[_BytesLike] = None,
        prefix: Optional[_BytesLike] = None,
    ) -> Entries[bytes]: ...
    def root(self) -> bytes:
        """The 32-byte state root of the current contents (authenticated tables)."""
    def version(self) -> int:
        """The version of the current contents (authenticated tables)."""
    def prove(self, keys: Iterable[_BytesLike]) -> bytes:
        """A multiproof of each key's presence or absence against root()."""
    def save_snapshot(self, name: str, label: str) -> None:
        """Saves the table as snapshot name with label."""
    def close(self) -> None:
        """Closes the table."""

@final
class Session:
    """A session directory: a context manager that closes it on exit."""
    def __new__(cls, path: Union[str, os.PathLike], read_only: bool = False) -> "Session": ...
    def __enter__(self) -> "Session": ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]] = None,
        exc: Optional[BaseException] = None,
        traceback: Optional[TracebackType] = None,
    ) -> bool: ...
    @property
    def closed(self) -> bool: ...
    @property
    def read_only(self) -> bool: ...
    @property
    def path(self) -> pathlib.Path: ...
    def table(self, name: str, authenticated: bool = False) -> Table:
        """The durable table name, created empty if missing."""
    def open_snapshot(self, name: str, label: str) -> Table:
        """Opens snapshot name (saved with label) as a new, non-durable table."""
    def snapshots(self) -> List[str]:
        """The names of the saved snapshots, sorted."""
    def checkpoint(self) -> None:
        """Checkpoints every durable table."""
    def close(self) -> None:
        """Closes the session and releases its lock. Idempotent."""

def verify(
    root: _BytesLike,
    proof: _BytesLike,
    claims: Union[
        Mapping[_BytesLike, Optional[_BytesLike]],
        Iterable[Tuple[_BytesLike, Optional[_BytesLike]]],
    ],
) -> None:
    """Raises VerifyError unless proof proves every claim (value, or None for absent) against root."""
