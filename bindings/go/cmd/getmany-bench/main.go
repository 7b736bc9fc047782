// Command getmany-bench measures what the Go binding adds to a batched lookup (issue 51's
// acceptance 3): the batches of crates/cairn-capi/examples/lookup_overhead.rs (1,000 random
// 8-byte keys each, all present, in a table of 8-byte values loaded in batches of 10,000),
// looked up through Table.GetMany and through cairn_lookups called in a C loop (no Go in the
// timed part), on the same table in the same process: the C API's session is closed before the
// Go one opens, and opened again after, as the example does with Rust. The example run with the
// same ENTRIES gives the Rust figure (Table::lookups) on a table of the same shape.
//
//	go run ./cmd/getmany-bench [-entries 1000000] [-batch 1000] [-batches 200] [-passes 3]
package main

/*
#cgo CFLAGS: -I${SRCDIR}/../../../../crates/cairn-capi/include
#cgo LDFLAGS: -L${SRCDIR}/../../../../target/release -Wl,-Bstatic -lcairn_capi -Wl,-Bdynamic -lpthread -ldl -lm -lrt -lutil -lgcc_s
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include "cairn.h"

// Opens the session in dir and its table "bench": 0 or a CAIRN_ERR_* code.
static int open_bench(const char *dir, cairn_session **session, cairn_table **table) {
	int code = cairn_session_open(dir, false, session, NULL);
	if (code != CAIRN_OK) return code;
	return cairn_table_open(*session, "bench", CAIRN_AUTH_NONE, table, NULL);
}

// Looks up `batches` batches of `batch` keys of 8 bytes each, laid end to end in `keys`:
// the nanoseconds taken, or minus a CAIRN_ERR_* code.
static int64_t time_lookups(const cairn_table *table, const uint8_t *keys, size_t batch,
                            size_t batches) {
	size_t *lens = malloc(batch * sizeof(size_t));
	for (size_t i = 0; i < batch; i++) lens[i] = 8;
	struct timespec start, end;
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (size_t b = 0; b < batches; b++) {
		cairn_values values;
		int code = cairn_lookups(table, keys + b * batch * 8, lens, batch, &values, NULL);
		if (code != CAIRN_OK) {
			free(lens);
			return -code;
		}
		cairn_values_free(&values);
	}
	clock_gettime(CLOCK_MONOTONIC, &end);
	free(lens);
	return (int64_t)(end.tv_sec - start.tv_sec) * 1000000000 + (end.tv_nsec - start.tv_nsec);
}
*/
import "C"

import (
	"encoding/binary"
	"flag"
	"fmt"
	"log"
	"os"
	"time"
	"unsafe"

	cairn "github.com/cairn-db/cairn/bindings/go"
)

// key is key i of lookup_overhead.rs: 8 bytes, spread over the key space.
func key(i uint64) []byte {
	return binary.BigEndian.AppendUint64(nil, i*0x9E3779B97F4A7C15)
}

func main() {
	entries := flag.Uint64("entries", 1_000_000, "entries in the table")
	batch := flag.Int("batch", 1000, "keys per batch")
	batches := flag.Int("batches", 200, "batches per pass")
	passes := flag.Int("passes", 3, "passes over every batch per path (the best kept)")
	dirFlag := flag.String("dir", "", "session directory (default: a temporary one, removed)")
	flag.Parse()
	dir := *dirFlag
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "getmany-bench"); err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(dir)
	}

	load(dir, *entries)
	// The batches of lookup_overhead.rs: batch b holds keys (b*7919 + i*104729) % entries.
	flat := make([]byte, 0, *batch**batches*8)
	goBatches := make([][][]byte, *batches)
	for b := range goBatches {
		for i := 0; i < *batch; i++ {
			k := key((uint64(b)*7919 + uint64(i)*104_729) % *entries)
			flat = append(flat, k...)
			goBatches[b] = append(goBatches[b], flat[len(flat)-8:len(flat):len(flat)])
		}
	}
	keys := float64(*batch * *batches)
	fmt.Printf("%d entries; %d batches of %d keys; best of %d passes per path\n",
		*entries, *batches, *batch, *passes)

	cFirst := timeC(dir, flat, *batch, *batches, *passes)
	goNs := timeGo(dir, goBatches, *passes)
	cAgain := timeC(dir, flat, *batch, *batches, *passes)
	fmt.Printf("cairn_lookups (C loop): %.0f ns/key, then %.0f ns/key after the Go pass\n",
		cFirst/keys, cAgain/keys)
	fmt.Printf("Table.GetMany (Go):     %.0f ns/key (%.2fx the better C pass)\n",
		goNs/keys, goNs/min(cFirst, cAgain))
}

// load fills table "bench" with entries keys, value i as 8 little-endian bytes, in batches of
// 10,000 through Apply (as lookup_overhead.rs does through cairn_updates), unless it holds the
// last one already.
func load(dir string, entries uint64) {
	s, err := cairn.Open(dir)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	t, err := s.Table("bench", false)
	if err != nil {
		log.Fatal(err)
	}
	if _, ok, err := t.Get(key(entries - 1)); err != nil || ok {
		if err != nil {
			log.Fatal(err)
		}
		return
	}
	start := time.Now()
	for lo := uint64(0); lo < entries; lo += 10_000 {
		updates := make([]cairn.Update, 0, 10_000)
		for i := lo; i < min(lo+10_000, entries); i++ {
			updates = append(updates, cairn.Update{Key: key(i),
				Value: binary.LittleEndian.AppendUint64(nil, i)})
		}
		if err := t.Apply(updates); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Printf("loaded %d entries in %.1f s\n", entries, time.Since(start).Seconds())
}

// timeC opens the session through the C API and returns the best pass's nanoseconds.
func timeC(dir string, flat []byte, batch, batches, passes int) float64 {
	cdir := C.CString(dir)
	defer C.free(unsafe.Pointer(cdir))
	var session *C.cairn_session
	var table *C.cairn_table
	if code := C.open_bench(cdir, &session, &table); code != 0 {
		log.Fatalf("opening through the C API: code %d", code)
	}
	defer C.cairn_session_close(session)
	defer C.cairn_table_free(table)
	// The keys in C memory, so that the timed loop touches no Go memory at all.
	ckeys := C.CBytes(flat)
	defer C.free(ckeys)
	best := 0.0
	for p := 0; p < passes; p++ {
		ns := C.time_lookups(table, (*C.uint8_t)(ckeys), C.size_t(batch), C.size_t(batches))
		if ns < 0 {
			log.Fatalf("cairn_lookups: code %d", -ns)
		}
		if p == 0 || float64(ns) < best {
			best = float64(ns)
		}
	}
	return best
}

// timeGo opens the session through the Go package and returns the best pass's nanoseconds.
func timeGo(dir string, batches [][][]byte, passes int) float64 {
	s, err := cairn.Open(dir)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	t, err := s.Table("bench", false)
	if err != nil {
		log.Fatal(err)
	}
	best := 0.0
	for p := 0; p < passes; p++ {
		start := time.Now()
		for _, b := range batches {
			values, err := t.GetMany(b)
			if err != nil {
				log.Fatal(err)
			}
			if values[0] == nil {
				log.Fatal("a loaded key is missing")
			}
		}
		ns := float64(time.Since(start).Nanoseconds())
		if p == 0 || ns < best {
			best = ns
		}
	}
	return best
}
