package cairn

/*
#include "cairn.h"
*/
import "C"

import "fmt"

// Code is one of the C API's error codes (the CAIRN_ERR_* constants of cairn.h).
type Code int

// The error codes, with the values of cairn.h.
const (
	CodeInvalidArgument    Code = C.CAIRN_ERR_INVALID_ARGUMENT
	CodeIO                 Code = C.CAIRN_ERR_IO
	CodeCorrupt            Code = C.CAIRN_ERR_CORRUPT
	CodeLocked             Code = C.CAIRN_ERR_LOCKED
	CodeClosed             Code = C.CAIRN_ERR_CLOSED
	CodeNotFound           Code = C.CAIRN_ERR_NOT_FOUND
	CodeExists             Code = C.CAIRN_ERR_EXISTS
	CodeTooLarge           Code = C.CAIRN_ERR_TOO_LARGE
	CodeReadOnly           Code = C.CAIRN_ERR_READ_ONLY
	CodeNotDurable         Code = C.CAIRN_ERR_NOT_DURABLE
	CodeNotAuthenticated   Code = C.CAIRN_ERR_NOT_AUTHENTICATED
	CodeLogFailed          Code = C.CAIRN_ERR_LOG_FAILED
	CodeTableBroken        Code = C.CAIRN_ERR_TABLE_BROKEN
	CodeUnsupportedVersion Code = C.CAIRN_ERR_UNSUPPORTED_VERSION
	CodeLabelMismatch      Code = C.CAIRN_ERR_LABEL_MISMATCH
	CodeConflict           Code = C.CAIRN_ERR_CONFLICT
	CodeProofInvalid       Code = C.CAIRN_ERR_PROOF_INVALID
	CodePanic              Code = C.CAIRN_ERR_PANIC
	CodeOther              Code = C.CAIRN_ERR_OTHER
)

// String is the code's name in cairn.h, such as "CAIRN_ERR_LOCKED".
func (c Code) String() string {
	return C.GoString(C.cairn_code_name(C.int(c)))
}

// Error is every error this package returns: the C API's code and its message. Compare it
// with the sentinel values (ErrLocked, ErrClosed, ...) through errors.Is, which matches codes.
type Error struct {
	// Code is the C API's error code.
	Code Code
	// Message says what went wrong, naming the file, key or argument where it can.
	Message string
}

// Error formats the error as "cairn: CODE: message".
func (e *Error) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("cairn: %s", e.Code)
	}
	return fmt.Sprintf("cairn: %s: %s", e.Code, e.Message)
}

// Is reports whether target is an *Error of the same code (so errors.Is(err, ErrLocked)
// holds for every error with CodeLocked, whatever its message).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Sentinel errors for errors.Is, one per code that a caller is likely to handle.
var (
	// ErrInvalidArgument: a bad table or snapshot name, a key too long, an invalid update.
	ErrInvalidArgument = &Error{Code: CodeInvalidArgument}
	// ErrIO: an operating-system I/O error.
	ErrIO = &Error{Code: CodeIO}
	// ErrCorrupt: data on disk failed its checks.
	ErrCorrupt = &Error{Code: CodeCorrupt}
	// ErrLocked: another live session holds the directory.
	ErrLocked = &Error{Code: CodeLocked}
	// ErrClosed: the session, table or cursor was closed.
	ErrClosed = &Error{Code: CodeClosed}
	// ErrNotFound: the session directory or snapshot named does not exist.
	ErrNotFound = &Error{Code: CodeNotFound}
	// ErrExists: the snapshot named exists already.
	ErrExists = &Error{Code: CodeExists}
	// ErrTooLarge: a key, value or table beyond the engine's limits.
	ErrTooLarge = &Error{Code: CodeTooLarge}
	// ErrReadOnly: a write to a session opened read-only.
	ErrReadOnly = &Error{Code: CodeReadOnly}
	// ErrNotDurable: a durable operation on a table without a write-ahead log.
	ErrNotDurable = &Error{Code: CodeNotDurable}
	// ErrNotAuthenticated: a root or proof of a table created without authentication.
	ErrNotAuthenticated = &Error{Code: CodeNotAuthenticated}
	// ErrLogFailed: the write-ahead log failed; reopen the session.
	ErrLogFailed = &Error{Code: CodeLogFailed}
	// ErrLabelMismatch: a snapshot's label is not the one given.
	ErrLabelMismatch = &Error{Code: CodeLabelMismatch}
	// ErrProofInvalid: a proof did not verify.
	ErrProofInvalid = &Error{Code: CodeProofInvalid}
)

// fromC turns a failed call's code and error handle into an *Error and frees the handle.
func fromC(code C.int, cerr *C.cairn_error) error {
	if code == C.CAIRN_OK {
		C.cairn_error_free(cerr)
		return nil
	}
	e := &Error{Code: Code(code)}
	if cerr != nil {
		e.Message = C.GoString(C.cairn_error_message(cerr))
		C.cairn_error_free(cerr)
	}
	return e
}

// closedError is the error of a call on a handle this package has already freed.
func closedError(what string) error {
	return &Error{Code: CodeClosed, Message: what + " is closed"}
}
