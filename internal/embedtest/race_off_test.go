//go:build !race

package embedtest

const raceEnabled = false
