package main

import (
	"os"
	"runtime"
	"strconv"

	"github.com/kvoffload/kvoffload/node"
)

// minProcs is the fewest Go Ps (GOMAXPROCS) storenode runs with, whatever the core count.
//
// The store keeps goroutines in long blocking system calls: the WAL's fsync, bolt's, the
// bucket fdatasyncs and O_DIRECT pwrites of up to 8 MiB, each taking milliseconds. Such a
// goroutine keeps its P until the runtime's sysmon thread takes the P back, after 20 µs to
// 10 ms (golang/go#18236; golang/go#29734 proposed a call that gives the P up at once). With
// GOMAXPROCS=2 on a 2-core machine both Ps are often in such calls, and a goroutine that is
// ready to run (a Raft future's waiter, a health check) waits milliseconds for one while the
// CPUs are idle: a Raft commit spent ~9 ms of its ~16 ms between the FSM applying it and its
// proposer running, and a health check took 75-98 ms under a read storm (docs/benchmarks.md).
// With 4 Ps on the same 2 cores, 64-byte commits went from ~185k to ~233k keys/s. Not more:
// 8 measured no better, and the garbage collector's dedicated mark workers are a quarter of
// the Ps, which with 8 Ps on 2 cores would take both CPUs while it marks.
const minProcs = node.MinProcs

// raiseProcs sets GOMAXPROCS to minProcs when the runtime chose fewer (from the CPUs, or a
// container's CPU limit) and the environment does not set GOMAXPROCS to a value the runtime
// takes (a positive integer): an operator's value stands, and one the runtime ignores (abc,
// 0, -1) is ignored here too. It returns the value in effect. A program that embeds the store
// chooses its own (docs/operations.md).
func raiseProcs() int {
	if n, err := strconv.Atoi(os.Getenv("GOMAXPROCS")); (err != nil || n < 1) && runtime.GOMAXPROCS(0) < minProcs {
		runtime.GOMAXPROCS(minProcs)
	}
	return runtime.GOMAXPROCS(0)
}
