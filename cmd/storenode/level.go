package main

import (
	"fmt"
	"io"
	"log/slog"
)

type slogLevel slog.Level

func (l *slogLevel) set(s string) error {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(s)); err != nil {
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", s)
	}
	*l = slogLevel(lv)
	return nil
}

// logger writes records at l or above to w, as text (key=value) or JSON (one object a line).
func (l slogLevel) logger(format string, w io.Writer) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: slog.Level(l)}
	switch format {
	case "text", "":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}
