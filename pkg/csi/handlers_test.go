package csi_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ssdcache/ssdcache/pkg/blockdev/blockdevfake"
	ssdcsi "github.com/ssdcache/ssdcache/pkg/csi"
	"github.com/ssdcache/ssdcache/pkg/dm"
)

func mountCap(fs string) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: fs}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

func expectCode(t *testing.T, err error, code codes.Code, contains ...string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("code %v (%v), want %v", status.Code(err), err, code)
	}
	for _, c := range contains {
		if !strings.Contains(err.Error(), c) {
			t.Errorf("error %q does not mention %q", err, c)
		}
	}
}

func (n *fakeNode) create(t *testing.T, name string, params map[string]string) *csi.Volume {
	t.Helper()
	resp, err := n.driver.Controller.CreateVolume(context.Background(), &csi.CreateVolumeRequest{
		Name: name, Parameters: params, VolumeCapabilities: []*csi.VolumeCapability{mountCap("ext4")},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 10 << 30},
	})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetVolume()
}

func TestBadParametersNameFieldValueAndAllowed(t *testing.T) {
	n := newFakeNode(t)
	cases := []struct {
		params   map[string]string
		contains []string
	}{
		{map[string]string{"ssdcache.io/cache-mode": "writeback"}, []string{"ssdcache.io/cache-mode", `"writeback"`, "ReadCache, None"}},
		{map[string]string{"ssdcache.io/cache-mode": "ReadCache", "ssdcache.io/cache-size": "lots"}, []string{"ssdcache.io/cache-size", `"lots"`, "10Gi", "10%"}},
		{map[string]string{"ssdcache.io/cache-mode": "ReadCache", "ssdcache.io/cache-size": "150%"}, []string{"150%", "1% to 100%"}},
		{map[string]string{"ssdcache.io/cache-mode": "ReadCache", "ssdcache.io/cache-size": "1Mi"}, []string{"1Mi", "16Mi"}},
		{map[string]string{"ssdcache.io/cache-mode": "ReadCache", "ssdcache.io/device-class": "optane"}, []string{"optane", "nvme"}},
		{map[string]string{"ssdcache.io/warmup": "eager"}, []string{"ssdcache.io/warmup", `"eager"`, "HotSet", "None"}},
		{map[string]string{"ssdcache.io/cache-sise": "1Gi"}, []string{`"ssdcache.io/cache-sise"`, "ssdcache.io/cache-size"}},
		{map[string]string{"csi.storage.k8s.io/fstype": "btrfs"}, []string{"btrfs", "ext4, xfs"}},
		{map[string]string{"ssdcache.io/cache-size": "1Gi"}, []string{"ssdcache.io/cache-mode=ReadCache"}},
		{map[string]string{"ssdcache.io/device": "/dev/disk/by-id/x"}, []string{"static PersistentVolume"}},
		{map[string]string{"ssdcache.io/cache-mode": "ReadCache", "ssdcache.io/cache-size": "1%"}, []string{"1%", "16Mi"}},
	}
	for _, c := range cases {
		_, err := n.driver.Controller.CreateVolume(context.Background(), &csi.CreateVolumeRequest{
			Name: "v", Parameters: c.params, VolumeCapabilities: []*csi.VolumeCapability{mountCap("")},
			CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30},
		})
		expectCode(t, err, codes.InvalidArgument, c.contains...)
	}
}

func TestCreateVolumeContextAndTopology(t *testing.T) {
	n := newFakeNode(t)
	vol := n.create(t, "pvc-0123", map[string]string{"ssdcache.io/cache-mode": "ReadCache", "ssdcache.io/cache-size": "2Gi"})
	if vol.VolumeId != "pvc-0123" || vol.CapacityBytes != 10<<30 {
		t.Fatalf("volume %+v", vol)
	}
	// The PV keeps the lowercase mode node plugins before 0.2 read (v1alpha1.VolumeContext).
	if got := vol.VolumeContext; got["ssdcache.io/cache-mode"] != "readcache" || got["ssdcache.io/cache-size"] != "2Gi" {
		t.Fatalf("context %v", got)
	}
	if seg := vol.AccessibleTopology[0].Segments["topology.ssdcache.io/node"]; seg != nodeID {
		t.Fatalf("topology %v", vol.AccessibleTopology)
	}
	// Same name, same size: the same volume. Same name, bigger: AlreadyExists.
	if again := n.create(t, "pvc-0123", nil); again.VolumeId != vol.VolumeId {
		t.Fatalf("not idempotent: %v", again)
	}
	_, err := n.driver.Controller.CreateVolume(context.Background(), &csi.CreateVolumeRequest{
		Name: "pvc-0123", VolumeCapabilities: []*csi.VolumeCapability{mountCap("")},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 20 << 30},
	})
	expectCode(t, err, codes.AlreadyExists)
}

// The PVC that csi-provisioner's --extra-create-metadata names reaches the
// volume context, and so NodeStage; the rest of its metadata does not.
func TestCreateVolumeCarriesThePVCIntoTheContext(t *testing.T) {
	n := newFakeNode(t)
	vol := n.create(t, "pvc-0456", map[string]string{"ssdcache.io/cache-mode": "None",
		ssdcsi.ContextPVCName: "data", ssdcsi.ContextPVCNamespace: "team-a", "csi.storage.k8s.io/pv/name": "pvc-0456"})
	if ns, name := ssdcsi.PVCOf(vol.VolumeContext); ns != "team-a" || name != "data" {
		t.Fatalf("context %v names PVC %s/%s", vol.VolumeContext, ns, name)
	}
	if _, ok := vol.VolumeContext["csi.storage.k8s.io/pv/name"]; ok {
		t.Fatalf("context %v carries the PV name", vol.VolumeContext)
	}
	if _, err := ssdcsi.CacheSpecFromContext(vol.VolumeContext, vol.CapacityBytes); err != nil {
		t.Fatalf("NodeStage would refuse the context: %v", err)
	}
	if ns, name := ssdcsi.PVCOf(n.create(t, "pvc-0789", nil).VolumeContext); ns != "" || name != "" {
		t.Fatalf("a volume without PVC metadata names %s/%s", ns, name)
	}
}

// NodeStage brings a cached class's volume up linear and tells Deps.Staged,
// with its lock free: the cache is the node agent's to attach.
func TestStageBringsVolumeUpLinearAndTellsTheAgent(t *testing.T) {
	n := newFakeNode(t)
	vol := n.create(t, "pvc-1", map[string]string{"ssdcache.io/cache-mode": "ReadCache", "ssdcache.io/cache-size": "10%"})
	staging := filepath.Join(t.TempDir(), "staging")
	_, err := n.driver.Node.NodeStageVolume(context.Background(), &csi.NodeStageVolumeRequest{
		VolumeId: vol.VolumeId, StagingTargetPath: staging, VolumeCapability: mountCap("xfs"), VolumeContext: vol.VolumeContext,
	})
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := n.dm.Table(context.Background(), "ssdcache-pvc-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tbl.Target.(dm.LinearTarget); !ok {
		t.Fatalf("table %q, want linear", tbl)
	}
	if fs := n.mounter.Formatted["/dev/mapper/ssdcache-pvc-1"]; fs != "xfs" {
		t.Fatalf("formatted %v", n.mounter.Formatted)
	}
	if len(n.staged) != 1 || n.staged[0].ID != "pvc-1" || n.staged[0].OriginBytes != 10<<30 ||
		n.staged[0].Context["ssdcache.io/cache-size"] != "10%" || !n.staged[0].LockFree {
		t.Fatalf("told %+v, want pvc-1 of 10Gi with its volume context, told with its lock free", n.staged)
	}
}

func TestConcurrentCallOnSameVolumeIsAborted(t *testing.T) {
	n := newFakeNode(t)
	vol := n.create(t, "pvc-2", nil)
	if !n.locks.TryAcquire(vol.VolumeId) {
		t.Fatal("lock busy")
	}
	_, err := n.driver.Node.NodeStageVolume(context.Background(), &csi.NodeStageVolumeRequest{
		VolumeId: vol.VolumeId, StagingTargetPath: t.TempDir(), VolumeCapability: mountCap("ext4"), VolumeContext: vol.VolumeContext,
	})
	expectCode(t, err, codes.Aborted, vol.VolumeId)
	_, err = n.driver.Controller.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: vol.VolumeId})
	expectCode(t, err, codes.Aborted)
}

// A node call waits for the node agent's hold on its volume (an attach)
// instead of answering Aborted, so kubelet does not back off.
func TestStageWaitsForTheAgentsHoldOnItsVolume(t *testing.T) {
	n := newFakeNode(t)
	vol := n.create(t, "pvc-3", nil)
	n.locks.TryAcquire(vol.VolumeId)
	go func() {
		time.Sleep(testLockWait / 5)
		n.locks.Release(vol.VolumeId)
	}()
	_, err := n.driver.Node.NodeStageVolume(context.Background(), &csi.NodeStageVolumeRequest{
		VolumeId: vol.VolumeId, StagingTargetPath: t.TempDir(), VolumeCapability: mountCap("ext4"), VolumeContext: vol.VolumeContext,
	})
	if err != nil {
		t.Fatalf("stage after the agent released the volume: %v", err)
	}
}

// The StoreMI case through the CSI API: a static PV names an existing disk.
func TestStageExistingDiskThroughSameDMPath(t *testing.T) {
	n := newFakeNode(t)
	n.dev.Add("/dev/disk/by-id/ata-HDD_DATA", blockdevfake.Device{Node: "/dev/sdc", Size: 100 << 30, DevNum: dm.DevNum{Major: 8, Minor: 32}})
	n.mounter.Formatted["/dev/mapper/ssdcache-media-disk"] = "ext4" // the disk's data, seen through the dm device
	_, err := n.driver.Node.NodeStageVolume(context.Background(), &csi.NodeStageVolumeRequest{
		VolumeId: "media-disk", StagingTargetPath: t.TempDir(), VolumeCapability: mountCap("ext4"),
		VolumeContext: map[string]string{"ssdcache.io/device": "/dev/disk/by-id/ata-HDD_DATA",
			"ssdcache.io/cache-mode": "ReadCache", "ssdcache.io/cache-size": "4Gi"},
	})
	if err != nil {
		t.Fatal(err)
	}
	tbl, _ := n.dm.Table(context.Background(), "ssdcache-media-disk")
	if l, ok := tbl.Target.(dm.LinearTarget); !ok || l.Device != (dm.DevNum{Major: 8, Minor: 32}) {
		t.Fatalf("table %q", tbl)
	}
	if len(n.dev.Zeroed) != 0 {
		t.Fatalf("staging wrote to %v", n.dev.Zeroed)
	}
	_, err = n.driver.Node.NodeStageVolume(context.Background(), &csi.NodeStageVolumeRequest{
		VolumeId: "bad", StagingTargetPath: t.TempDir(), VolumeCapability: mountCap("ext4"),
		VolumeContext: map[string]string{"ssdcache.io/device": "/dev/sdc"},
	})
	expectCode(t, err, codes.InvalidArgument, "/dev/sdc", "/dev/disk/by-id/")
}

// An existing disk whose content blkid does not recognise (a raw database,
// dm-crypt) is never formatted unless its PV asks for it.
func TestStaticDiskFormattedOnlyWhenAsked(t *testing.T) {
	n := newFakeNode(t)
	n.dev.Add("/dev/disk/by-id/ata-RAW_DB", blockdevfake.Device{Node: "/dev/sdd", Size: 100 << 30, DevNum: dm.DevNum{Major: 8, Minor: 48}})
	stage := func(attrs map[string]string) error {
		_, err := n.driver.Node.NodeStageVolume(context.Background(), &csi.NodeStageVolumeRequest{
			VolumeId: "raw-db", StagingTargetPath: t.TempDir(), VolumeCapability: mountCap("ext4"), VolumeContext: attrs,
		})
		return err
	}
	err := stage(map[string]string{"ssdcache.io/device": "/dev/disk/by-id/ata-RAW_DB"})
	expectCode(t, err, codes.FailedPrecondition, "ata-RAW_DB", "no filesystem", "ssdcache.io/format")
	if len(n.mounter.Formatted) != 0 {
		t.Fatalf("a static disk was formatted without being asked: %v", n.mounter.Formatted)
	}
	if err := stage(map[string]string{"ssdcache.io/device": "/dev/disk/by-id/ata-RAW_DB", "ssdcache.io/format": "true"}); err != nil {
		t.Fatal(err)
	}
	if fs := n.mounter.Formatted["/dev/mapper/ssdcache-raw-db"]; fs != "ext4" {
		t.Fatalf("asked to format: formatted %v", n.mounter.Formatted)
	}
	_, err = n.driver.Controller.CreateVolume(context.Background(), &csi.CreateVolumeRequest{Name: "pvc-x",
		Parameters:         map[string]string{"ssdcache.io/format": "true"},
		VolumeCapabilities: []*csi.VolumeCapability{mountCap("ext4")}})
	expectCode(t, err, codes.InvalidArgument, "ssdcache.io/format")
}

// A repeated NodeStage is OK; a staging path that something else is mounted
// on is refused, not reported as staged (the pod would get the wrong data).
func TestStageRefusesStagingPathMountedFromElsewhere(t *testing.T) {
	n := newFakeNode(t)
	vol := n.create(t, "pvc-3", nil)
	req := &csi.NodeStageVolumeRequest{VolumeId: vol.VolumeId, StagingTargetPath: filepath.Join(t.TempDir(), "staging"),
		VolumeCapability: mountCap("ext4"), VolumeContext: vol.VolumeContext}
	if _, err := n.driver.Node.NodeStageVolume(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if _, err := n.driver.Node.NodeStageVolume(context.Background(), req); err != nil {
		t.Fatalf("repeated NodeStage: %v", err)
	}
	other := filepath.Join(t.TempDir(), "other")
	if err := n.mounter.Mount("/dev/sdz", other, "ext4", nil); err != nil {
		t.Fatal(err)
	}
	req.StagingTargetPath = other
	_, err := n.driver.Node.NodeStageVolume(context.Background(), req)
	expectCode(t, err, codes.FailedPrecondition, other, "/dev/sdz")
}

func TestDeleteRefusesStagedVolume(t *testing.T) {
	n := newFakeNode(t)
	vol := n.create(t, "pvc-3", nil)
	if _, err := n.driver.Node.NodeStageVolume(context.Background(), &csi.NodeStageVolumeRequest{
		VolumeId: vol.VolumeId, StagingTargetPath: t.TempDir(), VolumeCapability: mountCap("ext4"), VolumeContext: vol.VolumeContext,
	}); err != nil {
		t.Fatal(err)
	}
	_, err := n.driver.Controller.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: vol.VolumeId})
	expectCode(t, err, codes.FailedPrecondition, "staged")
}

func TestGetCapacityIsPerNode(t *testing.T) {
	n := newFakeNode(t)
	resp, err := n.driver.Controller.GetCapacity(context.Background(), &csi.GetCapacityRequest{
		AccessibleTopology: &csi.Topology{Segments: map[string]string{"topology.ssdcache.io/node": "other"}}})
	if err != nil || resp.AvailableCapacity != 0 {
		t.Fatalf("other node: %v %v", resp, err)
	}
	resp, err = n.driver.Controller.GetCapacity(context.Background(), &csi.GetCapacityRequest{
		AccessibleTopology: &csi.Topology{Segments: map[string]string{"topology.ssdcache.io/node": nodeID}}})
	if err != nil || resp.AvailableCapacity != 1<<40 {
		t.Fatalf("this node: %v %v", resp, err)
	}
}

// A cached class has no capacity on a node without a cache pool of its
// device class, so the scheduler places its volumes where a cache can be.
func TestGetCapacityHonoursTheDeviceClass(t *testing.T) {
	n := newFakeNode(t)
	here := &csi.Topology{Segments: map[string]string{"topology.ssdcache.io/node": nodeID}}
	for _, c := range []struct {
		params map[string]string
		want   int64
	}{
		{map[string]string{"ssdcache.io/cache-mode": "ReadCache"}, 1 << 40},
		{map[string]string{"ssdcache.io/cache-mode": "ReadCache", "ssdcache.io/device-class": "nvme"}, 1 << 40},
		{map[string]string{"ssdcache.io/cache-mode": "ReadCache", "ssdcache.io/device-class": "optane"}, 0},
		{map[string]string{"ssdcache.io/cache-mode": "None"}, 1 << 40},
	} {
		resp, err := n.driver.Controller.GetCapacity(context.Background(), &csi.GetCapacityRequest{AccessibleTopology: here, Parameters: c.params})
		if err != nil || resp.AvailableCapacity != c.want {
			t.Errorf("parameters %v: capacity %v, %v; want %d", c.params, resp, err, c.want)
		}
	}
	_, err := n.driver.Controller.GetCapacity(context.Background(), &csi.GetCapacityRequest{AccessibleTopology: here,
		Parameters: map[string]string{"ssdcache.io/cache-mode": "writeback"}})
	expectCode(t, err, codes.InvalidArgument, "ssdcache.io/cache-mode", "writeback")
}
