package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload"
)

// eventLines runs events --json and returns its lines, parsed.
func eventLines(t *testing.T, f eventsFlags) []eventJSON {
	t.Helper()
	var out bytes.Buffer
	if err := runEvents(context.Background(), f, &out); err != nil {
		t.Fatalf("events: %v\n%s", err, out.String())
	}
	var evs []eventJSON
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if l == "" {
			continue
		}
		var e eventJSON
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		evs = append(evs, e)
	}
	return evs
}

// TestEventsUntilNowJSON: events --from 0 --until-now --json prints one stored line per
// key, a removed line with its cause, and stops; --from the third line's position prints
// exactly the lines after it.
func TestEventsUntilNowJSON(t *testing.T) {
	nodes := openMembers(t, "", "a", "b")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	keys := []string{"m@p@d@t:ev@1", "m@p@d@t:ev@2", "m@p@d@t:ev@3"}
	var objs []kvoffload.Object
	for _, k := range keys {
		objs = append(objs, kvoffload.Object{Key: k, Value: []byte("value of " + k)})
	}
	if _, err := nodes[1].BatchOffload(ctx, kvoffload.NewTxnID(), objs); err != nil {
		t.Fatal(err)
	}
	if _, err := nodes[0].Remove(ctx, keys[1:2]); err != nil {
		t.Fatal(err)
	}
	f := eventsFlags{statusFlags: statusFlags{addr: nodes[0].APIAddr() + "," + nodes[1].APIAddr(), json: true},
		from: "0", untilNow: true}
	evs := eventLines(t, f)
	if len(evs) != 4 {
		t.Fatalf("%d lines, want 3 stored and 1 removed: %+v", len(evs), evs)
	}
	for i, k := range keys {
		if e := evs[i]; e.Kind != "stored" || e.Key != k || e.Node != "b" || e.Size != uint64(len("value of "+k)) {
			t.Fatalf("line %d: %+v, want %s stored", i, e, k)
		}
	}
	if e := evs[3]; e.Kind != "removed" || e.Key != keys[1] || e.Cause != "removed" {
		t.Fatalf("last line %+v, want %s removed", e, keys[1])
	}
	f.from = evs[2].Pos
	if rest := eventLines(t, f); len(rest) != 1 || rest[0] != evs[3] {
		t.Fatalf("--from %s: %+v, want the last line", f.from, rest)
	}
}
