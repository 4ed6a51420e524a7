package guest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ssdcache/ssdcache/pkg/cache"
	"github.com/ssdcache/ssdcache/pkg/dm"
)

// lvDMName is the device-mapper name LVM gives vg/lv ('-' doubled).
func lvDMName(vg, lv string) string {
	return strings.ReplaceAll(vg, "-", "--") + "-" + strings.ReplaceAll(lv, "-", "--")
}

// Safety rule 4 on the real kernel: both devices of a cached volume's cache
// start failing every I/O while a reader re-reads a checksummed region; the
// plugin's monitor drops the cache to linear, and from then on every read
// succeeds and returns the origin's data. How long the drop took is logged,
// not asserted (timings under emulation belong in benchmarks); the target is
// 5 seconds. Reads that hit the failing SSD before the drop fail with EIO
// (dm-cache does not retry them on the origin); the test reports how many.
func TestSafetyRule4_SSDFailure(t *testing.T) {
	e := guestEnv(t)
	p := startPlugin(t, e)
	w := cachedAndWarm(t, p, "ssd-fail")
	v, want, readRegion := w.volume, w.sum, w.readRegion
	t.Logf("before failure: %s", sh(t, "dmsetup status --noflush %s", cache.DeviceName(v.id)))

	// One line per read: "<unix ns when it started> ok|bad".
	reader := childCommand(t, "bash", "-c", fmt.Sprintf(
		`end=$((SECONDS+10)); while [ $SECONDS -lt $end ]; do t0=$(date +%%s%%N); s=$( { set -o pipefail; %s; } 2>/dev/null ) && case "$s" in %s*) r=ok;; *) r=bad;; esac || r=bad; echo "$t0 $r"; done`,
		readRegion, want))
	out := &lockedBuffer{}
	reader.Stdout, reader.Stderr = out, out
	if err := reader.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	broken := breakCache(t, v.id) // reads that hit the cache fail from here on
	dropped := waitLinear(t, p, v.id)
	if err := waitChild(reader); err != nil {
		t.Fatalf("reader: %v %s", err, out)
	}
	window, after := countBadReads(t, out.String(), dropped)
	t.Logf("cache dropped %v after the SSD failed; %d reads of the 16 MiB region failed before the drop, %d after",
		dropped.Sub(broken).Round(10*time.Millisecond), window, after)
	if after > 0 {
		t.Errorf("%d reads failed or returned wrong data after the cache was dropped", after)
	}
	if got := strings.Fields(sh(t, "%s", readRegion))[0]; got != want {
		t.Fatalf("after the drop the volume reads %s, want %s", got, want)
	}
	if !strings.Contains(p.log.String(), "Dropped failing cache") {
		t.Errorf("plugin log does not record the drop")
	}
	p.teardown(t, v)
}

// countBadReads splits the reader's failures into reads started before the
// drop completed and reads started after it.
func countBadReads(t *testing.T, out string, dropped time.Time) (before, after int) {
	t.Helper()
	reads := 0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var ns int64
		var result string
		if _, err := fmt.Sscan(line, &ns, &result); err != nil {
			t.Fatalf("reader line %q: %v", line, err)
		}
		reads++
		if result == "ok" {
			continue
		}
		if time.Unix(0, ns).After(dropped) {
			after++
		} else {
			before++
		}
	}
	if reads == 0 {
		t.Fatal("the reader made no read")
	}
	return before, after
}

// cachedBlocks counts the blocks a cache holds, promoted by dm-cache or by
// the plugin's promoter.
func cachedBlocks(t testing.TB, id string) uint64 { return liveStatus(t, id).CacheUsed }

// cachedBytes is what a cache holds, in bytes (its block size is the plugin's choice).
func cachedBytes(t testing.TB, id string) uint64 {
	st := liveStatus(t, id)
	return st.CacheUsed * st.BlockSectors * dm.SectorSize
}

// liveStatus is the status of a working cache; zero when the cache failed
// or the device is no cache.
func liveStatus(t testing.TB, id string) dm.CacheStatus {
	t.Helper()
	st, err := dm.ParseCacheStatus(sh(t, "dmsetup status --noflush %s", cache.DeviceName(id)))
	if err != nil || st.Failed {
		return dm.CacheStatus{}
	}
	return st
}

// waitLinear waits for the plugin's monitor to drop the cache of volume id,
// that is for its table to turn linear, and returns when it saw that: it
// polls every 50 ms, as the time is the drop's measure.
func waitLinear(t testing.TB, p *plugin, id string) time.Time {
	t.Helper()
	var seen time.Time
	err := poll("the cache of "+id+" to be dropped (a linear table)", 50*time.Millisecond, func() (bool, string, error) {
		out, err := trySh("dmsetup table %s", cache.DeviceName(id))
		seen = time.Now()
		if err != nil {
			return false, fmt.Sprintf("dmsetup table: %v: %s", err, out), nil
		}
		tbl, err := dm.ParseTable(out)
		if err != nil {
			return false, fmt.Sprintf("table %q: %v", out, err), nil
		}
		return tbl.Target.Type() == "linear", "table " + out, nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, p.diagnose())
	}
	return seen
}
