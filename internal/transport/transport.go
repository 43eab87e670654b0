// Package transport is the HTTP/2 tuning that the node's gRPC servers and every gRPC client
// of the module (the Go client, a node's calls to its peers) share: the lean stream path of
// issue 10. grpc-go's defaults suit small RPCs; a batch of KV-cache blocks is megabytes.
//
//   - Flow-control windows: grpc-go starts every stream and connection at 64 KiB and grows
//     them by BDP estimation (google.golang.org/grpc internal/transport bdp_estimator.go, up to
//     16 MiB), so a 4 MiB batch on a fresh connection waits for several window updates, each a
//     round trip that a loaded host schedules late. Fixed windows of StreamWindow and
//     ConnWindow let a whole batch be in flight at once. Setting them turns the estimator off.
//   - Read and write buffers of IOBuffer bytes instead of 32 KiB: a 256 KiB value takes one
//     or two read and write syscalls instead of eight or more (the frames stay 16 KiB).
//   - A buffer pool that does not zero (Pool): grpc-go's default pool clears the whole
//     capacity of every buffer it hands out (internal/mem buffer_pool.go), 1 MiB for each
//     message between 32 KiB and 1 MiB; every byte of a buffer it hands out is written
//     before it is read (a frame read into it, or a message marshalled into it). The
//     messages are marshalled into it and gathered from their frames in it too (codec).
//
// Memory: a peer may make one stream buffer at most StreamWindow bytes the server has not
// read. grpc-go returns connection-level window as data arrives (it decouples the
// connection's flow control from the application's reads), so ConnWindow bounds bytes on the
// wire, not bytes held: a connection can hold up to MaxStreams x StreamWindow (1 GiB), the
// same kind of bound gRPC's defaults gave (64 KiB windows grown to 16 MiB per stream) but
// now with a stream limit, where grpc-go sets none. A node's handlers hold what they read
// within its buffer budget (node.Config MaxBufferedBytes).
package transport

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"
)

const (
	// StreamWindow is each stream's initial HTTP/2 flow-control window, in bytes: a batch of
	// 16 values of 256 KiB with its framing.
	StreamWindow = 8 << 20
	// ConnWindow is each connection's initial flow-control window, in bytes.
	ConnWindow = 16 << 20
	// IOBuffer is the size of each connection's read and write buffers, in bytes.
	IOBuffer = 256 << 10
	// MaxStreams is the most concurrent streams (calls) a server accepts on one connection;
	// a client's further calls wait for one to end (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS).
	MaxStreams = 128
)

// ServerOptions are the tuning options of a node's gRPC server.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.InitialWindowSize(StreamWindow), grpc.InitialConnWindowSize(ConnWindow),
		grpc.ReadBufferSize(IOBuffer), grpc.WriteBufferSize(IOBuffer), grpc.MaxConcurrentStreams(MaxStreams),
		experimental.BufferPool(pool), grpc.ForceServerCodecV2(codec{}),
	}
}

// DialOptions are the tuning options of a gRPC client connection.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithInitialWindowSize(StreamWindow), grpc.WithInitialConnWindowSize(ConnWindow),
		grpc.WithReadBufferSize(IOBuffer), grpc.WithWriteBufferSize(IOBuffer),
		experimental.WithBufferPool(pool), grpc.WithDefaultCallOptions(grpc.ForceCodecV2(codec{})),
	}
}
