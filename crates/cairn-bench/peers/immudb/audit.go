package main

// Auditing (config "audit_block": N): immudb's model of an auditor, a party
// that holds a trusted state (tx id, Alh) and checks the server's history as
// it grows. While the clients run, an auditor goroutine audits every block of
// at least N new transactions; at END, a full audit checks the whole store
// from tx 1.
//
// As in verify.go, a "server" half reads what immudb's API would send (the
// dual proof between two states, as VerifiableTxById with ProveSinceTx; the
// transactions, as TxScan: schema.TxToProto, entries with their value hashes,
// no values), and an "auditor" half checks it, sharing nothing but those
// protobuf messages.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"github.com/codenotary/immudb/embedded/ahtree"
	"github.com/codenotary/immudb/embedded/htree"
	"github.com/codenotary/immudb/embedded/store"
	"github.com/codenotary/immudb/pkg/api/schema"
	"google.golang.org/protobuf/proto"
)

// genesisAlh is the Alh before tx 1 (immudb's store starts its chain at
// sha256 of nothing): tx 1's PrevAlh.
var genesisAlh = sha256.Sum256(nil)

// auditCount is what one audit covered.
type auditCount struct {
	txs, entries, protoBytes uint64
}

// auditor is the block auditor goroutine's state.
type auditor struct {
	p      *Peer
	block  uint64
	holder *store.Tx // TxScan buffer

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	first  uint64      // the tx id of the state trusted on first use
	state  clientState // the last audited state
	counts auditCount
	blocks int64
	// latency of each block's audit, µs: from the moment the auditor takes
	// the new state to the moment the block is checked.
	latency *hdrhistogram.Histogram
}

// startAuditor starts the block auditor: its first state is the store's
// committed state now (trusted on first use), then it audits a block each
// time at least block transactions have been committed past its state.
func startAuditor(p *Peer, block uint64) *auditor {
	ctx, cancel := context.WithCancel(context.Background())
	id, alh := p.st.CommittedAlh()
	a := &auditor{
		p:       p,
		block:   block,
		holder:  store.NewTx(p.st.MaxTxEntries(), p.st.MaxKeyLen()),
		ctx:     ctx,
		cancel:  cancel,
		done:    make(chan struct{}),
		first:   id,
		state:   clientState{id: id, alh: alh},
		latency: newLatencyHistogram(),
	}
	go a.loop()
	return a
}

// loop waits for each block and audits it, until stopped or failed.
func (a *auditor) loop() {
	defer close(a.done)
	st := a.p.st
	for {
		err := st.WaitForTx(a.ctx, a.state.id+a.block, false)
		if a.ctx.Err() != nil {
			// Stopped (END or a failure): a block that came due before
			// the stop is still audited.
			if !a.p.isFailed() && st.LastCommittedTxID() >= a.state.id+a.block {
				if err := a.auditBlock(); err != nil {
					a.p.fail(withContext("audit", err))
				}
			}
			return
		}
		if err != nil {
			a.p.fail(internal("audit: WaitForTx", err))
			return
		}
		if a.p.isFailed() {
			return
		}
		if err := a.auditBlock(); err != nil {
			a.p.fail(withContext("audit", err))
			return
		}
	}
}

// stop lets the block in progress (or one that is due) finish and stops the
// goroutine.
func (a *auditor) stop() {
	a.cancel()
	<-a.done
}

// auditBlock audits the transactions from the state's tx + 1 to the newest
// committed one and adopts the newest as the new state.
func (a *auditor) auditBlock() error {
	start := time.Now()
	id, alh := a.p.st.CommittedAlh() // the server's current state
	to := clientState{id: id, alh: alh}
	if to.id <= a.state.id {
		return nil
	}
	c, err := auditHistory(a.p.st, a.holder, a.state, to, nil, nil)
	if err != nil {
		return err
	}
	a.state = to
	a.blocks++
	a.counts.txs += c.txs
	a.counts.entries += c.entries
	a.counts.protoBytes += c.protoBytes
	us := time.Since(start).Microseconds()
	if us < 1 {
		us = 1
	}
	_ = a.latency.RecordValue(us)
	return nil
}

// auditHistory audits the transactions from.id+1 .. to.id against the
// trusted state from (from.id 0: the empty store, whose Alh is genesisAlh)
// and the server's claimed state to:
//
//  1. if from.id > 0, the dual proof from `from` to `to` must verify
//     (store.VerifyDualProof: the linear proof and the Alh tree's inclusion
//     and consistency proofs between the two states);
//  2. for every transaction, in order, from TxScan: its id is the next one,
//     its Eh is recomputed from its entries (each entry's digest,
//     TxEntryDigest of the header's version, over key, metadata and value
//     hash, hashed into immudb's Merkle tree htree) and must equal the
//     header's Eh, and its PrevAlh must be the Alh of the transaction before
//     (the trusted one for the first); its Alh is then computed from the
//     checked header;
//  3. the last transaction's Alh must be to's Alh.
//
// With aht (the full audit) every header's BlRoot must also be the root of
// the auditor's own Alh tree, built from the Alhs it checked, at the
// header's BlTxID. onAlh, if set, sees every checked (id, Alh).
func auditHistory(st *store.ImmuStore, holder *store.Tx, from, to clientState, aht *ahtree.AHtree,
	onAlh func(id uint64, alh [sha256.Size]byte) error) (auditCount, error) {
	var c auditCount
	if to.id <= from.id {
		return c, nil
	}
	if from.id > 0 {
		dp, err := proveDual(st, from.id, to.id)
		if err != nil {
			return c, err
		}
		c.protoBytes += uint64(proto.Size(dp))
		tamper(dp)
		if err := verifyAdvance(from, to, dp); err != nil {
			return c, err
		}
	}
	prevAlh := from.alh
	if from.id == 0 {
		prevAlh = genesisAlh
	}
	// The server's TxScan from from.id+1.
	r, err := st.NewTxReader(from.id+1, false, holder)
	if err != nil {
		return c, fmt.Errorf("NewTxReader(%d): %w", from.id+1, err)
	}
	for id := from.id + 1; id <= to.id; id++ {
		tx, err := r.Read()
		if err != nil {
			return c, fmt.Errorf("reading tx %d: %w", id, err)
		}
		ptx := schema.TxToProto(tx)
		c.protoBytes += uint64(proto.Size(ptx))
		tamper(ptx)
		hdr, err := auditTx(id, prevAlh, ptx)
		if err != nil {
			return c, err
		}
		alh := hdr.Alh()
		if aht != nil {
			if err := checkBlRoot(aht, hdr); err != nil {
				return c, err
			}
			if _, _, err := aht.Append(alh[:]); err != nil {
				return c, fmt.Errorf("the auditor's Alh tree: %w", err)
			}
		}
		if onAlh != nil {
			if err := onAlh(id, alh); err != nil {
				return c, err
			}
		}
		prevAlh = alh
		c.txs++
		c.entries += uint64(hdr.NEntries)
	}
	if prevAlh != to.alh {
		return c, rejected("the chain of headers from tx %d ends at an Alh that is not state %d's", from.id+1, to.id)
	}
	return c, nil
}

// auditTx checks one transaction as TxScan sent it: its id, its Eh
// recomputed from its entries, and its PrevAlh. It returns the checked
// header, whose Alh() the caller chains on.
func auditTx(id uint64, prevAlh [sha256.Size]byte, ptx *schema.Tx) (*store.TxHeader, error) {
	if ptx == nil || ptx.Header == nil {
		return nil, rejected("tx %d: no header", id)
	}
	hdr := schema.TxHeaderFromProto(ptx.Header)
	if hdr.ID != id {
		return nil, rejected("tx %d: the server sent tx %d", id, hdr.ID)
	}
	if hdr.NEntries != len(ptx.Entries) {
		return nil, rejected("tx %d: header says %d entries, %d sent", id, hdr.NEntries, len(ptx.Entries))
	}
	// The version must be known before Alh() is computed (it panics on an
	// unknown one).
	digest, err := hdr.TxEntryDigest()
	if err != nil {
		return nil, rejected("tx %d: %v", id, err)
	}
	digests := make([][sha256.Size]byte, len(ptx.Entries))
	for i, pe := range ptx.Entries {
		if pe == nil || len(pe.HValue) != sha256.Size || pe.VLen < 0 {
			return nil, rejected("tx %d: entry %d is malformed", id, i)
		}
		e := store.NewTxEntry(pe.Key, schema.KVMetadataFromProto(pe.Metadata), int(pe.VLen), schema.DigestFromProto(pe.HValue), 0)
		if digests[i], err = digest(e); err != nil {
			return nil, rejected("tx %d: entry %d: %v", id, i, err)
		}
	}
	tree, err := htree.New(len(digests))
	if err != nil {
		return nil, fmt.Errorf("htree.New: %w", err)
	}
	if err := tree.BuildWith(digests); err != nil {
		return nil, rejected("tx %d: %v", id, err)
	}
	if tree.Root() != hdr.Eh {
		return nil, rejected("tx %d: the Eh recomputed from its %d entries is not its header's", id, len(digests))
	}
	if hdr.PrevAlh != prevAlh {
		return nil, rejected("tx %d: PrevAlh is not the Alh of tx %d", id, id-1)
	}
	return hdr, nil
}

// checkBlRoot checks hdr's Alh tree fields against the auditor's own tree,
// which holds the Alhs of txs 1..hdr.ID-1: BlTxID below the tx, and BlRoot
// the root of the tree at BlTxID (all zero bytes when BlTxID is 0).
func checkBlRoot(aht *ahtree.AHtree, hdr *store.TxHeader) error {
	if hdr.BlTxID >= hdr.ID {
		return rejected("tx %d: BlTxID %d is not below it", hdr.ID, hdr.BlTxID)
	}
	var want [sha256.Size]byte
	if hdr.BlTxID > 0 {
		root, err := aht.RootAt(hdr.BlTxID)
		if err != nil {
			return fmt.Errorf("the auditor's Alh tree at %d: %w", hdr.BlTxID, err)
		}
		want = root
	}
	if !bytes.Equal(want[:], hdr.BlRoot[:]) {
		return rejected("tx %d: BlRoot is not the root of the Alh tree at %d", hdr.ID, hdr.BlTxID)
	}
	return nil
}

// fullAuditReply is the result's "full_audit".
type fullAuditReply struct {
	Txs        uint64  `json:"txs"`
	Entries    uint64  `json:"entries"`
	Seconds    float64 `json:"seconds"`
	ProtoBytes uint64  `json:"proto_bytes"`
}

// fullAudit audits the whole store, tx 1 to the last committed one, from the
// empty state, rebuilding the Alh tree in a temporary directory; it also
// checks that the block auditor's last state (if any) is on the chain it
// recomputed.
func (p *Peer) fullAudit() (*fullAuditReply, error) {
	id, alh := p.st.CommittedAlh()
	tmp, err := os.MkdirTemp("", "cairn-immudb-audit-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	aht, err := ahtree.Open(tmp, ahtree.DefaultOptions().WithRetryableSync(false).WithAutoSync(false).WithSyncThld(1<<30))
	if err != nil {
		return nil, fmt.Errorf("the auditor's Alh tree: %w", err)
	}
	defer aht.Close()
	// Timed from here: the tree's files exist (creating them may wait on a
	// busy disk, which is not the audit's cost).
	start := time.Now()
	var check func(uint64, [sha256.Size]byte) error
	if a := p.auditor; a != nil && a.state.id > 0 {
		check = func(txID uint64, alh [sha256.Size]byte) error {
			if txID == a.state.id && alh != a.state.alh {
				return rejected("full audit: tx %d's Alh is not the one the block auditor trusted", txID)
			}
			return nil
		}
	}
	holder := store.NewTx(p.st.MaxTxEntries(), p.st.MaxKeyLen())
	c, err := auditHistory(p.st, holder, clientState{}, clientState{id: id, alh: alh}, aht, check)
	if err != nil {
		return nil, withContext("full audit", err)
	}
	secs := time.Since(start).Seconds()
	fmt.Fprintf(p.logw, "cairn-immudb-peer: full audit of txs 1..%d (%d entries) in %.2f s\n", id, c.entries, secs)
	return &fullAuditReply{Txs: c.txs, Entries: c.entries, Seconds: secs, ProtoBytes: c.protoBytes}, nil
}

// auditReply is the result's "audit".
type auditReply struct {
	Block       uint64  `json:"block"`
	Blocks      int64   `json:"blocks"`
	Txs         uint64  `json:"txs"`
	Entries     uint64  `json:"entries"`
	LatencyP50  float64 `json:"latency_ms_p50"`
	LatencyP99  float64 `json:"latency_ms_p99"`
	LatencyMax  float64 `json:"latency_ms_max"`
	LatencyMean float64 `json:"latency_ms_mean"`
	ProtoBytes  uint64  `json:"proto_bytes"`
	TrustedFrom uint64  `json:"trusted_from"`
	LastAudited uint64  `json:"last_audited"`
}

// reply summarizes the block audits (after stop).
func (a *auditor) reply() *auditReply {
	r := &auditReply{
		Block:       a.block,
		Blocks:      a.blocks,
		Txs:         a.counts.txs,
		Entries:     a.counts.entries,
		ProtoBytes:  a.counts.protoBytes,
		TrustedFrom: a.first,
		LastAudited: a.state.id,
	}
	if a.latency.TotalCount() > 0 {
		r.LatencyP50 = float64(a.latency.ValueAtQuantile(50)) / 1000
		r.LatencyP99 = float64(a.latency.ValueAtQuantile(99)) / 1000
		r.LatencyMax = float64(a.latency.Max()) / 1000
		r.LatencyMean = a.latency.Mean() / 1000
	}
	return r
}
