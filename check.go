package kvoffload

import (
	"fmt"
	"unicode/utf8"
)

// CheckKey returns why key can never name an object, or "" if it can: a key is 1 or more
// bytes of UTF-8 (the protocol's keys are proto3 strings) without ASCII control characters
// (0x00-0x1f, 0x7f: they would forge lines in logs). Its length limit is the store's own
// (MaxKeyBytes, 1 KiB by default) and is checked by the store. Every Store refuses such a key
// per key: Rejected with CodeInvalidKey by BatchOffload, InvalidKey by BatchGet, Absent by
// BatchExists, Removed false by Remove.
func CheckKey(key string) string {
	if key == "" {
		return "invalid key: empty"
	}
	if !utf8.ValidString(key) {
		return "invalid key: not valid UTF-8"
	}
	for i := 0; i < len(key); i++ {
		if b := key[i]; b < 0x20 || b == 0x7f {
			return fmt.Sprintf("invalid key: control character at byte %d", i)
		}
	}
	return ""
}

// CheckTxnID returns ErrInvalidArgument, wrapped, for the zero TxnID, else nil.
func CheckTxnID(id TxnID) error {
	if id.IsZero() {
		return fmt.Errorf("%w: zero txn ID (make one with NewTxnID)", ErrInvalidArgument)
	}
	return nil
}
