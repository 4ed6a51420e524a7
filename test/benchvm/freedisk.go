package main

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/ssdcache/ssdcache/pkg/bench"
)

// diskSlack covers the caches' metadata, LVM's and qemu's own writes and the
// guest's logs and reports on the share.
const diskSlack = 2 << 30

// imageBytesNeeded is how much the VM's sparse disk images grow at most:
// the HDD image is only read (a volume's unwritten blocks read as zeros,
// through the simulated head), and the SSD image takes each cache's copy of
// the largest working set; the guest discards the freed extents between
// working sets, so sets do not add up.
func imageBytesNeeded(o options) int64 {
	var largest int64
	for _, ws := range o.workingSets {
		if sets, err := bench.ParseWorkingSets([]string{ws}, o.cacheMiB<<20, false); err == nil {
			largest = max(largest, sets[0].Bytes)
		}
	}
	const caches = 3 // ssdcache, lvmcache, bcache
	return caches*largest + diskSlack
}

// checkFreeDisk refuses to start a run whose disk images would fill the
// file system they live on, which would fail it hours in.
func checkFreeDisk(o options) error {
	dir := o.workDir
	if dir == "" {
		dir = os.TempDir()
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("free space of %s: %w", dir, err)
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	if need := imageBytesNeeded(o); free < need {
		return fmt.Errorf("work dir %s has %d GiB free; the disk images of working sets %v on a %d MiB cache need up to %d GiB: free space, or pass -work-dir on a larger file system, or smaller -working-sets",
			dir, free>>30, o.workingSets, o.cacheMiB, need>>30)
	}
	return nil
}
