package kvoffload

import (
	"errors"
	"testing"
)

// TestVocabularySpellings: every named value's Label is its String in snake_case, a number
// that names none has no Label, and a status's Code is the one its results carry
// (errors.Is on a result's Err matches it).
func TestVocabularySpellings(t *testing.T) {
	for _, c := range []struct {
		v           interface{ String() string }
		label, want string
	}{
		{AlreadyStored, AlreadyStored.Label(), "already_stored"},
		{Failed, Failed.Label(), "failed"},
		{NotFound, NotFound.Label(), "not_found"},
		{ShortBuffer, ShortBuffer.Label(), "short_buffer"},
		{InFlight, InFlight.Label(), "in_flight"},
		{Unknown, Unknown.Label(), "unknown"},
		{Outcome(0), Outcome(0).Label(), ""},
		{Outcome(9), Outcome(9).Label(), ""},
		{GetStatus(7), GetStatus(7).Label(), ""},
		{Presence(5), Presence(5).Label(), ""},
	} {
		if c.label != c.want {
			t.Errorf("%v: Label %q, want %q", c.v, c.label, c.want)
		}
	}
	if s := Outcome(9).String(); s != "Outcome(9)" {
		t.Errorf("Outcome(9).String() = %q", s)
	}
	for s, want := range map[GetStatus]Code{Found: CodeNone, NotFound: CodeNotFound, Corrupt: CodeCorrupt,
		Unavailable: CodeUnavailable, InvalidKey: CodeInvalidKey, ShortBuffer: CodeShortBuffer, GetStatus(0): CodeUnavailable, GetStatus(9): CodeUnavailable} {
		if got := s.Code(); got != want {
			t.Errorf("%v.Code() = %v, want %v", s, got, want)
		}
		if r := (GetResult{Key: "k", Status: s, Code: s.Code()}); s != Found && !errors.Is(r.Err(), want) {
			t.Errorf("%v: Err %v does not match %v", s, r.Err(), want)
		}
	}
}
