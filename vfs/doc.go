// Package vfs is the filesystem seam of the bucket store: the FS and File interfaces through
// which bucketstore does all its I/O, and OSFS, the real (Linux) implementation (O_DIRECT,
// fdatasync, fallocate, flock). The test filesystems live below it: vfs/memfs, in memory and
// crashable (Crash keeps durable state plus a seeded choice of pending operations), and
// vfs/errorfs, which wraps another FS and injects errors chosen by an Injector. The layout
// follows pebble's vfs and vfs/errorfs (github.com/cockroachdb/pebble).
//
// vfs and its subpackages import no other package of this module (docs/architecture.md), and
// no product code imports vfs/memfs or vfs/errorfs: only tests and the chaos suite do.
package vfs
