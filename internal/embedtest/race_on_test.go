//go:build race

package embedtest

// raceEnabled: the embedder is built with -race too, so it reuses the dependencies that the
// race-enabled test run has already compiled.
const raceEnabled = true
