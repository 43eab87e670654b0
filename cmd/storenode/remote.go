package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kvoffload/kvoffload/client"
	"github.com/kvoffload/kvoffload/internal/replay"
)

// remoteCallTimeout bounds one batch offload or read of a replay, retries included, so a
// cluster that stays down shows up as batch errors rather than a replay that never ends.
const remoteCallTimeout = 2 * time.Minute

// dialRemoteTimeout bounds connecting to the cluster before a replay starts.
const dialRemoteTimeout = 10 * time.Second

// dialRemote connects to a cluster for replay.
func dialRemote(ctx context.Context, addr string, verbose bool) (replay.Target, func(), error) {
	addrs := splitAddrs(addr)
	if len(addrs) == 0 {
		return nil, nil, errors.New("--addr is empty")
	}
	dctx, cancel := context.WithTimeout(ctx, dialRemoteTimeout)
	defer cancel()
	opt := client.DefaultOptions()
	opt.Logger = logger(verbose)
	c, err := client.DialOptions(dctx, opt, addrs...)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot reach the cluster at %s: %w", addr, err)
	}
	return replay.Remote{Client: c, CallTimeout: remoteCallTimeout}, func() { _ = c.Close() }, nil
}
