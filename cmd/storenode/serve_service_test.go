package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvoffload/kvoffload/internal/freeport"
)

// serve tells systemd (NOTIFY_SOCKET) READY=1 once the node is ready, and STOPPING=1 when
// it shuts down; with --log-format json --log-file, every log line is a JSON object in
// that file.
func TestServeNotifiesSystemdAndLogsJSON(t *testing.T) {
	dir, err := os.MkdirTemp("", "kvn") // a short path: sun_path holds 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	sockPath := filepath.Join(dir, "notify.sock")
	sock, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sockPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	t.Setenv("NOTIFY_SOCKET", sockPath)

	addrs := make([]string, 4)
	for i := range addrs {
		if addrs[i], err = freeport.Addr(); err != nil {
			t.Fatal(err)
		}
	}
	logFile := filepath.Join(dir, "storenode.log")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := serveCmd()
	cmd.SetArgs([]string{"--id", "n1", "--data", t.TempDir(), "--raft-addr", addrs[0], "--api-addr", addrs[1],
		"--peer-addr", addrs[2], "--http-addr", addrs[3], "--log-format", "json", "--log-file", logFile})
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()

	next := func() string {
		t.Helper()
		buf := make([]byte, 4096)
		_ = sock.SetReadDeadline(time.Now().Add(30 * time.Second))
		k, err := sock.Read(buf)
		if err != nil {
			t.Fatalf("no notification: %v", err)
		}
		return string(buf[:k])
	}
	if got := next(); got != "READY=1" {
		t.Fatalf("first notification %q, want READY=1", got)
	}
	resp, err := http.Get("http://" + addrs[3] + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/readyz after READY=1: %s, want 200", resp.Status)
	}
	cancel()
	if got := next(); got != "STOPPING=1" {
		t.Errorf("notification on shutdown %q, want STOPPING=1", got)
	}
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("serve: %v", err)
	}

	f, err := os.Open(logFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lines, ready := 0, false
	for sc := bufio.NewScanner(f); sc.Scan(); lines++ {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("log line %d is no JSON object: %v: %s", lines+1, err, sc.Text())
		}
		ready = ready || rec["msg"] == "node ready"
	}
	if !ready {
		t.Errorf("%d log lines in %s, none \"node ready\"", lines, logFile)
	}
}

// --log-format takes text or json, and names itself when refused.
func TestLogFormat(t *testing.T) {
	var l slogLevel
	for _, f := range []string{"text", "json"} {
		if _, err := l.logger(f, os.Stderr); err != nil {
			t.Errorf("--log-format %s: %v", f, err)
		}
	}
	if _, err := l.logger("yaml", os.Stderr); err == nil || err.Error() != `--log-format "yaml": want text or json` {
		t.Errorf("--log-format yaml: %v, want a refusal naming the flag and the value", err)
	}
}
