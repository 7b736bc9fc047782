package main

// Tests of the storage-growth (STORE), range (RLOAD, R) and audit
// (audit_block, full audit) workloads, and of malformed lines for them.

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/codenotary/immudb/embedded/ahtree"
	"github.com/codenotary/immudb/embedded/store"
	"github.com/codenotary/immudb/pkg/api/schema"
	"google.golang.org/protobuf/proto"
)

// protocolInput renders a config and command lines as the peer's stdin.
func protocolInput(t *testing.T, cfg map[string]any, lines ...string) string {
	t.Helper()
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return string(b) + "\n" + strings.Join(lines, "\n") + "\n"
}

// num reads a JSON number of a reply.
func num(t *testing.T, m map[string]any, k string) float64 {
	t.Helper()
	v, ok := m[k].(float64)
	if !ok {
		t.Fatalf("reply has no number %q: %v", k, m)
	}
	return v
}

// TestRecordValue pins STORE's values (the Rust side checks the same bytes
// with its own SplitMix64): SplitMix64 seeded with the id, little-endian.
func TestRecordValue(t *testing.T) {
	for _, c := range []struct {
		id         uint64
		head, tail string
	}{
		{0, "afcd1d7b39a820e2f465b9a16a9e786e", "7bdbbbe0"},
		{1, "c15c0289ec2d0a9167ec8e65a18debbe", "c05daa4b"},
		{1234567, "85fc08fb17d09e59a50f545884f0732c", "ebbf1990"},
	} {
		v := recordValue(c.id)
		if len(v) != storeValueLen || hex.EncodeToString(v[:16]) != c.head || hex.EncodeToString(v[96:]) != c.tail {
			t.Fatalf("recordValue(%d) = %x", c.id, v)
		}
	}
}

// TestStoreGrows runs three STOREs of 500 records, synced (measured with the
// store open) and not (measured closed), and checks the replies (records so
// far, bytes growing, the split adding up), then reopens the store and reads
// every record back.
func TestStoreGrows(t *testing.T) {
	for _, synced := range []bool{true, false} {
		t.Run(fmt.Sprintf("synced=%v", synced), func(t *testing.T) { storeGrows(t, synced) })
	}
}

func storeGrows(t *testing.T, synced bool) {
	dir := filepath.Join(t.TempDir(), "db")
	in := protocolInput(t, map[string]any{"dir": dir, "accounts": 0, "clients": 1, "verify": "none", "synced": synced},
		"STORE 500 100", "STORE 500 100", "STORE 0 1", "STORE 500 1000", "END")
	code, replies := runProtocol(t, in, synced)
	if code != exitOK || len(replies) != 5 {
		t.Fatalf("exit %d, replies %v", code, replies)
	}
	replies = append(replies[:2], replies[3:]...) // STORE 0 only measured
	var last float64
	for i, r := range replies[:3] {
		if r["event"] != "stored" || num(t, r, "records") != float64(500*(i+1)) {
			t.Fatalf("STORE %d: %v", i, r)
		}
		if want := map[bool]string{true: "open", false: "closed"}[synced]; r["measured"] != want {
			t.Fatalf("STORE %d measured %v, want %s", i, r["measured"], want)
		}
		disk := num(t, r, "disk_bytes")
		if disk <= last {
			t.Fatalf("STORE %d: %v bytes after %v", i, disk, last)
		}
		last = disk
		split := r["disk_split"].(map[string]any)
		var sum float64
		for _, v := range split {
			sum += v.(float64)
		}
		if sum != disk {
			t.Fatalf("STORE %d: split %v adds up to %v, not %v", i, split, sum, disk)
		}
		// Every value is in the value log, every key in the index.
		if split["val_0"].(float64) < float64(500*(i+1)*storeValueLen) || split["index/nodes"].(float64) == 0 ||
			split["tx"].(float64) < float64(500*(i+1)*9) {
			t.Fatalf("STORE %d: split %v", i, split)
		}
		t.Logf("STORE %d: %v bytes: %v", i, disk, split)
	}
	if num(t, replies[0], "txs") != 5 || num(t, replies[1], "txs") != 5 || num(t, replies[2], "txs") != 1 {
		t.Fatalf("transactions per STORE: %v %v %v", replies[0]["txs"], replies[1]["txs"], replies[2]["txs"])
	}
	if num(t, replies[3], "last_tx_id") != 11 {
		t.Fatalf("END: %v", replies[3])
	}

	st, err := store.Open(dir, store.DefaultOptions().WithSynced(false))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	for id := uint64(0); id < 1500; id++ {
		ref, err := st.Get(ctx, recordKey(id))
		if err != nil {
			t.Fatalf("record %d: %v", id, err)
		}
		v, err := ref.Resolve()
		if err != nil || !bytes.Equal(v, recordValue(id)) {
			t.Fatalf("record %d: %x %v", id, v, err)
		}
	}
	if _, err := st.Get(ctx, recordKey(1500)); err == nil {
		t.Fatal("record 1500 exists")
	}
}

// testRanges are (client, lo, count): within one RLOAD transaction, across
// two and three, the first and last key, and everything.
var testRanges = [][3]uint64{{0, 0, 1}, {1, 10, 50}, {0, 900, 300}, {1, 999, 2}, {0, 500, 2000}, {1, 2999, 1}, {0, 0, 3000}}

// TestRangeEachMode runs the ranges above on 3,000 keys with 2 clients in
// each verify mode. scanRange checks every key and value against RLOAD's;
// the test checks the counts.
func TestRangeEachMode(t *testing.T) {
	var entries float64
	lines := []string{"RLOAD 3000"}
	for i, r := range testRanges {
		lines = append(lines, fmt.Sprintf("R %d %d %d %d", r[0], i, r[1], r[2]))
		entries += float64(r[2])
	}
	lines = append(lines, "END")
	for _, mode := range []string{"immediate", "deferred", "none"} {
		t.Run(mode, func(t *testing.T) {
			in := protocolInput(t, map[string]any{"dir": filepath.Join(t.TempDir(), "db"), "accounts": 0, "clients": 2,
				"verify": mode, "deferred_delay_ms": 5, "synced": false}, lines...)
			code, replies := runProtocol(t, in, false)
			if code != exitOK || len(replies) != 2 || replies[0]["event"] != "rloaded" || replies[1]["event"] != "result" {
				t.Fatalf("exit %d, replies %v", code, replies)
			}
			if num(t, replies[0], "txs") != 3 || num(t, replies[0], "keys") != 3000 {
				t.Fatalf("RLOAD: %v", replies[0])
			}
			res := replies[1]
			n := float64(len(testRanges))
			if num(t, res, "transactions") != n || num(t, res, "entries_read") != entries {
				t.Fatalf("counts: %v", res)
			}
			pt := res["per_type"].(map[string]any)
			if len(pt) != 1 || num(t, pt["Range"].(map[string]any), "count") != n {
				t.Fatalf("per_type: %v", pt)
			}
			reads := num(t, res, "verified_reads")
			switch mode {
			case "none":
				if reads != 0 || num(t, res, "proof_bytes") != 0 {
					t.Fatalf("verify none verified: %v", res)
				}
			default:
				if reads != entries || num(t, res, "proof_bytes") == 0 {
					t.Fatalf("verified %v of %v entries: %v", reads, entries, res)
				}
			}
			if mode == "deferred" {
				d := res["deferred"].(map[string]any)
				if num(t, d, "inclusion_proofs") != entries {
					t.Fatalf("deferred: %v", d)
				}
			}
			t.Logf("%s: %.0f proof bytes per entry", mode, res["proof_bytes_per_verified_read"])
		})
	}
}

// rangeStore opens a store with RLOAD's keys 0..9 in tx 1, key 5 rewritten
// with a wrong value in tx 2 when bad.
func rangeStore(t *testing.T, bad bool) *store.ImmuStore {
	t.Helper()
	st, err := store.Open(t.TempDir(), store.DefaultOptions().WithSynced(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ctx := context.Background()
	tx, _ := st.NewWriteOnlyTx(ctx)
	for id := uint64(0); id < 10; id++ {
		if err := tx.Set(rangeKey(id), nil, rangeValue(id)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if bad {
		tx, _ := st.NewWriteOnlyTx(ctx)
		if err := tx.Set(rangeKey(5), nil, rangeValue(6)); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

// TestScanRangeChecks checks that scanRange returns exactly the range and
// refuses a wrong value or a short range.
func TestScanRangeChecks(t *testing.T) {
	ctx := context.Background()
	st := rangeStore(t, false)
	reads, err := scanRange(ctx, st, 3, 4)
	if err != nil || len(reads) != 4 || !bytes.Equal(reads[0].key, rangeKey(3)) || !bytes.Equal(reads[3].key, rangeKey(6)) || reads[2].tx != 1 {
		t.Fatalf("scan 3+4: %v %v", reads, err)
	}
	if _, err := scanRange(ctx, st, 8, 3); err == nil || !strings.Contains(err.Error(), "2 entries, want 3") {
		t.Fatalf("short range: %v", err)
	}
	st = rangeStore(t, true)
	if _, err := scanRange(ctx, st, 3, 4); err == nil || !strings.Contains(err.Error(), "has value") {
		t.Fatalf("wrong value: %v", err)
	}
}

// TestRangeProofs checks the range proofs: honest ones verify, a flipped
// term, a wrong value, a forged dual proof or a wrong state are refused; and
// shows what they do not prove: a range with an entry left out verifies.
func TestRangeProofs(t *testing.T) {
	ctx := context.Background()
	st := rangeStore(t, false)
	for i := 0; i < 3; i++ { // txs 2..4, so that the state is newer than tx 1
		tx, _ := st.NewWriteOnlyTx(ctx)
		_ = tx.Set([]byte(fmt.Sprintf("x%d", i)), nil, []byte("x"))
		if _, err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	holder := store.NewTx(st.MaxTxEntries(), st.MaxKeyLen())
	id, alh := st.CommittedAlh()
	state := clientState{id: id, alh: alh}
	reads, err := scanRange(ctx, st, 2, 5)
	if err != nil {
		t.Fatal(err)
	}
	keys := make([][]byte, len(reads))
	for i, r := range reads {
		keys[i] = r.key
	}
	p, err := proveEntries(st, holder, keys, 1, state.id)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := verifyEntries(state, reads, 1, p); err != nil || s != state {
		t.Fatalf("honest range: %v %v", s, err)
	}
	p0, err := proveEntries(st, holder, keys, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := verifyEntries(clientState{}, reads, 1, p0); err != nil || s.id != 1 {
		t.Fatalf("honest range, first contact: %v %v", s, err)
	}
	clone := func() *entriesProof {
		c := &entriesProof{dual: proto.Clone(p.dual).(*schema.DualProof)}
		for _, ip := range p.inclusions {
			c.inclusions = append(c.inclusions, proto.Clone(ip).(*schema.InclusionProof))
		}
		return c
	}
	bad := clone()
	flip(bad.inclusions[3].Terms[0])
	_, err = verifyEntries(state, reads, 1, bad)
	mustReject(t, "range inclusion term", err)
	bad = clone()
	flip(bad.dual.TargetBlTxAlh)
	_, err = verifyEntries(state, reads, 1, bad)
	mustReject(t, "range dual proof", err)
	wrong := append([]readRec(nil), reads...)
	wrong[4].value = rangeValue(99)
	_, err = verifyEntries(state, wrong, 1, p)
	mustReject(t, "range wrong value", err)
	badState := state
	badState.alh[0] ^= 1
	_, err = verifyEntries(badState, reads, 1, p)
	mustReject(t, "range against a wrong state", err)
	_, err = verifyEntries(state, reads[:4], 1, p)
	mustReject(t, "range with proofs and entries miscounted", err)

	// Not proved: completeness. A server that leaves key 4 out of the range
	// and sends the proofs of the others passes.
	omitted := []readRec{reads[0], reads[1], reads[3], reads[4]}
	op := &entriesProof{dual: p.dual, inclusions: []*schema.InclusionProof{p.inclusions[0], p.inclusions[1], p.inclusions[3], p.inclusions[4]}}
	if _, err := verifyEntries(state, omitted, 1, op); err != nil {
		t.Fatalf("an incomplete range was refused (immudb's proofs do not show completeness): %v", err)
	}
}

// TestRangeRejectionExit3 checks that a tampered range proof fails the run
// with exit 3, in immediate and deferred mode.
func TestRangeRejectionExit3(t *testing.T) {
	var mu sync.Mutex
	t.Cleanup(func() { tamperForTest = nil })
	for _, mode := range []string{"immediate", "deferred"} {
		n := 0
		tamperForTest = func(p any) {
			mu.Lock()
			defer mu.Unlock()
			switch p := p.(type) {
			case *entriesProof:
				if n++; n == 2 {
					flip(p.inclusions[len(p.inclusions)-1].Terms[0])
				}
			case *schema.InclusionProof:
				if n++; n == 30 {
					tamperInclusion(p)
				}
			}
		}
		in := protocolInput(t, map[string]any{"dir": filepath.Join(t.TempDir(), "db"), "accounts": 0, "clients": 1,
			"verify": mode, "deferred_delay_ms": 5, "synced": false},
			"RLOAD 2000", "R 0 0 10 20", "R 0 1 990 20", "R 0 2 0 100", "END")
		code, replies := runProtocol(t, in, false)
		if code != exitRejected || replies[len(replies)-1]["event"] != "error" {
			t.Fatalf("%s: exit %d, replies %v", mode, code, replies)
		}
		t.Logf("%s: %v", mode, replies[len(replies)-1]["message"])
	}
}

// TestAuditSmallBank runs a tiny SmallBank with audit_block 50 and checks
// that blocks were audited and that the full audit covered every tx.
func TestAuditSmallBank(t *testing.T) {
	const accounts, clients, n = 100, 4, 400
	lines := []string{"LOAD"}
	for _, g := range genWorkload(7, accounts, clients, n) {
		lines = append(lines, g.line())
	}
	lines = append(lines, "END")
	in := protocolInput(t, map[string]any{"dir": filepath.Join(t.TempDir(), "db"), "accounts": accounts, "clients": clients,
		"verify": "none", "synced": false, "audit_block": 50}, lines...)
	code, replies := runProtocol(t, in, false)
	if code != exitOK || len(replies) != 2 {
		t.Fatalf("exit %d, replies %v", code, replies)
	}
	res := replies[1]
	audit, ok := res["audit"].(map[string]any)
	if !ok {
		t.Fatalf("no audit: %v", res["audit"])
	}
	full := res["full_audit"].(map[string]any)
	lastTx := num(t, res, "last_tx_id")
	blocks, txs := num(t, audit, "blocks"), num(t, audit, "txs")
	if num(t, audit, "block") != 50 || blocks < 1 || txs < 50*blocks || num(t, audit, "entries") < txs ||
		num(t, audit, "latency_ms_max") <= 0 || num(t, audit, "last_audited") != num(t, audit, "trusted_from")+txs {
		t.Fatalf("audit: %v", audit)
	}
	// LOAD's transaction (100 accounts: one) is trusted on first use.
	if num(t, audit, "trusted_from") != 1 || num(t, audit, "last_audited") > lastTx {
		t.Fatalf("audit: %v (last tx %v)", audit, lastTx)
	}
	if num(t, full, "txs") != lastTx || num(t, full, "entries") < 2*accounts+lastTx-1 || num(t, full, "seconds") <= 0 {
		t.Fatalf("full audit: %v (last tx %v)", full, lastTx)
	}
	t.Logf("audit %v, full audit %v", audit, full)

	// Without audit_block: both null.
	in = protocolInput(t, map[string]any{"dir": filepath.Join(t.TempDir(), "db"), "accounts": accounts, "clients": clients,
		"verify": "none", "synced": false}, lines...)
	code, replies = runProtocol(t, in, false)
	if code != exitOK || replies[1]["audit"] != nil || replies[1]["full_audit"] != nil {
		t.Fatalf("audit off: exit %d, %v %v", code, replies[1]["audit"], replies[1]["full_audit"])
	}
}

// TestAuditChecks audits testStore's six transactions honestly (full, and a
// block from tx 2), then with each part of what the server sends tampered.
func TestAuditChecks(t *testing.T) {
	st, _ := testStore(t)
	holder := store.NewTx(st.MaxTxEntries(), st.MaxKeyLen())
	id, alh := st.CommittedAlh()
	to := clientState{id: id, alh: alh}
	hdr2, err := st.ReadTxHeader(2, false, false)
	if err != nil {
		t.Fatal(err)
	}
	from := clientState{id: 2, alh: hdr2.Alh()}
	newAHT := func() *ahtree.AHtree {
		a, err := ahtree.Open(t.TempDir(), ahtree.DefaultOptions().WithRetryableSync(false).WithAutoSync(false))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close() })
		return a
	}
	c, err := auditHistory(st, holder, clientState{}, to, newAHT(), nil)
	if err != nil || c.txs != 6 || c.entries != 15 {
		t.Fatalf("honest full audit: %+v %v", c, err)
	}
	c, err = auditHistory(st, holder, from, to, nil, nil)
	if err != nil || c.txs != 4 || c.entries != 4 {
		t.Fatalf("honest block audit: %+v %v", c, err)
	}

	t.Cleanup(func() { tamperForTest = nil })
	cases := []struct {
		what   string
		tamper func(p any)
	}{
		{"an entry's value hash", func(p any) {
			if tx, ok := p.(*schema.Tx); ok && tx.Header.Id == 4 {
				flip(tx.Entries[0].HValue)
			}
		}},
		{"an entry's key", func(p any) {
			if tx, ok := p.(*schema.Tx); ok && tx.Header.Id == 3 {
				tx.Entries[0].Key = []byte("k0")
			}
		}},
		{"an entry left out", func(p any) {
			if tx, ok := p.(*schema.Tx); ok && tx.Header.Id == 1 {
				tx.Entries = tx.Entries[1:]
				tx.Header.Nentries--
			}
		}},
		{"a header's Eh", func(p any) {
			if tx, ok := p.(*schema.Tx); ok && tx.Header.Id == 5 {
				flip(tx.Header.EH)
			}
		}},
		{"a header's PrevAlh", func(p any) {
			if tx, ok := p.(*schema.Tx); ok && tx.Header.Id == 6 {
				flip(tx.Header.PrevAlh)
			}
		}},
		{"a header's timestamp", func(p any) {
			if tx, ok := p.(*schema.Tx); ok && tx.Header.Id == 3 {
				tx.Header.Ts++
			}
		}},
		{"the dual proof", func(p any) {
			if dp, ok := p.(*schema.DualProof); ok {
				flip(dp.TargetBlTxAlh)
			}
		}},
	}
	for _, tc := range cases {
		tamperForTest = tc.tamper
		_, err := auditHistory(st, holder, from, to, nil, nil)
		if tc.what != "an entry left out" { // tx 1 is before the block
			mustReject(t, "block audit, tampered "+tc.what, err)
		}
		if tc.what != "the dual proof" { // no dual proof from the empty state
			_, err = auditHistory(st, holder, clientState{}, to, newAHT(), nil)
			mustReject(t, "full audit, tampered "+tc.what, err)
		}
	}
	tamperForTest = nil
	bad := to
	bad.alh[5] ^= 1
	_, err = auditHistory(st, holder, clientState{}, bad, newAHT(), nil)
	mustReject(t, "full audit to a wrong state", err)

	// The Alh tree check, on its own: a header whose BlRoot is not the root
	// of the tree of the Alhs before it.
	aht := newAHT()
	var hdrs []*store.TxHeader
	for i := uint64(1); i <= id; i++ {
		h, err := st.ReadTxHeader(i, false, false)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkBlRoot(aht, h); err != nil {
			t.Fatalf("tx %d: %v", i, err)
		}
		a := h.Alh()
		if _, _, err := aht.Append(a[:]); err != nil {
			t.Fatal(err)
		}
		hdrs = append(hdrs, h)
	}
	h := *hdrs[4]
	h.BlRoot[0] ^= 1
	mustReject(t, "BlRoot", checkBlRoot(aht, &h))
	h = *hdrs[4]
	h.BlTxID = h.ID
	mustReject(t, "BlTxID", checkBlRoot(aht, &h))
}

// TestAuditRejectionExit3 checks that a transaction tampered on its way to
// the auditor fails a SmallBank run with exit 3.
func TestAuditRejectionExit3(t *testing.T) {
	t.Cleanup(func() { tamperForTest = nil })
	tamperForTest = func(p any) {
		if tx, ok := p.(*schema.Tx); ok && tx.Header.Id == 4 {
			flip(tx.Entries[0].HValue)
		}
	}
	lines := []string{"LOAD"}
	for _, g := range genWorkload(3, 10, 2, 40) {
		lines = append(lines, g.line())
	}
	lines = append(lines, "END")
	in := protocolInput(t, map[string]any{"dir": filepath.Join(t.TempDir(), "db"), "accounts": 10, "clients": 2,
		"verify": "none", "synced": false, "audit_block": 5}, lines...)
	code, replies := runProtocol(t, in, false)
	if code != exitRejected || replies[len(replies)-1]["event"] != "error" {
		t.Fatalf("exit %d, replies %v", code, replies)
	}
	t.Logf("%v", replies[len(replies)-1]["message"])
}

// TestNewLinesMalformed checks that bad STORE, RLOAD and R lines (and LOAD
// or T lines without accounts) end the run with exit 2.
func TestNewLinesMalformed(t *testing.T) {
	cases := []struct {
		line  string
		rload bool // after RLOAD 10
	}{
		{"R 0 0 0 1", false}, // before RLOAD
		{"RLOAD 0", false},
		{"RLOAD", false},
		{"RLOAD -5", false},
		{"RLOAD 10 10", false},
		{"RLOAD 10", true}, // twice
		{"STORE 10", true}, // missing batch
		{"STORE 10 0", true},
		{"STORE 10 1001", true},
		{"STORE x 1", true},
		{"STORE -1 1", true},
		{"R 0 0 5 0", true},  // empty range
		{"R 0 0 9 2", true},  // past the last key
		{"R 0 0 10 1", true}, // lo past the last key
		{"R 2 0 0 1", true},  // client out of range
		{"R 0 0 0", true},    // missing count
		{"R 0 0 18446744073709551615 1", true},
		{"R 0 0 1 18446744073709551615", true},
		{"R 0 0 0 1\nSTORE 1 1", true}, // STORE after the run started
		{"LOAD", true},                 // accounts 0
		{"T 0 0 Balance 0 0 0", true},
	}
	for _, c := range cases {
		lines := []string{c.line, "END"}
		if c.rload {
			lines = []string{"RLOAD 10", c.line, "END"}
		}
		in := protocolInput(t, map[string]any{"dir": filepath.Join(t.TempDir(), "db"), "accounts": 0, "clients": 2,
			"verify": "none", "synced": false}, lines...)
		code, replies := runProtocol(t, in, false)
		if code != exitMalformed || replies[len(replies)-1]["event"] != "error" {
			t.Fatalf("%q: exit %d, replies %v", c.line, code, replies)
		}
	}
}

// TestRandomLines feeds random lines made of the protocol's words and odd
// numbers: the peer must end with exit 0 or 2 and an answer, never panic.
func TestRandomLines(t *testing.T) {
	words := []string{"R", "T", "STORE", "RLOAD", "LOAD", "DUMP", "END", "Balance", "SendPayment", "Range", "0", "1",
		"2", "3", "9", "-1", "x", "1e3", "18446744073709551616", "4294967296", "", " ", "\t", "{}", "null"}
	r := rand.New(rand.NewSource(46))
	for i := 0; i < 60; i++ {
		var f []string
		for j := r.Intn(7); j >= 0; j-- {
			f = append(f, words[r.Intn(len(words))])
		}
		line := strings.Join(f, " ")
		if strings.HasPrefix(strings.TrimSpace(line), "DUMP") {
			continue // DUMP writes a file where it is told
		}
		in := protocolInput(t, map[string]any{"dir": filepath.Join(t.TempDir(), "db"), "accounts": 3, "clients": 2,
			"verify": "none", "synced": false}, "RLOAD 10", line, "END")
		code, replies := runProtocol(t, in, false)
		if (code != exitOK && code != exitMalformed) || len(replies) == 0 {
			t.Fatalf("%q: exit %d, replies %v", line, code, replies)
		}
	}
}

// FuzzParseLines checks that the line parsers never panic and accept only
// what is in range (go test runs the seeds; go test -fuzz explores).
func FuzzParseLines(f *testing.F) {
	for _, s := range []string{"R 0 1 2 3", "STORE 10 10", "RLOAD 5", "T 0 0 Balance 1 0 0", "R 1 1 9 1",
		"R 0 0 18446744073709551615 2", "STORE 0 1000", `{"dir":"x","clients":1}`, "R  0 0 0 1 "} {
		f.Add(s)
	}
	cfg := Config{Dir: "x", Accounts: 5, Clients: 2}
	f.Fuzz(func(t *testing.T, line string) {
		if r, pe := parseRange(line, cfg, 10); pe == nil {
			if r.client >= 2 || r.count == 0 || r.lo+r.count > 10 || r.lo+r.count < r.lo {
				t.Fatalf("%q accepted as %+v", line, r)
			}
		}
		if c, b, pe := parseStore(line); pe == nil && (b < 1 || b > maxStoreBatch || c > maxIDs) {
			t.Fatalf("%q accepted as STORE %d %d", line, c, b)
		}
		if k, pe := parseRLoad(line, 0); pe == nil && (k < 1 || k > maxIDs) {
			t.Fatalf("%q accepted as RLOAD %d", line, k)
		}
		if r, pe := parseTx(line, cfg); pe == nil && (r.a >= 5 || r.client >= 2) {
			t.Fatalf("%q accepted as %+v", line, r)
		}
		_, _ = parseConfig(line)
	})
}
