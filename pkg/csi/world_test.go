package csi_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/ssdcache/ssdcache/pkg/blockdev/blockdevfake"
	"github.com/ssdcache/ssdcache/pkg/cache"
	"github.com/ssdcache/ssdcache/pkg/csi"
	"github.com/ssdcache/ssdcache/pkg/dm/dmfake"
	"github.com/ssdcache/ssdcache/pkg/lvm"
	"github.com/ssdcache/ssdcache/pkg/lvm/lvmfake"
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
	n := &fakeNode{dm: dmfake.New(), lvm: lvmfake.New(), dev: blockdevfake.New(), mounter: mounterfake.New(), locks: cache.NewVolumeLocks()}
	n.lvm.AddVG("ssdcache-hdd", 1<<40, lvm.PoolTagPrefix+"origin")
	n.lvm.AddVG("ssdcache-nvme", 200<<30, lvm.PoolTagPrefix+"cache")
	pools := cache.Pools{OriginVG: "ssdcache-hdd", CacheVGs: map[string]string{"nvme": "ssdcache-nvme"}, DefaultClass: "nvme"}
	n.engine = cache.NewEngine(cache.Layers{DM: n.dm, LVM: n.lvm, Dev: n.dev}, pools, nil)
	n.endpoint = "unix://" + filepath.Join(t.TempDir(), "csi.sock")
	var err error
	n.driver, err = csi.NewDriver(csi.Config{
		DriverName: "ssdcache.io", Version: "test", NodeID: nodeID, Endpoint: n.endpoint, LockWait: testLockWait,
	}, csi.Deps{Engine: n.engine, LVM: n.lvm, Mounter: n.mounter, Locks: n.locks, Staged: func(_ context.Context, v csi.StagedVolume) {
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
