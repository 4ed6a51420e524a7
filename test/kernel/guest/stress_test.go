package guest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"k8s.io/utils/exec"

	"github.com/ssdcache/ssdcache/pkg/cache"
	"github.com/ssdcache/ssdcache/pkg/command"
	"github.com/ssdcache/ssdcache/pkg/dm"
)

// Stress sizing: 32 volumes of 64 MiB on the 4 GiB HDD, with caches of 16
// to 24 MiB each on the 2 GiB SSD the host gives this test (TestStress), so
// every volume can hold a cache and a resize's new LVs at once.
const (
	stressVolumes     = 32
	stressVolumeBytes = 64 << 20
	stressRoundsEnv   = "SSDCACHE_STRESS_ROUNDS"
)

// stressCacheSizes are the sizes the stand-in agent alternates between.
var stressCacheSizes = [2]uint64{16 << 20, 24 << 20}

// TestStressParallelVolumes stages, caches, publishes, writes, verifies,
// unpublishes and unstages 32 volumes at once, round after round (make
// stress). Half ask for their cache through the StorageClass (the plugin
// attaches it at NodeStage and warms it from the hot set from round 2 on,
// with the promoter running); the other half are cached by a stand-in for
// the node agent, an engine of the test's own that attaches and resizes
// their caches while the plugin serves the other volumes. After every round:
// no leaked dm device or LV, no suspended device, every byte written so far
// reads back. It reports the wall time of each round.
func TestStressParallelVolumes(t *testing.T) {
	e := guestEnv(t)
	rounds, err := strconv.Atoi(os.Getenv(stressRoundsEnv))
	if err != nil || rounds < 1 {
		t.Skipf("stress test: runs from make stress, which sets %s to the number of rounds (got %q)", stressRoundsEnv, os.Getenv(stressRoundsEnv))
	}
	p := startPlugin(t, e)
	before := storageInventory(t)
	vols := provisionStress(t, p)
	baseline := storageInventory(t)
	agent := realEngine(cache.NoFaults{})
	var walls []time.Duration
	for r := 0; r < rounds; r++ {
		start := time.Now()
		errs := parallel(vols, func(v *stressVolume) error { return v.round(ctx(t), p, agent, r) })
		walls = append(walls, time.Since(start))
		t.Logf("round %d: %d volumes in %v", r+1, len(vols), walls[r].Round(time.Millisecond))
		for _, err := range errs {
			t.Errorf("round %d: %v", r+1, err)
		}
		if leaks := inventoryChanges(baseline, storageInventory(t)); len(leaks) > 0 {
			t.Errorf("round %d left storage behind or removed it: %s", r+1, strings.Join(leaks, "; "))
		}
		if s := suspendedDevices(t); len(s) > 0 {
			t.Errorf("round %d left devices suspended: %v", r+1, s)
		}
		if t.Failed() {
			t.FailNow()
		}
	}
	for _, v := range vols {
		sh(t, "e2fsck -fn /dev/%s/%s", originVG, v.id)
	}
	for _, err := range parallel(vols, func(v *stressVolume) error {
		_, err := p.csi.Controller.DeleteVolume(ctx(t), &csi.DeleteVolumeRequest{VolumeId: v.id})
		return err
	}) {
		t.Error(err)
	}
	if leaks := inventoryChanges(before, storageInventory(t)); len(leaks) > 0 {
		t.Errorf("after deleting the volumes: %s", strings.Join(leaks, "; "))
	}
	slices.Sort(walls)
	t.Logf("stress: %d volumes x %d rounds; wall time per round: min %v, median %v, max %v",
		len(vols), rounds, walls[0].Round(time.Millisecond), walls[len(walls)/2].Round(time.Millisecond), walls[len(walls)-1].Round(time.Millisecond))
}

// stressVolume is one volume of the stress test and what it holds.
type stressVolume struct {
	*volume
	// byAgent: the stand-in agent attaches and resizes its cache; otherwise
	// its StorageClass asks for one and NodeStage attaches it.
	byAgent bool
	// sums are the checksums of the files written so far, by path.
	sums map[string]string
}

// provisionStress creates the volumes, all at once.
func provisionStress(t *testing.T, p *plugin) []*stressVolume {
	t.Helper()
	vols := make([]*stressVolume, stressVolumes)
	idx := make([]int, stressVolumes)
	for i := range idx {
		idx[i] = i
	}
	errs := parallel(idx, func(i int) error {
		byAgent := i%2 == 1
		var params map[string]string
		if !byAgent {
			params = cached("16Mi")
		}
		name := fmt.Sprintf("stress-%02d", i)
		resp, err := p.csi.Controller.CreateVolume(ctx(t), &csi.CreateVolumeRequest{
			Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: stressVolumeBytes}, Parameters: params,
			VolumeCapabilities: []*csi.VolumeCapability{fsCapability("ext4")},
		})
		if err != nil {
			return fmt.Errorf("CreateVolume %s: %w", name, err)
		}
		dir := filepath.Join(p.env.work, "kubelet", name)
		vols[i] = &stressVolume{byAgent: byAgent, sums: map[string]string{}, volume: &volume{
			id: resp.Volume.VolumeId, context: resp.Volume.VolumeContext, capability: fsCapability("ext4"),
			staging: filepath.Join(dir, "staging"), target: filepath.Join(dir, "target")}}
		return nil
	})
	for _, err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	return vols
}

// round takes one volume through a pod's life once: stage (and cache),
// publish, write a file and verify every file, resize the cache if the
// agent owns it, verify again, unpublish, unstage.
func (v *stressVolume) round(ctx context.Context, p *plugin, agent *cache.Engine, r int) error {
	if err := os.MkdirAll(v.staging, 0o750); err != nil {
		return err
	}
	if _, err := p.csi.Node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{
		VolumeId: v.id, StagingTargetPath: v.staging, VolumeCapability: v.capability, VolumeContext: v.context,
	}); err != nil {
		return fmt.Errorf("NodeStageVolume %s: %w", v.id, err)
	}
	if err := v.attachByAgent(ctx, agent, stressCacheSizes[r%2]); err != nil {
		return err
	}
	if err := expectCached(v.id); err != nil {
		return err
	}
	if _, err := p.csi.Node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{
		VolumeId: v.id, StagingTargetPath: v.staging, TargetPath: v.target, VolumeCapability: v.capability, VolumeContext: v.context,
	}); err != nil {
		return fmt.Errorf("NodePublishVolume %s: %w", v.id, err)
	}
	if err := v.writeAndVerify(r); err != nil {
		return err
	}
	if err := v.attachByAgent(ctx, agent, stressCacheSizes[(r+1)%2]); err != nil {
		return err
	}
	if err := v.verifyAll(); err != nil {
		return fmt.Errorf("after resizing the cache: %w", err)
	}
	if _, err := p.csi.Node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: v.id, TargetPath: v.target}); err != nil {
		return fmt.Errorf("NodeUnpublishVolume %s: %w", v.id, err)
	}
	if _, err := p.csi.Node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: v.id, StagingTargetPath: v.staging}); err != nil {
		return fmt.Errorf("NodeUnstageVolume %s: %w", v.id, err)
	}
	return nil
}

// attachByAgent sets the cache of an agent-owned volume to size, as the
// agent does for a binding; other volumes keep the cache NodeStage gave them.
func (v *stressVolume) attachByAgent(ctx context.Context, agent *cache.Engine, size uint64) error {
	if !v.byAgent {
		return nil
	}
	if _, err := agent.SetCache(ctx, v.id, &cache.Spec{SizeBytes: size, Mode: cache.ModeReadCache}); err != nil {
		return fmt.Errorf("agent: cache of %s to %d MiB: %w", v.id, size>>20, err)
	}
	return expectCached(v.id)
}

// expectCached checks that a volume's live table is a writethrough cache.
func expectCached(id string) error {
	out, err := trySh("dmsetup table %s", cache.DeviceName(id))
	if err != nil {
		return fmt.Errorf("volume %s: dmsetup table: %w: %s", id, err, out)
	}
	tbl, err := dm.ParseTable(out)
	if err != nil {
		return fmt.Errorf("volume %s: %w", id, err)
	}
	if c, ok := tbl.Target.(dm.CacheTarget); !ok || c.Mode != dm.Writethrough {
		return fmt.Errorf("volume %s: table %q, want a writethrough cache", id, out)
	}
	return nil
}

// writeAndVerify writes this round's file of 1 MiB and reads back every file.
func (v *stressVolume) writeAndVerify(r int) error {
	buf := make([]byte, 1<<20)
	if _, err := rand.Read(buf); err != nil {
		return err
	}
	name := filepath.Join(v.target, fmt.Sprintf("round-%02d", r))
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	_, err = f.Write(buf)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("volume %s: writing %s: %w", v.id, name, err)
	}
	sum := sha256.Sum256(buf)
	v.sums[filepath.Base(name)] = hex.EncodeToString(sum[:])
	return v.verifyAll()
}

// verifyAll re-reads every file with O_DIRECT, through the cache.
func (v *stressVolume) verifyAll() error {
	for name, want := range v.sums {
		path := filepath.Join(v.target, name)
		out, err := trySh("dd if=%s iflag=direct bs=1M status=none | sha256sum", path)
		if err != nil {
			return fmt.Errorf("volume %s: reading %s: %w: %s", v.id, path, err, out)
		}
		if got := strings.Fields(out)[0]; got != want {
			return fmt.Errorf("volume %s: %s reads back with checksum %s, want %s", v.id, path, got, want)
		}
	}
	return nil
}

// parallel runs do for every item at once and returns the errors.
func parallel[T any](items []T, do func(T) error) []error {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	for _, it := range items {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := do(it); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errs
}

// storageInventory lists the node's dm devices and LVs, one entry each.
func storageInventory(t testing.TB) []string {
	t.Helper()
	var inv []string
	for _, d := range dmDevices(t) {
		inv = append(inv, "dm device "+d.Name)
	}
	for _, line := range strings.Split(sh(t, "lvs --noheadings -o vg_name,lv_name"), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			inv = append(inv, "LV "+f[0]+"/"+f[1])
		}
	}
	slices.Sort(inv)
	return inv
}

// inventoryChanges says what appeared in now and what vanished from want.
func inventoryChanges(want, now []string) []string {
	var changes []string
	for _, x := range now {
		if !slices.Contains(want, x) {
			changes = append(changes, "leaked "+x)
		}
	}
	for _, x := range want {
		if !slices.Contains(now, x) {
			changes = append(changes, "missing "+x)
		}
	}
	return changes
}

// suspendedDevices are the dm devices whose I/O is suspended.
func suspendedDevices(t testing.TB) []string {
	t.Helper()
	var names []string
	for _, d := range dmDevices(t) {
		if d.Suspended {
			names = append(names, d.Name)
		}
	}
	return names
}

// dmDevices lists the dm devices as the plugin reads them.
func dmDevices(t testing.TB) []dm.Device {
	t.Helper()
	devs, err := dm.NewDmsetup(command.NewRunner(exec.New())).List(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	return devs
}
