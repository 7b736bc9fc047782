package main

// Counters, HDR latency histograms and the size of the store on disk.

import (
	"io/fs"
	"path/filepath"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// newLatencyHistogram records microseconds from 1 µs to one hour with three
// significant digits.
func newLatencyHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(1, int64(time.Hour/time.Microsecond), 3)
}

// stats are one client's (or the deferred verifier's) counters; each is
// owned by one goroutine and merged at END.
type stats struct {
	latency        [numKinds]*hdrhistogram.Histogram // per transaction type (and Range), µs
	committed      uint64                            // finished without a business abort (Balance included)
	aborted        uint64                            // business aborts
	retries        uint64                            // ErrTxReadConflict retries
	verifiedReads  uint64                            // values read whose proofs verified
	verifiedWrites uint64                            // entries written whose proofs verified
	proofBytes     uint64                            // protobuf bytes of every proof
	readProofBytes float64                           // the share of proofBytes that proved reads
	entriesRead    uint64                            // entries returned by range reads
}

// newStats allocates the histograms.
func newStats() stats {
	var s stats
	for i := range s.latency {
		s.latency[i] = newLatencyHistogram()
	}
	return s
}

// record adds one transaction's latency.
func (s *stats) record(t txType, d time.Duration) {
	us := d.Microseconds()
	if us < 1 {
		us = 1
	}
	_ = s.latency[t].RecordValue(us) // values above one hour are dropped
}

// merge adds o into s.
func (s *stats) merge(o *stats) {
	for i := range s.latency {
		s.latency[i].Merge(o.latency[i])
	}
	s.committed += o.committed
	s.aborted += o.aborted
	s.retries += o.retries
	s.verifiedReads += o.verifiedReads
	s.verifiedWrites += o.verifiedWrites
	s.proofBytes += o.proofBytes
	s.readProofBytes += o.readProofBytes
	s.entriesRead += o.entriesRead
}

// diskBytes is the total size of every regular file under dir.
func diskBytes(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			total += info.Size()
		}
		return nil
	})
	return total, err
}
