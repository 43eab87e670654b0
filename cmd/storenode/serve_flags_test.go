package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvoffload/kvoffload/node"
)

// serveValues resolves the serve settings of args and a config file holding file (none
// when empty), as `storenode serve` does.
func serveValues(t *testing.T, args []string, file string) map[string]string {
	t.Helper()
	cmd := serveCmd()
	if err := cmd.Flags().Parse(args); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	path := ""
	if file != "" {
		path = filepath.Join(t.TempDir(), "config.json")
		if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	vals, err := resolveSettings(cmd.Flags(), path)
	if err != nil {
		t.Fatalf("resolveSettings(%q, %s): %v", args, file, err)
	}
	return vals
}

// A size in the config file is read from a JSON number as from a string.
func TestServeConfigFileSizes(t *testing.T) {
	for _, file := range []string{`{"capacity": 1048576}`, `{"capacity": "1048576"}`, `{"capacity": "1MiB"}`} {
		cfg, err := nodeConfig(serveValues(t, nil, file))
		if err != nil || cfg.Capacity != 1<<20 {
			t.Errorf("config %s: capacity %d, %v; want %d", file, cfg.Capacity, err, 1<<20)
		}
	}
}

// --api-tls and --insecure are pflag bools: bare is true, --x=false is false, and a word
// after the flag is an argument, not its value; the environment and the config file give
// them as text and JSON bools.
func TestServeSwitchesAreBools(t *testing.T) {
	cmd := serveCmd()
	for _, name := range []string{"api-tls", "insecure"} {
		if typ := cmd.Flags().Lookup(name).Value.Type(); typ != "bool" {
			t.Errorf("--%s is a %s flag, want bool", name, typ)
		}
	}
	if help := cmd.Flags().FlagUsages(); strings.Contains(help, `[="true"]`) {
		t.Errorf("help shows a switch as a string flag:\n%s", help)
	}
	if err := cmd.Flags().Parse([]string{"--api-tls", "yes"}); err != nil || cmd.Flags().Arg(0) != "yes" {
		t.Errorf("--api-tls yes: %v, args %q; want the flag set and yes an argument", err, cmd.Flags().Args())
	}
	if err := cmd.Args(cmd, cmd.Flags().Args()); err == nil || !strings.Contains(err.Error(), "--api-tls=false") {
		t.Errorf("--api-tls yes: %v, want a refusal saying how a switch takes a value", err)
	}
	for _, c := range []struct {
		args []string
		env  string
		file string
		want string
	}{
		{[]string{"--insecure"}, "", "", "true"}, {[]string{"--insecure=false"}, "true", "", "false"},
		{nil, "", "", "false"}, {nil, "true", "", "true"}, {nil, "", `{"insecure": true}`, "true"},
	} {
		if c.env != "" {
			t.Setenv("KVOFFLOAD_INSECURE", c.env)
		} else {
			os.Unsetenv("KVOFFLOAD_INSECURE")
		}
		if got := serveValues(t, c.args, c.file)["insecure"]; got != c.want {
			t.Errorf("args %q, env %q, file %s: insecure %q, want %q", c.args, c.env, c.file, got, c.want)
		}
	}
	vals := serveValues(t, nil, `{"insecure": "maybe"}`)
	if _, err := securityConfig(vals); err == nil || !strings.Contains(err.Error(), `--insecure "maybe"`) {
		t.Errorf("insecure maybe: %v, want an error naming the flag and the value", err)
	}
}

// A configuration error names the serve flags to change, not node.Config's fields.
func TestServeErrorsNameFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--api-tls"}, "--api-tls needs --tls-cert, --tls-key and --tls-ca"},
		{[]string{"--tls-cert", "c.pem"}, "TLS needs --tls-cert, --tls-key and --tls-ca together"},
		{[]string{"--id", ""}, "--id is empty"},
		{[]string{"--data", ""}, "--data is empty"},
		{[]string{"--peer-addr", ""}, "needs --peer-addr"},
		{[]string{"--raft-addr", "10.1.2.3:7000", "--peer-addr", "10.1.2.3:7300"}, "or, on a network you trust, --insecure"},
	} {
		_, err := nodeConfig(serveValues(t, c.args, ""))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error with %q", c.args, err, c.want)
			continue
		}
		for _, field := range []string{"CertFile", "APITLS", "DataDir", "PeerAddr", "RaftAddr", "Insecure"} {
			if strings.Contains(err.Error(), field) {
				t.Errorf("%q: %q names the field %s", c.args, err, field)
			}
		}
	}
}

// A KVOFFLOAD_ variable that sets nothing is warned about, with the setting it is closest
// to; the harnesses' variables are not.
func TestUnknownEnv(t *testing.T) {
	got := unknownEnv([]string{"KVOFFLOAD_RAFT_ADR=x", "KVOFFLOAD_RAFT_ADDR=y", "KVOFFLOAD_BENCH_CHILD=d",
		"KVOFFLOAD_FAILPOINTS=", "KVOFFLOAD_NOTHING_LIKE_IT=1", "PATH=/bin"})
	want := []string{
		"KVOFFLOAD_RAFT_ADR is no serve setting and is ignored (did you mean KVOFFLOAD_RAFT_ADDR?)",
		"KVOFFLOAD_NOTHING_LIKE_IT is no serve setting and is ignored",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("unknownEnv = %q, want %q", got, want)
	}
}

// --space-reserve: auto leaves the computed reserve, 0 turns it off, a size sets it, and a
// bad value is refused naming the flag.
func TestServeSpaceReserve(t *testing.T) {
	for _, c := range []struct {
		args []string
		want int64
	}{{nil, 0}, {[]string{"--space-reserve", "auto"}, 0}, {[]string{"--space-reserve", "0"}, -1}, {[]string{"--space-reserve", "256MiB"}, 256 << 20}} {
		cfg, err := nodeConfig(serveValues(t, c.args, ""))
		if err != nil || cfg.SpaceReserve != c.want {
			t.Errorf("%q: SpaceReserve %d, %v; want %d", c.args, cfg.SpaceReserve, err, c.want)
		}
	}
	if _, err := nodeConfig(serveValues(t, []string{"--space-reserve", "lots"}, "")); err == nil || !strings.Contains(err.Error(), "--space-reserve") {
		t.Errorf("--space-reserve lots: %v, want a refusal naming the flag", err)
	}
}

// --watch-retain and --max-watchers set the watch limits from a flag, the environment or the
// config file; the defaults are the node's; a value that is no whole number of at least 1 is
// refused naming the flag.
func TestServeWatchLimits(t *testing.T) {
	cfg, err := nodeConfig(serveValues(t, nil, ""))
	if err != nil || cfg.WatchRetain != node.DefaultWatchRetain || cfg.MaxWatchers != node.DefaultMaxWatchers {
		t.Errorf("defaults: WatchRetain %d, MaxWatchers %d, %v", cfg.WatchRetain, cfg.MaxWatchers, err)
	}
	cfg, err = nodeConfig(serveValues(t, []string{"--watch-retain", "1000", "--max-watchers", "3"}, ""))
	if err != nil || cfg.WatchRetain != 1000 || cfg.MaxWatchers != 3 {
		t.Errorf("flags: WatchRetain %d, MaxWatchers %d, %v", cfg.WatchRetain, cfg.MaxWatchers, err)
	}
	cfg, err = nodeConfig(serveValues(t, nil, `{"watch_retain": 500, "max_watchers": "7"}`))
	if err != nil || cfg.WatchRetain != 500 || cfg.MaxWatchers != 7 {
		t.Errorf("config file: WatchRetain %d, MaxWatchers %d, %v", cfg.WatchRetain, cfg.MaxWatchers, err)
	}
	t.Setenv("KVOFFLOAD_MAX_WATCHERS", "9")
	cfg, err = nodeConfig(serveValues(t, nil, `{"max_watchers": 7}`))
	if err != nil || cfg.MaxWatchers != 9 {
		t.Errorf("environment over the config file: MaxWatchers %d, %v; want 9", cfg.MaxWatchers, err)
	}
	for _, args := range [][]string{{"--watch-retain", "0"}, {"--watch-retain", "many"}, {"--max-watchers", "-1"}} {
		if _, err := nodeConfig(serveValues(t, args, "")); err == nil || !strings.Contains(err.Error(), args[0]) {
			t.Errorf("%q: %v, want a refusal naming the flag", args, err)
		}
	}
}
