package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kvoffload/kvoffload/node"
	"github.com/kvoffload/kvoffload/ops"
)

// serveSettings are the serve flags. Each can also come from the environment
// (KVOFFLOAD_<NAME>, e.g. KVOFFLOAD_RAFT_ADDR) or a JSON config file (--config, keys like
// "raft_addr"); precedence: flag, environment, config file, default.
var serveSettings = []struct{ name, def, usage string }{
	{"id", "node1", "node ID (unique in the cluster)"},
	{"data", "./storenode-data", "data directory (WAL, buckets, Raft state); not the replay's ./kvoffload-data, whose embedded node is no cluster member"},
	{"raft-addr", "127.0.0.1:7000", "host:port the Raft transport listens on"},
	{"raft-advertise", "", "host:port other nodes dial for Raft (empty = --raft-addr)"},
	{"api-addr", "127.0.0.1:7100", "host:port of the client API (KVOffload, gRPC health, reflection)"},
	{"peer-addr", "127.0.0.1:7300", "host:port of the peer service other members call (Join, Leave, Propose, reads)"},
	{"tls-cert", "", "this node's certificate (PEM, Common Name = --id): mutual TLS for peer and Raft traffic (docs/security.md)"},
	{"tls-key", "", "the key of --tls-cert (PEM)"},
	{"tls-ca", "", "the cluster CA's certificate (PEM); peers must present a certificate it signed"},
	{"api-tls", "false", "serve the client API over TLS too, with --tls-cert"},
	{"api-token-file", "", "file of bearer tokens the client API accepts, one per line (empty = no token needed)"},
	{"insecure", "false", "allow peer and Raft listeners on non-loopback addresses without TLS (a network you trust)"},
	{"http-addr", "127.0.0.1:7200", "host:port of /metrics, /healthz and /readyz (empty = off)"},
	{"join", "", "comma-separated peer addresses (--peer-addr) of existing members; empty = bootstrap a new cluster"},
	{"local-socket", "", "path of a Unix domain socket for clients on this host: gRPC plus shared-memory regions (client address unix://PATH; empty = off)"},
	{"local-socket-mode", "0600", "permission bits of --local-socket (0600: this user only; 0660: also its group)"},
	{"capacity", "0", "quota on live bucket bytes, e.g. 64GiB (0 = unlimited)"},
	{"space-reserve", "auto", "free space of the data filesystem that bucket data never takes, kept for the WAL and the Raft log, e.g. 256MiB (auto = sized from their limits, at most a quarter of the filesystem; 0 = none; docs/operations.md)"},
	{"watch-retain", strconv.Itoa(node.DefaultWatchRetain), "key events kept for WatchEvents consumers to resume from (about 100 bytes each plus the key); a consumer further behind gets a reset and a listing"},
	{"max-watchers", strconv.Itoa(node.DefaultMaxWatchers), "most WatchEvents streams served at once; more are refused (RESOURCE_EXHAUSTED) and their clients watch through another member"},
	{"log-level", "info", "debug, info, warn or error"},
	{"log-format", "text", "text (key=value) or json (one object a line)"},
	{"log-file", "", "append the log to this file (empty = standard error)"},
}

func serveCmd() *cobra.Command {
	var configFile string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a cluster node",
		Long: `serve runs one kvoffload node. The first node bootstraps a cluster; others start with
--join host:port (the peer address, --peer-addr, of any member). Up to five nodes are voters, later ones
non-voters. SIGTERM or SIGINT shuts the node down gracefully.

Every flag can also be set in the environment (KVOFFLOAD_RAFT_ADDR=...) or in a JSON file
given with --config ({"id": "n2", "raft_addr": "127.0.0.1:7001", ...}); a flag wins over the
environment, which wins over the file.`,
		Args: serveArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			vals, err := resolveSettings(cmd.Flags(), configFile)
			if err != nil {
				return err
			}
			return runServe(cmd.Context(), vals)
		},
	}
	for _, s := range serveSettings {
		if s.def == "false" { // a switch: --api-tls means --api-tls=true, --api-tls=false turns it off
			cmd.Flags().Bool(s.name, false, s.usage)
		} else {
			cmd.Flags().String(s.name, s.def, s.usage)
		}
	}
	cmd.Flags().StringVar(&configFile, "config", "", "JSON config file")
	return cmd
}

// serveArgs refuses any argument: serve takes only flags. A word after a switch is the
// usual one (--api-tls yes), so the refusal says how a switch takes a value.
func serveArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("serve takes no arguments, got %q: a switch (--api-tls, --insecure) takes a value only as --api-tls=true or --api-tls=false", args[0])
	}
	return nil
}

// resolveSettings applies the precedence flag > environment > config file > default.
func resolveSettings(fl *pflag.FlagSet, configFile string) (map[string]string, error) {
	file := map[string]any{}
	if configFile != "" {
		b, err := os.ReadFile(configFile)
		if err != nil {
			return nil, fmt.Errorf("--config: %w", err)
		}
		// Numbers stay as written: {"capacity": 1048576} is the size 1048576, not 1.048576e+06.
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		if err := dec.Decode(&file); err != nil {
			return nil, fmt.Errorf("--config %s: %w", configFile, err)
		}
	}
	vals := map[string]string{}
	for _, s := range serveSettings {
		key := strings.ReplaceAll(s.name, "-", "_")
		v := fl.Lookup(s.name).Value.String()
		if !fl.Changed(s.name) {
			if e, ok := os.LookupEnv("KVOFFLOAD_" + strings.ToUpper(key)); ok {
				v = e
			} else if f, ok := file[key]; ok {
				v = fmt.Sprint(f)
			}
		}
		vals[s.name] = v
	}
	for k := range file {
		if !knownSetting(k) {
			return nil, fmt.Errorf("--config %s: unknown key %q", configFile, k)
		}
	}
	return vals, nil
}

func knownSetting(key string) bool {
	for _, s := range serveSettings {
		if strings.ReplaceAll(s.name, "-", "_") == key {
			return true
		}
	}
	return false
}

func nodeConfig(vals map[string]string) (node.Config, error) {
	cfg := node.DefaultConfig(vals["data"])
	cfg.ID, cfg.Txn.NodeID = vals["id"], vals["id"]
	cfg.RaftAddr, cfg.RaftAdvertise, cfg.APIAddr = vals["raft-addr"], vals["raft-advertise"], vals["api-addr"]
	cfg.PeerAddr = vals["peer-addr"]
	sec, err := securityConfig(vals)
	if err != nil {
		return cfg, err
	}
	cfg.Security = sec
	cfg.Join = splitAddrs(vals["join"])
	if c := vals["capacity"]; c != "0" && c != "" {
		n, err := parseSize(c)
		if err != nil {
			return cfg, fmt.Errorf("--capacity: %w", err)
		}
		cfg.Capacity = n
	}
	switch r := vals["space-reserve"]; r {
	case "auto", "":
	case "0":
		cfg.SpaceReserve = -1 // none (node.Config.SpaceReserve)
	default:
		n, err := parseSize(r)
		if err != nil {
			return cfg, fmt.Errorf("--space-reserve: %w (or auto, or 0 for none)", err)
		}
		cfg.SpaceReserve = n
	}
	for _, w := range []struct {
		name string
		to   *int
	}{{"watch-retain", &cfg.WatchRetain}, {"max-watchers", &cfg.MaxWatchers}} {
		n, err := strconv.Atoi(vals[w.name])
		if err != nil || n < 1 {
			return cfg, fmt.Errorf("--%s %q: want a whole number of at least 1", w.name, vals[w.name])
		}
		*w.to = n
	}
	cfg.Local.Socket = vals["local-socket"]
	mode, err := strconv.ParseUint(vals["local-socket-mode"], 8, 32)
	if err != nil {
		return cfg, fmt.Errorf("--local-socket-mode %q: an octal mode like 0600: %w", vals["local-socket-mode"], err)
	}
	cfg.Local.SocketMode = os.FileMode(mode)
	if cfg.RaftAddr == "" {
		return cfg, errors.New("--raft-addr is required for serve")
	}
	return cfg, flagNames(cfg.Validate())
}

// configFlags maps the node.Config fields that node.Config.Validate names to the serve
// flags that set them; a field is replaced only as a whole word.
var configFlags = []struct{ field, flag string }{ // "Insecure (--insecure)" is flagNames' own case
	{"Local.SocketMode", "--local-socket-mode"}, {"Local.Socket", "--local-socket"},
	{"CertFile", "--tls-cert"}, {"KeyFile", "--tls-key"}, {"CAFile", "--tls-ca"}, {"APITLS", "--api-tls"},
	{"RaftAddr", "--raft-addr"}, {"PeerAddr", "--peer-addr"}, {"APIAddr", "--api-addr"},
	{"DataDir", "--data"}, {"Capacity", "--capacity"}, {"Join", "--join"}, {"ID", "--id"},
	{"WatchRetain", "--watch-retain"}, {"MaxWatchers", "--max-watchers"},
}

var configFieldRE = func() *regexp.Regexp {
	alts := make([]string, len(configFlags))
	for i, m := range configFlags {
		alts[i] = regexp.QuoteMeta(m.field)
	}
	return regexp.MustCompile(`\b(` + strings.Join(alts, "|") + `)\b`)
}()

// flagNames rewrites a node.Config validation error in the serve flags' names: the user
// set flags, not Go fields.
func flagNames(err error) error {
	if err == nil {
		return nil
	}
	msg := strings.ReplaceAll(err.Error(), "Insecure (--insecure)", "--insecure")
	msg = configFieldRE.ReplaceAllStringFunc(msg, func(field string) string {
		for _, m := range configFlags {
			if m.field == field {
				return m.flag
			}
		}
		return field
	})
	return errors.New(msg)
}

// serveEnvPrefix starts the environment variable of each serve setting.
const serveEnvPrefix = "KVOFFLOAD_"

// harnessEnv are KVOFFLOAD_ variables that are no serve setting: the test, chaos and bench
// harnesses read them (names, or prefixes ending in "_").
var harnessEnv = []string{"KVOFFLOAD_BENCH_", "KVOFFLOAD_CHAOS_", "KVOFFLOAD_FAILPOINTS", "KVOFFLOAD_MUTANT",
	"KVOFFLOAD_COVERAGE", "KVOFFLOAD_SEED", "KVOFFLOAD_LOCAL_ACK", "KVOFFLOAD_LOCAL_CLIENT", "KVOFFLOAD_LOCAL_SEED"}

// unknownEnv names each KVOFFLOAD_ variable of environ that sets no serve setting, with
// the closest setting's variable when one is a few edits away (a misspelt name is
// otherwise ignored without a word).
func unknownEnv(environ []string) []string {
	var known []string
	for _, s := range serveSettings {
		known = append(known, serveEnvPrefix+strings.ToUpper(strings.ReplaceAll(s.name, "-", "_")))
	}
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, serveEnvPrefix) || slices.Contains(known, name) || slices.ContainsFunc(harnessEnv, func(h string) bool {
			return name == h || strings.HasSuffix(h, "_") && strings.HasPrefix(name, h)
		}) {
			continue
		}
		msg := fmt.Sprintf("%s is no serve setting and is ignored", name)
		best, bestDist := "", 4 // at most three edits away
		for _, k := range known {
			if d := editDistance(name, k); d < bestDist {
				best, bestDist = k, d
			}
		}
		if best != "" {
			msg += fmt.Sprintf(" (did you mean %s?)", best)
		}
		out = append(out, msg)
	}
	return out
}

// editDistance is the Levenshtein distance of a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// listenHint names the serve flag behind an address that is in use, not only the node's
// listener, so the operator knows which flag to change (TestListenHintNamesTheFlag); other
// errors pass unchanged.
func listenHint(err error) error {
	if !errors.Is(err, syscall.EADDRINUSE) {
		return err
	}
	for _, m := range []struct{ part, flag string }{
		{"--http-addr", "--http-addr"}, {"API listener", "--api-addr"}, {"peer listener", "--peer-addr"}, {"raftmeta: transport", "--raft-addr"},
	} {
		if strings.Contains(err.Error(), m.part) {
			return fmt.Errorf("%s is in use (another storenode or another program listens there): choose another address: %w", m.flag, err)
		}
	}
	return err
}

// parseSwitch reads the bool setting name, which the environment and the config file give
// as text (true, false, 1, 0).
func parseSwitch(name string, vals map[string]string) (bool, error) {
	b, err := strconv.ParseBool(vals[name])
	if err != nil {
		return false, fmt.Errorf("--%s %q: want true or false", name, vals[name])
	}
	return b, nil
}

// securityConfig reads the TLS and token settings.
func securityConfig(vals map[string]string) (node.Security, error) {
	sec := node.Security{CertFile: vals["tls-cert"], KeyFile: vals["tls-key"], CAFile: vals["tls-ca"]}
	var err error
	if sec.APITLS, err = parseSwitch("api-tls", vals); err != nil {
		return sec, err
	}
	if sec.Insecure, err = parseSwitch("insecure", vals); err != nil {
		return sec, err
	}
	if f := vals["api-token-file"]; f != "" {
		if sec.APITokens, err = readTokens(f); err != nil {
			return sec, fmt.Errorf("--api-token-file: %w", err)
		}
	}
	return sec, nil
}

func runServe(ctx context.Context, vals map[string]string) error {
	cfg, err := nodeConfig(vals)
	if err != nil {
		return err
	}
	var level slogLevel
	if err := level.set(vals["log-level"]); err != nil {
		return err
	}
	var logTo io.Writer = os.Stderr
	if path := vals["log-file"]; path != "" {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
		if err != nil {
			return fmt.Errorf("--log-file: %w", err)
		}
		defer f.Close()
		logTo = f
	}
	if cfg.Logger, err = level.logger(vals["log-format"], logTo); err != nil {
		return err
	}
	for _, w := range unknownEnv(os.Environ()) {
		cfg.Logger.Warn(w)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg.Registry = reg

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	var current atomic.Pointer[node.Node]
	if addr := vals["http-addr"]; addr != "" {
		checks := ops.Checks{
			Ready: func() error {
				if n := current.Load(); n != nil {
					return n.Ready()
				}
				return errors.New("starting")
			},
			Healthy: func() error {
				if n := current.Load(); n != nil {
					return n.Healthy()
				}
				return nil // starting: alive, not ready
			},
		}
		bound, err := ops.Serve(ctx, addr, ops.Handler(reg, checks), cfg.Logger)
		if err != nil {
			return listenHint(fmt.Errorf("--http-addr: %w", err))
		}
		cfg.Logger.Info("http listening", "addr", bound.String())
	}
	n, err := node.Open(ctx, cfg)
	if err != nil {
		return listenHint(err)
	}
	current.Store(n)
	fmt.Fprintf(os.Stderr, "storenode %s ready: api %s, peer %s, raft %s\n", cfg.ID, n.APIAddr(), n.PeerAddr(), cfg.RaftAddr)
	if p := n.LocalSocket(); p != "" {
		fmt.Fprintf(os.Stderr, "storenode %s: local socket %s (clients: unix://%s)\n", cfg.ID, p, p)
	}
	notifySystemd(cfg.Logger, daemon.SdNotifyReady) // recovery has ended: the node serves
	<-ctx.Done()
	notifySystemd(cfg.Logger, daemon.SdNotifyStopping)
	fmt.Fprintf(os.Stderr, "storenode %s: shutting down\n", cfg.ID)
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return n.Shutdown(sctx)
}

// notifySystemd sends state to the service manager (a systemd unit of Type=notify); without
// NOTIFY_SOCKET, as outside systemd, it does nothing.
func notifySystemd(log *slog.Logger, state string) {
	if _, err := daemon.SdNotify(false, state); err != nil {
		log.Warn("could not notify the service manager", "state", state, "err", err)
	}
}
