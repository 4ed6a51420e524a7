package guest

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/utils/exec"

	"github.com/ssdcache/ssdcache/pkg/command"
	"github.com/ssdcache/ssdcache/pkg/dm"
)

// TestKernelReadsMatchDmsetup: the plugin reads devices, tables and
// statuses with ioctls on /dev/mapper/control (pkg/dm/ioctl.go); on the real
// kernel they must read exactly what dmsetup reads. A linear device, a
// dm-cache over loop devices, a two-target device, one suspended, one
// with an inactive table loaded and one with no table at all. The warm-up's dm-stats messages go
// through the control device too: the region it creates is the one dmsetup
// lists, and the writes it finds are the ones made.
func TestKernelReadsMatchDmsetup(t *testing.T) {
	e := guestEnv(t)
	loops := loopDevices(t, filepath.Join(e.work, "dmioctl"), map[string]int{"meta": 8, "data": 32, "origin": 64})
	devices := map[string]string{
		"ioctl-linear": fmt.Sprintf("0 65536 linear %s 0", loops["origin"]),
		"ioctl-cache":  fmt.Sprintf("0 131072 cache %s %s %s 128 1 writethrough smq 0", loops["meta"], loops["data"], loops["origin"]),
		"ioctl-two":    "0 8 zero\n8 8 error",
	}
	for name, table := range devices {
		sh(t, "printf '%%b\\n' %q | dmsetup create %s", table, name)
		t.Cleanup(func() { _, _ = trySh("dmsetup resume %s; dmsetup remove %s", name, name) })
	}
	// A device with no live table, as LVM's are between create and resume:
	// listed like the others, and no reason for States to fail.
	sh(t, "dmsetup create --notable ioctl-notable")
	t.Cleanup(func() { _, _ = trySh("dmsetup remove ioctl-notable") })
	sh(t, "dd if=%s of=/dev/null bs=64k count=64 iflag=direct status=none", dm.DevicePath("ioctl-cache")) // counters that are not zero
	sh(t, "dmsetup suspend ioctl-linear")
	sh(t, "printf '0 16 zero\\n' | dmsetup load ioctl-two")

	kernel := dm.NewDmsetup(command.NewRunner(exec.New())).ReadingFrom(dm.NewControlDevice())
	tool := dm.NewDmsetup(command.NewRunner(exec.New()))
	fromKernel, err1 := kernel.List(ctx(t))
	fromTool, err2 := tool.List(ctx(t))
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if fmt.Sprint(fromKernel) != fmt.Sprint(fromTool) {
		t.Fatalf("List through the control device:\n%v\ndmsetup info:\n%v", fromKernel, fromTool)
	}
	for name := range devices {
		kt, kerr := kernel.Table(ctx(t), name)
		tt, terr := tool.Table(ctx(t), name) // the two-target device: neither parses
		if (kerr == nil) != (terr == nil) || (kerr == nil && kt.String() != tt.String()) {
			t.Errorf("table of %s through the control device: %v (%v), dmsetup: %v (%v)", name, kt, kerr, tt, terr)
		}
		ks, kerr := kernel.Status(ctx(t), name)
		ts, terr := tool.Status(ctx(t), name)
		if kerr != nil || terr != nil || strings.Join(strings.Fields(ks), " ") != strings.Join(strings.Fields(ts), " ") {
			t.Errorf("status of %s through the control device: %q (%v), dmsetup: %q (%v)", name, ks, kerr, ts, terr)
		}
	}
	states, err := kernel.States(ctx(t), func(name string) bool { return name == "ioctl-cache" })
	if err != nil {
		t.Fatal(err)
	}
	if st, err := dm.ParseCacheStatus(states["ioctl-cache"].Status); err != nil || st.ReadMisses+st.ReadHits == 0 || len(states) != 1 {
		t.Errorf("States' cache status %+v (%v) of %d devices: the reads made show no hit or miss, or the states are not ioctl-cache's alone", st, err, len(states))
	}
	t.Logf("control device and dmsetup agree on %d devices; %s", len(fromKernel), sh(t, "dmsetup info -c"))
	checkStatsMessages(t, kernel)
}

// checkStatsMessages tracks the writes of ioctl-cache in areas of 64 KiB
// through the control device, as a warm-up does, writes 1 MiB at 16 MiB
// and reads the areas written.
func checkStatsMessages(t *testing.T, kernel *dm.Dmsetup) {
	t.Helper()
	region, err := kernel.TrackWrites(ctx(t), "ioctl-cache", 128)
	if err != nil {
		t.Fatal(err)
	}
	if list := sh(t, "dmsetup message ioctl-cache 0 @stats_list"); !strings.Contains(list, " 128 ssdcache-writes") {
		t.Fatalf("dmsetup lists %q after TrackWrites through the control device, want a region of 128-sector areas", list)
	}
	sh(t, "dd if=/dev/zero of=%s bs=1M seek=16 count=1 oflag=direct status=none", dm.DevicePath("ioctl-cache"))
	areas, err := kernel.WrittenAreas(ctx(t), "ioctl-cache", region)
	if err != nil || len(areas) != 16 || areas[0] != 256 || areas[15] != 271 {
		t.Fatalf("areas written through the control device: %v (%v), want 256 to 271", areas, err)
	}
	// A promotion reads its copies' areas alone, by line ranges of the print.
	among, err := kernel.WrittenAreasAmong(ctx(t), "ioctl-cache", region, []uint64{250, 251, 252, 253, 254, 255, 256, 257, 300, 2047})
	if err != nil || !slices.Equal(among, []uint64{256, 257}) {
		t.Fatalf("areas written among 250-257, 300 and the last: %v (%v), want 256 and 257", among, err)
	}
	if err := kernel.Untrack(ctx(t), "ioctl-cache", region); err != nil {
		t.Fatal(err)
	}
	if list := sh(t, "dmsetup message ioctl-cache 0 @stats_list"); strings.TrimSpace(list) != "" {
		t.Errorf("dmsetup lists %q after Untrack through the control device, want nothing", list)
	}
}

// loopDevices makes a sparse file of each size (MiB) in dir and a loop
// device over it, removed with the test, and returns the devices by name.
func loopDevices(t *testing.T, dir string, mib map[string]int) map[string]string {
	t.Helper()
	loops := map[string]string{}
	for name, size := range mib {
		file := filepath.Join(dir, name)
		sh(t, "mkdir -p %s && truncate -s %dM %s", dir, size, file)
		loops[name] = sh(t, "losetup --show -f %s", file)
		t.Cleanup(func() { _, _ = trySh("losetup -d %s", loops[name]) })
	}
	return loops
}
