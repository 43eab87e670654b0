//go:build !(linux && (amd64 || arm64))

package vfs

// aioReadBatch reports that native AIO is not used here (struct iocb's layout is only
// written down for little-endian 64-bit Linux): ReadBatch uses goroutines.
func aioReadBatch(n, depth int, prep ReadPrep, done ReadDone) bool { return false }
