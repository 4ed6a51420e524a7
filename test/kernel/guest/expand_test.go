package guest

import (
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"

	"github.com/ssdcache/ssdcache/pkg/dm"
)

// TestExpandCachedXFS grows a mounted, cached xfs volume online as the
// resizer and kubelet would: ControllerExpandVolume extends the origin LV,
// NodeExpandVolume reloads the dm table with the new length (re-attaching
// the cache over fresh metadata) and grows the filesystem.
func TestExpandCachedXFS(t *testing.T) {
	e := guestEnv(t)
	p := startPlugin(t, e)
	v := p.provision(t, "expand-xfs", 512<<20, cached("32Mi"), fsCapability("xfs"))
	p.stage(t, v)
	p.publish(t, v)
	sums := dataset(t, v.target, 4)
	before := fsBytes(t, v.target)

	resp, err := p.csi.Controller.ControllerExpandVolume(ctx(t), &csi.ControllerExpandVolumeRequest{
		VolumeId: v.id, CapacityRange: &csi.CapacityRange{RequiredBytes: 768 << 20}, VolumeCapability: v.capability})
	if err != nil {
		t.Fatal(err)
	}
	if !resp.NodeExpansionRequired || resp.CapacityBytes < 768<<20 {
		t.Fatalf("ControllerExpandVolume: %+v", resp)
	}
	if _, err := p.csi.Node.NodeExpandVolume(ctx(t), &csi.NodeExpandVolumeRequest{VolumeId: v.id, VolumePath: v.target,
		StagingTargetPath: v.staging, CapacityRange: &csi.CapacityRange{RequiredBytes: 768 << 20}, VolumeCapability: v.capability}); err != nil {
		t.Fatalf("NodeExpandVolume: %v\n%s", err, p.diagnose())
	}
	if got := table(t, v.id).Length * dm.SectorSize; got != 768<<20 {
		t.Fatalf("dm device is %d bytes after expansion, want %d", got, 768<<20)
	}
	expectCacheMode(t, v.id, dm.Writethrough)
	after := fsBytes(t, v.target)
	if after <= before+200<<20 {
		t.Fatalf("filesystem grew from %d to %d bytes only", before, after)
	}
	t.Logf("xfs grew online from %d MiB to %d MiB with the cache re-attached", before>>20, after>>20)
	verify(t, sums)
	p.teardown(t, v)
}

func fsBytes(t testing.TB, path string) uint64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * uint64(st.Bsize)
}
