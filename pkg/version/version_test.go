package version

import (
	"reflect"
	"runtime"
	"runtime/debug"
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
		{Info{Version: "0.1.0-rc.1", GoVersion: "go1.26.8"}, "ssdcache-node 0.1.0-rc.1 (go1.26.8)"},
	}
	for _, c := range cases {
		if got := c.info.String("ssdcache-node"); got != c.want {
			t.Errorf("String() = %q, want %q", got, c.want)
		}
	}
}

func TestRevisionMarksLocalChanges(t *testing.T) {
	cases := []struct {
		settings []debug.BuildSetting
		want     string
	}{
		{nil, ""},
		{[]debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "false"}}, "abc"},
		{[]debug.BuildSetting{{Key: "vcs.modified", Value: "true"}, {Key: "vcs.revision", Value: "abc"}}, "abc-dirty"},
		{[]debug.BuildSetting{{Key: "vcs.modified", Value: "true"}}, ""}, // no commit: nothing to mark
	}
	for _, c := range cases {
		if got := revision(c.settings); got != c.want {
			t.Errorf("revision(%v) = %q, want %q", c.settings, got, c.want)
		}
	}
}

func TestGetReportsThisBinary(t *testing.T) {
	i := Get()
	if i.Version != Version || i.GoVersion != runtime.Version() {
		t.Errorf("Get() = %+v, want version %q and toolchain %q", i, Version, runtime.Version())
	}
}

func TestBuildInfoSeries(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	info := Info{Version: "0.1.0", GoVersion: "go1.26.8", Revision: "aef9708"}
	if err := RegisterBuildInfo(reg, info); err != nil {
		t.Fatal(err)
	}
	want := `# HELP ssdcache_build_info Always 1; the labels say which ssdcache build is running.
# TYPE ssdcache_build_info gauge
ssdcache_build_info{goversion="go1.26.8",revision="aef9708",version="0.1.0"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ssdcache_build_info"); err != nil {
		t.Error(err)
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
