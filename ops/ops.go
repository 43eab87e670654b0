package ops

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/net/netutil"
)

// Checks are a node's health probes. A nil func passes.
type Checks struct {
	// Healthy reports whether the process is alive and able to make progress (/healthz).
	Healthy func() error
	// Ready reports whether the node should receive traffic (/readyz).
	Ready func() error
}

// Handler serves /metrics from reg, and /healthz and /readyz from c.
func Handler(reg prometheus.Gatherer, c Checks) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("GET /healthz", check(c.Healthy))
	mux.Handle("GET /readyz", check(c.Ready))
	return mux
}

// check answers 200 "ok" when f passes and 503 with the error text when it fails.
func check(f func() error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if f != nil {
			if err := f(); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintln(w, err.Error())
				return
			}
		}
		fmt.Fprintln(w, "ok")
	})
}

// shutdownTimeout bounds the graceful shutdown once Serve's context ends.
const shutdownTimeout = 5 * time.Second

// Limits of the ops listener. A scrape or a probe is one small request on its own
// connection: the node answers it and closes the connection (no keep-alive), a request's
// headers must arrive within HeaderTimeout and its whole request within ReadTimeout, the
// answer must go within WriteTimeout, and at most MaxConns connections are open at once (more
// wait in the kernel's accept queue). Without a cap, idle keep-alive connections could take
// every file descriptor of the node; with keep-alive, 256 connections each asking every few
// seconds would hold every slot for good, and a readiness probe would never get one. So a
// slot is held for at most one request, and a slow sender for at most HeaderTimeout
// (TestServeCapsConnections).
const (
	HeaderTimeout = 2 * time.Second
	ReadTimeout   = 10 * time.Second
	WriteTimeout  = 30 * time.Second
	MaxConns      = 256
)

// Serve listens on addr (":0" picks a port) and serves h until ctx ends, then shuts down
// gracefully, giving requests in flight up to 5 s. It returns the bound address once the
// listener is open; serving runs in the background. lg (nil discards) receives the serve
// error, if any, at Error level and the start and stop at Info level.
func Serve(ctx context.Context, addr string, h http.Handler, lg *slog.Logger) (net.Addr, error) {
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	lg = lg.With("pkg", "ops")
	var lc net.ListenConfig
	lis, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrListen, addr, err)
	}
	lis = netutil.LimitListener(lis, MaxConns)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: HeaderTimeout, ReadTimeout: ReadTimeout, WriteTimeout: WriteTimeout}
	srv.SetKeepAlivesEnabled(false)
	go func() {
		lg.Info("ops endpoints serving", "addr", lis.Addr().String())
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			lg.Error("ops endpoints stopped", "err", err)
		}
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			lg.Warn("ops endpoints shutdown", "err", err)
			_ = srv.Close()
		}
		lg.Info("ops endpoints stopped", "addr", lis.Addr().String())
	}()
	return lis.Addr(), nil
}
