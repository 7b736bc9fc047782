// Package cairn is Cairn's Go binding: sessions, tables, batched lookups and updates, durable
// writes, cursors as iterators, snapshots, state roots and proofs, over Cairn's C API
// (crates/cairn-capi) through cgo.
//
// The package links the C API's static library, built by
// `cargo build --release -p cairn-capi` into the repository's target/release. With another
// target directory, point the linker at it first:
//
//	CGO_LDFLAGS="-L$CARGO_TARGET_DIR/release" go test ./...
//
// Handles (Session, Table, Cursor, Durability) hold C memory: Close them (each implements
// io.Closer). Closing a session closes its tables and cursors too; later calls on them fail
// with ErrClosed. Sessions and tables may be used from several goroutines at once, a cursor
// from one at a time. Byte slices passed in are read during the call only; byte slices
// returned belong to the caller (copied out of C memory, which is freed before the call
// returns).
package cairn

/*
#cgo CFLAGS: -I${SRCDIR}/../../crates/cairn-capi/include
#cgo LDFLAGS: -L${SRCDIR}/../../target/release -Wl,-Bstatic -lcairn_capi -Wl,-Bdynamic -lpthread -ldl -lm -lrt -lutil -lgcc_s
#include <stdlib.h>
#include "cairn.h"
*/
import "C"

import (
	"sync"
	"unsafe"
)

// Session owns one directory and the tables in it. Make one with Open; Close it when done.
type Session struct {
	mu     sync.RWMutex // held for reading by calls, for writing by Close and table opens
	ptr    *C.cairn_session
	tables map[*Table]struct{} // the tables not closed yet, closed with the session
}

// Option configures Open.
type Option func(*options)

type options struct {
	readOnly bool
}

// ReadOnly opens an existing session without taking its lock: every write fails with
// ErrReadOnly, durable tables cannot be opened (snapshots can).
func ReadOnly() Option {
	return func(o *options) { o.readOnly = true }
}

// Open opens the session in dir, creating the directory and a new session when it is missing
// or empty and recovering the session otherwise (its write-ahead log replayed). It fails with
// ErrLocked when another live session holds the directory.
func Open(dir string, opts ...Option) (*Session, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	cdir := C.CString(dir)
	defer C.free(unsafe.Pointer(cdir))
	var ptr *C.cairn_session
	var cerr *C.cairn_error
	code := C.cairn_session_open(cdir, C.bool(o.readOnly), &ptr, &cerr)
	if err := fromC(code, cerr); err != nil {
		return nil, err
	}
	return &Session{ptr: ptr, tables: map[*Table]struct{}{}}, nil
}

// Close checkpoints the durable tables when anything was logged since the last checkpoint,
// closes every table and cursor of the session (their later calls fail with ErrClosed) and
// releases the directory's lock. Closing a closed session does nothing and returns nil.
func (s *Session) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ptr == nil {
		return nil
	}
	for t := range s.tables {
		t.free()
	}
	s.tables = nil
	C.cairn_session_close(s.ptr)
	s.ptr = nil
	return nil
}

// Checkpoint saves every durable table after syncing the log, so that the next Open replays
// nothing written before.
func (s *Session) Checkpoint() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.ptr == nil {
		return closedError("session")
	}
	var cerr *C.cairn_error
	return fromC(C.cairn_session_checkpoint(s.ptr, &cerr), cerr)
}

// Table opens the durable table name (1 to 64 characters from [a-z0-9_-]), creating it when
// the session has none of that name: its writes go through the write-ahead log and survive a
// restart. An authenticated table keeps a SHA-256 state root and proves its contents (Root,
// Prove); authenticated must match an existing table's. Close the table when done (or the
// session, which closes its tables).
func (s *Session) Table(name string, authenticated bool) (*Table, error) {
	auth := AuthNone
	if authenticated {
		auth = AuthSHA256
	}
	return s.TableWithAuth(name, auth)
}

// TableWithAuth is Table with the hash named: AuthNone, AuthSHA256 or AuthBLAKE3.
func (s *Session) TableWithAuth(name string, auth Auth) (*Table, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	return s.openTable(func(out **C.cairn_table, cerr **C.cairn_error) C.int {
		return C.cairn_table_open(s.ptr, cname, C.int(auth), out, cerr)
	})
}

// OpenSnapshot opens snapshot name of the session as a new table, not durable (its updates are
// not logged; save it again to keep them). label must be the one it was saved with
// (ErrLabelMismatch otherwise); a missing snapshot is ErrNotFound.
func (s *Session) OpenSnapshot(name, label string) (*Table, error) {
	cname, clabel := C.CString(name), C.CString(label)
	defer C.free(unsafe.Pointer(cname))
	defer C.free(unsafe.Pointer(clabel))
	return s.openTable(func(out **C.cairn_table, cerr **C.cairn_error) C.int {
		return C.cairn_snapshot_open(s.ptr, cname, clabel, out, cerr)
	})
}

// openTable runs open under the session's lock and registers the table it makes.
func (s *Session) openTable(open func(**C.cairn_table, **C.cairn_error) C.int) (*Table, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ptr == nil {
		return nil, closedError("session")
	}
	var ptr *C.cairn_table
	var cerr *C.cairn_error
	if err := fromC(open(&ptr, &cerr), cerr); err != nil {
		return nil, err
	}
	t := &Table{ptr: ptr, session: s, cursors: map[*Cursor]struct{}{}}
	s.tables[t] = struct{}{}
	return t, nil
}
