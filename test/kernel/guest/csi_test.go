package guest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// volume is a provisioned volume and where it is staged and published.
type volume struct {
	id, staging, target string
	context             map[string]string
	capability          *csi.VolumeCapability
}

func fsCapability(fsType string) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: fsType}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

func blockCapability() *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

// provision calls CreateVolume as external-provisioner would.
func (p *plugin) provision(t testing.TB, name string, bytes int64, params map[string]string, c *csi.VolumeCapability) *volume {
	t.Helper()
	resp, err := p.csi.Controller.CreateVolume(ctx(t), &csi.CreateVolumeRequest{
		Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: bytes}, Parameters: params,
		VolumeCapabilities: []*csi.VolumeCapability{c},
	})
	if err != nil {
		t.Fatalf("CreateVolume %s: %v", name, err)
	}
	dir := filepath.Join(p.env.work, "kubelet", name)
	return &volume{id: resp.Volume.VolumeId, context: resp.Volume.VolumeContext, capability: c,
		staging: filepath.Join(dir, "staging"), target: filepath.Join(dir, "target")}
}

// stage calls NodeStageVolume as kubelet would (kubelet creates the dir).
func (p *plugin) stage(t testing.TB, v *volume) {
	t.Helper()
	if err := p.tryStage(t, v); err != nil {
		t.Fatalf("NodeStageVolume %s: %v\n%s", v.id, err, p.diagnose())
	}
}

func (p *plugin) tryStage(t testing.TB, v *volume) error {
	if err := os.MkdirAll(v.staging, 0o750); err != nil {
		t.Fatal(err)
	}
	_, err := p.csi.Node.NodeStageVolume(ctx(t), &csi.NodeStageVolumeRequest{
		VolumeId: v.id, StagingTargetPath: v.staging, VolumeCapability: v.capability, VolumeContext: v.context,
	})
	return err
}

func (p *plugin) publish(t testing.TB, v *volume) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(v.target), 0o750); err != nil {
		t.Fatal(err)
	}
	_, err := p.csi.Node.NodePublishVolume(ctx(t), &csi.NodePublishVolumeRequest{
		VolumeId: v.id, StagingTargetPath: v.staging, TargetPath: v.target, VolumeCapability: v.capability, VolumeContext: v.context,
	})
	if err != nil {
		t.Fatalf("NodePublishVolume %s: %v", v.id, err)
	}
}

// teardown unpublishes, unstages and deletes the volume.
func (p *plugin) teardown(t testing.TB, v *volume) {
	t.Helper()
	if _, err := p.csi.Node.NodeUnpublishVolume(ctx(t), &csi.NodeUnpublishVolumeRequest{VolumeId: v.id, TargetPath: v.target}); err != nil {
		t.Fatalf("NodeUnpublishVolume %s: %v", v.id, err)
	}
	p.unstage(t, v)
	if _, err := p.csi.Controller.DeleteVolume(ctx(t), &csi.DeleteVolumeRequest{VolumeId: v.id}); err != nil {
		t.Fatalf("DeleteVolume %s: %v", v.id, err)
	}
}

func (p *plugin) unstage(t testing.TB, v *volume) {
	t.Helper()
	if _, err := p.csi.Node.NodeUnstageVolume(ctx(t), &csi.NodeUnstageVolumeRequest{VolumeId: v.id, StagingTargetPath: v.staging}); err != nil {
		t.Fatalf("NodeUnstageVolume %s: %v\n%s", v.id, err, p.diagnose())
	}
}

func cached(size string) map[string]string {
	return map[string]string{"ssdcache.io/cache-mode": "readcache", "ssdcache.io/cache-size": size}
}

// teardownKeep unpublishes and unstages but keeps the volume, e.g. to fsck its origin.
func (p *plugin) teardownKeep(t testing.TB, v *volume) {
	t.Helper()
	if _, err := p.csi.Node.NodeUnpublishVolume(ctx(t), &csi.NodeUnpublishVolumeRequest{VolumeId: v.id, TargetPath: v.target}); err != nil {
		t.Fatalf("NodeUnpublishVolume %s: %v", v.id, err)
	}
	p.unstage(t, v)
}

func deleteRequest(v *volume) *csi.DeleteVolumeRequest {
	return &csi.DeleteVolumeRequest{VolumeId: v.id}
}
