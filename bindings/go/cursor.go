package cairn

/*
#include "cairn.h"
*/
import "C"

import (
	"iter"
	"sync"
	"unsafe"
)

// cursorChunk is how many entries a Cursor reads per call into the engine: one cgo call per
// 256 entries, and at most 256 entries copied into Go memory ahead of the caller.
const cursorChunk = 256

// Cursor walks a key range of a table in key order, as the table was when the cursor was
// opened (later updates are invisible through it). Make one with Table.Scan; Close it when
// done. Use it from one goroutine at a time.
//
//	c, err := t.Scan(nil, nil)
//	if err != nil { ... }
//	defer c.Close()
//	for key, value := range c.All() { ... }
//	if err := c.Err(); err != nil { ... }
type Cursor struct {
	mu     sync.Mutex // held by every call, and by free
	ptr    *C.cairn_cursor
	table  *Table
	keys   [][]byte // entries read ahead, from pos on
	values [][]byte
	pos    int
	key    []byte
	value  []byte
	ended  bool // the C cursor reached the end of its range
	err    error
}

// Scan opens a cursor over the keys k with start <= k < end. A nil start means from the first
// key, a nil end to the last (an empty but non-nil bound is the empty key).
func (t *Table) Scan(start, end []byte) (*Cursor, error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.ptr == nil {
		return nil, closedError("table")
	}
	startPtr, endPtr := (*C.uint8_t)(nil), (*C.uint8_t)(nil)
	if start != nil {
		startPtr = bytesPtr(start)
	}
	if end != nil {
		endPtr = bytesPtr(end)
	}
	var ptr *C.cairn_cursor
	var cerr *C.cairn_error
	code := C.cairn_cursor_open(t.ptr, startPtr, C.size_t(len(start)), endPtr,
		C.size_t(len(end)), &ptr, &cerr)
	if err := fromC(code, cerr); err != nil {
		return nil, err
	}
	c := &Cursor{ptr: ptr, table: t}
	t.cmu.Lock()
	t.cursors[c] = struct{}{}
	t.cmu.Unlock()
	return c, nil
}

// Next moves to the next entry: true when there is one (read it with Key and Value), false at
// the end of the range or after an error (see Err).
func (c *Cursor) Next() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.key, c.value = nil, nil
	if c.pos == len(c.keys) {
		if c.ended || c.err != nil || !c.fill() {
			return false
		}
	}
	c.key, c.value = c.keys[c.pos], c.values[c.pos]
	c.keys[c.pos], c.values[c.pos] = nil, nil
	c.pos++
	return true
}

// fill reads the next chunk of entries from the engine: false when there are none, or on an
// error (kept for Err).
func (c *Cursor) fill() bool {
	if c.ptr == nil {
		c.err = closedError("cursor")
		return false
	}
	var entries C.cairn_entries
	var cerr *C.cairn_error
	code := C.cairn_cursor_read(c.ptr, cursorChunk, &entries, &cerr)
	if err := fromC(code, cerr); err != nil {
		c.err = err
		return false
	}
	defer C.cairn_entries_free(&entries)
	n := int(entries.count)
	c.ended = n < cursorChunk
	c.keys = split(c.keys[:0], entries.keys, entries.keys_len, entries.key_offsets, n)
	c.values = split(c.values[:0], entries.values, entries.values_len, entries.value_offsets, n)
	c.pos = 0
	return n > 0
}

// split copies n byte strings, laid end to end in C memory at data with n + 1 offsets, into one
// Go allocation and appends them to dst (each capped at its own length).
func split(dst [][]byte, data *C.uint8_t, length C.size_t, offsets *C.size_t, n int) [][]byte {
	if n == 0 {
		return dst
	}
	all := goBytes(data, length)
	offs := unsafe.Slice(offsets, n+1)
	for i := 0; i < n; i++ {
		start, end := offs[i], offs[i+1]
		if start == end {
			dst = append(dst, empty)
		} else {
			dst = append(dst, all[start:end:end])
		}
	}
	return dst
}

// Key is the current entry's key (valid until the caller drops it: it is the caller's copy).
func (c *Cursor) Key() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.key
}

// Value is the current entry's value (a key with a blob gives its value only).
func (c *Cursor) Value() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.value
}

// Err is the error that ended the walk, or nil when it reached the end of its range (or has
// not ended yet).
func (c *Cursor) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Seek moves the cursor to the first entry whose key is >= key within its range, forwards or
// backwards: the next Next returns it. The cursor keeps its view.
func (c *Cursor) Seek(key []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ptr == nil {
		return closedError("cursor")
	}
	var cerr *C.cairn_error
	if err := fromC(C.cairn_cursor_seek(c.ptr, bytesPtr(key), C.size_t(len(key)), &cerr), cerr); err != nil {
		return err
	}
	c.keys, c.values, c.pos, c.ended, c.err = c.keys[:0], c.values[:0], 0, false, nil
	return nil
}

// All is the rest of the walk as a Go 1.23 iterator of (key, value) pairs, for a range loop.
// The loop ends at the end of the range or at an error: check Err after it.
func (c *Cursor) All() iter.Seq2[[]byte, []byte] {
	return func(yield func([]byte, []byte) bool) {
		for c.Next() {
			if !yield(c.Key(), c.Value()) {
				return
			}
		}
	}
}

// Close frees the cursor. Closing twice does nothing.
func (c *Cursor) Close() error {
	c.free()
	t := c.table
	t.cmu.Lock()
	delete(t.cursors, c)
	t.cmu.Unlock()
	return nil
}

// free frees the cursor's handle, once; later calls fail with ErrClosed.
func (c *Cursor) free() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ptr == nil {
		return
	}
	C.cairn_cursor_free(c.ptr)
	c.ptr = nil
	if c.err == nil && (!c.ended || c.pos < len(c.keys)) {
		c.err = closedError("cursor") // closed before the end of its range
	}
	c.keys, c.values, c.pos = nil, nil, 0
}
