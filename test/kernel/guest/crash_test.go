package guest

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/ssdcache/ssdcache/pkg/cache"
	"github.com/ssdcache/ssdcache/pkg/dm"
)

// Safety rule 5, on the real kernel: the plugin is killed (SIGKILL) at steps
// of staging a cached volume; restarted, a repeated NodeStageVolume
// converges, no dm device or LV leaks, and the data is intact. The unit test
// (pkg/cache) crashes at every fault point; here each point leaves a
// different kernel and LVM state: one of two cache LVs, both LVs with
// unzeroed metadata (rule 2 must zero it on the retry), a suspended device.
// A loaded but inactive table is the online test's case below.
func TestSafetyRule5_CrashDuringStage(t *testing.T) {
	e := guestEnv(t)
	p := startPlugin(t, e)
	v := p.provision(t, "crash-stage", 256<<20, cached("64Mi"), fsCapability("ext4"))
	p.stage(t, v)
	sums := dataset(t, v.staging, 8)
	p.unstage(t, v)
	// Each unstage keeps the cache LVs; a new cache's points need them gone.
	points := []struct {
		point     string
		keptCache bool
	}{
		{"attach/metadata-lv-created", false}, {"attach/zero-metadata", false}, {"attach/suspended", false},
		{"stage/count-writes-over-kept", true}, {"attach/map-kept", true}, {"attach/suspended", true},
	}
	for _, pt := range points {
		point := pt.point
		name := map[bool]string{false: point + "@new", true: point + "@kept"}[pt.keptCache]
		t.Run(name, func(t *testing.T) {
			if !pt.keptCache {
				if err := realEngine(cache.NoFaults{}).Detach(ctx(t), v.id); err != nil {
					t.Fatal(err)
				}
			}
			p.restart("--fault-point=" + point)
			if err := p.tryStage(t, v); err == nil {
				t.Fatalf("NodeStageVolume succeeded: fault point %s never reached", point)
			}
			if err := p.waitExit(); !killedBySIGKILL(err) {
				t.Fatalf("plugin did not die at %s: %v", point, err)
			}
			p.restart()
			p.stage(t, v)
			expectCacheMode(t, v.id, dm.Writethrough)
			expectClean(t, v.id, 2)
			verify(t, sums)
			p.unstage(t, v)
			expectNoDevice(t, v.id)
		})
	}
}

// Safety rule 5 for the agent's online operations: a process running the
// cache library is killed during resize, pause and detach of a mounted
// volume's cache, at points that leave distinct states (a live cache
// suspended with a linear or passthrough table loaded, a linear table with
// its cache LVs left, a linear table with no LVs); running the operation
// again converges. Attach's states are covered by the stage test above.
func TestSafetyRule5_CrashDuringOnlineOps(t *testing.T) {
	e := guestEnv(t)
	p := startPlugin(t, e)
	v := p.provision(t, "crash-online", 256<<20, nil, fsCapability("ext4"))
	p.stage(t, v)
	sums := dataset(t, v.staging, 8)
	ops := []struct {
		op     string
		before *cache.Spec
		after  *cache.Spec
		points []string
	}{
		{"resize", &cache.Spec{SizeBytes: 64 << 20, Mode: cache.ModeReadCache}, &cache.Spec{SizeBytes: 96 << 20, Mode: cache.ModeReadCache},
			[]string{"change/create-cache-lvs"}},
		{"pause", &cache.Spec{SizeBytes: 64 << 20, Mode: cache.ModeReadCache}, &cache.Spec{SizeBytes: 64 << 20, Mode: cache.ModePaused},
			[]string{"change/loaded"}},
		{"detach", &cache.Spec{SizeBytes: 64 << 20, Mode: cache.ModeReadCache}, nil,
			[]string{"detach/loaded", "detach/remove-cache-lvs"}},
	}
	eng := realEngine(cache.NoFaults{})
	for _, o := range ops {
		for _, point := range o.points {
			t.Run(o.op+"@"+point, func(t *testing.T) {
				if _, err := eng.SetCache(ctx(t), v.id, o.before); err != nil {
					t.Fatal(err)
				}
				runKilledHelper(t, v.id, o.after, point)
				if _, err := eng.SetCache(ctx(t), v.id, o.after); err != nil {
					t.Fatalf("converging after a crash at %s: %v", point, err)
				}
				lvs := 2
				if o.after == nil {
					lvs = 0
				}
				expectClean(t, v.id, lvs)
				verify(t, sums)
			})
		}
	}
	p.unstage(t, v)
	expectNoDevice(t, v.id)
}

// runKilledHelper runs this test binary again as TestHelperCacheOp, which
// applies spec with the fault point armed, and expects it to die there.
func runKilledHelper(t *testing.T, id string, spec *cache.Spec, point string) {
	t.Helper()
	cmd := childCommand(t, os.Args[0], "-test.run=^TestHelperCacheOp$", "-test.v")
	cmd.Env = append(os.Environ(), "SSDCACHE_HELPER_VOLUME="+id, "SSDCACHE_HELPER_FAULT="+point, "SSDCACHE_HELPER_SPEC="+encodeSpec(spec))
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := waitChild(cmd); !killedBySIGKILL(err) {
		t.Fatalf("helper was not killed at %s: %v\n%s\n%s", point, err, out, dmState())
	}
}

// TestHelperCacheOp is not a test of its own: runKilledHelper runs it in a
// child process that the armed fault point kills.
func TestHelperCacheOp(t *testing.T) {
	id := os.Getenv("SSDCACHE_HELPER_VOLUME")
	if id == "" {
		t.Skip("helper process for the crash tests")
	}
	if _, err := suiteDeadline(); err != nil { // inherited from the parent test
		t.Fatal(err)
	}
	spec := decodeSpec(t, os.Getenv("SSDCACHE_HELPER_SPEC"))
	eng := realEngine(killAt(os.Getenv("SSDCACHE_HELPER_FAULT")))
	if _, err := eng.SetCache(ctx(t), id, spec); err != nil {
		t.Fatal(err)
	}
	t.Fatal("the operation finished without reaching the fault point")
}

func encodeSpec(s *cache.Spec) string {
	if s == nil {
		return "none"
	}
	return strings.Join([]string{string(s.Mode), strings.TrimSpace(formatBytes(s.SizeBytes))}, ":")
}

// expectNoDevice checks that an unstage removed the volume's device and
// left no cache LVs but the pair a clean unstage keeps, tagged as such.
func expectNoDevice(t testing.TB, id string) {
	t.Helper()
	if out, err := trySh("dmsetup info %s", cache.DeviceName(id)); err == nil {
		t.Fatalf("device of %s still exists after unstage:\n%s", id, out)
	}
	got := cacheLVs(t, id)
	if len(got) == 0 {
		return
	}
	tags := sh(t, "lvs --devices %s --noheadings -o lv_tags %s/%s.cache-meta", guestEnv(t).ssd, cacheVG, id)
	if len(got) != 2 || !strings.Contains(tags, cache.UnstagedCleanTag) {
		t.Fatalf("cache LVs of %s left after unstage: %v, the metadata LV's tags %q; want none or the pair kept with %s", id, got, tags, cache.UnstagedCleanTag)
	}
}

// A process changing a mounted volume's cache is killed between a reload's
// suspend and its resume (SIGKILL during a promotion's swap, the OOM
// killer), and kubelet's NodeUnstage arrives: it must resume the device
// before it unmounts, or the unmount's writes queue on the suspended device
// and hold the call, and the volume's lock, in D state.
func TestUnstageAfterAKillBetweenSuspendAndResume(t *testing.T) {
	e := guestEnv(t)
	p := startPlugin(t, e)
	eng := realEngine(cache.NoFaults{})
	for _, point := range []string{"detach/suspended", "detach/loaded"} {
		t.Run(point, func(t *testing.T) {
			v := p.provision(t, "killed-swap", 128<<20, nil, fsCapability("ext4"))
			p.stage(t, v)
			sums := dataset(t, v.staging, 4)
			if _, err := eng.SetCache(ctx(t), v.id, &cache.Spec{SizeBytes: 32 << 20, Mode: cache.ModeReadCache}); err != nil {
				t.Fatal(err)
			}
			runKilledHelper(t, v.id, nil, point)
			if info := sh(t, "dmsetup info -c --noheadings -o attr %s", cache.DeviceName(v.id)); !strings.Contains(info, "s") {
				t.Fatalf("device attributes %q after the kill at %s, want it suspended", info, point)
			}
			done := make(chan error, 1)
			go func() {
				_, err := p.csi.Node.NodeUnstageVolume(ctx(t), &csi.NodeUnstageVolumeRequest{VolumeId: v.id, StagingTargetPath: v.staging})
				done <- err
			}()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("NodeUnstageVolume after a kill at %s: %v\n%s", point, err, p.diagnose())
				}
			case <-time.After(45 * time.Second):
				_, _ = trySh("dmsetup resume %s", cache.DeviceName(v.id)) // let the stuck unmount finish
				<-done
				t.Fatalf("NodeUnstageVolume after a kill at %s did not return within 45 s: it unmounted the suspended device", point)
			}
			expectNoDevice(t, v.id)
			p.stage(t, v)
			verify(t, sums)
			removeVolume(t, p, v)
		})
	}
}
