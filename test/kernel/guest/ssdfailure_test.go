package guest

import (
	"fmt"
	"os/exec"
	"path/filepath"
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

// Safety rule 4 on the real kernel: the SSD under a cached volume starts
// failing every I/O while a reader checks data; the plugin's monitor drops
// the cache to linear within 5 seconds and the data read afterwards is the
// origin's. Reads during the window are counted and must not fail.
func TestSafetyRule4_SSDFailure(t *testing.T) {
	e := guestEnv(t)
	p := startPlugin(t, e)
	v := p.provision(t, "ssd-fail", 256<<20, cached("64Mi"), blockCapability())
	p.stage(t, v)
	p.publish(t, v)
	pattern := filepath.Join(e.work, "ssd-fail.pattern")
	sh(t, "head -c 16M /dev/urandom > %s && dd if=%s of=%s bs=1M oflag=direct conv=notrunc status=none", pattern, pattern, v.target)
	want := strings.Fields(sh(t, "sha256sum %s", pattern))[0]
	readRegion := fmt.Sprintf("dd if=%s iflag=direct bs=1M count=16 status=none | sha256sum", v.target)
	for i := 0; i < 12 && promotions(t, v.id) == 0; i++ {
		sh(t, "%s >/dev/null; sleep 1", readRegion)
	}
	if promotions(t, v.id) == 0 {
		t.Fatalf("no block was promoted after 12 passes; cannot test a failing cache: %s", sh(t, "dmsetup status %s", cache.DeviceName(v.id)))
	}
	t.Logf("before failure: %s", sh(t, "dmsetup status --noflush %s", cache.DeviceName(v.id)))

	reader := exec.Command("bash", "-c", fmt.Sprintf(
		`ok=0; bad=0; end=$((SECONDS+10)); while [ $SECONDS -lt $end ]; do s=$(%s) || { bad=$((bad+1)); continue; }; case "$s" in %s*) ok=$((ok+1));; *) bad=$((bad+1));; esac; done; echo "$ok $bad"`,
		readRegion, want))
	out := &lockedBuffer{}
	reader.Stdout, reader.Stderr = out, out
	if err := reader.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	broken := time.Now()
	for _, lv := range []string{v.id + ".cache-meta", v.id + ".cache-data"} {
		name := lvDMName(cacheVG, lv)
		size := sh(t, "blockdev --getsz /dev/mapper/%s", name)
		sh(t, "dmsetup suspend %s && dmsetup load %s --table '0 %s error' && dmsetup resume %s", name, name, size, name)
	}
	dropped := waitLinear(t, v.id, 10*time.Second)
	t.Logf("cache dropped %v after the SSD failed", dropped.Sub(broken).Round(10*time.Millisecond))
	if err := reader.Wait(); err != nil {
		t.Fatalf("reader: %v %s", err, out)
	}
	var ok, bad int
	if _, err := fmt.Sscan(out.String(), &ok, &bad); err != nil {
		t.Fatalf("reader output %q: %v", out, err)
	}
	t.Logf("reads of the 16 MiB region while the SSD failed: %d correct, %d failed or wrong", ok, bad)
	if got := strings.Fields(sh(t, "%s", readRegion))[0]; got != want {
		t.Fatalf("after the drop the volume reads %s, want %s", got, want)
	}
	if d := dropped.Sub(broken); d > 5*time.Second {
		t.Errorf("the failing cache was dropped after %v, want within 5s", d)
	}
	if bad > 0 {
		t.Errorf("the application saw %d failed or wrong reads while the cache failed", bad)
	}
	if !strings.Contains(p.log.String(), "Dropped failing cache") {
		t.Errorf("plugin log does not record the drop:\n%s", p.log)
	}
	p.teardown(t, v)
}

func promotions(t testing.TB, id string) uint64 {
	t.Helper()
	st, err := dm.ParseCacheStatus(sh(t, "dmsetup status --noflush %s", cache.DeviceName(id)))
	if err != nil || st.Failed {
		return 0
	}
	return st.Promotions
}

func waitLinear(t testing.TB, id string, timeout time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if tbl, err := dm.ParseTable(sh(t, "dmsetup table %s", cache.DeviceName(id))); err == nil && tbl.Target.Type() == "linear" {
			return time.Now()
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("cache of %s not dropped within %v: %s", id, timeout, sh(t, "dmsetup status %s", cache.DeviceName(id)))
	return time.Time{}
}
