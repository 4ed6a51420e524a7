package guest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"k8s.io/utils/exec"

	"github.com/ssdcache/ssdcache/pkg/blockdev"
	"github.com/ssdcache/ssdcache/pkg/cache"
	"github.com/ssdcache/ssdcache/pkg/command"
	"github.com/ssdcache/ssdcache/pkg/dm"
	"github.com/ssdcache/ssdcache/pkg/fileblocks"
	"github.com/ssdcache/ssdcache/pkg/hotset"
	"github.com/ssdcache/ssdcache/pkg/lvm"
	"github.com/ssdcache/ssdcache/pkg/readtrack"
)

// realEngine is the cache library the node agent uses, on the VM's real
// device-mapper and LVM, for the online operations the agent would run.
func realEngine(faults cache.FaultPoints, opts ...cache.Option) *cache.Engine {
	run := command.NewRunner(exec.New())
	pools := cache.Pools{OriginVG: originVG, CacheVGs: map[string]string{"nvme": cacheVG}, DefaultClass: "nvme"}
	state := stateDir()
	// LVM reads the pool devices only, as the plugin's does (--devices).
	lvmCmd := lvm.NewCommand(run, "", os.Getenv("SSDCACHE_HDD"), os.Getenv("SSDCACHE_SSD"))
	return cache.NewEngine(cache.Layers{DM: dm.NewDmsetup(run).ReadingFrom(dm.NewControlDevice()), LVM: lvmCmd, Dev: blockdev.NewHost(run),
		Metadata: dm.NewCacheTools(run, state), HotSets: hotset.InStateDir(state), Files: fileblocks.NewHost(),
		Reads: readtrack.NewKernel()}, pools, faults, opts...)
}

// stateDir is the plugin's --state-dir in the kernel suite, shared by the
// engine the tests drive directly, as the agent shares the plugin's.
func stateDir() string {
	return filepath.Join(os.Getenv("SSDCACHE_WORK"), "state")
}

// table returns the live table of a volume's dm device.
func table(t testing.TB, id string) dm.Table {
	t.Helper()
	tbl, err := dm.ParseTable(sh(t, "dmsetup table %s", cache.DeviceName(id)))
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

func expectCacheMode(t testing.TB, id string, mode dm.CacheMode) {
	t.Helper()
	c, ok := table(t, id).Target.(dm.CacheTarget)
	if !ok || c.Mode != mode {
		t.Fatalf("volume %s: table %q, want a %s cache", id, table(t, id), mode)
	}
}

func expectLinear(t testing.TB, id string) {
	t.Helper()
	if _, ok := table(t, id).Target.(dm.LinearTarget); !ok {
		t.Fatalf("volume %s: table %q, want linear", id, table(t, id))
	}
}

// expectPaused checks that a paused volume serves on a linear table with
// its two cache LVs kept.
func expectPaused(t testing.TB, id string) {
	t.Helper()
	expectLinear(t, id)
	if lvs := cacheLVs(t, id); len(lvs) != 2 {
		t.Fatalf("paused volume %s: cache LVs %v, want both kept", id, lvs)
	}
}

// expectClean checks that nothing is left suspended or half-loaded and that
// the volume has exactly wantCacheLVs cache LVs.
func expectClean(t testing.TB, id string, wantCacheLVs int) {
	t.Helper()
	attr := sh(t, "dmsetup info -c --noheadings -o attr %s", cache.DeviceName(id))
	if strings.ContainsAny(attr, "sI") {
		t.Fatalf("volume %s: device attributes %q: suspended or with an inactive table", id, attr)
	}
	if got := cacheLVs(t, id); len(got) != wantCacheLVs {
		t.Fatalf("volume %s: cache LVs %v, want %d", id, got, wantCacheLVs)
	}
}

// cacheLVs are the names of volume id's LVs in the cache VG, found by the
// volume tag the plugin gives each (a promotion may have moved the metadata
// to <id>.cache-meta2). LVM reads the cache pool's device only, as the
// plugin's does: a scan of every device would wait on a volume whose cache
// hangs.
func cacheLVs(t testing.TB, id string) []string {
	t.Helper()
	out := sh(t, "lvs --devices %s --noheadings -o lv_name,lv_tags %s", guestEnv(t).ssd, cacheVG)
	var names []string
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, lvm.VolumeTagPrefix+id+",") || strings.HasSuffix(strings.TrimSpace(line), lvm.VolumeTagPrefix+id) {
			names = append(names, strings.Fields(line)[0])
		}
	}
	return names
}

// killAt kills this process at one fault point, as kill -9 would.
type killAt string

func (k killAt) Reached(_ context.Context, point string) {
	if point == string(k) {
		fmt.Fprintf(os.Stderr, "fault point %s reached: killing\n", point)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
}

func formatBytes(n uint64) string { return strconv.FormatUint(n, 10) }

func decodeSpec(t testing.TB, s string) *cache.Spec {
	t.Helper()
	if s == "none" {
		return nil
	}
	mode, size, ok := strings.Cut(s, ":")
	n, err := strconv.ParseUint(size, 10, 64)
	if !ok || err != nil {
		t.Fatalf("bad spec %q", s)
	}
	return &cache.Spec{SizeBytes: n, Mode: cache.Mode(mode)}
}
