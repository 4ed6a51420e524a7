package csi_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ssdcache/ssdcache/pkg/blockdev/blockdevfake"
	"github.com/ssdcache/ssdcache/pkg/cache"
	"github.com/ssdcache/ssdcache/pkg/csi"
	"github.com/ssdcache/ssdcache/pkg/dm/dmfake"
	"github.com/ssdcache/ssdcache/pkg/lvm"
	"github.com/ssdcache/ssdcache/pkg/lvm/lvmfake"
	"github.com/ssdcache/ssdcache/pkg/mounter"
	"github.com/ssdcache/ssdcache/pkg/mounter/mounterfake"
)

const nodeID = "node-a"

// fakeNode is a node made of fakes: a 1 TiB HDD pool, a 200 GiB NVMe pool.
type fakeNode struct {
	dm      *dmfake.DM
	lvm     *lvmfake.LVM
	dev     *blockdevfake.Devices
	mounter *mounterfake.Mounter
	locks   *cache.VolumeLocks
	engine  *cache.Engine
	driver  *csi.Driver
	// endpoint is where serve listens.
	endpoint string
	// staged records what NodeStage told Deps.Staged.
	staged []stagedCall
	// events is the dm fake's mutating calls and the driver's unmounts, in
	// the order they happened.
	events *eventLog
	// kill crashes the engine at a fault point a test names.
	kill *killAt
}

// eventLog merges calls of several fakes into one ordered log.
type eventLog struct {
	mu     sync.Mutex
	events []string
}

func (l *eventLog) add(event string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, event)
}

func (l *eventLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.events...)
}

// loggedMounter is the fake mounter with its unmounts in the event log:
// the order of an unmount and the dm calls around it is what keeps a
// filesystem's last writes off a suspended device.
type loggedMounter struct {
	*mounterfake.Mounter
	events *eventLog
}

var _ mounter.Interface = loggedMounter{}

func (m loggedMounter) Unmount(target string) error {
	m.events.add("unmount " + target)
	return m.Mounter.Unmount(target)
}

// killed is panicked with to model the plugin killed (SIGKILL, the OOM
// killer) at a fault point.
type killed struct{ point string }

// killAt is the engine's FaultPoints: it panics with killed at point, once.
type killAt struct {
	mu    sync.Mutex
	point string
}

// at arms k to kill at point.
func (k *killAt) at(point string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.point = point
}

func (k *killAt) Reached(_ context.Context, point string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.point != "" && point == k.point {
		k.point = ""
		panic(killed{point})
	}
}

type stagedCall struct {
	csi.StagedVolume
	// LockFree is whether the volume's lock was free when told.
	LockFree bool
}

// testLockWait is how long the fake node's calls wait for a held volume.
const testLockWait = 50 * time.Millisecond

func newFakeNode(t *testing.T) *fakeNode {
	t.Helper()
	n := &fakeNode{dm: dmfake.New(), lvm: lvmfake.New(), dev: blockdevfake.New(), mounter: mounterfake.New(), locks: cache.NewVolumeLocks(),
		events: &eventLog{}, kill: &killAt{}}
	n.dm.Record = n.events.add
	n.lvm.AddVG("ssdcache-hdd", 1<<40, lvm.PoolTagPrefix+"origin")
	n.lvm.AddVG("ssdcache-nvme", 200<<30, lvm.PoolTagPrefix+"cache")
	pools := cache.Pools{OriginVG: "ssdcache-hdd", CacheVGs: map[string]string{"nvme": "ssdcache-nvme"}, DefaultClass: "nvme"}
	n.engine = cache.NewEngine(cache.Layers{DM: n.dm, LVM: n.lvm, Dev: n.dev}, pools, n.kill)
	n.endpoint = "unix://" + filepath.Join(t.TempDir(), "csi.sock")
	var err error
	n.driver, err = csi.NewDriver(csi.Config{
		DriverName: "ssdcache.io", Version: "test", NodeID: nodeID, Endpoint: n.endpoint, LockWait: testLockWait,
	}, csi.Deps{Engine: n.engine, LVM: n.lvm, Mounter: loggedMounter{n.mounter, n.events}, Locks: n.locks, Staged: func(_ context.Context, v csi.StagedVolume) {
		free := n.locks.TryAcquire(v.ID)
		if free {
			n.locks.Release(v.ID)
		}
		n.staged = append(n.staged, stagedCall{StagedVolume: v, LockFree: free})
	}})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// serve runs the driver on its socket for the test's lifetime.
func (n *fakeNode) serve(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.driver.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("driver stopped with %v", err)
		}
	})
}
