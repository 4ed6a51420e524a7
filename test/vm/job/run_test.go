package job

import (
	"strings"
	"testing"

	"github.com/ssdcache/ssdcache/test/vm"
)

func TestJobScriptPassesSharedFlagsThenOwn(t *testing.T) {
	j := Job{Name: "bench", CacheMiB: 64, GuestArgs: []string{"-working-sets", "25%", "-runs", "2"}}
	want := "exec " + vm.GuestWorkDir + "/bin/bench-guest -hdd " + vm.HDDByID + " -ssd " + vm.SSDByID +
		" -output-dir " + vm.GuestWorkDir + "/out -cache-mib 64 -working-sets 25% -runs 2 2>&1"
	if got := j.script(nil); got != want {
		t.Fatalf("script:\n got %q\nwant %q", got, want)
	}
	if got, want := j.script([]string{"-tree", "", "-name", "it's"}), strings.Replace(want, " 2>&1", ` -tree '' -name 'it'\''s' 2>&1`, 1); got != want {
		t.Fatalf("script with an empty and a quoted argument:\n got %q\nwant %q", got, want)
	}
	bins := j.binaries("/share")
	if last := bins[len(bins)-1]; last.Out != "/share/bin/bench-guest" {
		t.Fatalf("guest binary built to %q, want /share/bin/bench-guest (the script runs that name)", last.Out)
	}
}
