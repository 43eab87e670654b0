package sim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/bucketstore"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/wal"
)

// check checks every invariant (the package doc) on a world just recovered, against its
// model, then settles the model's uncertain keys to what the world holds: everything a
// recovered world shows was on the disk or in the Raft log, so it is durable. It returns the
// number of checks made.
func (s *sim) check(ctx context.Context, w *world) (int, error) {
	// First what recovery left, before any read: a read that finds a damaged record drops
	// its key, and the reclaimer frees its bytes in the background.
	checks, entries, err := s.structure(w)
	if err != nil {
		return checks, err
	}
	n, err := s.intents(w)
	checks += n
	if err != nil {
		return checks, err
	}
	n, err = s.readAll(ctx, w, entries)
	return checks + n, err
}

// checkRunning checks, between two operations of a running world, what holds there: I1's
// count, I4 and I12 once the reclaimer has freed what the last operations released (it
// polls for up to settleTime). Intents may still be unresolved (their DONE is queued).
func (s *sim) checkRunning(w *world) (int, error) {
	deadline := time.Now().Add(settleTime)
	for {
		checks, _, err := s.structure(w)
		if err == nil || w.disk.powerOff() {
			return checks, nil
		}
		if time.Now().After(deadline) {
			return checks, fmt.Errorf("running, %v after the last operation: %w", settleTime, err)
		}
		time.Sleep(time.Millisecond)
	}
}

// settleTime bounds how long checkRunning waits for background frees.
const settleTime = 200 * time.Millisecond

// structure checks I1's key count, I12 and I4, and returns the live entries.
func (s *sim) structure(w *world) (int, map[string]fsm.Entry, error) {
	checks := 0
	var errs []error
	entries := map[string]fsm.Entry{}
	var live int64
	w.f.ForEach(func(e fsm.Entry) bool {
		entries[e.Key] = e
		live += e.Extent.Length
		return true
	})
	checks++
	if len(entries) > len(s.keys) {
		errs = append(errs, violation{"I1", "-", fmt.Sprintf("%d keys in metadata, the key space has %d", len(entries), len(s.keys))})
	}
	// I12: the bytes metadata references are the store's live bytes.
	st, err := w.data.Stats()
	if err != nil {
		return checks, nil, fmt.Errorf("bucket stats: %w", err)
	}
	checks++
	if st.LiveBytes != live {
		errs = append(errs, violation{"I12", "-", fmt.Sprintf("live bytes %d, metadata references %d", st.LiveBytes, live)})
	}
	// I4: every record on the disk is one metadata references.
	err = w.data.Scan(func(ext bucketstore.Extent, h bucketstore.Header, err error) error {
		if err != nil {
			return nil // a damaged record nobody references: collected, not live
		}
		checks++
		e, ok := entries[h.Key]
		if !ok || e.Extent != (fsm.Extent{Bucket: ext.Bucket, Offset: ext.Offset, Length: ext.Length}) {
			errs = append(errs, violation{"I4", h.Key, fmt.Sprintf("record at %+v that metadata does not reference", ext)})
		}
		return nil
	})
	if err != nil {
		return checks, nil, fmt.Errorf("scan buckets: %w", err)
	}
	return checks, entries, errors.Join(errs...)
}

// intents checks I5: recovery resolved every intent.
func (s *sim) intents(w *world) (int, error) {
	open, err := Unresolved(w.log)
	if err != nil {
		return 1, fmt.Errorf("replay WAL: %w", err)
	}
	if open > 0 {
		return 1, violation{"I5", "-", fmt.Sprintf("%d intents unresolved after recovery", open)}
	}
	return 1, nil
}

// Unresolved counts the INTENT records of l without a DONE (I5 after a recovery).
func Unresolved(l *wal.Log) (int, error) {
	open := map[[16]byte]bool{}
	err := l.Replay(func(_ uint64, r wal.Record) error {
		switch r.Type {
		case wal.RecordIntent:
			open[r.TxnID] = true
		case wal.RecordDone:
			delete(open, r.TxnID)
		}
		return nil
	})
	return len(open), err
}

// readAll checks I1, I2, I3 and no resurrection by reading every key of the key space, and
// settles the model's uncertain and damaged keys.
func (s *sim) readAll(ctx context.Context, w *world, entries map[string]fsm.Entry) (int, error) {
	checks := 0
	var errs []error
	res, err := w.coord.BatchGet(ctx, s.keys)
	if err != nil {
		return checks, fmt.Errorf("read every key: %w", err)
	}
	w.disk.mu.Lock()
	defer w.disk.mu.Unlock()
	m := w.disk.model
	for _, r := range res {
		checks += 2
		if err := s.judge(r, m.keys[r.Key]); err != nil {
			errs = append(errs, err)
		}
		if _, ok := entries[r.Key]; ok != (r.Status == kvoffload.Found) && r.Status != kvoffload.Corrupt {
			errs = append(errs, violation{"I1", r.Key, fmt.Sprintf("in metadata: %v, read %s (%s)", ok, r.Status, r.Reason)})
		}
		if st := m.keys[r.Key]; st == uncertain || st == damaged {
			m.keys[r.Key] = absent
			if r.Status == kvoffload.Found {
				m.keys[r.Key] = present
			}
			// Settled by what the store holds now (a damaged record read Corrupt was removed):
			// a retry answering an older transaction's result no longer decides the key.
			m.decided[r.Key]++
		}
	}
	return checks, errors.Join(errs...)
}
