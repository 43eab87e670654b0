package node

import (
	"runtime"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

// TestBuildInfoMetric: the node's registry holds kvoffload_build_info, 1, labelled with the
// facts ReadBuild gives (a modified tree's revision marked), and every metric the node
// registers passes promlint.
func TestBuildInfoMetric(t *testing.T) {
	_, reg, _, _ := apiNode(t, nil)
	b := ReadBuild()
	if b.GoVersion != runtime.Version() || b.Version == "" || b.Revision == "" {
		t.Errorf("ReadBuild() = %+v: every field but Time has a value, Go's is %s", b, runtime.Version())
	}
	got := series(t, reg, "kvoffload_build_info")
	want := "go_version=" + b.GoVersion + ",revision=" + b.revisionLabel() + ",version=" + b.Version
	m, ok := got[want]
	if !ok || len(got) != 1 {
		t.Fatalf("kvoffload_build_info series %v, want exactly {%s}", keys(got), want)
	}
	if v := m.GetGauge().GetValue(); v != 1 {
		t.Errorf("kvoffload_build_info = %v, want 1", v)
	}
	if (Build{Revision: "abc", Modified: true}).revisionLabel() != "abc-modified" {
		t.Error("a modified tree's revision label does not say so")
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(fams).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
