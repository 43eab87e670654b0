package bench

import (
	"bytes"
	"encoding/json"
	"math"
	"sort"
	"strings"
	"testing"

	"github.com/kvoffload/kvoffload/workload/replay"
)

// requiredKeys are the --json keys issue 9 lists, exactly.
var requiredKeys = []string{"limit_write_mb_per_s", "limit_read_mb_per_s", "limit_write_iops", "limit_read_iops",
	"offload_mb_per_s", "offload_ratio", "offload_2m_ratio", "offload_p99_ms", "get_mb_per_s", "get_ratio",
	"get_one_reader_ratio", "small_offload_keys_per_s", "small_get_keys_per_s", "commit_keys_per_s",
	"file_per_block_mb_per_s", "pebble_mb_per_s", "startup_s_per_gib", "startup_us_per_key", "bytes_per_key"}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{5}, 5}, {[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}, {[]float64{9, 1, 1}, 1}} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

// offloadRounds returns the samples of rounds of the 256 KiB offload, each {store, limit} in
// MB/s, as a run records them.
func offloadRounds(rounds [][2]float64) samples {
	s := samples{}
	for _, r := range rounds {
		s.add("offload_mb_per_s", r[0])
		s.add("limit_write_mb_per_s", r[1])
		s.addRatio("offload_ratio", r[0], r[1])
	}
	return s
}

// TestRatiosArePerRound: a ratio is the median of the per-round ratios, not the ratio of the
// medians, so that each is taken against the limit measured beside it.
func TestRatiosArePerRound(t *testing.T) {
	s := offloadRounds([][2]float64{{100, 200}, {300, 300}, {90, 100}})
	s.addRatio("get_ratio", 1, 0) // no limit: no ratio
	var rep Report
	s.fill(&rep)
	if rep.OffloadRatio != 0.9 || rep.OffloadMBPerS != 100 || rep.LimitWriteMBPerS != 200 {
		t.Errorf("ratio %v, offload %v, limit %v; want 0.9, 100, 200", rep.OffloadRatio, rep.OffloadMBPerS, rep.LimitWriteMBPerS)
	}
	if len(s["get_ratio"]) != 0 || rep.GetRatio != 0 {
		t.Errorf("a ratio to a zero limit was recorded: %v", s["get_ratio"])
	}
	if rep.PebbleMBPerS != nil {
		t.Errorf("pebble not run but reported %v", *rep.PebbleMBPerS)
	}
}

func TestJSONKeys(t *testing.T) {
	var buf bytes.Buffer
	if err := (Report{}).WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range requiredKeys {
		if _, ok := m[k]; !ok {
			t.Errorf("key %q missing from %s", k, buf.String())
		}
	}
	if m["pebble_mb_per_s"] != nil {
		t.Errorf("pebble_mb_per_s = %v, want null when pebble did not run", m["pebble_mb_per_s"])
	}
	if bytes.Count(buf.Bytes(), []byte("\n")) != 1 {
		t.Errorf("not one line: %q", buf.String())
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	t.Logf("keys: %v", keys)
}

// The table's limit column is the median of the limits a row's ratios were taken against
// (not of every limit of that kind the run measured), and its target column says whether the
// run meets issue 9's target.
func TestTableRowLimitsAndTargets(t *testing.T) {
	s := offloadRounds([][2]float64{{180, 200}, {290, 300}, {90, 100}})
	for range 4 { // later limit runs of the rounds, for other rows
		s.add("limit_write_mb_per_s", 900)
	}
	s.add("commit_keys_per_s", 150000)
	var rep Report
	s.fill(&rep)
	var buf bytes.Buffer
	rep.WriteTable(&buf)
	lines := strings.Split(buf.String(), "\n")
	find := func(prefix string) string {
		for _, l := range lines {
			if strings.HasPrefix(l, "| "+prefix) {
				return l
			}
		}
		t.Fatalf("no row %q in\n%s", prefix, buf.String())
		return ""
	}
	if row := find("offload, 32 writers x 16 x 256 KiB"); !strings.Contains(row, "| 200 MB/s seq 1 MiB") || !strings.Contains(row, ">= 0.85: met") {
		t.Errorf("offload row %q: want the limit 200 MB/s (the median of its own limits, not %v of all) and the target met", row, rep.LimitWriteMBPerS)
	}
	if row := find("metadata commits"); !strings.Contains(row, ">= 200000: missed") {
		t.Errorf("commits row %q: want the 200k target missed", row)
	}
}

// jsonOf is rep's --json object, decoded (and logged).
func jsonOf(t *testing.T, rep Report) map[string]any {
	t.Helper()
	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	t.Log(buf.String())
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// replayRounds returns the samples of rounds of the replay phase, each {embedded before the
// local path, local, embedded before the stream path, stream} written MB/s, the read-back
// MB/s being half of each, as replayRound records them.
func replayRounds(rounds [][4]float64) samples {
	s := samples{}
	sum := func(mb float64) replay.Summary { return replay.Summary{MBPerSec: mb, ReadMBPerSec: mb / 2} }
	for _, r := range rounds {
		s.addReplay("local", sum(r[0]), sum(r[1]))
		s.addReplay("stream", sum(r[2]), sum(r[3]))
	}
	return s
}

// The replay phase's figures reach the JSON under issue 29's names, each ratio the median of
// the per-round ratios to the embedded run just before it, and the table shows them, with
// issue 29's targets, in the whole bench's table and alone under --only replay.
func TestReplayReport(t *testing.T) {
	s := replayRounds([][4]float64{{1000, 950, 1000, 700}, {800, 400, 1200, 1100}, {1000, 920, 900, 810}})
	rep := Report{Rounds: 3, ReplayRounds: 3}
	s.fill(&rep)
	want := map[string]float64{
		"replay_embedded_mb_per_s": 1000, "replay_local_mb_per_s": 920, "replay_stream_mb_per_s": 810,
		"replay_local_over_embedded": 0.92, "replay_stream_over_embedded": 0.9,
		"replay_embedded_get_mb_per_s": 500, "replay_local_get_mb_per_s": 460, "replay_stream_get_mb_per_s": 405,
		"replay_local_get_over_embedded": 0.92, "replay_stream_get_over_embedded": 0.9, "replay_rounds": 3,
	}
	m := jsonOf(t, rep)
	for k, v := range want {
		if got, ok := m[k].(float64); !ok || math.Abs(got-v) > 1e-9 {
			t.Errorf("%s = %v, want %v", k, m[k], v)
		}
	}
	if m["only"] != "" {
		t.Errorf("only = %v, want \"\" for the whole bench", m["only"])
	}

	rows := func(r Report) map[string][]string {
		var table bytes.Buffer
		r.WriteTable(&table)
		out := map[string][]string{}
		for _, l := range strings.Split(table.String(), "\n") {
			if cells := strings.Split(l, "|"); len(cells) == 7 {
				what := strings.TrimSpace(cells[1])
				out[what] = append(out[what], strings.TrimSpace(strings.TrimSpace(cells[3])+" | "+strings.TrimSpace(cells[4])+" | "+strings.TrimSpace(cells[5])))
			}
		}
		return out
	}
	for _, r := range []Report{rep, func() Report { o := rep; o.Only = OnlyReplay; return o }()} {
		got := rows(r)
		for what, cells := range map[string][]string{
			"replay of the shipped sample, written, embedded node":        {"1000 MB/s |  |"},
			"replay of the shipped sample, read back, embedded node":      {"500 MB/s |  |"},
			"local path (unix socket + shared memory); ratio: / embedded": {"920 MB/s | 0.92 | >= 0.90: met", "460 MB/s | 0.92 | >= 0.90: met"},
			"stream path (gRPC, loopback TCP); ratio: / embedded":         {"810 MB/s | 0.90 | >= 0.75: met", "405 MB/s | 0.90 | >= 0.75: met"},
		} {
			have := got[what]
			if r.Only == "" && strings.Contains(what, "path") {
				have = have[len(have)-2:] // after the synthetic offload's and BatchGet's rows of that name
			}
			if strings.Join(have, "; ") != strings.Join(cells, "; ") {
				t.Errorf("only %q: rows %q: %q, want %q", r.Only, what, have, cells)
			}
		}
		if _, full := got["offload, 32 writers x 16 x 256 KiB"]; full != (r.Only == "") {
			t.Errorf("only %q: the synthetic offload's row shown: %v", r.Only, full)
		}
	}

	missed := replayRounds([][4]float64{{1000, 890, 1000, 740}})
	rep = Report{Rounds: 3, ReplayRounds: 1, Only: OnlyReplay}
	missed.fill(&rep)
	got := rows(rep)["local path (unix socket + shared memory); ratio: / embedded"]
	if len(got) != 2 || !strings.HasSuffix(got[0], ">= 0.90: missed") {
		t.Errorf("local path at 0.89: %q, want the 0.90 target missed", got)
	}
	if got := rows(Report{Rounds: 1})["replay of the shipped sample"]; len(got) != 1 || !strings.HasPrefix(got[0], "not run") {
		t.Errorf("replay phase not run: %q, want a row saying so", got)
	}
}
