package ops

import "errors"

// ErrListen wraps a failure to listen on Serve's address.
var ErrListen = errors.New("ops: cannot listen")
