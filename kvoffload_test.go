package kvoffload_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/kvoffload/kvoffload"
)

func TestResultErrMatchesItsCode(t *testing.T) {
	r := kvoffload.KeyResult{Key: "k", Outcome: kvoffload.Rejected, Code: kvoffload.CodeQuota, Reason: "quota: 10 bytes over"}
	err := r.Err()
	if !errors.Is(err, kvoffload.CodeQuota) || errors.Is(err, kvoffload.CodeTooLarge) {
		t.Fatalf("errors.Is on %v", err)
	}
	var ke *kvoffload.KeyError
	if !errors.As(err, &ke) || ke.Key != "k" || ke.Code != kvoffload.CodeQuota || ke.What != "Rejected" {
		t.Fatalf("errors.As: %+v", ke)
	}
	if want := `key "k": Rejected (quota): quota: 10 bytes over`; err.Error() != want {
		t.Fatalf("%q, want %q", err.Error(), want)
	}
	if (kvoffload.KeyResult{Outcome: kvoffload.AlreadyStored}).Err() != nil {
		t.Fatal("an AlreadyStored key has an error")
	}
	g := kvoffload.GetResult{Key: "g", Status: kvoffload.Corrupt, Code: kvoffload.CodeCorrupt}
	if !errors.Is(g.Err(), kvoffload.CodeCorrupt) || (kvoffload.GetResult{Status: kvoffload.Found}).Err() != nil {
		t.Fatalf("GetResult.Err: %v", g.Err())
	}
}

// Every code up to CodeNoSpace has a name; an unknown one reads as its number.
func TestCodeNames(t *testing.T) {
	seen := map[string]bool{}
	for c := kvoffload.CodeNone; c <= kvoffload.CodeNoSpace; c++ {
		n := c.String()
		if n == "" || strings.HasPrefix(n, "Code(") || seen[n] {
			t.Fatalf("code %d: name %q (duplicate: %v)", c, n, seen[n])
		}
		seen[n] = true
	}
	if got := kvoffload.Code(200).String(); got != "Code(200)" {
		t.Fatalf("unknown code: %q", got)
	}
	for v, want := range map[interface{ String() string }]string{
		kvoffload.Stored: "Stored", kvoffload.Failed: "Failed", kvoffload.Outcome(0): "Outcome(0)",
		kvoffload.ShortBuffer: "ShortBuffer", kvoffload.GetStatus(0): "GetStatus(0)",
		kvoffload.Unknown: "Unknown", kvoffload.Presence(9): "Presence(9)",
	} {
		if v.String() != want {
			t.Errorf("%q, want %q", v.String(), want)
		}
	}
}

func TestCheckKeyAndTxnID(t *testing.T) {
	for key, ok := range map[string]bool{"a": true, "m@tp0/ab12_k": true, "": false, "a\nb": false, "\x7f": false, "bad\xff": false, "é": true} {
		if got := kvoffload.CheckKey(key) == ""; got != ok {
			t.Errorf("CheckKey(%q) = %q, want ok=%v", key, kvoffload.CheckKey(key), ok)
		}
	}
	if !errors.Is(kvoffload.CheckTxnID(kvoffload.TxnID{}), kvoffload.ErrInvalidArgument) || kvoffload.CheckTxnID(kvoffload.NewTxnID()) != nil {
		t.Fatal("CheckTxnID")
	}
	if a, b := kvoffload.NewTxnID(), kvoffload.NewTxnID(); a == b || a.IsZero() || len(a.String()) != 32 {
		t.Fatalf("NewTxnID: %s %s", a, b)
	}
}
