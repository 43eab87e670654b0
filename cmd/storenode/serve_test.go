package main

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
)

// An address in use is reported by the serve flag behind it, the one the operator changes.
func TestListenHintNamesTheFlag(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	_, inUse := net.Listen("tcp", lis.Addr().String())
	if !errors.Is(inUse, syscall.EADDRINUSE) {
		t.Skipf("a second listen gave %v, not EADDRINUSE", inUse)
	}
	for wrap, flag := range map[string]string{
		"node: API listener: %w": "--api-addr", "node: peer listener: %w": "--peer-addr",
		"node: raftmeta: transport on x: %w": "--raft-addr", "--http-addr: ops: cannot listen: %w": "--http-addr",
	} {
		if got := listenHint(fmt.Errorf(wrap, inUse)); !strings.HasPrefix(got.Error(), flag+" is in use") {
			t.Errorf("%q: %v, want it to start with %q", wrap, got, flag+" is in use")
		}
	}
	other := errors.New("node: something else")
	if got := listenHint(other); got != other {
		t.Errorf("another error changed: %v", got)
	}
}
