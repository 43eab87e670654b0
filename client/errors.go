package client

import "errors"

// The errors of the client's own making. Calls return the Store's sentinels
// (kvoffload.ErrIndeterminate, ErrUnavailable, ErrInvalidArgument, ErrTooLarge, ErrDenied,
// ErrClosed, ErrProtocol; docs/api.md).
var (
	// ErrNoAddress is returned by Dial when no address was given.
	ErrNoAddress = errors.New("client: no address")
	// ErrUnreachable is returned by Dial when no address could be connected to.
	ErrUnreachable = errors.New("client: no member reachable")
	// ErrTxnDone is returned by Put and Commit after Commit or Abort.
	ErrTxnDone = errors.New("client: transaction already committed or aborted")
)
