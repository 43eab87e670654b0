package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
)

// Report is the bench's result: medians over the rounds. The JSON names are the --json
// contract (TestJSONKeys); MB is 10^6 bytes, ratios are the store's figure over the disk
// limit measured just before it in the same round (median of the per-round ratios).
type Report struct {
	LimitWriteMBPerS     float64  `json:"limit_write_mb_per_s"`     // O_DIRECT sequential 1 MiB write + fdatasync, best of 1 and 8 in flight (later in a round: its winner)
	LimitReadMBPerS      float64  `json:"limit_read_mb_per_s"`      // O_DIRECT random 256 KiB read, 32 in flight
	LimitWriteIOPS       float64  `json:"limit_write_iops"`         // O_DIRECT random 4 KiB write, 32 in flight, fdatasync every 256
	LimitReadIOPS        float64  `json:"limit_read_iops"`          // O_DIRECT random 4 KiB read, 32 in flight
	OffloadMBPerS        float64  `json:"offload_mb_per_s"`         // 256 KiB values, 32 writers x batches of 16
	OffloadRatio         float64  `json:"offload_ratio"`            // offload_mb_per_s / limit write
	Offload2MRatio       float64  `json:"offload_2m_ratio"`         // the same with 2 MiB values
	OffloadP99MS         float64  `json:"offload_p99_ms"`           // p99 batch latency at 256 KiB, ms
	GetMBPerS            float64  `json:"get_mb_per_s"`             // BatchGet, page cache dropped, 32 readers x 16 x 256 KiB
	GetRatio             float64  `json:"get_ratio"`                // get_mb_per_s / limit read
	GetOneReaderRatio    float64  `json:"get_one_reader_ratio"`     // one reader x 64 x 256 KiB / limit read
	SmallOffloadKeysPerS float64  `json:"small_offload_keys_per_s"` // 4 KiB values, 32 writers x 256
	SmallGetKeysPerS     float64  `json:"small_get_keys_per_s"`     // 4 KiB values, 32 readers x 256, page cache dropped
	CommitKeysPerS       float64  `json:"commit_keys_per_s"`        // 64-byte values, 32 writers x 256
	FilePerBlockMBPerS   float64  `json:"file_per_block_mb_per_s"`  // one file per 256 KiB block, fsync per file, dir fsync per batch
	PebbleMBPerS         *float64 `json:"pebble_mb_per_s"`          // pebble, synced batches; null when not run (PebbleNote)
	StartupSPerGiB       float64  `json:"startup_s_per_gib"`        // node.Open after a crash, s per GiB of committed payload
	StartupUSPerKey      float64  `json:"startup_us_per_key"`       // the same, µs per committed key
	BytesPerKey          float64  `json:"bytes_per_key"`            // live Go heap (after GC) per committed key after the restart

	// Extras.
	Offload2MMBPerS    float64  `json:"offload_2m_mb_per_s"`
	GetOneReaderMBPerS float64  `json:"get_one_reader_mb_per_s"`
	GetOneReaderP99MS  float64  `json:"get_one_reader_p99_ms"`
	SmallOffloadRatio  float64  `json:"small_offload_ratio"` // small_offload_keys_per_s / limit_write_iops
	SmallGetRatio      float64  `json:"small_get_ratio"`     // small_get_keys_per_s / limit_read_iops
	FilePerBlockRatio  float64  `json:"file_per_block_ratio"`
	OffloadOverFile    float64  `json:"offload_over_file_per_block"` // offload_mb_per_s / file_per_block_mb_per_s, per round
	PebbleRatio        *float64 `json:"pebble_ratio"`
	LimitWriteP99MS    float64  `json:"limit_write_p99_ms"` // per 1 MiB write
	LimitBatchP99MS    float64  `json:"limit_batch_p99_ms"` // per batch of the offload's shape on the bare disk (limitBatches)
	OffloadP99Ratio    float64  `json:"offload_p99_ratio"`  // offload_p99_ms / limit_batch_p99_ms (issue 9's target: <= 1.3)
	// The local path (a client, in a child process, on the local socket of a node in this
	// process: served.go), and each figure over the embedded node's in the same round.
	LocalOffloadMBPerS       float64 `json:"local_offload_mb_per_s"`
	LocalOffloadOverEmbedded float64 `json:"local_offload_over_embedded"`
	LocalGetMBPerS           float64 `json:"local_get_mb_per_s"`
	LocalGetOverEmbedded     float64 `json:"local_get_over_embedded"`
	// The stream path: the same through gRPC over loopback TCP, the client in a child process.
	StreamOffloadMBPerS       float64  `json:"stream_offload_mb_per_s"`
	StreamOffloadOverEmbedded float64  `json:"stream_offload_over_embedded"`
	StreamGetMBPerS           float64  `json:"stream_get_mb_per_s"`
	StreamGetOverEmbedded     float64  `json:"stream_get_over_embedded"`
	RSSPerKey                 float64  `json:"rss_bytes_per_key"`           // VmRSS growth per key over the same open (cross-check)
	StartupSnapshotSPerGiB    float64  `json:"startup_snapshot_s_per_gib"`  // node.Open restoring a snapshot of the same keys (a node whose log passed SnapshotThreshold)
	StartupSnapshotUSPerKey   float64  `json:"startup_snapshot_us_per_key"` // the same, µs per committed key
	StartupKeys               int      `json:"startup_keys"`
	StartupSeconds            float64  `json:"startup_s"`
	StartupCrashed            bool     `json:"startup_after_sigkill"`
	Rounds                    int      `json:"rounds"`
	Seconds                   float64  `json:"seconds"` // wall time of the whole bench
	Seed                      uint64   `json:"seed"`
	Direct                    bool     `json:"direct"` // every limit ran with O_DIRECT
	CacheDropped              bool     `json:"page_cache_dropped"`
	PebbleNote                string   `json:"pebble_note,omitempty"`
	Notes                     []string `json:"notes,omitempty"`
	FilesystemType            string   `json:"filesystem"`
	GoMaxProcs                int      `json:"gomaxprocs"` // Go Ps the bench ran with: the figures depend on it (docs/operations.md, "Go Ps")
	CPUs                      int      `json:"cpus"`

	// The replay phase (replay.go): the shipped sample, as storenode replay runs it by default,
	// into an embedded node, the local path and the stream path (clients in a child process),
	// each on a fresh directory; written MB/s (bytes of the keys Stored) and read-back MB/s
	// (every distinct key, verified), and each served figure over the embedded run just
	// before it in the same round. Zero when the phase did not run (ReplayRounds 0).
	ReplayEmbeddedMBPerS        float64 `json:"replay_embedded_mb_per_s"`
	ReplayLocalMBPerS           float64 `json:"replay_local_mb_per_s"`
	ReplayStreamMBPerS          float64 `json:"replay_stream_mb_per_s"`
	ReplayLocalOverEmbedded     float64 `json:"replay_local_over_embedded"`  // issue 29's target: >= 0.90
	ReplayStreamOverEmbedded    float64 `json:"replay_stream_over_embedded"` // issue 29's target: >= 0.75
	ReplayEmbeddedGetMBPerS     float64 `json:"replay_embedded_get_mb_per_s"`
	ReplayLocalGetMBPerS        float64 `json:"replay_local_get_mb_per_s"`
	ReplayStreamGetMBPerS       float64 `json:"replay_stream_get_mb_per_s"`
	ReplayLocalGetOverEmbedded  float64 `json:"replay_local_get_over_embedded"`
	ReplayStreamGetOverEmbedded float64 `json:"replay_stream_get_over_embedded"`
	ReplayRounds                int     `json:"replay_rounds"` // rounds that ran the replay phase
	Only                        string  `json:"only"`          // the part run alone ("replay"), "" for the whole bench

	// rowLimits is, for each ratio taken against a disk limit, the median of the limits it
	// was taken against (the table's limit column), by the ratio's JSON name.
	rowLimits map[string]float64
}

// samples holds each figure's per-round values, by the Report's JSON name.
type samples map[string][]float64

func (s samples) add(name string, v float64) { s[name] = append(s[name], v) }

// addRatio adds num/den under name (nothing when den is 0), and den under name's limit
// (limitOf), so that the table can show the limits a ratio was taken against.
func (s samples) addRatio(name string, num, den float64) {
	if den > 0 {
		s.add(name, num/den)
		s.add(limitOf(name), den)
	}
}

// limitOf names the samples of the denominators of ratio name.
func limitOf(name string) string { return name + "/limit" }

// median of name's values (0 when there are none); the mean of the middle two for an even count.
func (s samples) median(name string) float64 { return median(s[name]) }

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	c := append([]float64(nil), v...)
	sort.Float64s(c)
	if len(c)%2 == 1 {
		return c[len(c)/2]
	}
	return (c[len(c)/2-1] + c[len(c)/2]) / 2
}

// fill sets r's round figures to the medians of s.
func (s samples) fill(r *Report) {
	m := s.median
	r.LimitWriteMBPerS, r.LimitReadMBPerS = m("limit_write_mb_per_s"), m("limit_read_mb_per_s")
	r.LimitWriteIOPS, r.LimitReadIOPS = m("limit_write_iops"), m("limit_read_iops")
	r.OffloadMBPerS, r.OffloadRatio, r.OffloadP99MS = m("offload_mb_per_s"), m("offload_ratio"), m("offload_p99_ms")
	r.Offload2MMBPerS, r.Offload2MRatio = m("offload_2m_mb_per_s"), m("offload_2m_ratio")
	r.GetMBPerS, r.GetRatio = m("get_mb_per_s"), m("get_ratio")
	r.GetOneReaderMBPerS, r.GetOneReaderRatio, r.GetOneReaderP99MS = m("get_one_reader_mb_per_s"), m("get_one_reader_ratio"), m("get_one_reader_p99_ms")
	r.SmallOffloadKeysPerS, r.SmallOffloadRatio = m("small_offload_keys_per_s"), m("small_offload_ratio")
	r.SmallGetKeysPerS, r.SmallGetRatio = m("small_get_keys_per_s"), m("small_get_ratio")
	r.CommitKeysPerS = m("commit_keys_per_s")
	r.FilePerBlockMBPerS, r.FilePerBlockRatio, r.OffloadOverFile = m("file_per_block_mb_per_s"), m("file_per_block_ratio"), m("offload_over_file_per_block")
	r.LimitWriteP99MS, r.LimitBatchP99MS, r.OffloadP99Ratio = m("limit_write_p99_ms"), m("limit_batch_p99_ms"), m("offload_p99_ratio")
	r.LocalOffloadMBPerS, r.LocalOffloadOverEmbedded = m("local_offload_mb_per_s"), m("local_offload_over_embedded")
	r.LocalGetMBPerS, r.LocalGetOverEmbedded = m("local_get_mb_per_s"), m("local_get_over_embedded")
	r.StreamOffloadMBPerS, r.StreamOffloadOverEmbedded = m("stream_offload_mb_per_s"), m("stream_offload_over_embedded")
	r.StreamGetMBPerS, r.StreamGetOverEmbedded = m("stream_get_mb_per_s"), m("stream_get_over_embedded")
	r.ReplayEmbeddedMBPerS, r.ReplayEmbeddedGetMBPerS = m("replay_embedded_mb_per_s"), m("replay_embedded_get_mb_per_s")
	r.ReplayLocalMBPerS, r.ReplayLocalOverEmbedded = m("replay_local_mb_per_s"), m("replay_local_over_embedded")
	r.ReplayStreamMBPerS, r.ReplayStreamOverEmbedded = m("replay_stream_mb_per_s"), m("replay_stream_over_embedded")
	r.ReplayLocalGetMBPerS, r.ReplayLocalGetOverEmbedded = m("replay_local_get_mb_per_s"), m("replay_local_get_over_embedded")
	r.ReplayStreamGetMBPerS, r.ReplayStreamGetOverEmbedded = m("replay_stream_get_mb_per_s"), m("replay_stream_get_over_embedded")
	r.rowLimits = map[string]float64{}
	for name, v := range s {
		if ratio, ok := strings.CutSuffix(name, "/limit"); ok {
			r.rowLimits[ratio] = median(v)
		}
	}
	if len(s["pebble_mb_per_s"]) > 0 {
		p, q := m("pebble_mb_per_s"), m("pebble_ratio")
		r.PebbleMBPerS, r.PebbleRatio = &p, &q
	}
}

// atLeast is the target column for a figure that must reach target (format formats it).
func atLeast(v, target float64, format string) string {
	return ">= " + fmt.Sprintf(format, target) + ": " + metOrMissed(v >= target)
}

// atMost is the target column for a figure that must not pass target.
func atMost(v, target float64, format string) string {
	return "<= " + fmt.Sprintf(format, target) + ": " + metOrMissed(v <= target)
}

func metOrMissed(met bool) string {
	if met {
		return "met"
	}
	return "missed"
}

// WriteJSON writes r as one JSON object and a newline.
func (r Report) WriteJSON(w io.Writer) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// WriteTable writes r as a table: each figure beside the disk limit its ratio was taken
// against, the ratio, and issue 9's target (issue 29's for the replay phase) with whether
// this run meets it.
func (r Report) WriteTable(w io.Writer) {
	if r.Only != "" {
		fmt.Fprintf(w, "only the %s phase (--only %s): %s (a ratio is the median of the rounds' ratios, each to the embedded run just before it in its round: the local path's to the first embedded run of the round, the stream path's to the second; the embedded row shows the median of all of them, so a ratio need not equal the figures' quotient)\n\n", r.Only, r.Only, roundsText(r.Rounds))
	} else {
		fmt.Fprintf(w, "%s (limit and store runs alternate; a ratio is the median of the rounds' ratios, each to the limit measured just before it in its round, so it need not equal the ratio of the medians beside it; the limit shown is the median of the limits that row's ratios were taken against)\n\n", roundsText(r.Rounds))
	}
	fmt.Fprintf(w, "| %-62s | %-26s | %-30s | %-7s | %-26s |\n", "what", "disk limit", "figure", "ratio", "target")
	fmt.Fprintf(w, "|%s|%s|%s|%s|%s|\n", strings.Repeat("-", 64), strings.Repeat("-", 28), strings.Repeat("-", 32), strings.Repeat("-", 9), strings.Repeat("-", 28))
	row := func(what, limit, fig, ratio, target string) {
		fmt.Fprintf(w, "| %-62s | %-26s | %-30s | %-7s | %-26s |\n", what, limit, fig, ratio, target)
	}
	mb := func(v float64) string { return fmt.Sprintf("%.0f MB/s", v) }
	ks := func(v float64) string { return fmt.Sprintf("%.0f keys/s", v) }
	rt := func(v float64) string { return fmt.Sprintf("%.2f", v) }
	// limit is the median of the limits ratio was taken against, else all of that kind's.
	limit := func(ratio string, all float64, unit string) string {
		if v, ok := r.rowLimits[ratio]; ok {
			all = v
		}
		return fmt.Sprintf("%.0f %s", all, unit)
	}
	lw := func(ratio string) string { return limit(ratio, r.LimitWriteMBPerS, "MB/s seq 1 MiB") }
	lr := func(ratio string) string { return limit(ratio, r.LimitReadMBPerS, "MB/s rand 256 KiB") }
	if r.Only != "" {
		r.replayRows(row)
		fmt.Fprintf(w, "\nwall time %.1f s; filesystem %s; %d Go Ps on %d CPUs\n", r.Seconds, r.FilesystemType, r.GoMaxProcs, r.CPUs)
		r.writeNotes(w)
		return
	}
	row("offload, 32 writers x 16 x 256 KiB", lw("offload_ratio"), mb(r.OffloadMBPerS), rt(r.OffloadRatio), atLeast(r.OffloadRatio, 0.85, "%.2f"))
	row("  p99 batch latency, 4 MiB batches (ratio: lower is better)", fmt.Sprintf("%.1f ms, same batches", r.LimitBatchP99MS), fmt.Sprintf("%.1f ms", r.OffloadP99MS), rt(r.OffloadP99Ratio), atMost(r.OffloadP99Ratio, 1.3, "%.1f"))
	row("  local path (unix socket + shared memory); ratio: / embedded", "-", mb(r.LocalOffloadMBPerS), rt(r.LocalOffloadOverEmbedded), "")
	row("  stream path (gRPC, loopback TCP); ratio: / embedded", "-", mb(r.StreamOffloadMBPerS), rt(r.StreamOffloadOverEmbedded), "")
	row("offload, 32 writers x 16 x 2 MiB", lw("offload_2m_ratio"), mb(r.Offload2MMBPerS), rt(r.Offload2MRatio), atLeast(r.Offload2MRatio, 0.90, "%.2f"))
	row("BatchGet, cache dropped, 32 readers x 16 x 256 KiB", lr("get_ratio"), mb(r.GetMBPerS), rt(r.GetRatio), atLeast(r.GetRatio, 0.90, "%.2f"))
	row("  local path (unix socket + shared memory); ratio: / embedded", "-", mb(r.LocalGetMBPerS), rt(r.LocalGetOverEmbedded), "")
	row("  stream path (gRPC, loopback TCP); ratio: / embedded", "-", mb(r.StreamGetMBPerS), rt(r.StreamGetOverEmbedded), "")
	row("BatchGet, cache dropped, 1 reader x 64 x 256 KiB", lr("get_one_reader_ratio"), mb(r.GetOneReaderMBPerS), rt(r.GetOneReaderRatio), atLeast(r.GetOneReaderRatio, 0.80, "%.2f"))
	row("offload 4 KiB objects, 32 writers x 256 (keys/s / IOPS)", limit("small_offload_ratio", r.LimitWriteIOPS, "IOPS rand write"), ks(r.SmallOffloadKeysPerS), rt(r.SmallOffloadRatio), atLeast(r.SmallOffloadRatio, 0.80, "%.2f"))
	row("BatchGet 4 KiB objects, 32 readers x 256 (keys/s / IOPS)", limit("small_get_ratio", r.LimitReadIOPS, "IOPS rand read"), ks(r.SmallGetKeysPerS), rt(r.SmallGetRatio), atLeast(r.SmallGetRatio, 0.80, "%.2f"))
	row("metadata commits, 64-byte objects, 32 writers x 256", "-", ks(r.CommitKeysPerS), "", atLeast(r.CommitKeysPerS, 200000, "%.0f"))
	row("peer: one file per block + fsync, 256 KiB", lw("file_per_block_ratio"), mb(r.FilePerBlockMBPerS), rt(r.FilePerBlockRatio), "")
	if r.PebbleMBPerS != nil {
		row("peer: pebble, synced batches, 256 KiB", lw("pebble_ratio"), mb(*r.PebbleMBPerS), rt(*r.PebbleRatio), "")
	} else {
		row("peer: pebble, synced batches, 256 KiB", "-", "not run", "", "")
	}
	how := "after SIGKILL"
	if !r.StartupCrashed {
		how = "after a clean close"
	}
	startupTarget := "<= 1 s/GiB, 5 µs: " + metOrMissed(r.StartupSPerGiB <= 1 && r.StartupUSPerKey <= 5)
	if r.StartupKeys < 1<<20 {
		startupTarget = "set at 1M keys (full run)"
	}
	row(fmt.Sprintf("start-up, %d committed keys, %s", r.StartupKeys, how), "-",
		fmt.Sprintf("%.2f s/GiB, %.1f µs/key", r.StartupSPerGiB, r.StartupUSPerKey), "", startupTarget)
	row("  the same from a snapshot (clean close)", "-",
		fmt.Sprintf("%.2f s/GiB, %.1f µs/key", r.StartupSnapshotSPerGiB, r.StartupSnapshotUSPerKey), "", "")
	row("memory per committed key (live Go heap after GC)", "-", fmt.Sprintf("%.0f B (RSS %.0f B)", r.BytesPerKey, r.RSSPerKey), "", atMost(r.BytesPerKey, 300, "%.0f B"))
	r.replayRows(row)
	fmt.Fprintf(w, "\nkvoffload's 256 KiB offload / one file per block: %.2fx (target >= 3x: %s); wall time %.1f s; seed %d; filesystem %s; %d Go Ps on %d CPUs\n",
		r.OffloadOverFile, metOrMissed(r.OffloadOverFile >= 3), r.Seconds, r.Seed, r.FilesystemType, r.GoMaxProcs, r.CPUs)
	if r.ReplayRounds > 0 && r.ReplayRounds < r.Rounds {
		fmt.Fprintf(w, "the replay rows are medians of the first %d of the %d rounds (the replay phase ends only those)\n", r.ReplayRounds, r.Rounds)
	}
	if r.SmallOffloadRatio > 1 {
		fmt.Fprintf(w, "a 4 KiB offload ratio above 1 is expected: a batch of 256 keys is written with one pwrite per run of records and shares its fdatasyncs, while the limit is one random 4 KiB write per I/O (docs/benchmarks.md)\n")
	}
	if r.PebbleNote != "" {
		fmt.Fprintf(w, "pebble: %s\n", r.PebbleNote)
	}
	r.writeNotes(w)
}

func (r Report) writeNotes(w io.Writer) {
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

// replayRows writes the replay phase's rows (one saying "not run" when it did not): written and read-back
// MB/s of each store, and each served path's ratio to the embedded node with issue 29's target.
func (r Report) replayRows(row func(what, limit, fig, ratio, target string)) {
	if r.ReplayRounds == 0 {
		row("replay of the shipped sample", "-", "not run", "", "")
		return
	}
	mb := func(v float64) string { return fmt.Sprintf("%.0f MB/s", v) }
	rt := func(v float64) string { return fmt.Sprintf("%.2f", v) }
	for _, p := range []struct {
		what                    string
		emb, local, stream      float64
		localRatio, streamRatio float64
	}{
		{"written", r.ReplayEmbeddedMBPerS, r.ReplayLocalMBPerS, r.ReplayStreamMBPerS, r.ReplayLocalOverEmbedded, r.ReplayStreamOverEmbedded},
		{"read back", r.ReplayEmbeddedGetMBPerS, r.ReplayLocalGetMBPerS, r.ReplayStreamGetMBPerS, r.ReplayLocalGetOverEmbedded, r.ReplayStreamGetOverEmbedded},
	} {
		row(fmt.Sprintf("replay of the shipped sample, %s, embedded node", p.what), "-", mb(p.emb), "", "")
		row("  local path (unix socket + shared memory); ratio: / embedded", "-", mb(p.local), rt(p.localRatio), atLeast(p.localRatio, 0.90, "%.2f"))
		row("  stream path (gRPC, loopback TCP); ratio: / embedded", "-", mb(p.stream), rt(p.streamRatio), atLeast(p.streamRatio, 0.75, "%.2f"))
	}
}

// roundsText is "medians of N rounds", or "one round" for one.
func roundsText(n int) string {
	if n == 1 {
		return "one round"
	}
	return fmt.Sprintf("medians of %d rounds", n)
}
