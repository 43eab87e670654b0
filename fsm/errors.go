package fsm

import "errors"

// Decode and Restore errors. Each returned error wraps one of these.
var (
	// ErrShortCommand: the command has no type byte or ends inside a field.
	ErrShortCommand = errors.New("fsm: command truncated")
	// ErrUnknownCommand: the type byte names no command this binary knows.
	ErrUnknownCommand = errors.New("fsm: unknown command type")
	// ErrBadCommand: the body is structurally invalid (bad version, overflow, trailing bytes).
	ErrBadCommand = errors.New("fsm: malformed command")
	// ErrBadSnapshot: a snapshot failed its magic, version, checksum or invariant checks.
	ErrBadSnapshot = errors.New("fsm: malformed snapshot")
)
