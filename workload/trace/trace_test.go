package trace

import (
	"bytes"
	"strings"
	"testing"
)

func TestSampleParses(t *testing.T) {
	reqs := Sample()
	if len(reqs) != 200 {
		t.Fatalf("sample has %d requests, want 200", len(reqs))
	}
	if len(reqs[0].HashIDs) == 0 {
		t.Fatal("first request has no hash ids")
	}
}

func TestParseNamesBadLine(t *testing.T) {
	_, err := Parse(strings.NewReader("{\"hash_ids\":[1]}\n{bad\n"))
	if err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("err = %v, want it to name line 2", err)
	}
}

func TestKeyFormat(t *testing.T) {
	k := Key("m", 7)
	if !strings.HasPrefix(k, "m@pcp0@dcp0@") || len(k) != len("m@pcp0@dcp0@head_or_tp_rank:0@pp_rank:0@group:0@cache_role:kv@cache_family:full@")+64 {
		t.Fatalf("unexpected key %q", k)
	}
	if Key("m", 7) != k || Key("m", 8) == k {
		t.Fatal("keys must be deterministic and distinct")
	}
}

func TestPayloadDeterministic(t *testing.T) {
	a, b := Payload(1, "k", 4096), Payload(1, "k", 4096)
	if !bytes.Equal(a, b) {
		t.Fatal("same seed and key gave different payloads")
	}
	if bytes.Equal(a, Payload(2, "k", 4096)) || bytes.Equal(a, Payload(1, "j", 4096)) {
		t.Fatal("different seed or key gave the same payload")
	}
	// A reused buffer (the read-back's) is filled with the same bytes, whatever it held, and
	// a shorter payload is a prefix of a longer one.
	dirty := bytes.Repeat([]byte{0xff}, 4096)
	if FillPayload(dirty, 1, "k"); !bytes.Equal(dirty, a) || !bytes.Equal(Payload(1, "k", 100), a[:100]) {
		t.Fatal("FillPayload into a used buffer, or a shorter payload, differs")
	}
}

func TestParseRequiresHashIDs(t *testing.T) {
	if _, err := Parse(strings.NewReader("{\"foo\":1}\n")); err == nil || !strings.Contains(err.Error(), "hash_ids") {
		t.Fatalf("err = %v, want a complaint about hash_ids", err)
	}
	reqs, err := Parse(strings.NewReader("{\"hash_ids\":[]}\n"))
	if err != nil || len(reqs) != 1 {
		t.Fatalf("an empty hash_ids list is a valid request with no blocks: %v %v", reqs, err)
	}
}
