package main

// SmallBank on immudb: keys, values and the six transactions, each one
// immudb ReadWriteTx (Balance: a ReadOnlyTx) retried on ErrTxReadConflict.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/codenotary/immudb/embedded/store"
)

// txType is one of SmallBank's six transactions.
type txType int

// The six SmallBank transactions, in BenchBase's order, then the range
// workload's one operation (an `R` line, not a `T` type).
const (
	txBalance txType = iota
	txDepositChecking
	txTransactSavings
	txAmalgamate
	txWriteCheck
	txSendPayment
	numTxTypes // the SmallBank types end here

	txRange  = numTxTypes // a range read (`R` line)
	numKinds = numTxTypes + 1
)

// txTypeNames are the protocol's and the result's names, indexed by txType.
var txTypeNames = [numKinds]string{
	"Balance", "DepositChecking", "TransactSavings", "Amalgamate", "WriteCheck", "SendPayment", "Range",
}

// String returns the protocol name of t.
func (t txType) String() string { return txTypeNames[t] }

// usesB tells whether the transaction has a second account.
func (t txType) usesB() bool { return t == txAmalgamate || t == txSendPayment }

// parseTxType maps a SmallBank type's protocol name to its txType ("Range" is
// not one: ranges come on `R` lines).
func parseTxType(s string) (txType, bool) {
	for i, n := range txTypeNames[:numTxTypes] {
		if n == s {
			return txType(i), true
		}
	}
	return 0, false
}

// txReq is one parsed `T` line, or (typ txRange) one `R` line.
type txReq struct {
	client    int
	seq       uint64
	typ       txType
	a, b      uint64
	amount    int64
	lo, count uint64 // txRange: ids lo..lo+count-1
}

// Initial balances of every account.
const (
	initialSavings  = 1000
	initialChecking = 50
)

// savingsKey is 's' followed by the 8-byte big-endian account id.
func savingsKey(id uint64) []byte { return accountKey('s', id) }

// checkingKey is 'c' followed by the 8-byte big-endian account id.
func checkingKey(id uint64) []byte { return accountKey('c', id) }

// accountKey builds a 9-byte key: the table letter and the big-endian id.
func accountKey(table byte, id uint64) []byte {
	k := make([]byte, 9)
	k[0] = table
	binary.BigEndian.PutUint64(k[1:], id)
	return k
}

// encodeMoney is an 8-byte big-endian two's-complement int64.
func encodeMoney(v int64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, uint64(v))
	return b
}

// decodeMoney is the inverse of encodeMoney.
func decodeMoney(b []byte) (int64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("balance value has %d bytes, want 8", len(b))
	}
	return int64(binary.BigEndian.Uint64(b)), nil
}

// readRec is one value a transaction read: the key, the entry's metadata,
// the raw value and the id of the transaction that wrote it (what
// VerifiableGet proves).
type readRec struct {
	key   []byte
	md    *store.KVMetadata
	value []byte
	tx    uint64
}

// writeRec is one entry a committed transaction wrote.
type writeRec struct {
	key   []byte
	value []byte
}

// txOutcome is what one SmallBank transaction did.
type txOutcome struct {
	aborted bool            // a business abort (no write)
	hdr     *store.TxHeader // the committed header; nil if nothing was written
	reads   []readRec       // every value read, once per key
	writes  []writeRec      // every entry written (when hdr != nil)
	retries int             // ErrTxReadConflict retries
}

// acct is a key a transaction touches, with its value as read and as to be
// written.
type acct struct {
	key   []byte
	val   int64
	dirty bool
}

// txWork is the per-attempt working set: each key is read at most once, then
// updated in memory, and the dirty ones are written at commit.
type txWork struct {
	ctx   context.Context
	tx    *store.OngoingTx
	accts []acct
	reads []readRec

	// read, when set (server mode), reads a key instead of tx.Get: it
	// returns the value and the id of the transaction that wrote it.
	read func(key []byte) (readRec, error)
}

// get returns the slot of key, reading it through the transaction the first
// time.
func (w *txWork) get(key []byte) (*acct, error) {
	for i := range w.accts {
		if string(w.accts[i].key) == string(key) {
			return &w.accts[i], nil
		}
	}
	var rec readRec
	if w.read != nil {
		var err error
		if rec, err = w.read(key); err != nil {
			return nil, err
		}
	} else {
		ref, err := w.tx.Get(w.ctx, key)
		if err != nil {
			return nil, fmt.Errorf("get %x: %w", key, err)
		}
		raw, err := ref.Resolve()
		if err != nil {
			return nil, fmt.Errorf("resolve %x: %w", key, err)
		}
		rec = readRec{key: key, md: ref.KVMetadata(), value: raw, tx: ref.Tx()}
	}
	v, err := decodeMoney(rec.value)
	if err != nil {
		return nil, fmt.Errorf("key %x: %w", key, err)
	}
	w.reads = append(w.reads, rec)
	w.accts = append(w.accts, acct{key: key, val: v})
	return &w.accts[len(w.accts)-1], nil
}

// val reads key (once) and returns its balance.
func (w *txWork) val(key []byte) (int64, error) {
	a, err := w.get(key)
	if err != nil {
		return 0, err
	}
	return a.val, nil
}

// balances reads account a's savings, then its checking.
func (w *txWork) balances(a uint64) (savings, checking int64, err error) {
	if savings, err = w.val(savingsKey(a)); err != nil {
		return 0, 0, err
	}
	checking, err = w.val(checkingKey(a))
	return savings, checking, err
}

// set stores a new balance for key (already read), to be written at commit.
func (w *txWork) set(key []byte, v int64) error {
	a, err := w.get(key)
	if err != nil {
		return err
	}
	a.val = v
	a.dirty = true
	return nil
}

// runSmallBank executes req against st, retrying the whole transaction on
// ErrTxReadConflict, and returns what it read and wrote.
func runSmallBank(ctx context.Context, st *store.ImmuStore, req txReq) (txOutcome, error) {
	retries := 0
	for {
		out, err := attemptSmallBank(ctx, st, req)
		if errors.Is(err, store.ErrTxReadConflict) {
			retries++
			continue
		}
		out.retries = retries
		return out, err
	}
}

// attemptSmallBank runs one attempt of req in one immudb transaction.
func attemptSmallBank(ctx context.Context, st *store.ImmuStore, req txReq) (txOutcome, error) {
	mode := store.ReadWriteTx
	if req.typ == txBalance {
		mode = store.ReadOnlyTx
	}
	tx, err := st.NewTx(ctx, store.DefaultTxOptions().WithMode(mode))
	if err != nil {
		return txOutcome{}, fmt.Errorf("NewTx: %w", err)
	}
	w := &txWork{ctx: ctx, tx: tx}
	aborted, err := applySmallBank(w, req)
	if err != nil {
		_ = tx.Cancel()
		return txOutcome{}, err
	}
	var writes []writeRec
	for _, a := range w.accts {
		if a.dirty {
			writes = append(writes, writeRec{key: a.key, value: encodeMoney(a.val)})
		}
	}
	if aborted || len(writes) == 0 {
		_ = tx.Cancel()
		return txOutcome{aborted: aborted, reads: w.reads}, nil
	}
	for _, wr := range writes {
		if err := tx.Set(wr.key, nil, wr.value); err != nil {
			_ = tx.Cancel()
			return txOutcome{}, fmt.Errorf("set %x: %w", wr.key, err)
		}
	}
	hdr, err := tx.Commit(ctx)
	if err != nil {
		return txOutcome{}, err // ErrTxReadConflict is retried by the caller
	}
	return txOutcome{hdr: hdr, reads: w.reads, writes: writes}, nil
}

// applySmallBank runs the transaction's logic on the working set (BenchBase
// SmallBank with integer money). It returns true for a business abort.
// When a == b the operations apply in order to the same keys.
func applySmallBank(w *txWork, r txReq) (bool, error) {
	a, b, v := r.a, r.b, r.amount
	switch r.typ {
	case txBalance:
		_, _, err := w.balances(a)
		return false, err

	case txDepositChecking:
		c, err := w.val(checkingKey(a))
		if err != nil {
			return false, err
		}
		return false, w.set(checkingKey(a), c+v)

	case txTransactSavings:
		s, err := w.val(savingsKey(a))
		if err != nil {
			return false, err
		}
		if s+v < 0 {
			return true, nil
		}
		return false, w.set(savingsKey(a), s+v)

	case txAmalgamate:
		s, c, err := w.balances(a)
		if err != nil {
			return false, err
		}
		t := s + c
		if err := w.set(savingsKey(a), 0); err != nil {
			return false, err
		}
		if err := w.set(checkingKey(a), 0); err != nil {
			return false, err
		}
		cb, err := w.val(checkingKey(b))
		if err != nil {
			return false, err
		}
		return false, w.set(checkingKey(b), cb+t)

	case txWriteCheck:
		s, c, err := w.balances(a)
		if err != nil {
			return false, err
		}
		debit := v
		if s+c < v {
			debit = v + 1 // overdraft penalty
		}
		return false, w.set(checkingKey(a), c-debit)

	case txSendPayment:
		ca, err := w.val(checkingKey(a))
		if err != nil {
			return false, err
		}
		if ca < v {
			return true, nil
		}
		if err := w.set(checkingKey(a), ca-v); err != nil {
			return false, err
		}
		cb, err := w.val(checkingKey(b))
		if err != nil {
			return false, err
		}
		return false, w.set(checkingKey(b), cb+v)
	}
	return false, fmt.Errorf("unknown transaction type %d", r.typ)
}
