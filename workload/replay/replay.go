// Package replay drives a kvoffload target with a Mooncake-format trace: one batch offload
// per request from concurrent writers, then a verified read of every key. The storenode
// replay command and the workload tests share it.
package replay

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/fsm"
	"github.com/kvoffload/kvoffload/workload/trace"
)

// Target is what a replay drives: an embedded node or a cluster client.
type Target interface {
	BatchOffload(ctx context.Context, id kvoffload.TxnID, objs []kvoffload.Object) ([]kvoffload.KeyResult, error)
	BatchGet(ctx context.Context, keys []string) ([]kvoffload.GetResult, error)
}

// Options shape the workload.
type Options struct {
	Writers   int       // concurrent writers (batches in flight)
	BlockSize int       // payload bytes per block
	Model     string    // model name in keys
	Seed      uint64    // payload seed
	Ahead     int64     // payload bytes generated before the clock starts and kept ahead of the writers (0: DefaultAhead); at least one batch
	ReadBatch int       // keys per BatchGet during verification (default 64)
	Readers   int       // concurrent BatchGets during verification (default 4)
	Progress  io.Writer // progress lines, about once a second; nil = none
	// Pool, when set, holds the payloads (and the read-back's buffers): see Pool. The Target
	// must then also have BatchGetInto (IntoTarget).
	Pool *Pool `json:"-"`
}

// IntoTarget is a Target that reads into the caller's buffers (client.Client.BatchGetInto).
type IntoTarget interface {
	Target
	BatchGetInto(ctx context.Context, keys []string, bufs [][]byte) ([]kvoffload.GetResult, error)
}

// Summary is the replay's result. Field names are the --json contract.
type Summary struct {
	Store         string  `json:"store,omitempty"` // what was driven (set by the caller): the embedded node, the local path or the stream
	Requests      int     `json:"requests"`
	Keys          int     `json:"keys"`
	UniqueKeys    int     `json:"unique_keys"`
	Stored        int     `json:"stored"`
	AlreadyStored int     `json:"already_stored"`
	Joined        int     `json:"joined"`
	Conflict      int     `json:"conflict"`
	Rejected      int     `json:"rejected"`
	Failed        int     `json:"failed"`
	BatchErrors   int     `json:"batch_errors"`
	Bytes         int64   `json:"bytes"`         // payload bytes of the keys this replay Stored (written)
	OfferedBytes  int64   `json:"offered_bytes"` // payload bytes of every key sent, duplicates included
	Seconds       float64 `json:"seconds"`
	MBPerSec      float64 `json:"mb_per_s"` // Bytes (written) per second, 10^6 bytes
	P50MS         float64 `json:"p50_ms"`
	P99MS         float64 `json:"p99_ms"`
	ReadMBPerSec  float64 `json:"read_mb_per_s"`
	Verified      bool    `json:"verified"`          // the read-back ran (false: interrupted or stopped, Missing and Corrupt mean nothing)
	Stopped       bool    `json:"stopped,omitempty"` // the writes stopped at a batch the store could not take (ErrUnavailable, ErrIndeterminate)
	Missing       int     `json:"missing"`           // keys read back NotFound: lost
	Unavailable   int     `json:"unavailable"`       // keys that could not be read now (their owner down, a read error): not lost
	Corrupt       int     `json:"corrupt"`
	// The disk's sequential-write line, measured by the caller before and after the replay
	// (storenode replay: 1 MiB O_DIRECT writes, one fdatasync, DiskDepth in flight: the
	// better of 1 and 8), and the replay's MBPerSec over their mean.
	DiskMBPerSec       float64 `json:"disk_mb_per_s,omitempty"`
	DiskDepth          int     `json:"disk_depth,omitempty"`
	DiskBeforeMBPerSec float64 `json:"disk_before_mb_per_s,omitempty"`
	DiskAfterMBPerSec  float64 `json:"disk_after_mb_per_s,omitempty"`
	RatioToDisk        float64 `json:"ratio_to_disk,omitempty"`
	FirstProblem       string  `json:"first_problem,omitempty"`
}

// Run offloads every request and then reads back every distinct key.
func Run(ctx context.Context, t Target, reqs []trace.Request, opt Options) (Summary, error) {
	if opt.Writers < 1 || opt.BlockSize < 1 {
		return Summary{}, fmt.Errorf("replay: writers (%d) and block size (%d) must be positive", opt.Writers, opt.BlockSize)
	}
	if opt.ReadBatch < 1 {
		opt.ReadBatch = 64
	}
	if opt.Readers < 1 {
		opt.Readers = 4
	}
	if err := checkPool(t, reqs, opt); err != nil {
		return Summary{}, err
	}
	s := Summary{}
	w := newWriter(t, opt, reqs)
	// The payloads are generated ahead of the writers, and the clock starts once opt.Ahead
	// bytes of them (or all) are ready: the replay measures the store, not the payload
	// generator (DefaultAhead).
	ready, quit := newReady(opt.Writers, len(reqs)), make(chan struct{})
	primed, prepared := make(chan struct{}), make(chan struct{})
	go func() { defer close(prepared); w.prepare(ctx, ready, primed, quit) }()
	<-primed
	start := time.Now()
	stop := w.progress(start)
	w.run(ctx, ready)
	close(quit)
	<-prepared // no payload is generated after Run returns
	stop()
	s.Seconds = time.Since(start).Seconds()
	w.fill(&s)
	s.Requests = int(w.doneReqs.Load())
	keys := uniqueKeys(opt.Model, w.sent()) // of the requests sent: all of them unless interrupted or stopped
	s.UniqueKeys = len(keys)
	if s.Seconds > 0 {
		s.MBPerSec = float64(s.Bytes) / 1e6 / s.Seconds
	}
	if ctx.Err() != nil || w.stopped.Load() {
		s.Stopped = w.stopped.Load()
		return s, nil // interrupted or stopped: not verified
	}
	rstart := time.Now()
	readBytes := verify(ctx, t, keys, opt, &s)
	s.Verified = ctx.Err() == nil // an interrupted read-back counts cancelled reads as missing
	s.ReadMBPerSec = float64(readBytes) / 1e6 / time.Since(rstart).Seconds()
	return s, nil
}

type writer struct {
	t    Target
	opt  Options
	reqs []trace.Request

	stopped   atomic.Bool   // a batch the store could not take: no new batches
	ahead     atomic.Int64  // payload bytes prepared and not yet taken by a writer
	aheadMax  int64         // prepare's bound on ahead (Options.Ahead)
	lastDone  atomic.Int64  // when the last batch finished (Unix ns; 0: none yet)
	taken     chan struct{} // a writer took a batch (capacity 1: prepare's wake-up)
	done      []bool        // requests offloaded (under mu), by trace index
	doneReqs  atomic.Int64
	bytes     atomic.Int64 // written (Stored)
	offered   atomic.Int64
	mu        sync.Mutex
	latencies []time.Duration
	counts    map[kvoffload.Outcome]int
	joined    int
	keys      int
	batchErrs int
	problem   string
}

// batch is one request's objects, each value the payload its key derives; req is the
// request's index in the trace.
type batch struct {
	req   int
	objs  []kvoffload.Object
	slots []int // the Pool's slots holding the values, given back after the offload
}

// DefaultAhead is how many payload bytes prepare generates before the clock starts and then
// keeps ready ahead of the writers: the whole shipped sample (1.45 GB offered), so that none
// of its payloads is generated while the store is timed. Generating them inside the timing
// cost the store a quarter of its rate: with up to 32 batches (~220 MiB) ahead, five
// alternating pairs of runs wrote 1,180-1,430 MB/s (ratios to the disk line 0.72-0.95)
// against 1,270-1,740 MB/s (0.84-1.29) with all of them ahead; the ~1.2 GB made during the
// run was AES-CTR on the store's 2 cores and fresh memory the VM had to fault in. A trace
// larger than the bound streams its later payloads during the run. The bound is on payloads
// not yet taken (TestPrepareAheadBytes: 8 MiB blocks x 16 per request x 8 writers would,
// unbounded, hold gigabytes); the writers' batches in flight come on top, and Go's collector
// lets the heap grow to about twice what is live (the sample peaks at ~2.5 GB resident).
const DefaultAhead = 2 << 30

// maxReady bounds the batches ready holds, whatever their bytes: a channel slot per request
// of a long trace of small requests would be memory for nothing.
const maxReady = 1 << 16

// newReady makes the channel prepare fills: room for every request of the trace (up to
// maxReady), so that the bytes bound alone decides how far ahead prepare gets, and at least
// one batch per writer.
func newReady(writers, reqs int) chan batch {
	return make(chan batch, max(writers, min(reqs, maxReady)))
}

// prepare generates the batch of each request, in trace order, into ready, which holds up
// to cap(ready) batches and aheadMax bytes of payload ahead of the writers (at least one batch).
// It closes primed once ready is full or every batch is in it, and ready at the end; it
// stops, generating nothing more, once quit is closed or ctx ends.
func (w *writer) prepare(ctx context.Context, ready chan<- batch, primed, quit chan struct{}) {
	defer close(ready)
	once := sync.OnceFunc(func() { close(primed) })
	defer once()
	for i, req := range w.reqs {
		keys := trace.Keys(w.opt.Model, req)
		size := int64(len(keys)) * int64(w.opt.BlockSize)
		for len(ready) > 0 && (len(ready) == cap(ready) || w.ahead.Load()+size > w.aheadMax) {
			once() // as far ahead as it may be
			select {
			case <-w.taken:
			case <-quit:
				return
			case <-ctx.Done():
				return
			}
		}
		select {
		case <-quit:
			return
		case <-ctx.Done():
			return
		default:
		}
		b := batch{req: i, objs: make([]kvoffload.Object, len(keys))}
		for j, k := range keys {
			if w.opt.Pool == nil {
				b.objs[j] = kvoffload.Object{Key: k, Value: trace.Payload(w.opt.Seed, k, w.opt.BlockSize)}
				continue
			}
			slot, buf, ok := w.opt.Pool.get(ctx, quit)
			if !ok {
				w.opt.Pool.put(b.slots)
				return
			}
			trace.FillPayload(buf, w.opt.Seed, k)
			b.objs[j], b.slots = kvoffload.Object{Key: k, Value: buf}, append(b.slots, slot)
		}
		w.ahead.Add(size)
		ready <- b // never blocks: ready has room (checked above, and only prepare sends)
	}
}

// take receives the next prepared batch, telling prepare that room was made.
func (w *writer) take(ready <-chan batch) (batch, bool) {
	b, ok := <-ready
	if ok {
		w.ahead.Add(-int64(len(b.objs)) * int64(w.opt.BlockSize))
		select {
		case w.taken <- struct{}{}:
		default: // prepare was not waiting, or already has a wake-up
		}
	}
	return b, ok
}

// sent returns the requests whose batches were offloaded.
func (w *writer) sent() []trace.Request {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []trace.Request
	for i, r := range w.reqs {
		if w.done[i] {
			out = append(out, r)
		}
	}
	return out
}

func newWriter(t Target, opt Options, reqs []trace.Request) *writer {
	return &writer{t: t, opt: opt, reqs: reqs, taken: make(chan struct{}, 1), done: make([]bool, len(reqs)), aheadMax: cmp.Or(max(opt.Ahead, 0), DefaultAhead)}
}

// run offloads the batches of ready from Writers concurrent writers until ready is closed
// and empty, ctx ends, or a batch stops the replay.
func (w *writer) run(ctx context.Context, ready <-chan batch) {
	w.counts = map[kvoffload.Outcome]int{}
	var wg sync.WaitGroup
	for range w.opt.Writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b, ok := w.take(ready); ok; b, ok = w.take(ready) {
				if ctx.Err() != nil || w.stopped.Load() {
					w.release(b)
					return
				}
				w.one(ctx, b)
				w.release(b)
			}
		}()
	}
	wg.Wait()
}

// release gives b's slots back to the Pool (none without one).
func (w *writer) release(b batch) {
	if w.opt.Pool != nil {
		w.opt.Pool.put(b.slots)
	}
}

func (w *writer) one(ctx context.Context, b batch) {
	objs := b.objs
	t0 := time.Now()
	res, err := w.t.BatchOffload(ctx, txnID(), objs)
	lat := time.Since(t0)
	w.lastDone.Store(time.Now().UnixNano())
	w.offered.Add(int64(len(objs) * w.opt.BlockSize))
	w.doneReqs.Add(1)
	for _, r := range res {
		if r.Outcome == kvoffload.Stored {
			w.bytes.Add(int64(w.opt.BlockSize))
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done[b.req] = true
	w.latencies = append(w.latencies, lat)
	w.keys += len(objs)
	if err != nil {
		w.batchErrs++
		w.note(fmt.Sprintf("batch error: %v", err))
		if errors.Is(err, kvoffload.ErrUnavailable) || errors.Is(err, kvoffload.ErrIndeterminate) {
			// The store (a cluster without a leader, a node that failed its WAL) takes no
			// batch now, after the client's own retries: each further batch would wait out
			// the same time-out (a new user waited 480 s for 100 requests).
			w.stopped.Store(true)
		}
		return
	}
	for _, r := range res {
		w.counts[r.Outcome]++
		if r.Joined {
			w.joined++
		}
		if !r.Outcome.OK() {
			w.note(fmt.Sprintf("%s %s: %s", r.Key, r.Outcome, r.Reason))
		}
	}
}

func (w *writer) note(p string) {
	if w.problem == "" {
		w.problem = p
	}
}

func (w *writer) progress(start time.Time) (stop func()) {
	if w.opt.Progress == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	line := func(last bool) {
		el := time.Since(start).Seconds()
		fmt.Fprintf(w.opt.Progress, "offload: %d/%d requests, %.0f MB written, %.0f MB/s%s\n",
			w.doneReqs.Load(), len(w.reqs), float64(w.bytes.Load())/1e6, float64(w.bytes.Load())/1e6/el, w.stall(start, last))
	}
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-done:
				line(true) // the last one: where the offload ended
				return
			case <-tick.C:
				line(false)
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// stallAfter is how long no batch may finish before a progress line says so.
const stallAfter = 5 * time.Second

// stall is what a progress line adds when no batch has finished for stallAfter (since start
// if none has): a store that does not answer shows as such, not as a rate falling to 0 MB/s
// for as long as its client retries, two minutes against a killed node
// (TestProgressNamesAStall).
func (w *writer) stall(start time.Time, last bool) string {
	since := start
	if t := w.lastDone.Load(); t != 0 {
		since = time.Unix(0, t)
	}
	if last || time.Since(since) < stallAfter {
		return ""
	}
	return fmt.Sprintf("; no batch has finished for %s: the store is not answering, and each batch waits for its client's retries to end", time.Since(since).Truncate(time.Second))
}

func (w *writer) fill(s *Summary) {
	s.Keys = w.keys
	s.Stored = w.counts[kvoffload.Stored]
	s.AlreadyStored = w.counts[kvoffload.AlreadyStored]
	s.Conflict = w.counts[kvoffload.Conflict]
	s.Rejected = w.counts[kvoffload.Rejected]
	s.Failed = w.counts[kvoffload.Failed]
	s.Joined = w.joined
	s.BatchErrors = w.batchErrs
	s.Bytes = w.bytes.Load()
	s.OfferedBytes = w.offered.Load()
	s.FirstProblem = w.problem
	sort.Slice(w.latencies, func(a, b int) bool { return w.latencies[a] < w.latencies[b] })
	s.P50MS = percentileMS(w.latencies, 0.50)
	s.P99MS = percentileMS(w.latencies, 0.99)
}

// percentileMS is the nearest-rank percentile: the smallest value with at least q of the
// samples at or below it.
func percentileMS(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	i = max(0, min(i, len(sorted)-1))
	return float64(sorted[i].Microseconds()) / 1000
}

func uniqueKeys(model string, reqs []trace.Request) []string {
	seen := map[string]bool{}
	var keys []string
	for _, r := range reqs {
		for _, k := range trace.Keys(model, r) {
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	return keys
}

// verify reads every key back, opt.Readers batches at a time, and compares each value with
// the payload its key derives; a reader checks its batch while the others' reads are in
// flight, so the check (an AES-CTR keystream per key) does not add to the time the reads take.
func verify(ctx context.Context, t Target, keys []string, opt Options, s *Summary) int64 {
	var mu sync.Mutex // guards s and read
	var read int64
	var next atomic.Int64
	var wg sync.WaitGroup
	for range opt.Readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			want := make([]byte, opt.BlockSize)
			bufs, slots, ok := readBuffers(ctx, opt)
			if !ok {
				return
			}
			defer opt.Pool.putAll(slots)
			for b := int(next.Add(1) - 1); b*opt.ReadBatch < len(keys); b = int(next.Add(1) - 1) {
				batch := keys[b*opt.ReadBatch : min((b+1)*opt.ReadBatch, len(keys))]
				var res []kvoffload.GetResult
				var err error
				if bufs != nil {
					res, err = t.(IntoTarget).BatchGetInto(ctx, batch, bufs[:len(batch)])
				} else {
					res, err = t.BatchGet(ctx, batch)
				}
				var got checked
				if err != nil {
					got.unavailable = len(batch)
					got.problem = fmt.Sprintf("read error: %v", err)
				} else {
					got = check(res, want, opt.Seed)
				}
				mu.Lock()
				read += got.bytes
				s.Corrupt += got.corrupt
				s.Missing += got.missing
				s.Unavailable += got.unavailable
				s.noteProblem(got.problem)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return read
}

// readBuffers takes a reader's buffers from opt.Pool, one slot per key of a batch: nil
// without a Pool (BatchGet allocates), and ok false if ctx ended first.
func readBuffers(ctx context.Context, opt Options) (bufs [][]byte, slots []int, ok bool) {
	if opt.Pool == nil {
		return nil, nil, true
	}
	for range opt.ReadBatch {
		slot, buf, ok := opt.Pool.get(ctx, nil)
		if !ok {
			opt.Pool.put(slots)
			return nil, nil, false
		}
		bufs, slots = append(bufs, buf), append(slots, slot)
	}
	return bufs, slots, true
}

// checked is what one batch's read-back found.
type checked struct {
	bytes                         int64
	corrupt, missing, unavailable int
	problem                       string // the first, or ""
}

// check compares each result of one read-back batch with the payload its key derives (want
// is scratch space of the block size).
func check(res []kvoffload.GetResult, want []byte, seed uint64) checked {
	var c checked
	note := func(p string) {
		if c.problem == "" {
			c.problem = p
		}
	}
	for _, r := range res {
		switch r.Status {
		case kvoffload.Found:
			c.bytes += int64(len(r.Value))
			if len(r.Value) != len(want) {
				c.corrupt++
				note(fmt.Sprintf("%s: %d bytes, offloaded %d", r.Key, len(r.Value), len(want)))
				continue
			}
			trace.FillPayload(want, seed, r.Key)
			if !bytes.Equal(r.Value, want) {
				c.corrupt++
				note(r.Key + ": bytes differ from what was offloaded")
			}
		case kvoffload.Corrupt:
			c.corrupt++
			note(r.Key + ": " + r.Reason)
		case kvoffload.NotFound:
			c.missing++
			note(fmt.Sprintf("%s: %s %s", r.Key, r.Status, r.Reason))
		default:
			c.unavailable++
			note(fmt.Sprintf("%s: %s %s", r.Key, r.Status, r.Reason))
		}
	}
	return c
}

func (s *Summary) noteProblem(p string) {
	if s.FirstProblem == "" && p != "" {
		s.FirstProblem = p
	}
}

func txnID() fsm.TxnID { return kvoffload.NewTxnID() }
