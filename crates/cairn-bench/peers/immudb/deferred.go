package main

// Deferred verification: clients record promises and go on; a verifier
// goroutine checks every promise gathered since its last batch against one
// fresh state every deferred_delay_ms.

import (
	"fmt"
	"sort"
	"sync"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"github.com/codenotary/immudb/embedded/store"
	"google.golang.org/protobuf/proto"
)

// promise is a claim to verify later: key had value (with metadata md) in
// transaction tx, either because a client read it there or because the
// client's committed transaction tx wrote it.
type promise struct {
	key   []byte
	md    *store.KVMetadata
	value []byte
	tx    uint64
	read  bool
	at    time.Time // when the promise was made
}

// deferredVerifier owns the deferred mode's trusted state and statistics.
type deferredVerifier struct {
	p      *Peer
	delay  time.Duration
	holder *store.Tx // ReadTx buffer

	mu      sync.Mutex
	pending []promise

	state clientState // the verifier's trusted state (0: none yet)

	stopCh chan struct{}
	done   chan struct{}

	stats           stats                   // counters (latency histograms unused)
	latency         *hdrhistogram.Histogram // promise to verified, µs
	batches         int64                   // non-empty batches
	keys            int64                   // promises verified
	stateProofs     int64                   // dual proofs from the old state to the new
	txProofs        int64                   // dual proofs from a promised tx to the state
	inclusionProofs int64                   // entry inclusion proofs
}

// newDeferredVerifier starts the verifier goroutine.
func newDeferredVerifier(p *Peer, delay time.Duration) *deferredVerifier {
	v := &deferredVerifier{
		p:       p,
		delay:   delay,
		holder:  store.NewTx(p.st.MaxTxEntries(), p.st.MaxKeyLen()),
		stopCh:  make(chan struct{}),
		done:    make(chan struct{}),
		stats:   newStats(),
		latency: newLatencyHistogram(),
	}
	go v.loop()
	return v
}

// add records the promises of one finished transaction: one per value read
// (at the tx that wrote it) and one per entry written (at the committed tx).
func (v *deferredVerifier) add(out txOutcome) {
	now := time.Now()
	ps := make([]promise, 0, len(out.reads)+len(out.writes))
	for _, r := range out.reads {
		ps = append(ps, promise{key: r.key, md: r.md, value: r.value, tx: r.tx, read: true, at: now})
	}
	if out.hdr != nil {
		for _, w := range out.writes {
			ps = append(ps, promise{key: w.key, value: w.value, tx: out.hdr.ID, at: now})
		}
	}
	v.mu.Lock()
	v.pending = append(v.pending, ps...)
	v.mu.Unlock()
}

// loop runs a batch every delay, and a last one when stopped.
func (v *deferredVerifier) loop() {
	defer close(v.done)
	t := time.NewTicker(v.delay)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			v.runBatch()
		case <-v.stopCh:
			v.runBatch()
			return
		}
	}
}

// stop verifies what is left and stops the goroutine.
func (v *deferredVerifier) stop() {
	close(v.stopCh)
	<-v.done
}

// runBatch takes every pending promise and verifies them as one batch.
func (v *deferredVerifier) runBatch() {
	v.mu.Lock()
	batch := v.pending
	v.pending = nil
	v.mu.Unlock()
	if len(batch) == 0 || v.p.isFailed() {
		return
	}
	if err := v.verifyBatch(batch); err != nil {
		v.p.fail(withContext("deferred verification", err))
	}
}

// verifyBatch verifies a batch against one fresh state: the store's committed
// state, checked against the previous trusted state by a dual proof (trusted
// on first use), then for each distinct transaction of the batch one dual
// proof from it to the state, and for each promise the inclusion proof of its
// entry in its transaction.
func (v *deferredVerifier) verifyBatch(batch []promise) error {
	p := v.p
	st := p.st
	var maxTx uint64
	byTx := map[uint64][]int{}
	reads := 0
	for i, pr := range batch {
		if pr.tx > maxTx {
			maxTx = pr.tx
		}
		byTx[pr.tx] = append(byTx[pr.tx], i)
		if pr.read {
			reads++
		}
	}
	// Reads may have seen precommitted, not yet durable transactions.
	if err := st.WaitForTx(p.ctx, maxTx, false); err != nil {
		return fmt.Errorf("WaitForTx(%d): %w", maxTx, err)
	}

	// The fresh state, as immudb's CurrentState would give it.
	id, alh := st.CommittedAlh()
	fresh := clientState{id: id, alh: alh}
	if v.state.id != 0 {
		dp, err := proveDual(st, v.state.id, fresh.id)
		if err != nil {
			return err
		}
		n := proto.Size(dp)
		v.stats.proofBytes += uint64(n)
		v.stats.readProofBytes += float64(n) * float64(reads) / float64(len(batch))
		v.stateProofs++
		tamper(dp)
		if err := verifyAdvance(v.state, fresh, dp); err != nil {
			return err
		}
	}

	txs := make([]uint64, 0, len(byTx))
	for tx := range byTx {
		txs = append(txs, tx)
	}
	sort.Slice(txs, func(i, j int) bool { return txs[i] < txs[j] })
	for _, tx := range txs {
		idx := byTx[tx]
		dp, err := proveDual(st, tx, fresh.id)
		if err != nil {
			return err
		}
		dualBytes := proto.Size(dp)
		v.stats.proofBytes += uint64(dualBytes)
		v.txProofs++
		tamper(dp)
		hdr, err := verifyTxInState(fresh, tx, dp)
		if err != nil {
			return err
		}
		if err := st.ReadTx(tx, false, v.holder); err != nil {
			return fmt.Errorf("ReadTx(%d): %w", tx, err)
		}
		for _, i := range idx {
			pr := &batch[i]
			ip, err := proveInclusion(v.holder, pr.key)
			if err != nil {
				return err
			}
			n := proto.Size(ip)
			v.stats.proofBytes += uint64(n)
			v.inclusionProofs++
			tamper(ip)
			if err := verifyEntry(hdr, pr.key, pr.md, pr.value, ip); err != nil {
				return err
			}
			if pr.read {
				v.stats.readProofBytes += float64(n) + float64(dualBytes)/float64(len(idx))
				v.stats.verifiedReads++
			} else {
				v.stats.verifiedWrites++
			}
		}
	}
	v.state = fresh

	now := time.Now()
	for i := range batch {
		us := now.Sub(batch[i].at).Microseconds()
		if us < 1 {
			us = 1
		}
		_ = v.latency.RecordValue(us)
	}
	v.batches++
	v.keys += int64(len(batch))
	return nil
}
