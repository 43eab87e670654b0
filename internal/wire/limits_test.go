package wire

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// A Reason within MaxReasonBytes travels whole; a longer one is cut at a character boundary.
func TestReasonCut(t *testing.T) {
	if r := Reason("quota: full"); r != "quota: full" {
		t.Fatalf("short reason changed: %q", r)
	}
	long := strings.Repeat("é", MaxReasonBytes) // two bytes each: a cut may fall inside one
	r := Reason(long)
	if len(r) > MaxReasonBytes || !utf8.ValidString(r) || !strings.HasSuffix(r, "...") || !strings.HasPrefix(long, strings.TrimSuffix(r, "...")) {
		t.Fatalf("cut reason of %d bytes (valid UTF-8 %v): ...%q", len(r), utf8.ValidString(r), r[max(0, len(r)-10):])
	}
}
