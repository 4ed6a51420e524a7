package guest

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/utils/exec"

	"github.com/ssdcache/ssdcache/pkg/command"
	"github.com/ssdcache/ssdcache/pkg/dm"
)

// TestKernelReadsMatchDmsetup: the plugin reads devices, tables and
// statuses with ioctls on /dev/mapper/control (pkg/dm/ioctl.go); on the real
// kernel they must read exactly what dmsetup reads. A linear device, a
// dm-cache over loop devices, a two-target device, one suspended and one
// with an inactive table loaded.
func TestKernelReadsMatchDmsetup(t *testing.T) {
	e := guestEnv(t)
	dir := filepath.Join(e.work, "dmioctl")
	loops := map[string]string{}
	for _, f := range []struct {
		name string
		mib  int
	}{{"meta", 8}, {"data", 32}, {"origin", 64}} {
		file := filepath.Join(dir, f.name)
		sh(t, "mkdir -p %s && truncate -s %dM %s", dir, f.mib, file)
		loops[f.name] = sh(t, "losetup --show -f %s", file)
		t.Cleanup(func() { _, _ = trySh("losetup -d %s", loops[f.name]) })
	}
	devices := map[string]string{
		"ioctl-linear": fmt.Sprintf("0 65536 linear %s 0", loops["origin"]),
		"ioctl-cache":  fmt.Sprintf("0 131072 cache %s %s %s 128 1 writethrough smq 0", loops["meta"], loops["data"], loops["origin"]),
		"ioctl-two":    "0 8 zero\n8 8 error",
	}
	for name, table := range devices {
		sh(t, "printf '%%b\\n' %q | dmsetup create %s", table, name)
		t.Cleanup(func() { _, _ = trySh("dmsetup resume %s; dmsetup remove %s", name, name) })
	}
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
	states, err := kernel.States(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if st, err := dm.ParseCacheStatus(states["ioctl-cache"].Status); err != nil || st.ReadMisses+st.ReadHits == 0 {
		t.Errorf("States' cache status %+v (%v): the reads made show no hit or miss", st, err)
	}
	t.Logf("control device and dmsetup agree on %d devices; %s", len(fromKernel), sh(t, "dmsetup info -c"))
}
