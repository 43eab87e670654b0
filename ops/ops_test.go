package ops_test

import (
	"context"
	"errors"
	"io"
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

func TestServeAndShutdown(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, err := ops.Serve(ctx, "127.0.0.1:0", ops.Handler(prometheus.NewRegistry(), ops.Checks{}), nil)
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + addr.String() + "/healthz"
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
