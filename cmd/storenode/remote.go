package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/kvoffload/kvoffload/client"
	"github.com/kvoffload/kvoffload/workload/replay"
)

// remoteCallTimeout bounds one batch offload or read of a replay, retries included, so a
// cluster that stays down shows up as batch errors rather than a replay that never ends.
const remoteCallTimeout = 2 * time.Minute

// dialRemoteTimeout bounds connecting to the cluster before a replay starts.
const dialRemoteTimeout = 10 * time.Second

// dialRemote connects to a cluster for replay.
func dialRemote(ctx context.Context, addr string, creds apiCreds, verbose bool) (replay.Target, func(), error) {
	addrs := splitAddrs(addr)
	if len(addrs) == 0 {
		return nil, nil, errors.New("--addr is empty")
	}
	dctx, cancel := context.WithTimeout(ctx, dialRemoteTimeout)
	defer cancel()
	opt := client.DefaultOptions()
	opt.Logger = logger(verbose)
	opt.CallTimeout = remoteCallTimeout // one call, retries included: a cluster that stays down shows as batch errors
	if err := creds.apply(&opt); err != nil {
		return nil, nil, err
	}
	// One client per address, each preferring its own node and failing over to the others,
	// so the batches (and the bytes, which stay where they are written) spread over the
	// members the way one client per serving host would.
	var spread replay.Spread
	var clients []*client.Client
	closeAll := func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}
	for i := range addrs {
		order := append(append([]string(nil), addrs[i:]...), addrs[:i]...)
		c, err := client.DialOptions(dctx, opt, order...)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("cannot reach the cluster at %s: %w", addr, err)
		}
		clients = append(clients, c)
		// One cheap call before the replay: an address that answers gRPC but serves no
		// kvoffload API (a member's peer port) is named as such now, not by every batch
		// (TestStatusAtAPeerPort). Status does not wait for the member to be ready, and the
		// probe has its own short deadline, so a member still recovering costs the dial of the
		// others nothing (TestReplayProbeOfAStalledMember); any other error is left to the
		// batches.
		pctx, pcancel := context.WithTimeout(ctx, probeTimeout)
		_, err = c.Status(pctx)
		pcancel()
		if err != nil && notAPI(err) {
			closeAll()
			return nil, nil, apiAddrHint(c.Addr(), err)
		}
		spread.Targets = append(spread.Targets, c)
	}
	if len(clients) == 1 {
		return clients[0], closeAll, nil // the client itself: it reads into buffers (a Pool's)
	}
	return &spread, closeAll, nil
}

// probeTimeout bounds replay's probe of each address (dialRemote) and status's of each member.
const probeTimeout = 2 * time.Second

// notAPI reports whether err says the address serves gRPC but not the kvoffload API.
func notAPI(err error) bool {
	return strings.Contains(err.Error(), "unknown service kvoffload.v1.KVOffload")
}

// apiAddrHint is the error for an address that serves no kvoffload API: most likely a
// member's peer port given where its API address belongs.
func apiAddrHint(addr string, err error) error {
	return fmt.Errorf("%s serves no kvoffload API (a member's peer port?): give a member's API address, its --api-addr: %w", addr, err)
}
