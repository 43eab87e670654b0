package client

import "github.com/kvoffload/kvoffload"

// sendable reports whether key can travel and name an object (kvoffload.CheckKey): the
// protocol's keys are proto3 strings, which must be UTF-8, and an empty key would read as
// the continuation of the previous object.
func sendable(key string) bool { return kvoffload.CheckKey(key) == "" }

// self is the key of a key (for sendOnly).
func self(k string) string { return k }
