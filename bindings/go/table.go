package cairn

/*
#include <stdlib.h>
#include "cairn.h"
*/
import "C"

import (
	"sync"
	"unsafe"
)

// Auth names a table's authentication: none, or the hash of its state root and proofs.
type Auth int

// The authentications of cairn.h.
const (
	// AuthNone: no root, no proofs; the fastest.
	AuthNone Auth = C.CAIRN_AUTH_NONE
	// AuthSHA256: roots and proofs hashed with SHA-256.
	AuthSHA256 Auth = C.CAIRN_AUTH_SHA256
	// AuthBLAKE3: roots and proofs hashed with BLAKE3.
	AuthBLAKE3 Auth = C.CAIRN_AUTH_BLAKE3
)

// Kind is what an Update does. The zero value is Insert.
type Kind uint8

// The kinds of update.
const (
	// Insert: the key takes the value, replacing any it had.
	Insert Kind = iota
	// Upsert: the value is combined with the key's current one by the table's resolve
	// function (the default keeps the newer value, as Insert).
	Upsert
	// Delete: the key is removed (Value must be empty).
	Delete
)

// Update is one change of a batch given to Apply or Write.
type Update struct {
	// Kind is Insert (the zero value), Upsert or Delete.
	Kind Kind
	// Key is the key changed.
	Key []byte
	// Value is the new value (empty for a Delete).
	Value []byte
}

// Table is a sorted map from byte-string keys to byte-string values in a session. Make one
// with Session.Table or Session.OpenSnapshot; Close it when done. Safe for concurrent use.
type Table struct {
	mu      sync.RWMutex // held for reading by calls, for writing by free
	ptr     *C.cairn_table
	session *Session

	cmu     sync.Mutex // guards cursors
	cursors map[*Cursor]struct{}
}

// Close frees the table's handle and closes its cursors (a durable table lives on in its
// session). Later calls fail with ErrClosed; closing twice does nothing.
func (t *Table) Close() error {
	t.free()
	s := t.session
	s.mu.Lock()
	delete(s.tables, t)
	s.mu.Unlock()
	return nil
}

// free closes the table's cursors and frees its handle, once.
func (t *Table) free() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ptr == nil {
		return
	}
	t.cmu.Lock()
	for c := range t.cursors {
		c.free()
	}
	t.cursors = nil
	t.cmu.Unlock()
	C.cairn_table_free(t.ptr)
	t.ptr = nil
}

// empty is the value of a key found with an empty value (never nil, which means absent).
var empty = []byte{}

// bytesPtr points at b's first byte for a C call; a valid pointer even when b is empty
// (the C API takes null with a zero length too, but a non-null pointer is never wrong).
func bytesPtr(b []byte) *C.uint8_t {
	if cap(b) == 0 {
		b = make([]byte, 1)
	}
	return (*C.uint8_t)(unsafe.Pointer(&b[:1][0]))
}

// goBytes copies length bytes of C memory at data into a new Go slice (nil when empty).
func goBytes(data *C.uint8_t, length C.size_t) []byte {
	if length == 0 {
		return nil
	}
	out := make([]byte, length)
	copy(out, unsafe.Slice((*byte)(unsafe.Pointer(data)), length))
	return out
}

// flatten lays keys end to end in one buffer and returns it with their lengths.
func flatten(keys [][]byte) ([]byte, []C.size_t) {
	total := 0
	for _, k := range keys {
		total += len(k)
	}
	flat := make([]byte, total)
	lens := make([]C.size_t, len(keys))
	off := 0
	for i, k := range keys {
		off += copy(flat[off:], k)
		lens[i] = C.size_t(len(k))
	}
	return flat, lens
}

// Get looks up one key: its value and true when present, nil and false when absent.
func (t *Table) Get(key []byte) ([]byte, bool, error) {
	values, err := t.GetMany([][]byte{key})
	if err != nil {
		return nil, false, err
	}
	return values[0], values[0] != nil, nil
}

// GetMany looks up a batch of keys in one call into the engine, which submits the page reads
// of the whole batch together: value i is key i's value, or nil when the key is absent (a
// present key with an empty value gives an empty, non-nil slice).
//
// Cost: one cgo call per batch, whatever its size. The keys are copied into one flat buffer
// (plus 8 bytes of length each); the values come back in one C buffer, copied once into one
// Go allocation that the returned slices share (each capped at its own length).
func (t *Table) GetMany(keys [][]byte) ([][]byte, error) {
	n := len(keys)
	out := make([][]byte, n)
	if n == 0 {
		return out, nil
	}
	flat, lens := flatten(keys)
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.ptr == nil {
		return nil, closedError("table")
	}
	var values C.cairn_values
	var cerr *C.cairn_error
	code := C.cairn_lookups(t.ptr, bytesPtr(flat), &lens[0], C.size_t(n), &values, &cerr)
	if err := fromC(code, cerr); err != nil {
		return nil, err
	}
	defer C.cairn_values_free(&values)
	data := goBytes(values.data, values.data_len)
	offsets := unsafe.Slice(values.offsets, n+1)
	found := unsafe.Slice(values.found, n)
	for i := range out {
		if found[i] == 0 {
			continue
		}
		start, end := offsets[i], offsets[i+1]
		if start == end {
			out[i] = empty
		} else {
			out[i] = data[start:end:end]
		}
	}
	return out, nil
}

// Put inserts one key with its value (replacing any value it had).
func (t *Table) Put(key, value []byte) error {
	return t.Apply([]Update{{Kind: Insert, Key: key, Value: value}})
}

// Delete removes one key (nothing happens when it is absent).
func (t *Table) Delete(key []byte) error {
	return t.Apply([]Update{{Kind: Delete, Key: key}})
}

// batch is a batch of updates laid out as the C API takes it.
type batch struct {
	kinds     []C.uint8_t
	keys      []byte
	keyLens   []C.size_t
	values    []byte
	valueLens []C.size_t
}

// newBatch lays updates out for the C API; an unknown kind becomes kind 0, which the C API
// rejects with ErrInvalidArgument.
func newBatch(updates []Update) batch {
	var b batch
	keys := make([][]byte, len(updates))
	values := make([][]byte, len(updates))
	b.kinds = make([]C.uint8_t, len(updates))
	for i, u := range updates {
		keys[i], values[i] = u.Key, u.Value
		switch u.Kind {
		case Insert:
			b.kinds[i] = C.CAIRN_UPDATE_INSERT
		case Upsert:
			b.kinds[i] = C.CAIRN_UPDATE_UPSERT
		case Delete:
			b.kinds[i] = C.CAIRN_UPDATE_DELETE
		}
	}
	b.keys, b.keyLens = flatten(keys)
	b.values, b.valueLens = flatten(values)
	return b
}

// Apply applies a batch of updates in order, in one call: the whole batch is checked before
// anything is applied. On a durable table the batch is one log record; to learn when it is
// on disk, use Write.
func (t *Table) Apply(updates []Update) error {
	if len(updates) == 0 {
		return nil
	}
	b := newBatch(updates)
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.ptr == nil {
		return closedError("table")
	}
	var cerr *C.cairn_error
	code := C.cairn_updates(t.ptr, &b.kinds[0], bytesPtr(b.keys), &b.keyLens[0],
		bytesPtr(b.values), &b.valueLens[0], C.size_t(len(updates)), &cerr)
	return fromC(code, cerr)
}

// Write applies a batch as Apply does, on a durable table (one from Session.Table), and
// returns the durability of its log record: Wait on it to know the batch is on disk.
// Concurrent writers share fsyncs. A table opened from a snapshot gives ErrNotDurable.
func (t *Table) Write(updates []Update) (*Durability, error) {
	b := newBatch(updates)
	if len(updates) == 0 {
		b.kinds, b.keyLens, b.valueLens = make([]C.uint8_t, 1), make([]C.size_t, 1), make([]C.size_t, 1)
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.ptr == nil {
		return nil, closedError("table")
	}
	var ptr *C.cairn_durability
	var cerr *C.cairn_error
	code := C.cairn_write(t.ptr, &b.kinds[0], bytesPtr(b.keys), &b.keyLens[0],
		bytesPtr(b.values), &b.valueLens[0], C.size_t(len(updates)), &ptr, &cerr)
	if err := fromC(code, cerr); err != nil {
		return nil, err
	}
	return &Durability{ptr: ptr}, nil
}

// SaveSnapshot saves the table as snapshot name (1 to 64 characters from [a-z0-9_-]) with
// label, checked when it is opened. Durable and atomic when it returns; ErrExists when the
// name is taken.
func (t *Table) SaveSnapshot(name, label string) error {
	cname, clabel := C.CString(name), C.CString(label)
	defer C.free(unsafe.Pointer(cname))
	defer C.free(unsafe.Pointer(clabel))
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.ptr == nil {
		return closedError("table")
	}
	var cerr *C.cairn_error
	return fromC(C.cairn_snapshot_save(t.ptr, cname, clabel, &cerr), cerr)
}

// Durability is the durability of one Write: Wait blocks until the batch is on disk. Close it
// when done (closing does not cancel the write).
type Durability struct {
	mu  sync.Mutex
	ptr *C.cairn_durability
}

// Wait blocks until the write is durable; ErrLogFailed when the log failed, or the session
// closed, first.
func (d *Durability) Wait() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ptr == nil {
		return closedError("durability")
	}
	var cerr *C.cairn_error
	return fromC(C.cairn_durability_wait(d.ptr, &cerr), cerr)
}

// Durable reports whether the write is durable now, without blocking.
func (d *Durability) Durable() (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ptr == nil {
		return false, closedError("durability")
	}
	var durable C.bool
	var cerr *C.cairn_error
	err := fromC(C.cairn_durability_is_durable(d.ptr, &durable, &cerr), cerr)
	return bool(durable), err
}

// Position is the write's position in the log (later writes have larger ones); 0 after Close.
func (d *Durability) Position() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return uint64(C.cairn_durability_position(d.ptr))
}

// Close frees the handle; the write goes on. Closing twice does nothing.
func (d *Durability) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	C.cairn_durability_free(d.ptr)
	d.ptr = nil
	return nil
}
