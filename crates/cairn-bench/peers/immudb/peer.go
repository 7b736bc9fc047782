package main

// The peer: the immudb store, the client goroutines, LOAD, DUMP and END.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/codenotary/immudb/embedded/store"
)

// Verification modes.
const (
	verifyNone = iota
	verifyImmediate
	verifyDeferred
)

// loadKeysPerTx is how many keys one LOAD transaction writes (immudb's
// MaxTxEntries default is 1024).
const loadKeysPerTx = 1000

// loadWriters is how many LOAD transactions are in flight at once, so that
// they share group-commit fsyncs.
const loadWriters = 4

// Peer is one embedded immudb store driven by the protocol.
type Peer struct {
	cfg     Config
	mode    int
	st      *store.ImmuStore
	ctx     context.Context
	logw    io.Writer
	clients []*client

	pending sync.WaitGroup // dispatched transactions not yet finished
	workers sync.WaitGroup // client goroutines

	failOnce sync.Once
	failed   chan struct{} // closed on the first failure
	failErr  *peerError

	verifier *deferredVerifier

	queuesClosed bool // the client queues are closed (END or a failure)
	storeClosed  bool // the store is closed

	started    bool          // a T or R line has been dispatched
	startTime  time.Time     // when the first T or R line was dispatched
	pausedTime time.Duration // spent in DUMP, STORE and RLOAD after the start (not in the run's seconds)

	storeNext uint64 // the next STORE record id
	rangeKeys uint64 // keys written by RLOAD (0: none yet)

	auditor *auditor // nil unless audit_block > 0

	srv *serverSide // server mode (server.go); nil in the embedded mode
}

// client is one SmallBank client: a goroutine that runs its transactions in
// order, with its own trusted state (immediate mode), its own proof buffer and
// its own statistics (merged at END).
type client struct {
	id     int
	p      *Peer
	ch     chan txReq
	holder *store.Tx // ReadTx buffer for the proofs this client asks for
	state  clientState
	stats  stats
	log    [][3]uint64 // committed read-write transactions: client, seq, tx id
	sc     *srvClient  // server mode: this client's immudb session
}

// openPeer opens (creates) the store in cfg.Dir with immudb's default
// options, except MaxConcurrency raised to cover every client (see README),
// and Synced as configured, then starts the client goroutines.
func openPeer(cfg Config, logw io.Writer) (*Peer, error) {
	st, err := store.Open(cfg.Dir, storeOptions(cfg))
	if err != nil {
		return nil, err
	}
	p := &Peer{cfg: cfg, st: st, ctx: context.Background(), logw: logw, failed: make(chan struct{})}
	switch cfg.Verify {
	case "immediate":
		p.mode = verifyImmediate
	case "deferred":
		p.mode = verifyDeferred
		p.verifier = newDeferredVerifier(p, time.Duration(cfg.DeferredDelayMs)*time.Millisecond)
	default:
		p.mode = verifyNone
	}
	for i := 0; i < cfg.Clients; i++ {
		c := &client{id: i, p: p, ch: make(chan txReq, 256), stats: newStats()}
		if p.mode == verifyImmediate {
			c.holder = store.NewTx(st.MaxTxEntries(), st.MaxKeyLen())
		}
		p.clients = append(p.clients, c)
		p.workers.Add(1)
		go c.loop()
	}
	fmt.Fprintf(logw, "cairn-immudb-peer: opened %s (synced=%v, sync frequency %v, MaxTxEntries %d, MaxConcurrency %d), %d clients, verify %s\n",
		cfg.Dir, cfg.Synced, store.DefaultSyncFrequency, st.MaxTxEntries(), st.MaxConcurrency(), cfg.Clients, cfg.Verify)
	return p, nil
}

// storeOptions are immudb's default options with Synced as configured and
// MaxConcurrency raised (see maxConcurrency).
func storeOptions(cfg Config) *store.Options {
	return store.DefaultOptions().
		WithSynced(cfg.Synced).
		WithMaxConcurrency(maxConcurrency(cfg.Clients))
}

// maxConcurrency is the store's MaxConcurrency: immudb's default (30), or more
// when there are more clients, since every precommit and every LinearProof
// (part of each DualProof) takes one of that many transaction buffers and
// fails with ErrMaxConcurrencyLimitExceeded when none is free: one per client,
// per LOAD writer, for the deferred verifier, the auditor and one spare.
func maxConcurrency(clients int) int {
	n := clients + loadWriters + 3
	if n < store.DefaultMaxConcurrency {
		return store.DefaultMaxConcurrency
	}
	return n
}

// fail records the first failure and wakes the main loop.
func (p *Peer) fail(pe *peerError) {
	p.failOnce.Do(func() {
		p.failErr = pe
		close(p.failed)
	})
}

// failure returns the recorded failure.
func (p *Peer) failure() *peerError {
	<-p.failed
	return p.failErr
}

// isFailed tells whether a failure has been recorded.
func (p *Peer) isFailed() bool {
	select {
	case <-p.failed:
		return true
	default:
		return false
	}
}

// loadReply is the reply to LOAD.
type loadReply struct {
	Event     string  `json:"event"`
	Seconds   float64 `json:"seconds"`
	Txs       int     `json:"txs"`
	DiskBytes int64   `json:"disk_bytes"`
}

// load writes the initial balances of every account in write-only
// transactions of loadKeysPerTx keys (unverified), loadWriters at a time, and
// waits until immudb has indexed them all.
func (p *Peer) load() (*loadReply, error) {
	if p.srv != nil {
		return p.serverLoad()
	}
	start := time.Now()
	n := p.cfg.Accounts
	txs, lastTx, err := p.writeBatches(0, n, loadKeysPerTx/2, "load accounts", func(tx *store.OngoingTx, id uint64) error {
		if err := tx.Set(savingsKey(id), nil, encodeMoney(initialSavings)); err != nil {
			return err
		}
		return tx.Set(checkingKey(id), nil, encodeMoney(initialChecking))
	})
	if err != nil {
		return nil, err
	}
	if err := p.st.WaitForIndexingUpto(p.ctx, lastTx); err != nil {
		return nil, fmt.Errorf("waiting for indexing: %w", err)
	}
	secs := time.Since(start).Seconds()
	disk, err := diskBytes(p.cfg.Dir)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(p.logw, "cairn-immudb-peer: loaded %d accounts in %d transactions, %.2f s\n", n, txs, secs)
	return &loadReply{Event: "loaded", Seconds: secs, Txs: txs, DiskBytes: disk}, nil
}

// writeBatches writes the ids first..first+n-1 in write-only transactions of
// perTx ids each (put sets one id's entries), loadWriters transactions in
// flight so that they share group commits, unverified. It returns how many
// transactions it committed and the highest tx id (0 if none); it does not
// wait for the indexer.
func (p *Peer) writeBatches(first, n, perTx uint64, what string, put func(tx *store.OngoingTx, id uint64) error) (int, uint64, error) {
	return fanOutBatches(first, n, perTx, what, func(lo, hi uint64) (uint64, error) {
		tx, err := p.st.NewWriteOnlyTx(p.ctx)
		if err != nil {
			return 0, err
		}
		for id := lo; id < hi; id++ {
			if err := put(tx, id); err != nil {
				_ = tx.Cancel()
				return 0, err
			}
		}
		hdr, err := tx.Commit(p.ctx)
		if err != nil {
			return 0, err
		}
		return hdr.ID, nil
	})
}

// fanOutBatches commits the ids first..first+n-1 in batches of perTx ids,
// loadWriters batches in flight: commit writes ids lo..hi-1 as one transaction
// and returns its id. The first error stops the batches not yet started and is
// returned, named by what and the batch's ids. It returns how many batches it
// committed and the highest tx id (0 if none).
func fanOutBatches(first, n, perTx uint64, what string, commit func(lo, hi uint64) (uint64, error)) (int, uint64, error) {
	end := first + n
	jobs := make(chan uint64)
	errs := make(chan error, loadWriters)
	var wg sync.WaitGroup
	var mu sync.Mutex
	txs := 0
	var lastTx uint64
	for w := 0; w < loadWriters; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for lo := range jobs {
				hi := min(lo+perTx, end)
				id, err := commit(lo, hi)
				if err != nil {
					errs <- fmt.Errorf("%s %d..%d: %w", what, lo, hi, err)
					for range jobs {
					}
					return
				}
				mu.Lock()
				txs++
				lastTx = max(lastTx, id)
				mu.Unlock()
			}
		}()
	}
	for lo := first; lo < end; lo += perTx {
		select {
		case jobs <- lo:
		case err := <-errs:
			close(jobs)
			wg.Wait()
			return 0, 0, err
		}
	}
	close(jobs)
	wg.Wait()
	select {
	case err := <-errs:
		return 0, 0, err
	default:
	}
	return txs, lastTx, nil
}

// dispatch hands req to its client's queue; false if the peer failed.
func (p *Peer) dispatch(req txReq) bool {
	if !p.started {
		p.started = true
		p.startTime = time.Now()
		if p.cfg.AuditBlock > 0 {
			p.auditor = startAuditor(p, p.cfg.AuditBlock)
		}
	}
	p.pending.Add(1)
	select {
	case p.clients[req.client].ch <- req:
		return true
	case <-p.failed:
		p.pending.Done()
		return false
	}
}

// waitIdle waits until every dispatched transaction has finished (or the
// peer failed).
func (p *Peer) waitIdle() error {
	done := make(chan struct{})
	go func() { p.pending.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-p.failed:
		return p.failErr
	}
}

// pause waits until every dispatched transaction has finished, for a bulk
// command (STORE, RLOAD) that then runs alone; the returned function, called
// when the command is done, leaves the command's time out of the run's
// seconds.
func (p *Peer) pause() (func(), error) {
	if err := p.waitIdle(); err != nil {
		return nil, err
	}
	t0 := time.Now()
	return func() {
		if p.started {
			p.pausedTime += time.Since(t0)
		}
	}, nil
}

// loop is a client goroutine: it runs its transactions in order until its
// channel closes. After a failure it only drains its queue.
func (c *client) loop() {
	defer c.p.workers.Done()
	for req := range c.ch {
		if !c.p.isFailed() {
			if err := c.run(req); err != nil {
				c.p.fail(withContext(fmt.Sprintf("client %d seq %d %s", req.client, req.seq, req.typ), err))
			}
		}
		c.p.pending.Done()
	}
}

// run executes one transaction and its verification, and records its
// latency (from start to verified, retries included).
func (c *client) run(req txReq) error {
	if req.typ == txRange {
		return c.runRange(req)
	}
	if c.sc != nil {
		return c.runServer(req)
	}
	p := c.p
	start := time.Now()
	out, err := runSmallBank(p.ctx, p.st, req)
	if err != nil {
		return err
	}
	switch p.mode {
	case verifyImmediate:
		if err := c.verifyImmediate(out); err != nil {
			return err
		}
	case verifyDeferred:
		p.verifier.add(out)
	}
	c.stats.record(req.typ, time.Since(start))
	c.stats.retries += uint64(out.retries)
	switch {
	case out.aborted:
		c.stats.aborted++
	default:
		c.stats.committed++
	}
	if out.hdr != nil {
		c.log = append(c.log, [3]uint64{uint64(req.client), req.seq, out.hdr.ID})
	}
	return nil
}

// verifyImmediate verifies, as a VerifiedGet for each value read and then a
// VerifiedSet for the entries written, the transaction just run, moving the
// client's trusted state forward.
func (c *client) verifyImmediate(out txOutcome) error {
	p := c.p
	for _, r := range out.reads {
		// A read may see a transaction that is precommitted but not yet
		// durable; immudb serves proofs only for committed ones.
		if err := p.st.WaitForTx(p.ctx, r.tx, false); err != nil {
			return fmt.Errorf("WaitForTx(%d): %w", r.tx, err)
		}
		proof, err := proveGet(p.st, c.holder, r.key, r.tx, c.state.id)
		if err != nil {
			return err
		}
		n := proof.size()
		c.stats.proofBytes += uint64(n)
		c.stats.readProofBytes += float64(n)
		tamper(proof)
		st, err := verifyGet(c.state, r.key, r.md, r.value, r.tx, proof)
		if err != nil {
			return err
		}
		c.state = st
		c.stats.verifiedReads++
	}
	if out.hdr == nil {
		return nil
	}
	keys := make([][]byte, len(out.writes))
	for i, w := range out.writes {
		keys[i] = w.key
	}
	proof, err := proveSet(p.st, c.holder, out.hdr.ID, keys, c.state.id)
	if err != nil {
		return err
	}
	c.stats.proofBytes += uint64(proof.size())
	tamper(proof)
	st, err := verifySet(c.state, out.hdr, out.writes, proof)
	if err != nil {
		return err
	}
	c.state = st
	c.stats.verifiedWrites += uint64(len(out.writes))
	return nil
}

// dump waits for every dispatched transaction, then writes `id savings
// checking` for every account, read in one read-only snapshot.
func (p *Peer) dump(path string) error {
	if err := p.waitIdle(); err != nil {
		return err
	}
	// The dump itself is not part of the timed run (the wait above is).
	t0 := time.Now()
	defer func() { p.pausedTime += time.Since(t0) }()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	if p.srv != nil {
		if err := p.serverDump(w); err != nil {
			return err
		}
		if err := w.Flush(); err != nil {
			return err
		}
		return f.Sync()
	}
	tx, err := p.st.NewTx(p.ctx, store.DefaultTxOptions().WithMode(store.ReadOnlyTx))
	if err != nil {
		return err
	}
	defer tx.Cancel()
	for id := uint64(0); id < p.cfg.Accounts; id++ {
		var bal [2]int64
		for i, k := range [][]byte{savingsKey(id), checkingKey(id)} {
			ref, err := tx.Get(p.ctx, k)
			if err != nil {
				return fmt.Errorf("get %x: %w", k, err)
			}
			raw, err := ref.Resolve()
			if err != nil {
				return err
			}
			if bal[i], err = decodeMoney(raw); err != nil {
				return err
			}
		}
		fmt.Fprintf(w, "%d %d %d\n", id, bal[0], bal[1])
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return f.Sync()
}

// typeReply is one transaction type's latency summary, in microseconds.
type typeReply struct {
	Count  int64 `json:"count"`
	P50us  int64 `json:"p50_us"`
	P99us  int64 `json:"p99_us"`
	P999us int64 `json:"p999_us"`
	MaxUs  int64 `json:"max_us"`
}

// deferredReply summarizes deferred verification.
type deferredReply struct {
	Batches          int64   `json:"batches"`
	KeysPerBatchMean float64 `json:"keys_per_batch_mean"`
	VerifyLatencyP50 float64 `json:"verify_latency_ms_p50"`
	VerifyLatencyP99 float64 `json:"verify_latency_ms_p99"`
	VerifyLatencyMax float64 `json:"verify_latency_ms_max"`
	DelayMs          int     `json:"delay_ms"`
	StateProofs      int64   `json:"state_proofs"`
	TxProofs         int64   `json:"tx_proofs"`
	InclusionProofs  int64   `json:"inclusion_proofs"`
}

// resultReply is the reply to END.
type resultReply struct {
	Event                     string               `json:"event"`
	Transactions              uint64               `json:"transactions"`
	Committed                 uint64               `json:"committed"`
	Aborted                   uint64               `json:"aborted"`
	ConflictRetries           uint64               `json:"conflict_retries"`
	Seconds                   float64              `json:"seconds"`
	TxPerSecond               float64              `json:"tx_per_second"`
	PerType                   map[string]typeReply `json:"per_type"`
	VerifiedReads             uint64               `json:"verified_reads"`
	VerifiedWrites            uint64               `json:"verified_writes"`
	EntriesRead               uint64               `json:"entries_read"`
	ProofBytes                uint64               `json:"proof_bytes"`
	ProofBytesPerVerifiedRead float64              `json:"proof_bytes_per_verified_read"`
	Deferred                  *deferredReply       `json:"deferred"`
	Audit                     *auditReply          `json:"audit"`
	FullAudit                 *fullAuditReply      `json:"full_audit"`
	DiskBytes                 int64                `json:"disk_bytes"`
	Sync                      string               `json:"sync"`
	Verify                    string               `json:"verify"`
	Clients                   int                  `json:"clients"`
	LastTxID                  uint64               `json:"last_tx_id"`
	Log                       [][3]uint64          `json:"log"`
}

// stopWork closes the client queues, waits for the clients (after a failure
// they only drain their queues) and then stops the deferred verifier, which
// verifies what is left first. It is idempotent.
func (p *Peer) stopWork() {
	if p.queuesClosed {
		return
	}
	p.queuesClosed = true
	for _, c := range p.clients {
		close(c.ch)
	}
	p.workers.Wait()
	if p.verifier != nil {
		p.verifier.stop()
	}
	if p.auditor != nil {
		p.auditor.stop()
	}
}

// shutdown stops every goroutine and closes the store after a failure,
// giving up after timeout (the error has been reported already).
func (p *Peer) shutdown(timeout time.Duration) {
	done := make(chan struct{})
	go func() {
		p.stopWork()
		if !p.storeClosed {
			p.storeClosed = true
			if p.srv != nil {
				p.srv.close(p)
			} else {
				_ = p.st.Close()
			}
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(timeout):
	}
}

// finish waits for every client, finishes deferred verification, closes the
// store and builds the result.
func (p *Peer) finish() (*resultReply, error) {
	p.stopWork()
	if p.isFailed() {
		return nil, p.failErr
	}
	var secs float64
	if p.started {
		secs = (time.Since(p.startTime) - p.pausedTime).Seconds()
	}
	if p.srv != nil {
		return p.finishServer(secs)
	}
	lastTx, _ := p.st.CommittedAlh()
	var full *fullAuditReply
	var audit *auditReply
	if p.cfg.AuditBlock > 0 {
		var err error
		if full, err = p.fullAudit(); err != nil {
			return nil, err
		}
		if p.auditor != nil {
			audit = p.auditor.reply()
		} else {
			audit = &auditReply{Block: p.cfg.AuditBlock, TrustedFrom: lastTx, LastAudited: lastTx}
		}
	}
	p.storeClosed = true
	if err := p.st.Close(); err != nil {
		return nil, fmt.Errorf("closing store: %w", err)
	}
	disk, err := diskBytes(p.cfg.Dir)
	if err != nil {
		return nil, err
	}
	res := p.result(secs, lastTx, disk, syncText(p.cfg.Synced))
	res.Audit = audit
	res.FullAudit = full
	return res, nil
}

// result builds the reply to END from the clients' (and the deferred
// verifier's) statistics and logs.
func (p *Peer) result(secs float64, lastTx uint64, disk int64, sync string) *resultReply {
	total := newStats()
	var log [][3]uint64
	for _, c := range p.clients {
		total.merge(&c.stats)
		log = append(log, c.log...)
	}
	sort.Slice(log, func(i, j int) bool { return log[i][2] < log[j][2] })
	if log == nil {
		log = [][3]uint64{}
	}
	res := &resultReply{
		Event:           "result",
		Transactions:    total.committed + total.aborted,
		Committed:       total.committed,
		Aborted:         total.aborted,
		ConflictRetries: total.retries,
		Seconds:         secs,
		PerType:         map[string]typeReply{},
		DiskBytes:       disk,
		Sync:            sync,
		Verify:          p.cfg.Verify,
		Clients:         p.cfg.Clients,
		LastTxID:        lastTx,
		Log:             log,
		EntriesRead:     total.entriesRead,
	}
	if secs > 0 {
		res.TxPerSecond = float64(res.Transactions) / secs
	}
	for t := txType(0); t < numKinds; t++ {
		h := total.latency[t]
		if h.TotalCount() == 0 {
			continue
		}
		res.PerType[t.String()] = typeReply{
			Count:  h.TotalCount(),
			P50us:  h.ValueAtQuantile(50),
			P99us:  h.ValueAtQuantile(99),
			P999us: h.ValueAtQuantile(99.9),
			MaxUs:  h.Max(),
		}
	}
	res.VerifiedReads = total.verifiedReads
	res.VerifiedWrites = total.verifiedWrites
	res.ProofBytes = total.proofBytes
	readBytes := total.readProofBytes
	if v := p.verifier; v != nil {
		res.VerifiedReads += v.stats.verifiedReads
		res.VerifiedWrites += v.stats.verifiedWrites
		res.ProofBytes += v.stats.proofBytes
		readBytes += v.stats.readProofBytes
		d := &deferredReply{
			Batches:         v.batches,
			DelayMs:         p.cfg.DeferredDelayMs,
			StateProofs:     v.stateProofs,
			TxProofs:        v.txProofs,
			InclusionProofs: v.inclusionProofs,
		}
		if v.batches > 0 {
			d.KeysPerBatchMean = float64(v.keys) / float64(v.batches)
		}
		if v.latency.TotalCount() > 0 {
			d.VerifyLatencyP50 = float64(v.latency.ValueAtQuantile(50)) / 1000
			d.VerifyLatencyP99 = float64(v.latency.ValueAtQuantile(99)) / 1000
			d.VerifyLatencyMax = float64(v.latency.Max()) / 1000
		}
		res.Deferred = d
	}
	if res.VerifiedReads > 0 {
		res.ProofBytesPerVerifiedRead = readBytes / float64(res.VerifiedReads)
	}
	fmt.Fprintf(p.logw, "cairn-immudb-peer: %d transactions in %.2f s (%.0f/s), %d conflict retries\n",
		res.Transactions, secs, res.TxPerSecond, res.ConflictRetries)
	return res
}

// syncText describes the durability setting for the result.
func syncText(synced bool) string {
	if synced {
		return fmt.Sprintf("synced, %d ms group commit", store.DefaultSyncFrequency.Milliseconds())
	}
	return "not synced (-synced=false)"
}
