"""Tests of the cairn Python package: a model test against a dict, the context manager,
durability across reopening, errors, iteration bounds, proofs and snapshots."""

import random

import pytest

import cairn


@pytest.fixture
def path(tmp_path):
    return tmp_path / "db"


def key(i):
    return b"key%06d" % i


def test_model(path):
    """Random inserts, deletes and batched updates against a dict; then items(), get_many and
    bounded iteration agree with the model."""
    rng = random.Random(51)
    model = {}
    with cairn.Session(path) as s:
        t = s.table("model")
        for step in range(3000):
            k = key(rng.randrange(500))
            op = rng.random()
            if op < 0.5:
                v = b"v%d" % step
                t[k] = v
                model[k] = v
            elif op < 0.65:
                if k in model:
                    del t[k]
                    del model[k]
                else:
                    with pytest.raises(KeyError):
                        del t[k]
            elif op < 0.8:
                batch = {key(rng.randrange(500)): (None if rng.random() < 0.3 else b"b%d" % step)
                         for _ in range(rng.randrange(1, 40))}
                t.update_many(batch)
                for bk, bv in batch.items():
                    if bv is None:
                        model.pop(bk, None)
                    else:
                        model[bk] = bv
            elif op < 0.85:
                keys = [key(rng.randrange(500)) for _ in range(rng.randrange(1, 20))]
                t.delete_many(keys)
                for dk in keys:
                    model.pop(dk, None)
            else:
                assert t.get(k) == model.get(k)
                assert (k in t) == (k in model)
        expected = sorted(model.items())
        assert list(t.items()) == expected
        assert list(t) == [k for k, _ in expected]
        assert list(t.values()) == [v for _, v in expected]
        probe = [key(i) for i in range(600)]
        assert t.get_many(probe) == [model.get(k) for k in probe]
        lo, hi = key(100), key(200)
        assert list(t.items(start=lo, end=hi)) == [(k, v) for k, v in expected if lo <= k < hi]
        assert list(t.keys(prefix=b"key0001")) == [k for k, _ in expected if k.startswith(b"key0001")]


def test_bytes_like_and_types(path):
    with cairn.Session(path) as s:
        t = s.table("t")
        t[bytearray(b"a")] = memoryview(b"1")
        assert t[b"a"] == b"1" and isinstance(t[memoryview(b"a")], bytes)
        assert t.get(b"absent", b"dflt") == b"dflt"
        assert t.get(b"absent") is None
        with pytest.raises(KeyError):
            t[b"absent"]
        with pytest.raises(TypeError):
            t["a str"] = b"x"
        with pytest.raises(TypeError):
            t[b"k"] = 5
        with pytest.raises(ValueError):
            t.items(start=b"a", prefix=b"a")
        assert t.get_many([]) == []
        assert t.name == "t" and t.durable and not t.authenticated


def test_context_manager_closes(path):
    with cairn.Session(path) as s:
        t = s.table("t")
        t[b"k"] = b"v"
        it = t.items()
        assert not s.closed
    assert s.closed
    with pytest.raises(cairn.ClosedError):
        t[b"k"]
    with pytest.raises(cairn.ClosedError):
        s.table("t")
    with pytest.raises(cairn.ClosedError):
        next(it)
    s.close()  # idempotent
    # An exception inside the block propagates, and the session is closed all the same.
    with pytest.raises(RuntimeError):
        with cairn.Session(path) as s2:
            raise RuntimeError("boom")
    assert s2.closed


def test_reopen_keeps_durable_data(path):
    with cairn.Session(path) as s:
        t = s.table("accounts")
        t.update_many([(key(i), b"%d" % i) for i in range(1000)])
        del t[key(7)]
    with cairn.Session(path) as s:
        t = s.table("accounts")
        assert t[key(8)] == b"8" and key(7) not in t
        assert len(list(t.items())) == 999
        s.checkpoint()
        t[b"after-checkpoint"] = b"x"
    with cairn.Session(path) as s:
        assert s.table("accounts")[b"after-checkpoint"] == b"x"
    with cairn.Session(path, read_only=True) as s:
        assert s.read_only
        with pytest.raises(cairn.ReadOnlyError):
            s.table("accounts")


def test_errors(path, tmp_path):
    with cairn.Session(path) as s:
        with pytest.raises(cairn.LockedError):
            cairn.Session(path)
        with pytest.raises(cairn.InvalidArgumentError):
            s.table("Bad Name!")
        t = s.table("t")
        with pytest.raises(cairn.InvalidArgumentError):
            t[b"k" * 100_000] = b"v"
        with pytest.raises(cairn.InvalidArgumentError):
            t.root()  # not authenticated
        with pytest.raises(cairn.InvalidArgumentError):
            s.table("t", authenticated=True)  # created without authentication
        with pytest.raises(cairn.NotFoundError):
            s.open_snapshot("missing", "label")
    assert issubclass(cairn.LockedError, cairn.CairnError) and cairn.Error is cairn.CairnError
    # Opened read-only, a directory that is not a session is refused.
    with pytest.raises(cairn.CairnError):
        cairn.Session(tmp_path / "nothing-here", read_only=True)
    # The lock was released on exit: a new session opens.
    with cairn.Session(path):
        pass


def test_proofs(path):
    with cairn.Session(path) as s:
        t = s.table("state", authenticated=True)
        assert t.authenticated
        t.update_many({b"alice": b"100", b"bob": b"50"})
        root = t.root()
        assert len(root) == 32
        proof = t.prove([b"alice", b"carol"])
        assert t.root() == root  # nothing changed since
        cairn.verify(root, proof, {b"alice": b"100", b"carol": None})
        cairn.verify(root, proof, [(b"alice", b"100"), (b"carol", None)])
        with pytest.raises(cairn.VerifyError):
            cairn.verify(root, proof, {b"alice": b"1000000", b"carol": None})  # forged value
        with pytest.raises(cairn.VerifyError):
            cairn.verify(root, proof, {b"alice": b"100", b"carol": b"1"})  # forged presence
        with pytest.raises(cairn.VerifyError):
            cairn.verify(root, proof[:-1], {b"alice": b"100"})  # damaged proof
        v = t.version()
        t[b"carol"] = b"7"
        assert t.root() != root and t.version() == v + 1


def test_snapshots(path):
    with cairn.Session(path) as s:
        t = s.table("t")
        t.update_many({b"a": b"1", b"b": b"2"})
        t.save_snapshot("snap-1", "day 1")
        t[b"a"] = b"changed"
        assert s.snapshots() == ["snap-1"]
        with pytest.raises(cairn.InvalidArgumentError):
            s.open_snapshot("snap-1", "wrong label")
        old = s.open_snapshot("snap-1", "day 1")
        assert list(old.items()) == [(b"a", b"1"), (b"b", b"2")]
        assert old.name is None and not old.durable


def test_large_iteration_spans_fills(path):
    """More entries than one fill of the iterator (256), read in order."""
    with cairn.Session(path) as s:
        t = s.table("big")
        t.update_many((key(i), b"%d" % i) for i in range(2000))
        assert [k for k, _ in t.items()] == [key(i) for i in range(2000)]
        it = t.items(start=key(1990))
        assert next(it) == (key(1990), b"1990")
        it.close()
        assert list(it) == []


def test_threads(path):
    """Batches from several threads at once (each releases the GIL in the engine): every
    thread's writes are seen whole, and an iterator shared by threads never deadlocks."""
    import threading

    with cairn.Session(path) as s:
        t = s.table("t")
        errors = []

        def worker(n):
            try:
                keys = [b"t%d-%04d" % (n, i) for i in range(300)]
                for round_ in range(20):
                    value = b"%d" % round_
                    t.update_many([(k, value) for k in keys])
                    assert t.get_many(keys) == [value] * len(keys)
            except Exception as e:  # reported below, not lost in the thread
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert errors == []
        assert len(list(t.items())) == 4 * 300
        it = iter(t)
        seen = []

        def reader():
            try:
                for k in it:
                    seen.append(k)
            except RuntimeError:
                pass  # the other thread held the iterator: refused, not deadlocked

        readers = [threading.Thread(target=reader) for _ in range(2)]
        for th in readers:
            th.start()
        for th in readers:
            th.join(timeout=60)
            assert not th.is_alive()
        assert len(seen) == len(set(seen))
