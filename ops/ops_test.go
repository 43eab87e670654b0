package ops_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvoffload/kvoffload/ops"
)

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

func TestHandler(t *testing.T) {
	reg := prometheus.NewRegistry()
	ctr := prometheus.NewCounter(prometheus.CounterOpts{Name: "kvoffload_test_total", Help: "test"})
	reg.MustRegister(ctr)
	ctr.Add(3)
	var notReady error = errors.New("no leader known")
	h := ops.Handler(reg, ops.Checks{Ready: func() error { return notReady }})

	cases := []struct {
		path string
		code int
		body string
	}{
		{"/metrics", 200, "kvoffload_test_total 3"},
		{"/healthz", 200, "ok\n"},
		{"/readyz", 503, "no leader known\n"},
		{"/nope", 404, ""},
	}
	for _, tc := range cases {
		code, body := get(t, h, tc.path)
		if code != tc.code || !strings.Contains(body, tc.body) {
			t.Errorf("%s: %d %q, want %d containing %q", tc.path, code, body, tc.code, tc.body)
		}
	}
	notReady = nil
	if code, body := get(t, h, "/readyz"); code != 200 || body != "ok\n" {
		t.Errorf("/readyz once ready: %d %q", code, body)
	}
}

func TestHandlerNilChecksPass(t *testing.T) {
	h := ops.Handler(prometheus.NewRegistry(), ops.Checks{})
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, body := get(t, h, p); code != 200 || body != "ok\n" {
			t.Errorf("%s: %d %q", p, code, body)
		}
	}
	h = ops.Handler(prometheus.NewRegistry(), ops.Checks{Healthy: func() error { return errors.New("wal: failed") }})
	if code, body := get(t, h, "/healthz"); code != 503 || body != "wal: failed\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
}

// serveOps serves ops endpoints with no checks on a free loopback port until ctx ends and
// returns the address and the URL of /healthz.
func serveOps(t *testing.T, ctx context.Context) (net.Addr, string) {
	t.Helper()
	addr, err := ops.Serve(ctx, "127.0.0.1:0", ops.Handler(prometheus.NewRegistry(), ops.Checks{}), nil)
	if err != nil {
		t.Fatal(err)
	}
	return addr, "http://" + addr.String() + "/healthz"
}

func TestServeAndShutdown(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, url := serveOps(t, ctx)
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "ok\n" {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c := &http.Client{Timeout: time.Second}
		resp, err := c.Get(url)
		if err != nil {
			break // the listener is closed
		}
		_ = resp.Body.Close()
		if time.Now().After(deadline) {
			t.Fatal("still serving 5 s after the context ended")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := ops.Serve(context.Background(), "256.0.0.1:1", http.NotFoundHandler(), nil); !errors.Is(err, ops.ErrListen) {
		t.Fatalf("bad address: %v, want ErrListen", err)
	}
}

// TestServeCapsConnections: a client cannot hold the listener's slots. Connections that asked
// are closed after their answer, so a client that keeps MaxConns of them busy with requests
// does not keep a probe out; connections that send nothing hold at most MaxConns slots, and
// only for ops.HeaderTimeout.
func TestServeCapsConnections(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, url := serveOps(t, ctx)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for range ops.MaxConns + 8 { // each asks, as a keep-alive client would, and stays open
		c, err := net.Dial("tcp", addr.String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(c)
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := r.ReadByte(); err != io.EOF { // the node closed it after the answer
			t.Fatalf("a connection stayed open after its answer: %v", err)
		}
	}
	if resp, err := (&http.Client{Timeout: time.Second}).Get(url); err != nil {
		t.Fatalf("a probe after %d answered connections: %v", ops.MaxConns+8, err)
	} else {
		_ = resp.Body.Close()
	}
	for range ops.MaxConns { // silent connections: each holds a slot until HeaderTimeout
		c, err := net.Dial("tcp", addr.String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	if resp, err := (&http.Client{Timeout: 300 * time.Millisecond}).Get(url); err == nil {
		_ = resp.Body.Close()
		t.Fatalf("a connection over MaxConns %d was served", ops.MaxConns)
	}
	start := time.Now()
	resp, err := (&http.Client{Timeout: ops.HeaderTimeout + 3*time.Second}).Get(url)
	if err != nil {
		t.Fatalf("a probe behind %d silent connections: %v", ops.MaxConns, err)
	}
	_ = resp.Body.Close()
	t.Logf("a probe behind %d silent connections was served after %v", ops.MaxConns, time.Since(start))
}
