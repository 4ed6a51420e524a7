package guest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/ssdcache/ssdcache/pkg/cache"
)

// hungReportBound is how long the plugin may take to report a volume whose
// cache device stopped answering (the monitor's ProbeTimeout of 5 s plus its
// ticks) and to drop a second volume's failing cache meanwhile. It is a
// bound on function, not a timing: far above what either takes on an idle
// machine, it fails only when one volume's hang holds up another's checks.
const hungReportBound = time.Minute

// A cache device whose I/O never completes (a stuck NVMe controller reset,
// NVMe-oF with an unlimited ctrl_loss_tmo) on one volume: its cache LVs are
// suspended below it, so every read of a cached block waits. Meanwhile:
//   - a second volume keeps reading (what it reads in 5 s before and
//     during the hang is logged, with their ratio);
//   - the plugin reports the hung volume within hungReportBound and keeps
//     answering Probe;
//   - the second volume's own cache fails, and the plugin drops it within
//     hungReportBound, though the hung volume's drop waits on its device;
//   - once the device answers again, the hung volume is dropped too, and
//     both read what was written.
//
// One round, on new volumes, in make test-kernel (about 5 minutes under
// emulation on a loaded machine); SSDCACHE_HUNG_ROUNDS repeats it, as the
// three rounds in a row of
//
//	SSDCACHE_HUNG_ROUNDS=3 SSDCACHE_VM=1 SSDCACHE_GUEST_RUN='^TestHungSSDHoldsUpNoOtherVolume$' go test -run '^TestKernel$' ./test/kernel/
func TestHungSSDHoldsUpNoOtherVolume(t *testing.T) {
	e := guestEnv(t)
	rounds := 1
	if s := os.Getenv("SSDCACHE_HUNG_ROUNDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("SSDCACHE_HUNG_ROUNDS=%q: want a whole number of rounds, at least 1", s)
		}
		rounds = n
	}
	p := startPlugin(t, e)
	for round := 1; round <= rounds; round++ {
		t.Run(fmt.Sprintf("round-%d", round), func(t *testing.T) { hungSSDRound(t, p, round) })
	}
}

func hungSSDRound(t *testing.T, p *plugin, round int) {
	hung, other := cachedAndWarm(t, p, fmt.Sprintf("hung-%d", round)), cachedAndWarm(t, p, fmt.Sprintf("other-%d", round))
	before := readBytesIn(t, other, 5*time.Second)

	hungLVs := cacheLVDevices(t, hung.id)
	for _, name := range hungLVs {
		sh(t, "dmsetup suspend %s", name) // from now on its I/O waits
	}
	hungAt := time.Now()
	var resumed time.Time
	resume := func() {
		if resumed.IsZero() {
			for _, name := range hungLVs {
				sh(t, "dmsetup resume %s", name)
			}
			resumed = time.Now()
		}
	}
	defer resume() // a failed round must not leave the next with a hung device

	// A reader of the hung volume: it waits until the device answers.
	reader := childCommand(t, "bash", "-c", hung.readRegion)
	out := &lockedBuffer{}
	reader.Stdout, reader.Stderr = out, out
	if err := reader.Start(); err != nil {
		t.Fatal(err)
	}
	during := readBytesIn(t, other, 5*time.Second)
	t.Logf("round %d: the other volume read %d MiB in 5 s before the hang and %d MiB during it (%.2f)",
		round, before>>20, during>>20, float64(during)/float64(max(before, 1)))
	if during == 0 {
		t.Errorf("the other volume read nothing while %s hung", hung.id)
	}

	reported := waitLogged(t, p, hung.id, "The cache device does not answer")
	t.Logf("round %d: the hung volume was reported %v after its device stopped answering", round, reported.Sub(hungAt).Round(100*time.Millisecond))
	if reported.Sub(hungAt) > hungReportBound {
		t.Errorf("the hung volume was reported after %v, want within %v", reported.Sub(hungAt), hungReportBound)
	}
	probe(t, p)

	broken := breakCache(t, other.id)
	dropped := waitLinear(t, p, other.id)
	t.Logf("round %d: the other volume's failing cache was dropped %v after it failed, with the hung volume's drop waiting",
		round, dropped.Sub(broken).Round(100*time.Millisecond))
	if dropped.Sub(broken) > hungReportBound {
		t.Errorf("the other volume's failing cache was dropped after %v, want within %v", dropped.Sub(broken), hungReportBound)
	}
	if _, err := trySh("dmsetup table %s | grep -q ' cache '", "ssdcache-"+hung.id); err == nil {
		t.Logf("round %d: the hung volume still has its cache table (its drop waits on the device)", round)
	}

	resume()
	hungDropped := waitLinear(t, p, hung.id)
	t.Logf("round %d: the hung volume was dropped %v after its device answered again", round, hungDropped.Sub(resumed).Round(100*time.Millisecond))
	if err := waitChild(reader); err != nil {
		t.Fatalf("the hung volume's reader: %v %s", err, out)
	}
	for _, v := range []*warmVolume{hung, other} {
		if got := strings.Fields(sh(t, "%s", v.readRegion))[0]; got != v.sum {
			t.Errorf("%s reads %s after the drop, want %s", v.id, got, v.sum)
		}
	}
	p.teardown(t, hung.volume)
	p.teardown(t, other.volume)
}

// warmVolume is a published block volume with a 64Mi cache and 16 MiB of
// known data at its start, read until its cache holds some of it.
type warmVolume struct {
	*volume
	readRegion, sum string
}

func cachedAndWarm(t *testing.T, p *plugin, name string) *warmVolume {
	t.Helper()
	v := p.provision(t, name, 256<<20, cached("64Mi"), blockCapability())
	p.stage(t, v)
	p.publish(t, v)
	pattern := filepath.Join(p.env.work, name+".pattern")
	sh(t, "head -c 16M /dev/urandom > %s && dd if=%s of=%s bs=1M oflag=direct conv=notrunc status=none", pattern, pattern, v.target)
	w := &warmVolume{volume: v, sum: strings.Fields(sh(t, "sha256sum %s", pattern))[0],
		readRegion: fmt.Sprintf("dd if=%s iflag=direct bs=1M count=16 status=none | sha256sum", v.target)}
	for i := 0; i < 12 && cachedBlocks(t, v.id) == 0; i++ {
		sh(t, "%s >/dev/null; sleep 1", w.readRegion)
	}
	if cachedBlocks(t, v.id) == 0 {
		t.Fatalf("no block of %s was cached after 12 passes; cannot test a failing cache: %s", v.id, sh(t, "dmsetup status %s", cache.DeviceName(v.id)))
	}
	return w
}

// readBytesIn is what fio reads of v's region in d, sequentially with
// O_DIRECT, wrapping around.
func readBytesIn(t *testing.T, v *warmVolume, d time.Duration) uint64 {
	t.Helper()
	out := sh(t, "fio --name=other --filename=%s --rw=read --bs=1M --direct=1 --size=16M --time_based --runtime=%ds --output-format=json",
		v.target, int(d.Seconds()))
	var r struct {
		Jobs []struct {
			Read struct {
				Bytes uint64 `json:"io_bytes"`
			} `json:"read"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &r); err != nil || len(r.Jobs) != 1 {
		t.Fatalf("fio's report %q: %v", out, err)
	}
	return r.Jobs[0].Read.Bytes
}

// cacheLVDevices are the device-mapper names of volume id's cache LVs,
// which must be a data and a metadata LV.
func cacheLVDevices(t *testing.T, id string) []string {
	t.Helper()
	lvs := cacheLVs(t, id)
	if len(lvs) != 2 {
		t.Fatalf("cache LVs of %s: %v, want a data and a metadata LV", id, lvs)
	}
	names := make([]string, len(lvs))
	for i, lv := range lvs {
		names[i] = lvDMName(cacheVG, lv)
	}
	return names
}

// breakCache makes every I/O of volume id's cache LVs fail, and returns when.
func breakCache(t *testing.T, id string) time.Time {
	t.Helper()
	var broken time.Time
	for _, name := range cacheLVDevices(t, id) {
		size := sh(t, "blockdev --getsz /dev/mapper/%s", name)
		sh(t, "dmsetup suspend %s && dmsetup load %s --table '0 %s error' && dmsetup resume %s", name, name, size, name)
		if broken.IsZero() {
			broken = time.Now()
		}
	}
	return broken
}

// waitLogged waits for the plugin to log line about volume id and returns
// when it saw it.
func waitLogged(t *testing.T, p *plugin, id, line string) time.Time {
	t.Helper()
	var seen time.Time
	err := poll(fmt.Sprintf("the plugin to log %q for %s", line, id), 100*time.Millisecond, func() (bool, string, error) {
		seen = time.Now()
		for _, l := range strings.Split(p.log.String(), "\n") {
			if strings.Contains(l, line) && strings.Contains(l, id) {
				return true, "", nil
			}
		}
		return false, "not logged", nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, p.diagnose())
	}
	return seen
}

// probe calls the plugin's Probe, as kubelet's liveness probe does, within 10 s.
func probe(t *testing.T, p *plugin) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx(t), 10*time.Second)
	defer cancel()
	resp, err := csi.NewIdentityClient(p.csi.Conn).Probe(c, &csi.ProbeRequest{})
	if err != nil || !resp.GetReady().GetValue() {
		t.Errorf("Probe while a volume's cache device hangs: %v, ready %v", err, resp.GetReady().GetValue())
	}
}
