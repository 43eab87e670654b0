// Package embedtest holds no code: its test builds a program that embeds kvoffload the way
// another module does, through `go get` of this module's zip from a module proxy and
// without a replace directive, so that what embedders build is what this module's tests
// ran (the patched Raft in third_party/raft included).
package embedtest
