package main

// The range workload: a client reads the keys of ids lo..lo+count-1 in one
// read-only snapshot with immudb's key reader, checks them against the values
// RLOAD wrote, and verifies them (immediate: per transaction that wrote them,
// one dual proof shared by its entries; deferred: one promise per entry).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/codenotary/immudb/embedded/store"
)

// runRange executes one `R` line and its verification, and records its
// latency (from start to verified) as type Range.
func (c *client) runRange(req txReq) error {
	p := c.p
	start := time.Now()
	reads, err := scanRange(p.ctx, p.st, req.lo, req.count)
	if err != nil {
		return err
	}
	switch p.mode {
	case verifyImmediate:
		if err := c.verifyRange(reads); err != nil {
			return err
		}
	case verifyDeferred:
		p.verifier.add(txOutcome{reads: reads})
	}
	c.stats.record(txRange, time.Since(start))
	c.stats.committed++
	c.stats.entriesRead += uint64(len(reads))
	return nil
}

// scanRange reads the keys of ids lo..lo+count-1 (both included) in one
// read-only transaction with a key reader over that key range, and checks
// that it returned exactly those keys, in order, with RLOAD's values. A
// mismatch is an error (exit 1).
func scanRange(ctx context.Context, st *store.ImmuStore, lo, count uint64) ([]readRec, error) {
	tx, err := st.NewTx(ctx, store.DefaultTxOptions().WithMode(store.ReadOnlyTx))
	if err != nil {
		return nil, fmt.Errorf("NewTx: %w", err)
	}
	defer tx.Cancel()
	r, err := tx.NewKeyReader(store.KeyReaderSpec{
		Prefix:        []byte{'k'},
		SeekKey:       rangeKey(lo),
		EndKey:        rangeKey(lo + count - 1),
		InclusiveSeek: true,
		InclusiveEnd:  true,
	})
	if err != nil {
		return nil, fmt.Errorf("NewKeyReader: %w", err)
	}
	defer r.Close()
	reads := make([]readRec, 0, count)
	for {
		key, ref, err := r.Read(ctx)
		if errors.Is(err, store.ErrNoMoreEntries) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("range %d+%d: key reader: %w", lo, count, err)
		}
		i := uint64(len(reads))
		if i >= count {
			return nil, fmt.Errorf("range %d+%d: more than %d entries (key %x)", lo, count, count, key)
		}
		if want := rangeKey(lo + i); !bytes.Equal(key, want) {
			return nil, fmt.Errorf("range %d+%d: entry %d is key %x, want %x", lo, count, i, key, want)
		}
		value, err := ref.Resolve()
		if err != nil {
			return nil, fmt.Errorf("range %d+%d: resolve %x: %w", lo, count, key, err)
		}
		if want := rangeValue(lo + i); !bytes.Equal(value, want) {
			return nil, fmt.Errorf("range %d+%d: key %x has value %x, want %x", lo, count, key, value, want)
		}
		reads = append(reads, readRec{key: bytes.Clone(key), md: ref.KVMetadata(), value: value, tx: ref.Tx()})
	}
	if uint64(len(reads)) != count {
		return nil, fmt.Errorf("range %d+%d: %d entries, want %d", lo, count, len(reads), count)
	}
	return reads, nil
}

// verifyRange verifies every entry of a range as VerifiedGet would, before
// the client's next operation: for each transaction that wrote some of them
// (in increasing tx order), the entries' inclusion proofs in it and one dual
// proof between it and the client's state, which the client then moves to
// the newer of the two.
func (c *client) verifyRange(reads []readRec) error {
	p := c.p
	byTx := map[uint64][]readRec{}
	for _, r := range reads {
		byTx[r.tx] = append(byTx[r.tx], r)
	}
	txs := make([]uint64, 0, len(byTx))
	for tx := range byTx {
		txs = append(txs, tx)
	}
	sort.Slice(txs, func(i, j int) bool { return txs[i] < txs[j] })
	for _, vTx := range txs {
		group := byTx[vTx]
		if err := p.st.WaitForTx(p.ctx, vTx, false); err != nil {
			return fmt.Errorf("WaitForTx(%d): %w", vTx, err)
		}
		keys := make([][]byte, len(group))
		for i, r := range group {
			keys[i] = r.key
		}
		proof, err := proveEntries(p.st, c.holder, keys, vTx, c.state.id)
		if err != nil {
			return err
		}
		n := proof.size()
		c.stats.proofBytes += uint64(n)
		c.stats.readProofBytes += float64(n)
		tamper(proof)
		st, err := verifyEntries(c.state, group, vTx, proof)
		if err != nil {
			return err
		}
		c.state = st
		c.stats.verifiedReads += uint64(len(group))
	}
	return nil
}
