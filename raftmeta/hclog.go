package raftmeta

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"reflect"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kvoffload/kvoffload/third_party/raft"
)

// hcLogger adapts an *slog.Logger to hclog.Logger, which raft requires.
// Levels map one to one (hclog Trace -> slog Debug-4). hclog's "implied args"
// become slog attributes; SetLevel is ignored (the slog handler decides).
type hcLogger struct {
	l    *slog.Logger
	name string
	args []any
}

var _ hclog.Logger = (*hcLogger)(nil)

const levelTrace = slog.LevelDebug - 4

// newHCLogger returns an hclog.Logger writing to l (nil: discard) named name.
func newHCLogger(l *slog.Logger, name string) hclog.Logger {
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	return &hcLogger{l: l.With("component", name), name: name}
}

func slogLevel(level hclog.Level) slog.Level {
	switch level {
	case hclog.Trace:
		return levelTrace
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	}
	return slog.LevelInfo
}

func (h *hcLogger) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Off {
		return
	}
	for i, a := range args {
		if i%2 == 0 && a == "node" { // raft's own "Node at addr [state]": the record names the node already
			args[i] = "raft_node"
		}
		if f, ok := a.(hclog.Format); ok && len(f) > 0 { // hclog.Fmt("%+v", x): format it as hclog would
			if format, ok := f[0].(string); ok {
				args[i] = fmt.Sprintf(format, f[1:]...)
			}
		} else if i%2 == 1 {
			args[i] = hclogValue(a)
		}
	}
	h.l.Log(context.Background(), routineLevel(slogLevel(level), msg, args), msg, args...)
}

// hclogValue is v as a log value: itself when it is a boolean, a number, a string, a
// duration or a time, else its %v text, as hclog writes every value. Raft logs its own types
// (a server's description, a configuration), whose unexported fields a JSON handler would
// write as {}.
func hclogValue(v any) any {
	switch v.(type) {
	case time.Duration, time.Time:
		return v
	case error:
		return fmt.Sprint(v)
	}
	switch reflect.ValueOf(v).Kind() {
	case reflect.Bool, reflect.String, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return v
	}
	return fmt.Sprint(v)
}

// routineLevel lowers what raft reports as a warning or an error but is routine:
//   - an election with no leader known before: every start (a single node elects itself so);
//     losing a known leader stays a warning;
//   - an error caused by this node's own transport closing: a clean shutdown.
func routineLevel(level slog.Level, msg string, args []any) slog.Level {
	if level < slog.LevelWarn {
		return level
	}
	if msg == "heartbeat timeout reached, starting election" && argValue(args, "last-leader-id") == "" {
		return slog.LevelInfo
	}
	for _, a := range args {
		if err, ok := a.(error); ok && (errors.Is(err, raft.ErrTransportShutdown) || errors.Is(err, net.ErrClosed)) {
			return slog.LevelDebug
		}
	}
	return level
}

// argValue is the value of key in hclog's alternating key-value args, as text ("" if absent).
func argValue(args []any, key string) string {
	for i := 0; i+1 < len(args); i += 2 {
		if k, ok := args[i].(string); ok && k == key {
			return fmt.Sprint(args[i+1])
		}
	}
	return ""
}

func (h *hcLogger) Trace(msg string, args ...any) { h.Log(hclog.Trace, msg, args...) }
func (h *hcLogger) Debug(msg string, args ...any) { h.Log(hclog.Debug, msg, args...) }
func (h *hcLogger) Info(msg string, args ...any)  { h.Log(hclog.Info, msg, args...) }
func (h *hcLogger) Warn(msg string, args ...any)  { h.Log(hclog.Warn, msg, args...) }
func (h *hcLogger) Error(msg string, args ...any) { h.Log(hclog.Error, msg, args...) }

func (h *hcLogger) enabled(level slog.Level) bool {
	return h.l.Enabled(context.Background(), level)
}

func (h *hcLogger) IsTrace() bool { return h.enabled(levelTrace) }
func (h *hcLogger) IsDebug() bool { return h.enabled(slog.LevelDebug) }
func (h *hcLogger) IsInfo() bool  { return h.enabled(slog.LevelInfo) }
func (h *hcLogger) IsWarn() bool  { return h.enabled(slog.LevelWarn) }
func (h *hcLogger) IsError() bool { return h.enabled(slog.LevelError) }

func (h *hcLogger) ImpliedArgs() []any { return h.args }

func (h *hcLogger) With(args ...any) hclog.Logger {
	return &hcLogger{l: h.l.With(args...), name: h.name, args: append(append([]any(nil), h.args...), args...)}
}

func (h *hcLogger) Name() string { return h.name }

func (h *hcLogger) Named(name string) hclog.Logger {
	if h.name != "" {
		name = h.name + "." + name
	}
	return h.ResetNamed(name)
}

func (h *hcLogger) ResetNamed(name string) hclog.Logger {
	return &hcLogger{l: h.l.With("component", name), name: name, args: h.args}
}

func (h *hcLogger) SetLevel(hclog.Level) {}

func (h *hcLogger) GetLevel() hclog.Level {
	for _, lv := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn, hclog.Error} {
		if h.enabled(slogLevel(lv)) {
			return lv
		}
	}
	return hclog.Off
}

func (h *hcLogger) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(h.StandardWriter(opts), "", 0)
}

func (h *hcLogger) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	level := hclog.Info
	if opts != nil && opts.ForceLevel != hclog.NoLevel {
		level = opts.ForceLevel
	}
	return stdWriter{h: h, level: level}
}

// stdWriter turns standard-library log lines into records at one level.
type stdWriter struct {
	h     *hcLogger
	level hclog.Level
}

func (w stdWriter) Write(p []byte) (int, error) {
	w.h.Log(w.level, strings.TrimSpace(string(p)))
	return len(p), nil
}
