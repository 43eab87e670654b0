package node

import (
	"fmt"
	"os"
)

// Local configures the node's Unix domain socket for clients on the same host (the
// shared-memory path, docs/design.md "The local path"). Zero fields take the defaults below.
type Local struct {
	// Socket is the path of the Unix domain socket; empty means no local socket. A stale
	// socket file at the path is replaced; the node removes it when it closes.
	Socket string
	// SocketMode is the socket file's permission bits (default 0600: only the node's user
	// may connect; 0660 admits its group). docs/security.md.
	SocketMode os.FileMode
	// MaxRegionBytes is the largest region one registration may map, in bytes (default 4 GiB).
	MaxRegionBytes int64
	// MaxRegionsPerConn is the most regions one registration connection may hold (default 64).
	MaxRegionsPerConn int
	// MaxRegions is the most regions the node holds across all connections (default 1024).
	MaxRegions int
	// MaxMappedBytes bounds the bytes of all mapped regions together (default 64 GiB). The
	// pages belong to the clients' memfds; this bounds the node's address space.
	MaxMappedBytes int64
}

// Local defaults.
const (
	DefaultMaxRegionBytes    = 4 << 30
	DefaultMaxRegionsPerConn = 64
	DefaultMaxRegions        = 1024
	DefaultMaxMappedBytes    = 64 << 30
)

// withDefaults fills l's zero fields.
func (l Local) withDefaults() Local {
	if l.SocketMode == 0 {
		l.SocketMode = 0o600
	}
	if l.MaxRegionBytes == 0 {
		l.MaxRegionBytes = DefaultMaxRegionBytes
	}
	if l.MaxRegionsPerConn == 0 {
		l.MaxRegionsPerConn = DefaultMaxRegionsPerConn
	}
	if l.MaxRegions == 0 {
		l.MaxRegions = DefaultMaxRegions
	}
	if l.MaxMappedBytes == 0 {
		l.MaxMappedBytes = DefaultMaxMappedBytes
	}
	return l
}

func (l Local) validate() []error {
	var errs []error
	if l.Socket == "" {
		return nil
	}
	l = l.withDefaults()
	if l.SocketMode&^0o777 != 0 {
		errs = append(errs, fmt.Errorf("node: Local.SocketMode %o has bits beyond 0777", l.SocketMode))
	}
	if l.MaxRegionBytes < 0 || l.MaxRegionsPerConn < 0 || l.MaxRegions < 0 || l.MaxMappedBytes < 0 {
		errs = append(errs, fmt.Errorf("node: Local limits must not be negative: %+v", l))
	}
	if len(l.Socket) > 107 { // sun_path holds 108 bytes with the NUL (unix(7))
		errs = append(errs, fmt.Errorf("node: Local.Socket path of %d bytes is over the 107 a Unix socket address holds", len(l.Socket)))
	}
	return errs
}
