package main

import (
	"fmt"
	"log/slog"
	"os"
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

func (l slogLevel) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.Level(l)}))
}
