package raftmeta

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// The cluster-ID handshake: the first bytes of every Raft connection, before raft's own.
// etcd's cluster-ID check (rafthttp's X-Etcd-Cluster-ID header) is the model: a node never
// takes Raft traffic from another cluster's members, however their addresses got crossed.
//
//	hello (dialer):   magic "KVRH" | version 1 | len byte | cluster ID (len bytes)
//	reply (acceptor): status byte (0 accepted, 1 refused) | len byte | its cluster ID
//
// What an acceptor accepts is its ClusterPolicy's answer: a node that knows its cluster's ID
// accepts hellos with that ID only (a joining node knows the ID it asked the cluster for
// before it sends Join); a node that knows none accepts every hello only if told to (data
// from before cluster IDs), and none otherwise (a fresh node before it joins). A refused
// dialer's error names both IDs. The ID is an identity check, not a secret: an acceptor
// sends it in its reply; authentication is the transport's mutual TLS.
const (
	handshakeMagic   = "KVRH"
	handshakeVersion = 1
	handshakeTimeout = 5 * time.Second // the acceptor's wait for a hello
	maxClusterID     = 255
)

// ErrClusterMismatch: the peer belongs to another cluster (or does not say which).
var ErrClusterMismatch = errors.New("raftmeta: cluster ID mismatch")

// ClusterPolicy is what a node's handshake checks: ID returns this node's cluster ID ("" if
// it knows none); Open, when it knows none, whether to accept Raft connections from any
// cluster (nil: yes).
type ClusterPolicy struct {
	ID   func() string
	Open func() bool
}

// check returns this node's ID and whether a hello with ID theirs is accepted.
func (p *ClusterPolicy) check(theirs string) (mine string, ok bool) {
	mine = p.ID()
	if mine != "" {
		return mine, theirs == mine
	}
	return "", p.Open == nil || p.Open()
}

func hello(id string) []byte {
	b := append([]byte(handshakeMagic), handshakeVersion, byte(len(id)))
	return append(b, id...)
}

// dialHandshake sends this node's cluster ID on c and reads the acceptor's verdict.
func dialHandshake(c net.Conn, id, addr string, timeout time.Duration) error {
	if len(id) > maxClusterID {
		return fmt.Errorf("raftmeta: cluster ID of %d bytes exceeds %d", len(id), maxClusterID)
	}
	_ = c.SetDeadline(time.Now().Add(timeout))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write(hello(id)); err != nil {
		return fmt.Errorf("raftmeta: cluster handshake with %s: %w", addr, err)
	}
	var hdr [2]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return fmt.Errorf("raftmeta: cluster handshake with %s: %w", addr, err)
	}
	theirs := make([]byte, hdr[1])
	if _, err := io.ReadFull(c, theirs); err != nil {
		return fmt.Errorf("raftmeta: cluster handshake with %s: %w", addr, err)
	}
	if hdr[0] != 0 {
		return fmt.Errorf("%w: this node is in cluster %q, the node at %s in cluster %q: it refused the connection", ErrClusterMismatch, id, addr, theirs)
	}
	return nil
}

// acceptedConn is an accepted connection that runs the acceptor's side of the handshake on
// its first Read. raft's server side reads before it writes.
type acceptedConn struct {
	net.Conn
	policy *ClusterPolicy
	once   sync.Once
	err    error
}

func (a *acceptedConn) Read(p []byte) (int, error) {
	a.once.Do(func() { a.err = a.accept() })
	if a.err != nil {
		return 0, a.err
	}
	return a.Conn.Read(p)
}

func (a *acceptedConn) accept() error {
	_ = a.Conn.SetReadDeadline(time.Now().Add(handshakeTimeout))
	var hdr [len(handshakeMagic) + 2]byte
	if _, err := io.ReadFull(a.Conn, hdr[:]); err != nil {
		return fmt.Errorf("raftmeta: cluster handshake from %s: %w", a.RemoteAddr(), err)
	}
	if string(hdr[:4]) != handshakeMagic || hdr[4] != handshakeVersion {
		return fmt.Errorf("%w: %s sent no cluster handshake (header %q)", ErrClusterMismatch, a.RemoteAddr(), hdr[:5])
	}
	theirs := make([]byte, hdr[5])
	if _, err := io.ReadFull(a.Conn, theirs); err != nil {
		return fmt.Errorf("raftmeta: cluster handshake from %s: %w", a.RemoteAddr(), err)
	}
	_ = a.Conn.SetReadDeadline(time.Time{})
	mine, ok := a.policy.check(string(theirs))
	status := byte(0)
	if !ok {
		status = 1
	}
	if _, err := a.Conn.Write(append([]byte{status, byte(len(mine))}, mine...)); err != nil {
		return fmt.Errorf("raftmeta: cluster handshake from %s: %w", a.RemoteAddr(), err)
	}
	if status != 0 {
		if mine == "" {
			return fmt.Errorf("%w: this node belongs to no cluster yet and is not joining one; %s (cluster %q) refused", ErrClusterMismatch, a.RemoteAddr(), theirs)
		}
		return fmt.Errorf("%w: this node is in cluster %q, %s in cluster %q: refused", ErrClusterMismatch, mine, a.RemoteAddr(), theirs)
	}
	return nil
}
