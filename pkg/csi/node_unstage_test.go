package csi_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/ssdcache/ssdcache/pkg/cache"
	"github.com/ssdcache/ssdcache/pkg/dm"
)

// The fault points of a detach's reload between its suspend and its resume:
// killed at the first the device is suspended with its old table; at the
// second the new table is loaded beside it too. A promotion's table swap
// stops at the same two places.
var betweenSuspendAndResume = []string{"detach/suspended", "detach/loaded"}

// stageAndKillMidReload stages a volume mounted at its staging path, gives
// it a cache as the node agent would, and kills the plugin at point of the
// cache's detach, leaving the device suspended.
func (n *fakeNode) stageAndKillMidReload(t *testing.T, id, point string) (staging string) {
	t.Helper()
	ctx := context.Background()
	vol := n.create(t, id, nil)
	staging = filepath.Join(t.TempDir(), "staging")
	if _, err := n.driver.Node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{
		VolumeId: vol.VolumeId, StagingTargetPath: staging, VolumeCapability: mountCap("ext4"), VolumeContext: vol.VolumeContext,
	}); err != nil {
		t.Fatal(err)
	}
	if err := n.engine.Attach(ctx, id, cache.Spec{SizeBytes: 1 << 30, Mode: cache.ModeReadCache}); err != nil {
		t.Fatal(err)
	}
	n.kill.at(point)
	func() {
		defer func() {
			if r := recover(); r == nil {
				t.Fatalf("the detach was not killed at %s", point)
			} else if _, ok := r.(killed); !ok {
				panic(r)
			}
		}()
		// The agent holds the lock; the process dies with it.
		if !n.locks.TryAcquire(id) {
			t.Fatal("lock busy")
		}
		defer n.locks.Release(id)
		_ = n.engine.Detach(ctx, id)
	}()
	if !n.dm.Suspended(cache.DeviceName(id)) {
		t.Fatalf("killed at %s, the device is not suspended", point)
	}
	return staging
}

// before fails the test unless events holds first, then second.
func before(t *testing.T, events []string, first, second string) {
	t.Helper()
	i, j := slices.Index(events, first), slices.Index(events, second)
	if i < 0 || j < 0 || i > j {
		t.Fatalf("want %q before %q; events %q", first, second, events)
	}
}

// Issue 37: a plugin killed between a reload's suspend and resume (SIGKILL
// in a promotion's table swap, the OOM killer) leaves the volume's device
// suspended. NodeUnstage must resume it, dropping a half-loaded table,
// before it unmounts: the unmount's journal and superblock writes would
// queue on the suspended device and hold the call in D state with the
// volume's lock, which the monitor's resume needs too.
func TestUnstageResumesADeviceLeftSuspendedBeforeUnmounting(t *testing.T) {
	for _, point := range betweenSuspendAndResume {
		t.Run(point, func(t *testing.T) {
			n := newFakeNode(t)
			const id = "pvc-killed"
			name := cache.DeviceName(id)
			staging := n.stageAndKillMidReload(t, id, point)
			from := len(n.events.all())
			_, err := n.driver.Node.NodeUnstageVolume(context.Background(), &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging})
			if err != nil {
				t.Fatal(err)
			}
			events := n.events.all()[from:]
			before(t, events, "dm resume "+name, "unmount "+staging)
			before(t, events, "unmount "+staging, "dm remove "+name)
			if point == "detach/loaded" {
				// The change cut short is rolled back, not finished.
				before(t, events, "dm clear "+name, "dm resume "+name)
			}
			if _, err := n.dm.Table(context.Background(), name); !errors.Is(err, dm.ErrNotFound) {
				t.Fatalf("device %s after unstage: %v", name, err)
			}
			if mounted, _ := n.mounter.IsMountPoint(staging); mounted {
				t.Fatalf("%s is still mounted", staging)
			}
		})
	}
}

// NodeUnpublish resumes a device left suspended before its unmount too: a
// bind mount's unmount writes nothing while the staging mount holds the
// filesystem, but as its last mount (the staging mount gone by hand) it
// shuts the filesystem down and writes like NodeUnstage's.
func TestUnpublishResumesADeviceLeftSuspendedBeforeUnmounting(t *testing.T) {
	n := newFakeNode(t)
	const id = "pvc-killed"
	name := cache.DeviceName(id)
	staging := n.stageAndKillMidReload(t, id, "detach/loaded")
	target := filepath.Join(t.TempDir(), "target")
	if err := n.mounter.BindMount(staging, target, false); err != nil { // published before the kill
		t.Fatal(err)
	}
	from := len(n.events.all())
	if _, err := n.driver.Node.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	events := n.events.all()[from:]
	before(t, events, "dm clear "+name, "dm resume "+name)
	before(t, events, "dm resume "+name, "unmount "+target)
	if n.dm.Suspended(name) || n.dm.HasInactive(name) {
		t.Fatalf("device %s still suspended or with a table loaded; events %q", name, events)
	}
}
