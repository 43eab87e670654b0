package bucketstore

import (
	"errors"
	"fmt"
	"sync"

	"github.com/kvoffload/kvoffload/internal/mutant"
)

// syncGroup runs group-committed sync rounds. A caller needs a round that starts after it
// arrived; callers that arrive while a round runs share the next one, which the first of them
// to wake up runs. Rounds never overlap.
type syncGroup struct {
	mu       sync.Mutex
	cond     sync.Cond
	running  bool
	started  uint64
	finished uint64
	err      error // result of the latest finished round
}

// do returns the result of a round of fn that started after the call (or of a later round:
// callers rely on failures being sticky).
func (g *syncGroup) do(fn func() error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cond.L == nil {
		g.cond.L = &g.mu
	}
	need := g.started + 1
	for g.finished < need {
		if g.running {
			g.cond.Wait()
			continue
		}
		g.running = true
		g.started++
		g.mu.Unlock()
		err := fn()
		g.mu.Lock()
		g.running, g.finished, g.err = false, g.started, err
		g.cond.Broadcast()
	}
	return g.err
}

// Sync makes every record written so far to the given buckets durable: one fdatasync per
// bucket with writes since its last sync, shared by concurrent callers (group commit), plus
// one directory fsync if a bucket file was created or removed since the last one. With no
// arguments it syncs every bucket. A failed fdatasync is never retried: the bucket is marked
// failed (Reserve rolls past it, every later Sync of it fails) and the error wraps
// ErrSyncFailed. Syncing a bucket that was removed (nothing live) succeeds.
func (s *Store) Sync(ids ...uint32) error {
	bs, err := s.bucketsForSync(ids)
	if err != nil {
		return err
	}
	var errs []error
	if err := s.syncDir(); err != nil {
		errs = append(errs, err)
	}
	for _, b := range bs {
		err := s.syncBucket(b)
		if err == nil && b.failed.Load() && !b.removed.Load() {
			err = fmt.Errorf("%w: bucket %d failed earlier", ErrSyncFailed, b.id)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (s *Store) bucketsForSync(ids []uint32) ([]*bucket, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if len(ids) == 0 {
		ids = make([]uint32, 0, len(s.buckets))
		for id := range s.buckets {
			ids = append(ids, id)
		}
	}
	bs := make([]*bucket, 0, len(ids))
	for _, id := range ids {
		b := s.buckets[id]
		switch {
		case b != nil:
			bs = append(bs, b)
		case id == 0 || id >= s.nextID:
			return nil, fmt.Errorf("bucketstore: sync: no bucket %d", id)
		}
	}
	return bs, nil
}

func (s *Store) syncBucket(b *bucket) error {
	return b.group.do(func() error {
		if b.failed.Load() {
			return fmt.Errorf("%w: bucket %d failed earlier", ErrSyncFailed, b.id)
		}
		writes := b.writes.Load()
		if writes == b.synced {
			return nil
		}
		s.syncs.Add(1)
		if mutant.On(mutant.SkipBucketSync) { // mutation test only
			b.synced = writes
			return nil
		}
		if err := b.f.Sync(); err != nil {
			if b.removed.Load() {
				return nil // nothing in it is live any more
			}
			b.failed.Store(true)
			s.log.Error("fdatasync failed; bucket abandoned", "bucket", b.id, "err", err)
			return fmt.Errorf("%w: bucket %d: %w", ErrSyncFailed, b.id, err)
		}
		b.synced = writes
		return nil
	})
}

// syncDir fsyncs the directory if a bucket file was created or removed since the last
// successful directory sync. On failure every bucket whose creation it should have made
// durable is marked failed.
func (s *Store) syncDir() error {
	if mutant.On(mutant.SkipDirSync) { // mutation test only
		return nil
	}
	s.mu.Lock()
	clean := s.dirGen == s.dirSynced
	s.mu.Unlock()
	if clean {
		return nil
	}
	return s.dirGroup.do(func() error {
		s.mu.Lock()
		gen, synced := s.dirGen, s.dirSynced
		s.mu.Unlock()
		if gen == synced {
			return nil
		}
		if err := s.fs.SyncDir(s.cfg.Dir); err != nil {
			s.failCreatedSince(synced, gen)
			s.log.Error("directory fsync failed", "dir", s.cfg.Dir, "err", err)
			return fmt.Errorf("%w: directory %s: %w", ErrSyncFailed, s.cfg.Dir, err)
		}
		s.mu.Lock()
		s.dirSynced = max(s.dirSynced, gen)
		s.mu.Unlock()
		return nil
	})
}

func (s *Store) failCreatedSince(synced, gen uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.buckets {
		if b.fresh && b.dirGen > synced && b.dirGen <= gen {
			b.failed.Store(true)
		}
	}
}
