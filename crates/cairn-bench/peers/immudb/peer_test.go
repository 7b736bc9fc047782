package main

// Tests: a tiny SmallBank through the whole protocol in each verify mode,
// checked against a model replayed in commit order; tampered proofs rejected
// by the verification code; malformed input and rejections end the run with
// the right exit code.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/codenotary/immudb/embedded/store"
	"github.com/codenotary/immudb/pkg/api/schema"
	"google.golang.org/protobuf/proto"
)

// genTx is one generated transaction of the test workload.
type genTx struct {
	client int
	seq    uint64
	typ    txType
	a, b   uint64
	amount int64
}

// line renders the transaction as a protocol `T` line.
func (g genTx) line() string {
	return fmt.Sprintf("T %d %d %s %d %d %d", g.client, g.seq, g.typ, g.a, g.b, g.amount)
}

// genWorkload draws n SmallBank transactions (uniform types and accounts)
// spread over clients; seq is the global line number.
func genWorkload(seed int64, accounts uint64, clients, n int) []genTx {
	r := rand.New(rand.NewSource(seed))
	out := make([]genTx, n)
	for i := range out {
		t := txType(r.Intn(int(numTxTypes)))
		g := genTx{client: r.Intn(clients), seq: uint64(i), typ: t, a: uint64(r.Int63n(int64(accounts)))}
		if t.usesB() {
			g.b = uint64(r.Int63n(int64(accounts)))
		}
		switch t {
		case txDepositChecking, txSendPayment:
			g.amount = 1 + r.Int63n(100)
		case txTransactSavings:
			g.amount = r.Int63n(401) - 200 // negatives can abort
		case txWriteCheck:
			g.amount = 1 + r.Int63n(200)
		}
		out[i] = g
	}
	return out
}

// model is SmallBank's state in memory.
type model struct {
	savings, checking []int64
}

// newModel is every account at its initial balances.
func newModel(n uint64) *model {
	m := &model{savings: make([]int64, n), checking: make([]int64, n)}
	for i := range m.savings {
		m.savings[i] = initialSavings
		m.checking[i] = initialChecking
	}
	return m
}

// apply runs g on the model. It returns whether it aborted, and the change of
// the total money it made (non-zero only for deposits, transact-savings and
// checks: the other transactions move money).
func (m *model) apply(g genTx) (aborted bool, external int64) {
	a, b, v := g.a, g.b, g.amount
	before := m.total()
	switch g.typ {
	case txBalance:
	case txDepositChecking:
		m.checking[a] += v
		external = v
	case txTransactSavings:
		if m.savings[a]+v < 0 {
			return true, 0
		}
		m.savings[a] += v
		external = v
	case txAmalgamate:
		t := m.savings[a] + m.checking[a]
		m.savings[a] = 0
		m.checking[a] = 0
		m.checking[b] += t
	case txWriteCheck:
		debit := v
		if m.savings[a]+m.checking[a] < v {
			debit = v + 1
		}
		m.checking[a] -= debit
		external = -debit
	case txSendPayment:
		if m.checking[a] < v {
			return true, 0
		}
		m.checking[a] -= v
		m.checking[b] += v
	}
	if m.total()-before != external {
		panic(fmt.Sprintf("model: %s changed the total by %d, not %d", g.typ, m.total()-before, external))
	}
	return false, external
}

// total is all the money in the model.
func (m *model) total() int64 {
	var t int64
	for i := range m.savings {
		t += m.savings[i] + m.checking[i]
	}
	return t
}

// runProtocol runs the peer in-process on input and returns its exit code
// and the JSON objects it wrote.
func runProtocol(t *testing.T, input string, synced bool) (int, []map[string]any) {
	t.Helper()
	var out bytes.Buffer
	code := run(strings.NewReader(input), &out, io.Discard, synced)
	var replies []map[string]any
	sc := bufio.NewScanner(&out)
	sc.Buffer(make([]byte, 1<<20), 1<<28)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("reply is not JSON: %q: %v", sc.Text(), err)
		}
		replies = append(replies, m)
	}
	return code, replies
}

// TestSmallBankAgainstModel runs 2,000 SmallBank transactions on 100
// accounts with 4 clients in each verify mode, then replays the committed
// transactions in immudb commit order on a model and checks every balance of
// the dump and the total money.
func TestSmallBankAgainstModel(t *testing.T) {
	const accounts, clients, n = 100, 4, 2000
	for _, mode := range []string{"immediate", "deferred", "none"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			dumpPath := filepath.Join(dir, "dump.txt")
			work := genWorkload(46, accounts, clients, n)
			var in strings.Builder
			cfg := map[string]any{"dir": filepath.Join(dir, "db"), "accounts": accounts, "clients": clients,
				"verify": mode, "deferred_delay_ms": 10, "synced": true}
			cb, _ := json.Marshal(cfg)
			in.Write(cb)
			in.WriteString("\nLOAD\n")
			for _, g := range work {
				in.WriteString(g.line() + "\n")
			}
			in.WriteString("DUMP " + dumpPath + "\nEND\n")

			code, replies := runProtocol(t, in.String(), true)
			if code != exitOK {
				t.Fatalf("exit code %d, replies %v", code, replies)
			}
			if len(replies) != 3 || replies[0]["event"] != "loaded" || replies[1]["event"] != "dumped" || replies[2]["event"] != "result" {
				t.Fatalf("unexpected replies: %v", replies)
			}
			res := replies[2]
			num := func(k string) int64 { return int64(res[k].(float64)) }
			log := checkAgainstModel(t, work, res, dumpPath, accounts, n)

			// Verification counters.
			reads, writes := num("verified_reads"), num("verified_writes")
			if mode == "none" {
				if reads != 0 || writes != 0 || num("proof_bytes") != 0 {
					t.Fatalf("verify none verified something: %v", res)
				}
			} else {
				if reads == 0 || writes == 0 || num("proof_bytes") == 0 || res["proof_bytes_per_verified_read"].(float64) <= 0 {
					t.Fatalf("verify %s: counters %v", mode, res)
				}
				if writes < int64(len(log)) {
					t.Fatalf("verified %d writes for %d committed writers", writes, len(log))
				}
			}
			if mode == "deferred" {
				d := res["deferred"].(map[string]any)
				if d["batches"].(float64) < 1 || d["keys_per_batch_mean"].(float64) <= 0 {
					t.Fatalf("deferred: %v", d)
				}
				if int64(d["inclusion_proofs"].(float64)) != reads+writes {
					t.Fatalf("deferred: %v inclusion proofs for %d reads + %d writes", d["inclusion_proofs"], reads, writes)
				}
			}
			t.Logf("%s: %.0f tx/s, %d conflict retries, %d verified reads, %d verified writes, %.0f proof bytes per read",
				mode, res["tx_per_second"], num("conflict_retries"), reads, writes, res["proof_bytes_per_verified_read"])
		})
	}
}

// checkAgainstModel checks a SmallBank run's result and dump: the counts, the
// log replayed in tx id order on a model (every committed writer once, no
// business abort in the model, every other transaction a Balance or a
// business abort), every balance of the dump and the total money. It returns
// the log.
func checkAgainstModel(t *testing.T, work []genTx, res map[string]any, dumpPath string, accounts uint64, n int64) [][3]uint64 {
	t.Helper()
	num := func(k string) int64 { return int64(res[k].(float64)) }
	if num("transactions") != n || num("committed")+num("aborted") != n {
		t.Fatalf("counts: %v", res)
	}

	// Replay the log in commit (tx id) order.
	var log [][3]uint64
	for _, e := range res["log"].([]any) {
		f := e.([]any)
		log = append(log, [3]uint64{uint64(f[0].(float64)), uint64(f[1].(float64)), uint64(f[2].(float64))})
	}
	sort.Slice(log, func(i, j int) bool { return log[i][2] < log[j][2] })
	m := newModel(accounts)
	external := int64(0)
	logged := map[uint64]bool{}
	var lastTx uint64
	for _, e := range log {
		g := work[e[1]]
		if uint64(g.client) != e[0] || logged[e[1]] || e[2] <= lastTx {
			t.Fatalf("bad log entry %v (client %d, seen %v, last tx %d)", e, g.client, logged[e[1]], lastTx)
		}
		logged[e[1]], lastTx = true, e[2]
		aborted, ext := m.apply(g)
		if aborted {
			t.Fatalf("tx %d (%s) committed in immudb but aborts in the model", e[2], g.line())
		}
		external += ext
	}
	// Every transaction not logged is a Balance or a business abort.
	aborts := int64(0)
	for _, g := range work {
		if logged[g.seq] || g.typ == txBalance {
			continue
		}
		if g.typ != txTransactSavings && g.typ != txSendPayment {
			t.Fatalf("%s never committed", g.line())
		}
		aborts++
	}
	if aborts != num("aborted") {
		t.Fatalf("aborted: peer says %d, log implies %d", num("aborted"), aborts)
	}

	// Every balance, and the total money.
	f, err := os.Open(dumpPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var total int64
	rows := uint64(0)
	for sc.Scan() {
		var id uint64
		var s, c int64
		if _, err := fmt.Sscanf(sc.Text(), "%d %d %d", &id, &s, &c); err != nil {
			t.Fatalf("dump line %q: %v", sc.Text(), err)
		}
		if id != rows || s != m.savings[id] || c != m.checking[id] {
			t.Fatalf("account %d: immudb %d/%d, model %d/%d", id, s, c, m.savings[id], m.checking[id])
		}
		total += s + c
		rows++
	}
	if rows != accounts {
		t.Fatalf("dump has %d accounts", rows)
	}
	if want := int64(accounts*(initialSavings+initialChecking)) + external; total != want {
		t.Fatalf("total money %d, want %d", total, want)
	}
	return log
}

// testStore opens a store with a few transactions: tx 1 writes keys k0..k9,
// then txs 2..6 each rewrite one key.
func testStore(t *testing.T) (*store.ImmuStore, map[string][]byte) {
	t.Helper()
	st, err := store.Open(t.TempDir(), store.DefaultOptions().WithSynced(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ctx := context.Background()
	vals := map[string][]byte{}
	tx, _ := st.NewWriteOnlyTx(ctx)
	for i := 0; i < 10; i++ {
		k, v := fmt.Sprintf("k%d", i), []byte(fmt.Sprintf("v%d", i))
		if err := tx.Set([]byte(k), nil, v); err != nil {
			t.Fatal(err)
		}
		vals[k] = v
	}
	if _, err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		tx, _ := st.NewWriteOnlyTx(ctx)
		k, v := fmt.Sprintf("k%d", 9-i), []byte(fmt.Sprintf("w%d", i))
		if err := tx.Set([]byte(k), nil, v); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		vals[k] = v
	}
	return st, vals
}

// mustReject fails unless err is a rejection (exit code 3).
func mustReject(t *testing.T, what string, err error) {
	t.Helper()
	var pe *peerError
	if err == nil {
		t.Fatalf("%s: tampered proof accepted", what)
	}
	if !errors.As(err, &pe) || pe.code != exitRejected {
		t.Fatalf("%s: want a rejection, got %v", what, err)
	}
}

// flip flips one bit of b.
func flip(b []byte) { b[len(b)/2] ^= 0x01 }

// tamperInclusion flips a bit of the first term of an inclusion proof, or
// (for a transaction of one entry, whose proof has no terms) changes its
// width.
func tamperInclusion(p *schema.InclusionProof) {
	if len(p.Terms) > 0 {
		flip(p.Terms[0])
	} else {
		p.Width++
	}
}

// TestTamperedProofsRejected checks that each verifier accepts honest
// proofs and rejects a flipped byte in an inclusion proof term, in a dual
// proof's Alh or linear proof term, in an Eh, or in the trusted state.
func TestTamperedProofsRejected(t *testing.T) {
	st, _ := testStore(t)
	holder := store.NewTx(st.MaxTxEntries(), st.MaxKeyLen())
	last, lastAlh := st.CommittedAlh()
	if last != 6 {
		t.Fatalf("want 6 transactions, have %d", last)
	}
	key, val := []byte("k1"), []byte("v1") // written in tx 1, never rewritten

	// VerifiedGet, first contact (no state): inclusion only.
	p, err := proveGet(st, holder, key, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	s1, err := verifyGet(clientState{}, key, nil, val, 1, p)
	if err != nil || s1.id != 1 {
		t.Fatalf("honest first get: %v %v", s1, err)
	}
	bad := proto.Clone(p.inclusion).(*schema.InclusionProof)
	flip(bad.Terms[0])
	_, err = verifyGet(clientState{}, key, nil, val, 1, &getProof{inclusion: bad, dual: p.dual})
	mustReject(t, "get inclusion term", err)
	_, err = verifyGet(clientState{}, key, nil, []byte("v2"), 1, p)
	mustReject(t, "get wrong value", err)

	// VerifiedGet with a newer trusted state (dual proof tx 1 -> state 6).
	state := clientState{id: last, alh: lastAlh}
	p, err = proveGet(st, holder, key, 1, state.id)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := verifyGet(state, key, nil, val, 1, p); err != nil || s != state {
		t.Fatalf("honest get against newer state: %v %v", s, err)
	}
	badDual := proto.Clone(p.dual).(*schema.DualProof)
	flip(badDual.TargetBlTxAlh)
	_, err = verifyGet(state, key, nil, val, 1, &getProof{inclusion: p.inclusion, dual: badDual})
	mustReject(t, "get dual proof TargetBlTxAlh", err)
	badDual = proto.Clone(p.dual).(*schema.DualProof)
	if len(badDual.LinearProof.Terms) == 0 {
		t.Fatal("expected linear proof terms")
	}
	flip(badDual.LinearProof.Terms[0])
	_, err = verifyGet(state, key, nil, val, 1, &getProof{inclusion: p.inclusion, dual: badDual})
	mustReject(t, "get dual proof linear term", err)
	badState := state
	badState.alh[3] ^= 0x80
	_, err = verifyGet(badState, key, nil, val, 1, p)
	mustReject(t, "get against a wrong trusted Alh", err)

	// VerifiedGet with an older state (dual proof state 2 -> tx 6).
	hdr2, err := st.ReadTxHeader(2, false, false)
	if err != nil {
		t.Fatal(err)
	}
	old := clientState{id: 2, alh: hdr2.Alh()}
	k5 := []byte("k5") // rewritten in tx 6 with "w4"
	p, err = proveGet(st, holder, k5, 6, old.id)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := verifyGet(old, k5, nil, []byte("w4"), 6, p); err != nil || s.id != 6 || s.alh != lastAlh {
		t.Fatalf("honest get against older state: %v %v", s, err)
	}
	badDual = proto.Clone(p.dual).(*schema.DualProof)
	flip(badDual.TargetBlTxAlh)
	_, err = verifyGet(old, k5, nil, []byte("w4"), 6, &getProof{inclusion: p.inclusion, dual: badDual})
	mustReject(t, "get (older state) dual proof TargetBlTxAlh", err)
	_, err = verifyGet(old, k5, nil, []byte("v5"), 6, p)
	mustReject(t, "stale value at the newer tx", err)

	// VerifiedSet of tx 6 from state 2.
	hdr6, err := st.ReadTxHeader(6, false, false)
	if err != nil {
		t.Fatal(err)
	}
	writes := []writeRec{{key: k5, value: []byte("w4")}}
	sp, err := proveSet(st, holder, 6, [][]byte{k5}, old.id)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := verifySet(old, hdr6, writes, sp); err != nil || s.id != 6 {
		t.Fatalf("honest set: %v %v", s, err)
	}
	_, err = verifySet(old, hdr6, []writeRec{{key: k5, value: []byte("w5")}}, sp)
	mustReject(t, "set wrong value", err)
	badSet := &setProof{inclusions: sp.inclusions, dual: proto.Clone(sp.dual).(*schema.DualProof)}
	flip(badSet.dual.TargetBlTxAlh)
	_, err = verifySet(old, hdr6, writes, badSet)
	mustReject(t, "set dual proof TargetBlTxAlh", err)
	badSet = &setProof{inclusions: sp.inclusions, dual: proto.Clone(sp.dual).(*schema.DualProof)}
	flip(badSet.dual.TargetTxHeader.EH)
	_, err = verifySet(old, hdr6, writes, badSet)
	mustReject(t, "set dual proof Eh", err)
	badState = old
	badState.alh[0] ^= 1
	_, err = verifySet(badState, hdr6, writes, sp)
	mustReject(t, "set against a wrong trusted Alh", err)

	// A transaction of several entries: tx 1 with k0..k9 as a "set".
	hdr1, _ := st.ReadTxHeader(1, false, false)
	var keys [][]byte
	var ws []writeRec
	for i := 0; i < 10; i++ {
		k := []byte(fmt.Sprintf("k%d", i))
		keys = append(keys, k)
		ws = append(ws, writeRec{key: k, value: []byte(fmt.Sprintf("v%d", i))})
	}
	sp, err = proveSet(st, holder, 1, keys, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := verifySet(clientState{}, hdr1, ws, sp); err != nil {
		t.Fatalf("honest 10-entry set: %v", err)
	}
	badSet = &setProof{dual: sp.dual}
	for _, ip := range sp.inclusions {
		badSet.inclusions = append(badSet.inclusions, proto.Clone(ip).(*schema.InclusionProof))
	}
	flip(badSet.inclusions[7].Terms[1])
	_, err = verifySet(clientState{}, hdr1, ws, badSet)
	mustReject(t, "set inclusion term", err)

	// Deferred primitives: state advance, tx in state, entry inclusion.
	dp, err := proveDual(st, 2, 6)
	if err != nil {
		t.Fatal(err)
	}
	if err := verifyAdvance(old, state, dp); err != nil {
		t.Fatalf("honest advance: %v", err)
	}
	bd := proto.Clone(dp).(*schema.DualProof)
	flip(bd.TargetBlTxAlh)
	mustReject(t, "advance TargetBlTxAlh", verifyAdvance(old, state, bd))
	badState = state
	badState.alh[31] ^= 1
	mustReject(t, "advance to a wrong Alh", verifyAdvance(old, badState, dp))

	dp, err = proveDual(st, 1, 6)
	if err != nil {
		t.Fatal(err)
	}
	h, err := verifyTxInState(state, 1, dp)
	if err != nil {
		t.Fatalf("honest tx in state: %v", err)
	}
	bd = proto.Clone(dp).(*schema.DualProof)
	flip(bd.SourceTxHeader.EH) // changes tx 1's Alh
	_, err = verifyTxInState(state, 1, bd)
	mustReject(t, "tx in state with a forged Eh", err)
	_, err = verifyTxInState(badState, 1, dp)
	mustReject(t, "tx in a wrong state", err)

	if err := st.ReadTx(1, false, holder); err != nil {
		t.Fatal(err)
	}
	ip, err := proveInclusion(holder, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := verifyEntry(h, key, nil, val, ip); err != nil {
		t.Fatalf("honest entry: %v", err)
	}
	bi := proto.Clone(ip).(*schema.InclusionProof)
	flip(bi.Terms[len(bi.Terms)-1])
	mustReject(t, "entry inclusion term", verifyEntry(h, key, nil, val, bi))
	mustReject(t, "entry wrong value", verifyEntry(h, key, nil, []byte("v9"), ip))
}

// smallInput is a short valid protocol stream.
func smallInput(dir, mode string, extra ...string) string {
	lines := []string{
		fmt.Sprintf(`{"dir": %q, "accounts": 10, "clients": 2, "verify": %q, "deferred_delay_ms": 5}`, dir, mode),
		"LOAD",
		"T 0 0 DepositChecking 1 0 5",
		"T 1 1 SendPayment 2 3 10",
		"T 0 2 Balance 3 0 0",
	}
	lines = append(lines, extra...)
	return strings.Join(lines, "\n") + "\n"
}

// TestMalformedLinesExit2 checks that bad input ends the run with exit code
// 2 and an error reply.
func TestMalformedLinesExit2(t *testing.T) {
	cases := []string{
		"T 2 3 Balance 1 0 0",         // client out of range
		"T 0 3 Balance 10 0 0",        // account out of range
		"T 0 3 Withdraw 1 0 0",        // unknown type
		"T 0 3 Balance 1 0",           // missing field
		"T 0 3 SendPayment 1 99 5",    // b out of range
		"T 0 3 DepositChecking 1 0 x", // bad amount
		"FROB",                        // unknown command
	}
	for _, bad := range cases {
		code, replies := runProtocol(t, smallInput(filepath.Join(t.TempDir(), "db"), "none", bad, "END"), false)
		if code != exitMalformed || len(replies) == 0 || replies[len(replies)-1]["event"] != "error" {
			t.Fatalf("%q: exit %d, replies %v", bad, code, replies)
		}
	}
	code, replies := runProtocol(t, `{"dir": "/tmp/x", "accounts": 0, "clients": 1}`+"\n", false)
	if code != exitMalformed || replies[0]["event"] != "error" {
		t.Fatalf("bad config: exit %d, replies %v", code, replies)
	}
	code, _ = runProtocol(t, smallInput(filepath.Join(t.TempDir(), "db"), "none"), false) // no END
	if code != exitMalformed {
		t.Fatalf("missing END: exit %d", code)
	}
}

// TestRejectionExit3 checks that a proof tampered between the "server" and
// the "client" fails the whole run with exit code 3, in both verify modes.
func TestRejectionExit3(t *testing.T) {
	var mu sync.Mutex
	t.Cleanup(func() { tamperForTest = nil })
	for _, mode := range []string{"immediate", "deferred"} {
		n := 0
		tamperForTest = func(p any) {
			mu.Lock()
			defer mu.Unlock()
			n++
			if n != 3 { // leave the first proofs honest
				return
			}
			switch p := p.(type) {
			case *getProof:
				tamperInclusion(p.inclusion)
			case *setProof:
				tamperInclusion(p.inclusions[0])
			case *schema.DualProof:
				flip(p.TargetBlTxAlh)
			case *schema.InclusionProof:
				tamperInclusion(p)
			}
		}
		code, replies := runProtocol(t, smallInput(filepath.Join(t.TempDir(), "db"), mode, "END"), false)
		if code != exitRejected || replies[len(replies)-1]["event"] != "error" {
			t.Fatalf("%s: exit %d, replies %v", mode, code, replies)
		}
		t.Logf("%s: %v", mode, replies[len(replies)-1]["message"])
	}
}
