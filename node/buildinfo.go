package node

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Build describes the binary that runs: what `storenode version` prints and the metric
// kvoffload_build_info carries.
type Build struct {
	// Version is the main module's version: a tag, a pseudo-version made from the VCS
	// revision, or "(devel)"; unknownBuild when the binary carries no build information.
	Version string `json:"version"`
	// Revision and Time are the VCS commit the binary was built from and its time (RFC 3339);
	// unknownBuild and "" when the build recorded no VCS state (go test, -buildvcs=false).
	Revision string `json:"revision"`
	Time     string `json:"time,omitempty"`
	// Modified reports that the work tree had changes not in Revision.
	Modified bool `json:"modified"`
	// GoVersion is the Go toolchain that built the binary.
	GoVersion string `json:"go_version"`
}

// unknownBuild stands for a fact the build did not record.
const unknownBuild = "unknown"

// ReadBuild returns the running binary's build facts (runtime/debug.ReadBuildInfo).
func ReadBuild() Build {
	b := Build{Version: unknownBuild, Revision: unknownBuild, GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	if bi.Main.Version != "" {
		b.Version = bi.Main.Version
	}
	if bi.GoVersion != "" {
		b.GoVersion = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.time":
			b.Time = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

// String describes b in one line: "v1.2.3, revision abc123 2026-01-02T03:04:05Z (modified),
// go1.26.0" (Status's build, and `storenode version` after "storenode ").
func (b Build) String() string {
	rev := b.Revision
	if b.Time != "" {
		rev += " " + b.Time
	}
	if b.Modified {
		rev += " (modified)"
	}
	return fmt.Sprintf("%s, revision %s, %s", b.Version, rev, b.GoVersion)
}

// revisionLabel is the revision as the metric labels it: a modified work tree's revision
// ends in "-modified", so two binaries of one commit that differ are told apart.
func (b Build) revisionLabel() string {
	if b.Modified {
		return b.Revision + "-modified"
	}
	return b.Revision
}

// buildInfoGauge is kvoffload_build_info: always 1, labelled with the build's facts (the
// pattern of Prometheus' own *_build_info), so a query can join any series with the version
// of the binary that produced it.
func buildInfoGauge(b Build) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "kvoffload_build_info",
		Help: "1, labelled with the version, VCS revision and Go version of the binary this node runs in.",
		ConstLabels: prometheus.Labels{
			"version": b.Version, "revision": b.revisionLabel(), "go_version": b.GoVersion,
		},
	})
	g.Set(1)
	return g
}
