//go:build tools

// Package tools pins dependencies until the packages that use them land.
package tools
import (
 _ "github.com/tidwall/wal"
 _ "github.com/hashicorp/raft"
 _ "github.com/hashicorp/raft-boltdb/v2"
 _ "github.com/cespare/xxhash/v2"
 _ "github.com/hashicorp/go-hclog"
 _ "github.com/spf13/cobra"
 _ "golang.org/x/sys/unix"
 _ "pgregory.net/rapid"
)
