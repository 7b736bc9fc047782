package cairn_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"sort"
	"sync"
	"testing"

	cairn "github.com/cairn-db/cairn/bindings/go"
)

// open opens a session in a fresh temporary directory, closed when the test ends.
func open(t testing.TB) (*cairn.Session, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := cairn.Open(dir)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s, dir
}

func table(t testing.TB, s *cairn.Session, name string, authenticated bool) *cairn.Table {
	t.Helper()
	tbl, err := s.Table(name, authenticated)
	if err != nil {
		t.Fatalf("Table(%q): %v", name, err)
	}
	return tbl
}

// scanAll reads a cursor over [start, end) to its end.
func scanAll(t *testing.T, tbl *cairn.Table, start, end []byte) (keys, values [][]byte) {
	t.Helper()
	c, err := tbl.Scan(start, end)
	if err != nil {
		t.Fatalf("Scan: %v", err)
	}
	defer c.Close()
	for k, v := range c.All() {
		keys, values = append(keys, k), append(values, v)
	}
	if err := c.Err(); err != nil {
		t.Fatalf("cursor: %v", err)
	}
	return keys, values
}

// TestModel runs random puts, deletes and batches against a map, then checks that GetMany and
// cursors (whole range and sub-ranges) agree with it, before and after a reopen.
func TestModel(t *testing.T) {
	s, dir := open(t)
	tbl := table(t, s, "model", false)
	rng := rand.New(rand.NewSource(51))
	model := map[string][]byte{}
	key := func() []byte { return []byte(fmt.Sprintf("k%04d", rng.Intn(600))) }
	value := func() []byte {
		v := make([]byte, rng.Intn(40)) // empty values included
		rng.Read(v)
		return v
	}
	for round := 0; round < 400; round++ {
		switch rng.Intn(4) {
		case 0:
			k, v := key(), value()
			if err := tbl.Put(k, v); err != nil {
				t.Fatal(err)
			}
			model[string(k)] = v
		case 1:
			k := key()
			if err := tbl.Delete(k); err != nil {
				t.Fatal(err)
			}
			delete(model, string(k))
		default:
			batch := make([]cairn.Update, rng.Intn(50))
			for i := range batch {
				k := key()
				if rng.Intn(3) == 0 {
					batch[i] = cairn.Update{Kind: cairn.Delete, Key: k}
					delete(model, string(k))
				} else {
					v := value()
					batch[i] = cairn.Update{Key: k, Value: v}
					model[string(k)] = v
				}
			}
			if err := tbl.Apply(batch); err != nil {
				t.Fatal(err)
			}
		}
	}
	check := func(tbl *cairn.Table) {
		t.Helper()
		keys := make([][]byte, 0, 700)
		for i := 0; i < 700; i++ { // 600 possible keys and 100 never written
			keys = append(keys, []byte(fmt.Sprintf("k%04d", i)))
		}
		got, err := tbl.GetMany(keys)
		if err != nil {
			t.Fatal(err)
		}
		for i, k := range keys {
			want, ok := model[string(k)]
			if (got[i] != nil) != ok || !bytes.Equal(got[i], want) {
				t.Fatalf("GetMany %s: got %q, want %q (present %v)", k, got[i], want, ok)
			}
		}
		sorted := make([]string, 0, len(model))
		for k := range model {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		for _, r := range []struct{ start, end []byte }{
			{nil, nil}, {[]byte("k0100"), []byte("k0300")}, {[]byte("k0550"), nil},
			{nil, []byte("k0010")}, {[]byte("z"), nil},
		} {
			var want []string
			for _, k := range sorted {
				if (r.start == nil || k >= string(r.start)) && (r.end == nil || k < string(r.end)) {
					want = append(want, k)
				}
			}
			keys, values := scanAll(t, tbl, r.start, r.end)
			if len(keys) != len(want) {
				t.Fatalf("scan [%q, %q): %d entries, want %d", r.start, r.end, len(keys), len(want))
			}
			for i, k := range keys {
				if string(k) != want[i] || !bytes.Equal(values[i], model[want[i]]) {
					t.Fatalf("scan entry %d: %q=%q, want %q=%q", i, k, values[i], want[i], model[want[i]])
				}
			}
		}
	}
	check(tbl)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := cairn.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	check(table(t, s, "model", false))
}

// TestCursorChunksAndSeek walks more entries than one read of the engine returns, and seeks.
func TestCursorChunksAndSeek(t *testing.T) {
	s, _ := open(t)
	tbl := table(t, s, "walk", false)
	var batch []cairn.Update
	for i := 0; i < 1000; i++ {
		batch = append(batch, cairn.Update{Key: []byte(fmt.Sprintf("%05d", i)), Value: []byte{byte(i)}})
	}
	if err := tbl.Apply(batch); err != nil {
		t.Fatal(err)
	}
	keys, _ := scanAll(t, tbl, nil, nil)
	if len(keys) != 1000 || string(keys[999]) != "00999" {
		t.Fatalf("walked %d entries", len(keys))
	}
	c, err := tbl.Scan(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Seek([]byte("00500")); err != nil {
		t.Fatal(err)
	}
	if !c.Next() || string(c.Key()) != "00500" || !bytes.Equal(c.Value(), []byte{byte(500 % 256)}) {
		t.Fatalf("after Seek: %q %v", c.Key(), c.Value())
	}
	// Early break from the range loop, then the cursor goes on where it stopped.
	for k := range c.All() {
		if string(k) == "00510" {
			break
		}
	}
	if !c.Next() || string(c.Key()) != "00511" {
		t.Fatalf("after break: %q", c.Key())
	}
}

// TestClose: calls after Close fail with ErrClosed; Close twice is fine; closing the session
// closes its tables and cursors.
func TestClose(t *testing.T) {
	s, _ := open(t)
	a := table(t, s, "a", false)
	b := table(t, s, "b", false)
	if err := a.Put([]byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	c, err := a.Scan(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Get([]byte("k")); !errors.Is(err, cairn.ErrClosed) {
		t.Fatalf("Get on a closed table: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second session Close: %v", err)
	}
	if _, _, err := a.Get([]byte("k")); !errors.Is(err, cairn.ErrClosed) {
		t.Fatalf("Get after the session closed: %v", err)
	}
	if err := a.Put([]byte("k"), nil); !errors.Is(err, cairn.ErrClosed) {
		t.Fatalf("Put after the session closed: %v", err)
	}
	if c.Next() || !errors.Is(c.Err(), cairn.ErrClosed) {
		t.Fatalf("cursor after the session closed: %v", c.Err())
	}
	if _, err := s.Table("c", false); !errors.Is(err, cairn.ErrClosed) {
		t.Fatalf("Table after Close: %v", err)
	}
	if err := s.Checkpoint(); !errors.Is(err, cairn.ErrClosed) {
		t.Fatalf("Checkpoint after Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestDurableReopen: a durable write waited for survives a reopen, with a checkpoint and without.
func TestDurableReopen(t *testing.T) {
	s, dir := open(t)
	tbl := table(t, s, "accounts", false)
	d, err := tbl.Write([]cairn.Update{{Key: []byte("alice"), Value: []byte("100")},
		{Key: []byte("bob"), Value: []byte("50")}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Wait(); err != nil {
		t.Fatal(err)
	}
	if ok, err := d.Durable(); !ok || err != nil {
		t.Fatalf("Durable after Wait: %v %v", ok, err)
	}
	if d.Position() == 0 {
		t.Fatal("Position 0")
	}
	d.Close()
	if err := d.Wait(); !errors.Is(err, cairn.ErrClosed) {
		t.Fatalf("Wait after Close: %v", err)
	}
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	d, err = tbl.Write([]cairn.Update{{Kind: cairn.Delete, Key: []byte("bob")}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Wait(); err != nil {
		t.Fatal(err)
	}
	d.Close()
	s.Close()

	s, err = cairn.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tbl = table(t, s, "accounts", false)
	got, err := tbl.GetMany([][]byte{[]byte("alice"), []byte("bob")})
	if err != nil {
		t.Fatal(err)
	}
	if string(got[0]) != "100" || got[1] != nil {
		t.Fatalf("after reopen: %q", got)
	}
}

// TestErrors: each failure has its code, and errors.Is matches codes.
func TestErrors(t *testing.T) {
	s, dir := open(t)
	if _, err := cairn.Open(dir); !errors.Is(err, cairn.ErrLocked) {
		t.Fatalf("second Open: %v", err)
	}
	_, err := s.Table("Bad Name!", false)
	var e *cairn.Error
	if !errors.As(err, &e) || e.Code != cairn.CodeInvalidArgument || e.Message == "" {
		t.Fatalf("bad table name: %v", err)
	}
	if errors.Is(err, cairn.ErrLocked) {
		t.Fatal("an invalid argument matched ErrLocked")
	}
	if e.Code.String() != "CAIRN_ERR_INVALID_ARGUMENT" {
		t.Fatalf("code name %q", e.Code.String())
	}
	tbl := table(t, s, "plain", false)
	if _, err := tbl.Root(); !errors.Is(err, cairn.ErrNotAuthenticated) {
		t.Fatalf("Root of a plain table: %v", err)
	}
	if err := tbl.Apply([]cairn.Update{{Kind: cairn.Delete, Key: []byte("k"), Value: []byte("v")}}); !errors.Is(err, cairn.ErrInvalidArgument) {
		t.Fatalf("a delete with a value: %v", err)
	}
	if err := tbl.Apply([]cairn.Update{{Kind: cairn.Kind(9), Key: []byte("k")}}); !errors.Is(err, cairn.ErrInvalidArgument) {
		t.Fatalf("an unknown kind: %v", err)
	}
	if _, err := s.OpenSnapshot("missing", "x"); !errors.Is(err, cairn.ErrNotFound) {
		t.Fatalf("a missing snapshot: %v", err)
	}
	if _, err := s.Table("plain", true); !errors.Is(err, cairn.ErrInvalidArgument) {
		t.Fatalf("auth disagreeing with the table's: %v", err)
	}
	if _, err := cairn.Open(t.TempDir()+"/none", cairn.ReadOnly()); !errors.Is(err, cairn.ErrNotFound) {
		t.Fatalf("read-only open of a missing directory: %v", err)
	}
}

// TestSnapshot: a snapshot saved and opened again holds what was saved, and is not durable.
func TestSnapshot(t *testing.T) {
	s, _ := open(t)
	tbl := table(t, s, "state", false)
	if err := tbl.Put([]byte("a"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	if err := tbl.SaveSnapshot("v1", "height-1"); err != nil {
		t.Fatal(err)
	}
	if err := tbl.SaveSnapshot("v1", "height-1"); !errors.Is(err, cairn.ErrExists) {
		t.Fatalf("saving twice: %v", err)
	}
	if err := tbl.Put([]byte("a"), []byte("2")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.OpenSnapshot("v1", "other"); !errors.Is(err, cairn.ErrLabelMismatch) {
		t.Fatalf("wrong label: %v", err)
	}
	snap, err := s.OpenSnapshot("v1", "height-1")
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	if v, ok, err := snap.Get([]byte("a")); err != nil || !ok || string(v) != "1" {
		t.Fatalf("snapshot Get: %q %v %v", v, ok, err)
	}
	if _, err := snap.Write([]cairn.Update{{Key: []byte("b")}}); !errors.Is(err, cairn.ErrNotDurable) {
		t.Fatalf("Write to a snapshot: %v", err)
	}
}

// TestProof: a proof of present and absent keys verifies; forged claims and a wrong root do not.
func TestProof(t *testing.T) {
	s, _ := open(t)
	tbl := table(t, s, "state", true)
	if err := tbl.Apply([]cairn.Update{{Key: []byte("alice"), Value: []byte("100")},
		{Key: []byte("bob"), Value: []byte("50")}}); err != nil {
		t.Fatal(err)
	}
	root, err := tbl.Root()
	if err != nil {
		t.Fatal(err)
	}
	if root.Auth != cairn.AuthSHA256 {
		t.Fatalf("auth %d", root.Auth)
	}
	proof, err := tbl.Prove([][]byte{[]byte("alice"), []byte("mallory")})
	if err != nil {
		t.Fatal(err)
	}
	if proof.Root != root {
		t.Fatalf("proof root %x, table root %x", proof.Root.Hash, root.Hash)
	}
	claims := []cairn.Claim{{Key: []byte("alice"), Value: []byte("100"), Present: true},
		{Key: []byte("mallory")}}
	if err := cairn.Verify(root, proof.Bytes, claims); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	forged := slices.Clone(claims)
	forged[0].Value = []byte("1000000")
	if err := cairn.Verify(root, proof.Bytes, forged); !errors.Is(err, cairn.ErrProofInvalid) {
		t.Fatalf("a forged value: %v", err)
	}
	forged = slices.Clone(claims)
	forged[1] = cairn.Claim{Key: []byte("mallory"), Value: []byte("1"), Present: true}
	if err := cairn.Verify(root, proof.Bytes, forged); !errors.Is(err, cairn.ErrProofInvalid) {
		t.Fatalf("a forged presence: %v", err)
	}
	wrong := root
	wrong.Hash[0] ^= 1
	if err := cairn.Verify(wrong, proof.Bytes, claims); !errors.Is(err, cairn.ErrProofInvalid) {
		t.Fatalf("a wrong root: %v", err)
	}
	if err := cairn.Verify(root, proof.Bytes[:len(proof.Bytes)/2], claims); !errors.Is(err, cairn.ErrProofInvalid) {
		t.Fatalf("a truncated proof: %v", err)
	}
	if err := tbl.Put([]byte("carol"), []byte("7")); err != nil {
		t.Fatal(err)
	}
	if next, err := tbl.Root(); err != nil || next.Hash == root.Hash || next.Version <= root.Version {
		t.Fatalf("root after an update: %v %v", next, err)
	}
}

// TestEmpty: empty keys, empty values and empty batches.
func TestEmpty(t *testing.T) {
	s, _ := open(t)
	tbl := table(t, s, "empty", false)
	if err := tbl.Put([]byte{}, []byte{}); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := tbl.Get(nil); err != nil || !ok || v == nil || len(v) != 0 {
		t.Fatalf("empty key: %q %v %v", v, ok, err)
	}
	if got, err := tbl.GetMany(nil); err != nil || len(got) != 0 {
		t.Fatalf("GetMany(nil): %v %v", got, err)
	}
	if err := tbl.Apply(nil); err != nil {
		t.Fatal(err)
	}
	d, err := tbl.Write(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Wait(); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkGetMany looks up batches of 1,000 random keys (8 bytes, all present) in a table of
// 100,000 entries, reopened after loading (as cmd/getmany-bench does); ns/op is per batch, and
// the ns/key metric per key.
func BenchmarkGetMany(b *testing.B) {
	s, dir := open(b)
	tbl := table(b, s, "bench", false)
	const entries, batchKeys = 100_000, 1000
	for lo := 0; lo < entries; lo += 10_000 {
		batch := make([]cairn.Update, 0, 10_000)
		for i := lo; i < lo+10_000; i++ {
			batch = append(batch, cairn.Update{Key: benchKey(uint64(i)), Value: benchKey(uint64(i))})
		}
		if err := tbl.Apply(batch); err != nil {
			b.Fatal(err)
		}
	}
	s.Close()
	s, err := cairn.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	tbl = table(b, s, "bench", false)
	rng := rand.New(rand.NewSource(1))
	keys := make([][]byte, batchKeys)
	for i := range keys {
		keys[i] = benchKey(uint64(rng.Intn(entries)))
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := tbl.GetMany(keys); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batchKeys), "ns/key")
}

// benchKey is key i of the Rust baseline (crates/cairn-capi/examples/lookup_overhead.rs): 8
// bytes, spread over the key space.
func benchKey(i uint64) []byte {
	k := i * 0x9E3779B97F4A7C15
	return []byte{byte(k >> 56), byte(k >> 48), byte(k >> 40), byte(k >> 32),
		byte(k >> 24), byte(k >> 16), byte(k >> 8), byte(k)}
}

// TestConcurrent: goroutines looking up and writing one table at once, then the session closed
// while they run: every call either succeeds or fails with ErrClosed (run with -race).
func TestConcurrent(t *testing.T) {
	s, _ := open(t)
	tbl := table(t, s, "shared", false)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				k := []byte(fmt.Sprintf("g%d-%03d", g, i))
				if err := tbl.Put(k, k); err != nil {
					if !errors.Is(err, cairn.ErrClosed) {
						errs <- err
					}
					return
				}
				got, err := tbl.GetMany([][]byte{k, []byte("absent")})
				if err != nil {
					if !errors.Is(err, cairn.ErrClosed) {
						errs <- err
					}
					return
				}
				if !bytes.Equal(got[0], k) || got[1] != nil {
					errs <- fmt.Errorf("GetMany %s: %q", k, got)
					return
				}
				if i == 100 && g == 0 {
					s.Close()
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
