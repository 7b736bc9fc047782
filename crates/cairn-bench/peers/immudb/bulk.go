package main

// The storage-growth workload (STORE) and the range workload's load (RLOAD):
// bulk writes through writeBatches, then the bytes on disk.

import (
	"encoding/binary"
	"fmt"
	"io/fs"
	"path/filepath"
	"time"

	"github.com/codenotary/immudb/embedded/store"
)

// Sizes of the STORE and RLOAD workloads.
const (
	storeValueLen  = 100  // bytes of a STORE record's value
	maxStoreBatch  = 1000 // records per STORE transaction at most (MaxTxEntries is 1,024)
	rangeKeysPerTx = loadKeysPerTx
)

// recordKey is STORE's key of record id: 'r' and the 8-byte big-endian id.
func recordKey(id uint64) []byte { return accountKey('r', id) }

// rangeKey is RLOAD's key of id: 'k' and the 8-byte big-endian id.
func rangeKey(id uint64) []byte { return accountKey('k', id) }

// rangeValue is RLOAD's value of id: id as an 8-byte big-endian int64.
func rangeValue(id uint64) []byte { return encodeMoney(int64(id)) }

// splitMix64 is one step of the SplitMix64 generator (Steele, Lea and Flood,
// 2014): it advances *state by the golden gamma and returns the mixed output.
func splitMix64(state *uint64) uint64 {
	*state += 0x9e3779b97f4a7c15
	z := *state
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// recordValue is STORE's value of record id: the first 100 bytes of the
// outputs of a SplitMix64 generator seeded with id, each output as 8
// little-endian bytes (13 outputs, the last cut to 4 bytes). Effectively
// incompressible, and distinct for every id.
func recordValue(id uint64) []byte {
	v := make([]byte, 13*8)
	state := id
	for i := 0; i < 13; i++ {
		binary.LittleEndian.PutUint64(v[8*i:], splitMix64(&state))
	}
	return v[:storeValueLen]
}

// storeReply is the reply to STORE.
type storeReply struct {
	Event        string           `json:"event"`
	Records      uint64           `json:"records"`
	Seconds      float64          `json:"seconds"`
	Txs          int              `json:"txs"`
	FlushSeconds float64          `json:"flush_seconds"`
	DiskBytes    int64            `json:"disk_bytes"`
	DiskSplit    map[string]int64 `json:"disk_split"`
	Measured     string           `json:"measured"`
}

// storeRecords writes count new records (ids continuing from the records this
// peer has stored so far), batch per transaction, waits until immudb has
// indexed them, flushes the index to disk and measures the store's files:
// with the store open when it is synced, else closed (and opened again).
// STORE comes before any T or R line (checked by the caller), so that no
// client, verifier or auditor uses the store while it is closed.
func (p *Peer) storeRecords(count, batch uint64) (*storeReply, error) {
	paused, err := p.pause()
	if err != nil {
		return nil, err
	}
	defer paused()
	start := time.Now()
	first := p.storeNext
	txs, lastTx, err := p.writeBatches(first, count, batch, "store records", func(tx *store.OngoingTx, id uint64) error {
		return tx.Set(recordKey(id), nil, recordValue(id))
	})
	if err != nil {
		return nil, err
	}
	p.storeNext += count
	if lastTx > 0 {
		if err := p.st.WaitForIndexingUpto(p.ctx, lastTx); err != nil {
			return nil, fmt.Errorf("waiting for indexing: %w", err)
		}
	}
	secs := time.Since(start).Seconds()
	flushStart := time.Now()
	// Writes the index's in-memory nodes to its files and fsyncs them
	// (cleanupPercentage 0: no cleanup of old index files).
	if err := p.st.FlushIndexes(0, true); err != nil {
		return nil, fmt.Errorf("FlushIndexes: %w", err)
	}
	flushSecs := time.Since(flushStart).Seconds()
	measured := "open"
	if !p.cfg.Synced {
		// Not synced, the value log's and the transaction log's write
		// buffers (4 MiB each) reach their files only when full or at
		// close: measure a closed store, then open it again.
		measured = "closed"
		if err := p.st.Close(); err != nil {
			return nil, fmt.Errorf("closing the store to measure it: %w", err)
		}
	}
	split, total, err := diskSplit(p.cfg.Dir)
	if err != nil {
		return nil, err
	}
	if !p.cfg.Synced {
		if p.st, err = store.Open(p.cfg.Dir, storeOptions(p.cfg)); err != nil {
			return nil, fmt.Errorf("opening the store again: %w", err)
		}
	}
	fmt.Fprintf(p.logw, "cairn-immudb-peer: stored records %d..%d in %d transactions, %.2f s (+%.2f s index flush), %d bytes on disk\n",
		first, p.storeNext, txs, secs, flushSecs, total)
	return &storeReply{Event: "stored", Records: p.storeNext, Seconds: secs, Txs: txs, FlushSeconds: flushSecs,
		DiskBytes: total, DiskSplit: split, Measured: measured}, nil
}

// rloadReply is the reply to RLOAD.
type rloadReply struct {
	Event     string  `json:"event"`
	Keys      uint64  `json:"keys"`
	Seconds   float64 `json:"seconds"`
	Txs       int     `json:"txs"`
	DiskBytes int64   `json:"disk_bytes"`
}

// rload writes the range workload's keys 0..keys-1 in transactions of
// rangeKeysPerTx keys and waits until immudb has indexed them.
func (p *Peer) rload(keys uint64) (*rloadReply, error) {
	paused, err := p.pause()
	if err != nil {
		return nil, err
	}
	defer paused()
	start := time.Now()
	txs, lastTx, err := p.writeBatches(0, keys, rangeKeysPerTx, "range keys", func(tx *store.OngoingTx, id uint64) error {
		return tx.Set(rangeKey(id), nil, rangeValue(id))
	})
	if err != nil {
		return nil, err
	}
	if err := p.st.WaitForIndexingUpto(p.ctx, lastTx); err != nil {
		return nil, fmt.Errorf("waiting for indexing: %w", err)
	}
	p.rangeKeys = keys
	secs := time.Since(start).Seconds()
	disk, err := diskBytes(p.cfg.Dir)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(p.logw, "cairn-immudb-peer: loaded %d range keys in %d transactions, %.2f s\n", keys, txs, secs)
	return &rloadReply{Event: "rloaded", Keys: keys, Seconds: secs, Txs: txs, DiskBytes: disk}, nil
}

// diskSplit sums the sizes of the regular files under dir by the directory
// they are in, relative to dir, with '/' separators (immudb's store: "val_0"
// value log, "tx" transaction log, "commit" commit log, "aht/data",
// "aht/tree", "aht/commit" the Alh tree, "index/nodes", "index/history",
// "index/commit" the B-tree index; a file directly in dir counts under its
// own name), and in total.
func diskSplit(dir string) (map[string]int64, int64, error) {
	split := map[string]int64{}
	var total int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		where := filepath.ToSlash(filepath.Dir(rel))
		if where == "." {
			where = rel
		}
		split[where] += info.Size()
		total += info.Size()
		return nil
	})
	return split, total, err
}
