package main

// Server mode: SmallBank against immudb's own server (the `immudb` binary,
// v1.11.1) over gRPC, through its Go client (pkg/client), one session per
// client, verified as pkg/client's VerifiedGet and VerifiedSet verify.
//
// Each transaction reads every key it needs (immediate: VerifiableGet per key,
// verified as client.verifiedGet does; none: Get), computes, and writes its
// dirty keys in one immudb transaction whose preconditions say that no key it
// read was modified after the transaction that wrote the value read
// (optimistic concurrency; a failed precondition reruns the whole
// transaction). The write goes through the VerifiableSet RPC and is checked
// as client.VerifiedSet checks its one entry, for every entry written
// (immediate), or through Set (SetAll) unverified (none).

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/codenotary/immudb/embedded/logger"
	"github.com/codenotary/immudb/embedded/store"
	"github.com/codenotary/immudb/pkg/api/schema"
	immuclient "github.com/codenotary/immudb/pkg/client"
	"github.com/codenotary/immudb/pkg/client/state"
	"github.com/codenotary/immudb/pkg/database"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// serverSide is the server mode's part of the Peer.
type serverSide struct {
	host     string
	port     int
	db       string
	settings *schema.DatabaseNullableSettings // the database's settings, as the server reports them
	closed   bool
}

// srvClient is one client's immudb session: its own gRPC connection, session
// and state service (trusted state in its own directory).
type srvClient struct {
	cl  immuclient.ImmuClient
	ss  state.StateService
	svc schema.ImmuServiceClient
	db  string
}

// errPreconditionFailed marks an attempt whose write immudb refused because a
// key read was modified meanwhile: the transaction is run again.
var errPreconditionFailed = errors.New("precondition failed")

// checkServerConfig checks the config of the server mode: verify immediate or
// none, no audit; it fills in the defaults of the server fields.
func checkServerConfig(cfg Config) (Config, *peerError) {
	if _, _, err := splitServer(cfg.Server); err != nil {
		return cfg, malformed("config: \"server\": %v", err)
	}
	switch {
	case cfg.Verify != "immediate" && cfg.Verify != "none":
		return cfg, malformed("config: verify %q is not supported in server mode (immediate or none)", cfg.Verify)
	case cfg.AuditBlock > 0:
		return cfg, malformed("config: \"audit_block\" is not supported in server mode")
	}
	if cfg.ServerUser == "" {
		cfg.ServerUser = "immudb"
	}
	if cfg.ServerPassword == "" {
		cfg.ServerPassword = "immudb"
	}
	if cfg.ServerDatabase == "" {
		cfg.ServerDatabase = "defaultdb"
	}
	return cfg, nil
}

// splitServer parses "host:port".
func splitServer(s string) (string, int, error) {
	host, portText, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("bad port %q", portText)
	}
	if host == "" {
		return "", 0, fmt.Errorf("no host in %q", s)
	}
	return host, port, nil
}

// defaultDBName is immudb's default database, whose settings cannot be
// changed (UpdateDatabaseV2 refuses it: ErrReservedDatabase).
const defaultDBName = "defaultdb"

// serverPoolSize is MaxConcurrency and ReadTxPoolSize for a database the peer
// creates: immudb's defaults (30 and 128), or enough for every client (each
// VerifiableSet holds a read-pool buffer across its commit, each commit with
// preconditions and each dual proof a MaxConcurrency buffer).
func serverPoolSize(def, clients int) uint32 {
	n := clients + loadWriters + 4
	if n < def {
		n = def
	}
	return uint32(n)
}

// openServerPeer connects the C clients to the server (one session each, its
// own state directory under cfg.Dir), creating the database first if it is
// missing (not defaultdb), and starts the client goroutines.
func openServerPeer(cfg Config, logw io.Writer) (*Peer, error) {
	host, port, _ := splitServer(cfg.Server)
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	p := &Peer{cfg: cfg, ctx: context.Background(), logw: logw, failed: make(chan struct{}),
		srv: &serverSide{host: host, port: port, db: cfg.ServerDatabase}}
	p.mode = verifyNone
	if cfg.Verify == "immediate" {
		p.mode = verifyImmediate
	}
	if cfg.ServerDatabase != defaultDBName {
		if err := p.ensureDatabase(); err != nil {
			return nil, err
		}
	}
	start := time.Now()
	p.clients = make([]*client, cfg.Clients)
	// Sessions are opened a few at a time: the server checks each password
	// with bcrypt.
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	next := make(chan int)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				sc, err := p.srv.connect(p.ctx, cfg, filepath.Join(cfg.Dir, fmt.Sprintf("client-%d", i)), cfg.ServerDatabase, logw)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = fmt.Errorf("client %d: %w", i, err)
				}
				p.clients[i] = &client{id: i, p: p, ch: make(chan txReq, 256), stats: newStats(), sc: sc}
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < cfg.Clients; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		p.srv.close(p)
		return nil, firstErr
	}
	res, err := p.clients[0].sc.cl.GetDatabaseSettingsV2(p.ctx)
	if err != nil {
		p.srv.close(p)
		return nil, fmt.Errorf("GetDatabaseSettingsV2: %w", err)
	}
	p.srv.settings = res.GetSettings()
	for _, c := range p.clients {
		p.workers.Add(1)
		go c.loop()
	}
	s := p.srv.settings
	if need := serverPoolSize(0, cfg.Clients); s.GetMaxConcurrency().GetValue() < need || s.GetReadTxPoolSize().GetValue() < need {
		fmt.Fprintf(logw, "cairn-immudb-peer: warning: database %s has maxConcurrency %d and readTxPoolSize %d for %d clients: "+
			"expect \"max concurrency limit exceeded\" or \"read tx pool exhausted\" errors (use a \"server_database\" the peer creates)\n",
			cfg.ServerDatabase, s.GetMaxConcurrency().GetValue(), s.GetReadTxPoolSize().GetValue(), cfg.Clients)
	}
	fmt.Fprintf(logw, "cairn-immudb-peer: %d sessions on immudb server %s, database %s (syncFrequency %d ms, maxConcurrency %d, readTxPoolSize %d, maxTxEntries %d) in %.2f s, verify %s\n",
		cfg.Clients, cfg.Server, cfg.ServerDatabase, s.GetSyncFrequency().GetValue(), s.GetMaxConcurrency().GetValue(),
		s.GetReadTxPoolSize().GetValue(), s.GetMaxTxEntries().GetValue(), time.Since(start).Seconds(), cfg.Verify)
	return p, nil
}

// connect opens one client session: its own connection, state directory and
// state service.
func (s *serverSide) connect(ctx context.Context, cfg Config, dir, db string, logw io.Writer) (*srvClient, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	opts := immuclient.DefaultOptions().WithAddress(s.host).WithPort(s.port).WithDir(dir)
	cl := immuclient.NewClient().WithOptions(opts)
	cl.WithLogger(logger.NewSimpleLogger("immuclient", logw))
	if err := cl.OpenSession(ctx, []byte(cfg.ServerUser), []byte(cfg.ServerPassword), db); err != nil {
		return nil, fmt.Errorf("OpenSession(%s, database %s): %w", cfg.Server, db, err)
	}
	return &srvClient{cl: cl, ss: cl.StateService, svc: cl.ServiceClient, db: db}, nil
}

// ensureDatabase creates the configured database if the server does not have
// it, with immudb's default settings except MaxConcurrency and
// ReadTxPoolSize, raised to cover the clients (serverPoolSize). An existing
// database is used as it is.
func (p *Peer) ensureDatabase() error {
	cfg := p.cfg
	sc, err := p.srv.connect(p.ctx, cfg, filepath.Join(cfg.Dir, "admin"), defaultDBName, p.logw)
	if err != nil {
		return err
	}
	defer sc.cl.CloseSession(p.ctx)
	list, err := sc.cl.DatabaseListV2(p.ctx)
	if err != nil {
		return fmt.Errorf("DatabaseListV2: %w", err)
	}
	for _, d := range list.GetDatabases() {
		if d.GetName() == cfg.ServerDatabase {
			return nil
		}
	}
	settings := &schema.DatabaseNullableSettings{
		MaxConcurrency: &schema.NullableUint32{Value: serverPoolSize(store.DefaultMaxConcurrency, cfg.Clients)},
		ReadTxPoolSize: &schema.NullableUint32{Value: serverPoolSize(database.DefaultReadTxPoolSize, cfg.Clients)},
	}
	if _, err := sc.cl.CreateDatabaseV2(p.ctx, cfg.ServerDatabase, settings); err != nil {
		return fmt.Errorf("CreateDatabaseV2(%s): %w", cfg.ServerDatabase, err)
	}
	fmt.Fprintf(p.logw, "cairn-immudb-peer: created database %s (maxConcurrency %d, readTxPoolSize %d)\n",
		cfg.ServerDatabase, settings.MaxConcurrency.Value, settings.ReadTxPoolSize.Value)
	return nil
}

// close closes every open session (idempotent).
func (s *serverSide) close(p *Peer) {
	if s.closed {
		return
	}
	s.closed = true
	for _, c := range p.clients {
		if c != nil && c.sc != nil {
			_ = c.sc.cl.CloseSession(context.Background())
		}
	}
}

// syncText describes the server's durability: immudb's --synced flag (a
// server option the API does not report: the config's "synced" must say what
// the server was started with) and the database's group commit period.
func (s *serverSide) syncText(synced bool) string {
	if !synced {
		return "not synced (immudb server --synced=false)"
	}
	return fmt.Sprintf("synced (immudb server --synced=true), %d ms group commit", s.settings.GetSyncFrequency().GetValue())
}

// serverDisk is the size of the server's directory ("server_dir"), or 0.
func (p *Peer) serverDisk() (int64, error) {
	if p.cfg.ServerDir == "" {
		return 0, nil
	}
	return diskBytes(p.cfg.ServerDir)
}

// serverLoad writes the initial balances through client 0's session: SetAll
// (unverified) of loadKeysPerTx keys per transaction, loadWriters at a time,
// then one Get that waits until the server has indexed the last of them.
func (p *Peer) serverLoad() (*loadReply, error) {
	start := time.Now()
	sc := p.clients[0].sc
	n := p.cfg.Accounts
	const perTx = loadKeysPerTx / 2
	txs, lastTx, err := fanOutBatches(0, n, perTx, "load accounts", func(lo, hi uint64) (uint64, error) {
		req := &schema.SetRequest{}
		for id := lo; id < hi; id++ {
			req.KVs = append(req.KVs,
				&schema.KeyValue{Key: savingsKey(id), Value: encodeMoney(initialSavings)},
				&schema.KeyValue{Key: checkingKey(id), Value: encodeMoney(initialChecking)})
		}
		hdr, err := sc.cl.SetAll(p.ctx, req)
		if err != nil {
			return 0, err
		}
		return hdr.Id, nil
	})
	if err != nil {
		return nil, err
	}
	if _, err := sc.svc.Get(p.ctx, &schema.KeyRequest{Key: checkingKey(n - 1), SinceTx: lastTx}); err != nil {
		return nil, fmt.Errorf("waiting for indexing up to tx %d: %w", lastTx, err)
	}
	secs := time.Since(start).Seconds()
	disk, err := p.serverDisk()
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(p.logw, "cairn-immudb-peer: loaded %d accounts in %d transactions (last tx %d), %.2f s\n", n, txs, lastTx, secs)
	return &loadReply{Event: "loaded", Seconds: secs, Txs: txs, DiskBytes: disk}, nil
}

// serverDump writes `id savings checking` for every account, read with
// GetAll (unverified) in chunks, each at least as recent as the server's
// state when the dump started.
func (p *Peer) serverDump(w io.Writer) error {
	sc := p.clients[0].sc
	st, err := sc.svc.CurrentState(p.ctx, nil)
	if err != nil {
		return fmt.Errorf("CurrentState: %w", err)
	}
	const chunk = loadKeysPerTx / 2
	bw := bufio.NewWriter(w)
	for lo := uint64(0); lo < p.cfg.Accounts; lo += chunk {
		hi := min(lo+chunk, p.cfg.Accounts)
		var keys [][]byte
		for id := lo; id < hi; id++ {
			keys = append(keys, savingsKey(id), checkingKey(id))
		}
		entries, err := sc.svc.GetAll(p.ctx, &schema.KeyListRequest{Keys: keys, SinceTx: st.TxId})
		if err != nil {
			return fmt.Errorf("GetAll of accounts %d..%d: %w", lo, hi, err)
		}
		vals := make(map[string][]byte, len(keys))
		for _, e := range entries.GetEntries() {
			vals[string(e.Key)] = e.Value
		}
		for id := lo; id < hi; id++ {
			var bal [2]int64
			for i, k := range [][]byte{savingsKey(id), checkingKey(id)} {
				raw, ok := vals[string(k)]
				if !ok {
					return fmt.Errorf("GetAll: key %x missing", k)
				}
				if bal[i], err = decodeMoney(raw); err != nil {
					return err
				}
			}
			fmt.Fprintf(bw, "%d %d %d\n", id, bal[0], bal[1])
		}
	}
	return bw.Flush()
}

// finishServer builds the result of a server-mode run (the clients have
// finished) and closes the sessions.
func (p *Peer) finishServer(secs float64) (*resultReply, error) {
	st, err := p.clients[0].sc.svc.CurrentState(p.ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("CurrentState: %w", err)
	}
	p.storeClosed = true
	p.srv.close(p)
	disk, err := p.serverDisk()
	if err != nil {
		return nil, err
	}
	return p.result(secs, st.TxId, disk, p.srv.syncText(p.cfg.Synced)), nil
}

// runServer runs one SmallBank transaction against the server, rerunning it
// whole while a precondition fails, and records its latency (start to
// verified end, retries included).
func (c *client) runServer(req txReq) error {
	start := time.Now()
	retries := 0
	for {
		out, err := c.attemptServer(req)
		if errors.Is(err, errPreconditionFailed) {
			retries++
			continue
		}
		if err != nil {
			return err
		}
		c.stats.record(req.typ, time.Since(start))
		c.stats.retries += uint64(retries)
		if out.aborted {
			c.stats.aborted++
		} else {
			c.stats.committed++
		}
		if out.hdr != nil {
			c.log = append(c.log, [3]uint64{uint64(req.client), req.seq, out.hdr.ID})
		}
		return nil
	}
}

// attemptServer is one attempt: the reads (verified in immediate mode), the
// logic, and the write of the dirty keys in one transaction whose
// preconditions cover every key read.
func (c *client) attemptServer(req txReq) (txOutcome, error) {
	p := c.p
	w := &txWork{ctx: p.ctx}
	if p.mode == verifyImmediate {
		w.read = c.verifiedGet
	} else {
		w.read = c.plainGet
	}
	aborted, err := applySmallBank(w, req)
	if err != nil {
		return txOutcome{}, err
	}
	set := &schema.SetRequest{}
	for _, a := range w.accts {
		if a.dirty {
			set.KVs = append(set.KVs, &schema.KeyValue{Key: a.key, Value: encodeMoney(a.val)})
		}
	}
	if aborted || len(set.KVs) == 0 {
		return txOutcome{aborted: aborted, reads: w.reads}, nil
	}
	for _, r := range w.reads {
		set.Preconditions = append(set.Preconditions, schema.PreconditionKeyNotModifiedAfterTX(r.key, r.tx))
	}
	var txID uint64
	if p.mode == verifyImmediate {
		txID, err = c.verifiedSet(set)
	} else {
		var hdr *schema.TxHeader
		hdr, err = c.sc.cl.SetAll(p.ctx, set)
		if hdr != nil {
			txID = hdr.Id
		}
	}
	if err != nil {
		if isPreconditionFailed(err) {
			return txOutcome{}, errPreconditionFailed
		}
		return txOutcome{}, fmt.Errorf("write of %d keys: %w", len(set.KVs), err)
	}
	return txOutcome{hdr: &store.TxHeader{ID: txID}, reads: w.reads}, nil
}

// isPreconditionFailed tells whether err is immudb's answer to a failed
// precondition: store.ErrPreconditionFailed, which the server maps to
// CodIntegrityConstraintViolation, sent as gRPC code FailedPrecondition with
// the message "precondition failed: ...".
func isPreconditionFailed(err error) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.FailedPrecondition && strings.HasPrefix(st.Message(), store.ErrPreconditionFailed.Error())
}

// plainGet reads key unverified (verify none).
func (c *client) plainGet(key []byte) (readRec, error) {
	e, err := c.sc.svc.Get(c.p.ctx, &schema.KeyRequest{Key: key})
	if err != nil {
		return readRec{}, fmt.Errorf("Get(%x): %w", key, err)
	}
	return readRec{key: key, value: e.Value, tx: e.Tx}, nil
}

// verifiedGet is pkg/client's verifiedGet (v1.11.1), with the proof's bytes
// counted: under the state service's lock, VerifiableGet with ProveSinceTx =
// the trusted state, the entry's inclusion in the Eh of the transaction that
// wrote it, the dual proof between that transaction and the trusted state
// (older first; skipped with no state yet), then the newer of the two is
// stored as the new state.
func (c *client) verifiedGet(key []byte) (readRec, error) {
	ctx, sc := c.p.ctx, c.sc
	if err := sc.ss.CacheLock(); err != nil {
		return readRec{}, fmt.Errorf("state lock: %w", err)
	}
	defer sc.ss.CacheUnlock()
	st, err := sc.ss.GetState(ctx, sc.db)
	if err != nil {
		return readRec{}, fmt.Errorf("GetState: %w", err)
	}
	ve, err := sc.svc.VerifiableGet(ctx, &schema.VerifiableGetRequest{
		KeyRequest:   &schema.KeyRequest{Key: key},
		ProveSinceTx: st.TxId,
	})
	if err != nil {
		return readRec{}, fmt.Errorf("VerifiableGet(%x): %w", key, err)
	}
	n := proto.Size(ve.GetInclusionProof()) + proto.Size(ve.GetVerifiableTx().GetDualProof())
	c.stats.proofBytes += uint64(n)
	c.stats.readProofBytes += float64(n)
	tamper(ve)

	vtx := ve.GetVerifiableTx()
	dpb := vtx.GetDualProof()
	if ve.GetEntry() == nil || ve.GetInclusionProof() == nil || vtx.GetTx().GetHeader() == nil ||
		dpb.GetSourceTxHeader() == nil || dpb.GetTargetTxHeader() == nil {
		return readRec{}, rejected("VerifiableGet(%x): incomplete answer", key)
	}
	if ve.Entry.ReferencedBy != nil {
		return readRec{}, rejected("VerifiableGet(%x): unexpected reference", key)
	}
	digest, err := store.EntrySpecDigestFor(int(vtx.Tx.Header.Version))
	if err != nil {
		return readRec{}, rejected("VerifiableGet(%x): %v", key, err)
	}
	inclusion := schema.InclusionProofFromProto(ve.InclusionProof)
	dp := schema.DualProofFromProto(dpb)
	vTx := ve.Entry.Tx
	md := schema.KVMetadataFromProto(ve.Entry.Metadata)
	e := database.EncodeEntrySpec(key, md, ve.Entry.Value)

	var eh [sha256.Size]byte
	var srcID, dstID uint64
	var srcAlh, dstAlh [sha256.Size]byte
	if st.TxId <= vTx {
		eh = schema.DigestFromProto(dpb.TargetTxHeader.EH)
		srcID, srcAlh = st.TxId, schema.DigestFromProto(st.TxHash)
		dstID, dstAlh = vTx, dp.TargetTxHeader.Alh()
	} else {
		eh = schema.DigestFromProto(dpb.SourceTxHeader.EH)
		srcID, srcAlh = vTx, dp.SourceTxHeader.Alh()
		dstID, dstAlh = st.TxId, schema.DigestFromProto(st.TxHash)
	}
	if !store.VerifyInclusion(inclusion, digest(e), eh) {
		return readRec{}, rejected("VerifiableGet(%x): inclusion proof in tx %d does not verify", key, vTx)
	}
	if st.TxId > 0 {
		if err := c.verifyDual(dp, srcID, dstID, srcAlh, dstAlh); err != nil {
			return readRec{}, fmt.Errorf("VerifiableGet(%x) at tx %d: %w", key, vTx, err)
		}
	}
	if err := sc.ss.SetState(sc.db, &schema.ImmutableState{
		Db: sc.db, TxId: dstID, TxHash: dstAlh[:], Signature: vtx.Signature,
	}); err != nil {
		return readRec{}, fmt.Errorf("SetState: %w", err)
	}
	c.stats.verifiedReads++
	return readRec{key: key, md: md, value: ve.Entry.Value, tx: vTx}, nil
}

// verifiedSet is pkg/client's VerifiedSet (v1.11.1) for several entries and
// with preconditions: under the state service's lock, VerifiableSet with
// ProveSinceTx = the trusted state; the answer's transaction must have exactly
// the entries sent; each entry's inclusion proof, computed from the
// transaction's entries (schema.TxFromProto, tx.Proof), must verify against
// its Eh, which must be the dual proof's target Eh; the dual proof from the
// trusted state to the new transaction must verify (skipped with no state
// yet); then the new transaction becomes the trusted state. It returns the
// new transaction's id.
func (c *client) verifiedSet(set *schema.SetRequest) (uint64, error) {
	ctx, sc := c.p.ctx, c.sc
	if err := sc.ss.CacheLock(); err != nil {
		return 0, fmt.Errorf("state lock: %w", err)
	}
	defer sc.ss.CacheUnlock()
	st, err := sc.ss.GetState(ctx, sc.db)
	if err != nil {
		return 0, fmt.Errorf("GetState: %w", err)
	}
	vtx, err := sc.svc.VerifiableSet(ctx, &schema.VerifiableSetRequest{SetRequest: set, ProveSinceTx: st.TxId})
	if err != nil {
		return 0, err
	}
	n := proto.Size(vtx.GetDualProof())
	tamper(vtx)

	if vtx.GetTx().GetHeader() == nil || vtx.GetDualProof().GetTargetTxHeader() == nil {
		return 0, rejected("VerifiableSet: incomplete answer")
	}
	if int(vtx.Tx.Header.Nentries) != len(set.KVs) || len(vtx.Tx.Entries) != len(set.KVs) {
		return 0, rejected("VerifiableSet: tx %d has %d entries (header %d), want %d",
			vtx.Tx.Header.Id, len(vtx.Tx.Entries), vtx.Tx.Header.Nentries, len(set.KVs))
	}
	tx := schema.TxFromProto(vtx.Tx)
	hdr := tx.Header()
	digest, err := store.EntrySpecDigestFor(hdr.Version)
	if err != nil {
		return 0, rejected("VerifiableSet: %v", err)
	}
	for _, kv := range set.KVs {
		ekey := database.EncodeKey(kv.Key)
		ip, err := tx.Proof(ekey)
		if err != nil {
			return 0, rejected("VerifiableSet: key %x not in tx %d: %v", kv.Key, hdr.ID, err)
		}
		n += proto.Size(schema.InclusionProofToProto(ip))
		var md *store.KVMetadata
		for _, te := range tx.Entries() {
			if string(te.Key()) == string(ekey) {
				md = te.Metadata()
				break
			}
		}
		if md != nil && md.Deleted() {
			return 0, rejected("VerifiableSet: key %x deleted in tx %d", kv.Key, hdr.ID)
		}
		if !store.VerifyInclusion(ip, digest(database.EncodeEntrySpec(kv.Key, md, kv.Value)), hdr.Eh) {
			return 0, rejected("VerifiableSet: inclusion proof of key %x in tx %d does not verify", kv.Key, hdr.ID)
		}
	}
	c.stats.proofBytes += uint64(n)
	if hdr.Eh != schema.DigestFromProto(vtx.DualProof.TargetTxHeader.EH) {
		return 0, rejected("VerifiableSet: tx %d's Eh differs from the dual proof's", hdr.ID)
	}
	dstID, dstAlh := hdr.ID, hdr.Alh()
	if st.TxId > 0 {
		if err := c.verifyDual(schema.DualProofFromProto(vtx.DualProof), st.TxId, dstID, schema.DigestFromProto(st.TxHash), dstAlh); err != nil {
			return 0, fmt.Errorf("VerifiableSet of tx %d: %w", dstID, err)
		}
	}
	if err := sc.ss.SetState(sc.db, &schema.ImmutableState{
		Db: sc.db, TxId: dstID, TxHash: dstAlh[:], Signature: vtx.Signature,
	}); err != nil {
		return 0, fmt.Errorf("SetState: %w", err)
	}
	c.stats.verifiedWrites += uint64(len(set.KVs))
	return dstID, nil
}

// verifyDual is pkg/client's verifyDualProof: fill in the linear advance
// proof if the server left it out (v1.11.1 servers send it), then
// store.VerifyDualProof.
func (c *client) verifyDual(dp *store.DualProof, srcID, dstID uint64, srcAlh, dstAlh [sha256.Size]byte) error {
	if err := schema.FillMissingLinearAdvanceProof(c.p.ctx, dp, srcID, dstID, c.sc.svc); err != nil {
		return fmt.Errorf("FillMissingLinearAdvanceProof: %w", err)
	}
	if !store.VerifyDualProof(dp, srcID, dstID, srcAlh, dstAlh) {
		return rejected("dual proof from tx %d to tx %d does not verify", srcID, dstID)
	}
	return nil
}
