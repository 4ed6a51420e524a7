package version

import (
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestStringNamesBinaryVersionToolchainAndCommit(t *testing.T) {
	cases := []struct {
		info Info
		want string
	}{
		{Info{Version: "0.1.0", GoVersion: "go1.26.8", Revision: "aef9708"}, "ssdcache-node 0.1.0 (go1.26.8, commit aef9708)"},
		{Info{Version: "0.1.0", GoVersion: "go1.26.8", Revision: "aef9708-modified"}, "ssdcache-node 0.1.0 (go1.26.8, commit aef9708-modified)"},
		{Info{Version: "0.1.0-rc.1", GoVersion: "go1.26.8", Revision: "unknown"}, "ssdcache-node 0.1.0-rc.1 (go1.26.8)"},
		{Info{Version: "0.1.0-rc.1", GoVersion: "go1.26.8"}, "ssdcache-node 0.1.0-rc.1 (go1.26.8)"},
	}
	for _, c := range cases {
		if got := c.info.String("ssdcache-node"); got != c.want {
			t.Errorf("String() = %q, want %q", got, c.want)
		}
	}
}

// A test binary records no VCS commit: prometheus/common says "unknown".
func TestGetReportsThisBinary(t *testing.T) {
	i := Get()
	if i.Version != Version || i.GoVersion != runtime.Version() || i.Revision != unknownRevision {
		t.Errorf("Get() = %+v, want version %q, toolchain %q, revision %q", i, Version, runtime.Version(), unknownRevision)
	}
}

func TestBuildInfoSeries(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	info := Info{Version: "0.1.0", GoVersion: runtime.Version(), Revision: "aef9708"}
	if err := RegisterBuildInfo(reg, info); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil || len(families) != 1 || len(families[0].GetMetric()) != 1 {
		t.Fatalf("Gather() = %v, %v; want one ssdcache_build_info series", families, err)
	}
	m := families[0].GetMetric()[0]
	labels := map[string]string{}
	for _, l := range m.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	want := map[string]string{"version": "0.1.0", "revision": "aef9708", "goversion": runtime.Version(),
		"goos": runtime.GOOS, "goarch": runtime.GOARCH}
	for k, v := range want {
		if labels[k] != v {
			t.Errorf("ssdcache_build_info label %s = %q, want %q (labels %v)", k, labels[k], v, labels)
		}
	}
	if families[0].GetName() != "ssdcache_build_info" || m.GetGauge().GetValue() != 1 {
		t.Errorf("series %s = %v, want ssdcache_build_info = 1", families[0].GetName(), m.GetGauge().GetValue())
	}
	if n := testutil.CollectAndCount(reg, "ssdcache_build_info"); n != 1 {
		t.Errorf("ssdcache_build_info has %d series, want 1", n)
	}
	// A second registration is a wiring mistake and must be reported, not
	// served as two conflicting series.
	if err := RegisterBuildInfo(reg, info); err == nil || !strings.Contains(err.Error(), "ssdcache_build_info") {
		t.Errorf("second registration: err = %v, want an error naming ssdcache_build_info", err)
	}
}

// Symbol must name this package's Version, or every -X of it sets nothing.
func TestSymbolNamesVersion(t *testing.T) {
	if got := reflect.TypeOf(Info{}).PkgPath() + ".Version"; got != Symbol {
		t.Errorf("Symbol = %q, want %q", Symbol, got)
	}
}
