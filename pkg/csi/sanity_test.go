package csi_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"

	"github.com/ssdcache/ssdcache/pkg/blockdev/blockdevfake"
	"github.com/ssdcache/ssdcache/pkg/cache"
	"github.com/ssdcache/ssdcache/pkg/csi"
	"github.com/ssdcache/ssdcache/pkg/dm/dmfake"
	"github.com/ssdcache/ssdcache/pkg/lvm"
	"github.com/ssdcache/ssdcache/pkg/lvm/lvmfake"
	"github.com/ssdcache/ssdcache/pkg/mounter/mounterfake"
)

// TestSanity runs the CSI spec's conformance suite in process against the
// driver on a unix socket, with the OS layers faked. Every volume gets a
// read cache, so the cache path runs on every stage. The kernel suite runs
// the same suite on real dm-cache, LVM and filesystems.
func TestSanity(t *testing.T) {
	dir := t.TempDir()
	endpoint := "unix://" + filepath.Join(dir, "csi.sock")
	d := dmfake.New()
	l := lvmfake.New()
	l.AddVG("ssdcache-hdd", 1<<40, lvm.PoolTagPrefix+"origin")
	l.AddVG("ssdcache-nvme", 200<<30, lvm.PoolTagPrefix+"cache")
	pools := cache.Pools{OriginVG: "ssdcache-hdd", CacheVGs: map[string]string{"nvme": "ssdcache-nvme"}, DefaultClass: "nvme"}
	engine := cache.NewEngine(d, l, blockdevfake.New(), pools, nil)
	driver, err := csi.NewDriver(csi.Config{DriverName: "ssdcache.io", Version: "sanity", NodeID: nodeID, Endpoint: endpoint},
		csi.Deps{Engine: engine, LVM: l, Mounter: mounterfake.New(), Locks: cache.NewVolumeLocks()})
	if err != nil {
		t.Fatal(err)
	}
	n := &fakeNode{driver: driver}
	n.serve(t, endpoint)

	cfg := sanity.NewTestConfig()
	cfg.Address = endpoint
	cfg.TargetPath = filepath.Join(dir, "target")
	cfg.StagingPath = filepath.Join(dir, "staging")
	cfg.TestVolumeParameters = map[string]string{"ssdcache.io/cache-mode": "readcache", "ssdcache.io/cache-size": "5%"}
	cfg.IdempotentCount = 2
	cfg.TestVolumeExpandSize = cfg.TestVolumeSize * 2
	cfg.CreateTargetDir = func(p string) (string, error) { return p, os.MkdirAll(p, 0o750) }
	cfg.CreateStagingDir = cfg.CreateTargetDir
	cfg.CheckPath = checkPath
	sanity.Test(t, cfg)
}

func checkPath(path string) (sanity.PathKind, error) {
	fi, err := os.Stat(path)
	switch {
	case os.IsNotExist(err):
		return sanity.PathIsNotFound, nil
	case err != nil:
		return sanity.PathIsOther, err
	case fi.IsDir():
		return sanity.PathIsDir, nil
	case fi.Mode().IsRegular():
		return sanity.PathIsFile, nil
	}
	return sanity.PathIsOther, nil
}
