package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/kvoffload/kvoffload/client"
)

type eventsFlags struct {
	statusFlags
	from     string
	untilNow bool
	list     bool
}

func eventsCmd() *cobra.Command {
	var f eventsFlags
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Stream the cluster's stored and removed keys, resumable by position",
		Long: `events watches the cluster's key events (KVOffload.WatchEvents) through a member and prints one per
line, in Raft order: stored (key, size, node), removed (key, cause: removed, evicted, owner_left,
pruned), and, when the member no longer retains the events after --from, a reset followed by one
listed line per key stored at the reset's position. Each event has a position, "index.ordinal";
--from POS prints the events after POS (resume from the last position printed). A stream that
breaks is resumed on the next member of --addr after the last event printed. --until-now stops once
every event committed when events started is printed; without it events runs until interrupted
(or --timeout). --json prints one JSON object per line: pos, kind, key, size, node, gen, cause
(removed), listed and reason (reset).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runEvents(cmd.Context(), f, os.Stdout) },
	}
	registerAsk(cmd.Flags(), &f.statusFlags, 0)
	cmd.Flags().Lookup("timeout").Usage = "give up after this long (0: never)"
	cmd.Flags().StringVar(&f.from, "from", "0", `print the events after this position ("index.ordinal" or "index")`)
	cmd.Flags().BoolVar(&f.untilNow, "until-now", false, "stop after the events committed when events started")
	cmd.Flags().BoolVar(&f.list, "list", false, "start with a reset and the listing of every stored key")
	cmd.Flags().BoolVar(&f.json, "json", false, "print one JSON object per event")
	return cmd
}

// eventJSON is one line of events --json.
type eventJSON struct {
	Pos    string `json:"pos"`
	Kind   string `json:"kind"`
	Key    string `json:"key,omitempty"`
	Size   uint64 `json:"size,omitempty"`
	Node   string `json:"node,omitempty"`
	Gen    uint64 `json:"gen,omitempty"`
	Cause  string `json:"cause,omitempty"`
	Listed uint64 `json:"listed,omitempty"`
	Reason string `json:"reason,omitempty"`
}

func runEvents(ctx context.Context, f eventsFlags, w io.Writer) error {
	from, err := client.ParsePosition(f.from)
	if err != nil {
		return fmt.Errorf("events: --from: %w", err)
	}
	addrs := splitAddrs(f.addr)
	if len(addrs) == 0 {
		return errors.New("events: --addr is empty")
	}
	if f.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.timeout)
		defer cancel()
	}
	opt := client.DefaultOptions()
	if err := f.creds.apply(&opt); err != nil {
		return fmt.Errorf("events: %w", err)
	}
	c, err := client.DialOptions(ctx, opt, addrs...)
	if err != nil {
		return fmt.Errorf("events: cannot reach %s: %w", f.addr, err)
	}
	defer c.Close()
	var opts []client.WatchOption
	if f.untilNow {
		opts = append(opts, client.WatchUntilNow())
	}
	if f.list {
		opts = append(opts, client.WatchList())
	}
	bw := bufio.NewWriter(w)
	defer bw.Flush()
	enc := json.NewEncoder(bw)
	for ev, err := range c.Watch(ctx, from, opts...) {
		if err != nil {
			if notAPI(err) {
				return apiAddrHint(c.Addr(), err)
			}
			return fmt.Errorf("events: %w", err)
		}
		if f.json {
			err = enc.Encode(eventJSON{Pos: ev.Pos.String(), Kind: ev.Kind.String(), Key: ev.Key, Size: ev.Size,
				Node: ev.Node, Gen: ev.Generation, Cause: ev.Cause, Listed: ev.Listed, Reason: ev.Reason})
		} else {
			err = printEvent(bw, ev)
		}
		if err != nil {
			return err
		}
		if ev.Kind != client.EventListed { // a listing is flushed whole, live events at once
			if err := bw.Flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

func printEvent(w io.Writer, ev client.Event) error {
	var err error
	switch ev.Kind {
	case client.EventReset:
		_, err = fmt.Fprintf(w, "%s\treset\t%d keys listed: %s\n", ev.Pos, ev.Listed, ev.Reason)
	case client.EventRemoved:
		_, err = fmt.Fprintf(w, "%s\tremoved\t%s\t%d\t%s\t%s\n", ev.Pos, ev.Key, ev.Size, ev.Node, ev.Cause)
	default:
		_, err = fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\n", ev.Pos, ev.Kind, ev.Key, ev.Size, ev.Node)
	}
	return err
}
