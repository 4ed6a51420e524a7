package bench

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/ssdcache/ssdcache/pkg/blockdev"
	"github.com/ssdcache/ssdcache/pkg/dm"
)

// fakeSysfs lays out what sysfs shows for a cached volume: dm-3 (the
// volume) over dm-0 (the origin LV, on sdb) and dm-1, dm-2 (cache data and
// metadata LVs, on the partition nvme0n1p1), each device linked from
// /sys/dev/block and, but for the partition, from /sys/block.
func fakeSysfs(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	blocks := filepath.Join(root, "devices", "virtual", "block")
	write := func(path, value string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(value+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, name string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, name); err != nil {
			t.Fatal(err)
		}
	}
	devices := map[string]string{ // sysfs directory -> major:minor
		filepath.Join(blocks, "dm-0"): "253:0", filepath.Join(blocks, "dm-1"): "253:1",
		filepath.Join(blocks, "dm-2"): "253:2", filepath.Join(blocks, "dm-3"): "253:3",
		filepath.Join(root, "devices", "pci0", "block", "sdb"):                  "8:16",
		filepath.Join(root, "devices", "pci1", "block", "nvme0n1"):              "259:0",
		filepath.Join(root, "devices", "pci1", "block", "nvme0n1", "nvme0n1p1"): "259:1",
	}
	for dir, num := range devices {
		write(filepath.Join(dir, "dev"), num)
		write(filepath.Join(dir, "stat"), "1 0 8 2 0 0 0 0 0 3 4")
		link(dir, filepath.Join(root, "dev", "block", num))
		if filepath.Base(filepath.Dir(dir)) == "block" { // not a partition: /sys/block lists it
			link(dir, filepath.Join(root, "block", filepath.Base(dir)))
		}
	}
	for i, name := range []string{"ssdcache--hdd-pvc--1", "ssdcache--nvme-pvc--1.cache--data", "ssdcache--nvme-pvc--1.cache--meta", "ssdcache-pvc-1"} {
		write(filepath.Join(blocks, "dm-"+string(rune('0'+i)), "dm", "name"), name)
	}
	for _, dm := range []string{"dm-0", "dm-1", "dm-2"} {
		link(filepath.Join(blocks, dm), filepath.Join(blocks, "dm-3", "slaves", dm))
	}
	link(filepath.Join(root, "devices", "pci0", "block", "sdb"), filepath.Join(blocks, "dm-0", "slaves", "sdb"))
	part := filepath.Join(root, "devices", "pci1", "block", "nvme0n1", "nvme0n1p1")
	link(part, filepath.Join(blocks, "dm-1", "slaves", "nvme0n1p1"))
	link(part, filepath.Join(blocks, "dm-2", "slaves", "nvme0n1p1"))
	write(filepath.Join(part, "partition"), "1")
	write(filepath.Join(root, "devices", "pci0", "block", "sdb", "queue", "rotational"), "1")
	write(filepath.Join(root, "devices", "pci0", "block", "sdb", "device", "model"), "ST4000NM0035")
	write(filepath.Join(root, "devices", "pci1", "block", "nvme0n1", "queue", "rotational"), "0")
	write(filepath.Join(root, "devices", "pci1", "block", "nvme0n1", "device", "model"), "Samsung SSD 980")
	return root
}

func TestSysfsDisksFindsTheDisksUnderACachedVolume(t *testing.T) {
	s := SysfsDisks{Root: fakeSysfs(t)}
	disks, err := s.under(dm.DevNum{Major: 253, Minor: 3})
	if err != nil {
		t.Fatal(err)
	}
	want := []Disk{
		{Name: "dm-3/ssdcache-pvc-1", Role: DiskTarget, num: dm.DevNum{Major: 253, Minor: 3}},
		// The cache LVs share one partition: listed once, with its disk's flag and model.
		{Name: "nvme0n1p1", Role: DiskBelow, Model: "Samsung SSD 980", num: dm.DevNum{Major: 259, Minor: 1}},
		{Name: "sdb", Role: DiskBelow, Rotational: true, Model: "ST4000NM0035", num: dm.DevNum{Major: 8, Minor: 16}},
	}
	if len(disks) != len(want) {
		t.Fatalf("disks %+v, want %+v", disks, want)
	}
	for i := range want {
		if disks[i] != want[i] {
			t.Errorf("disk %d: %+v, want %+v", i, disks[i], want[i])
		}
	}
	for _, d := range disks {
		st, err := s.Read(d)
		if err != nil {
			t.Fatal(err)
		}
		if st.ReadIOs != 1 || st.ReadBytes != 8*dm.SectorSize || st.IOTicks != 3 {
			t.Errorf("counters of %s %+v", d.Name, st)
		}
	}
}

func TestSysfsDisksAWholeDiskIsItsOwnBottom(t *testing.T) {
	disks, err := SysfsDisks{Root: fakeSysfs(t)}.under(dm.DevNum{Major: 8, Minor: 16})
	if err != nil {
		t.Fatal(err)
	}
	if len(disks) != 1 || disks[0].Name != "sdb" || disks[0].Role != DiskTarget || !disks[0].Rotational {
		t.Fatalf("disks of a raw disk: %+v, want sdb alone as the target", disks)
	}
}

func TestSysfsDisksUnknownDevice(t *testing.T) {
	_, err := SysfsDisks{Root: fakeSysfs(t)}.under(dm.DevNum{Major: 0, Minor: 45})
	if err == nil || !strings.Contains(err.Error(), "device 0:45 in sysfs") {
		t.Fatalf("err = %v, want one naming the device", err)
	}
}

func TestDiskFiguresAreIostats(t *testing.T) {
	delta := blockdev.IOStats{ReadIOs: 150, ReadBytes: 120e6, ReadTicks: 600, WriteIOs: 50, WriteBytes: 10e6, WriteTicks: 400,
		IOTicks: 1800, TimeInQueue: 4000}
	f := diskFigures(Disk{Name: "sdb", Role: DiskBelow}, delta, 2*time.Second)
	want := DiskFigures{Disk: "sdb", Role: DiskBelow, ReadIOPS: 75, WriteIOPS: 25, ReadBytes: 120e6, WriteBytes: 10e6, ReadMBps: 60, WriteMBps: 5,
		AwaitMs: 5, QueueDepth: 2, Utilization: 0.9}
	if f != want {
		t.Errorf("figures %+v, want %+v", f, want)
	}
	// io_ticks can exceed the wall time measured around it by a tick.
	if f := diskFigures(Disk{}, blockdev.IOStats{IOTicks: 1010}, time.Second); f.Utilization != 1 {
		t.Errorf("utilisation %v, want at most 1", f.Utilization)
	}
	if f := diskFigures(Disk{}, delta, 0); f.ReadIOPS != 0 || f.Utilization != 0 {
		t.Errorf("figures over no time: %+v, want zeros", f)
	}
}

// steppingDisks answers every read of a disk with one more step of I/O and
// moves the clock half a second, so a test's figures are known.
type steppingDisks struct {
	clock *clocktesting.FakeClock
	under map[string][]Disk
	reads map[string]uint64
}

func (s *steppingDisks) Under(path string) ([]Disk, error) {
	d, ok := s.under[path]
	if !ok {
		return nil, os.ErrNotExist
	}
	return d, nil
}

func (s *steppingDisks) Read(d Disk) (blockdev.IOStats, error) {
	s.reads[d.Name]++
	s.clock.Step(500 * time.Millisecond)
	n := s.reads[d.Name]
	return blockdev.IOStats{ReadIOs: 100 * n, ReadBytes: 50e6 * n, ReadTicks: 200 * n, IOTicks: 800 * n, TimeInQueue: 1500 * n}, nil
}

func TestRunRecordsDiskFiguresPerTest(t *testing.T) {
	h := newHarness()
	clock := clocktesting.NewFakeClock(time.Unix(0, 0))
	h.deps.Clock = clock
	h.deps.Disks = &steppingDisks{clock: clock, reads: map[string]uint64{}, under: map[string][]Disk{
		"/mnt/vol/bench.dat": {{Name: "dm-3/ssdcache-pvc-1", Role: DiskTarget}, {Name: "sdb", Role: DiskBelow, Rotational: true}},
	}}
	cfg := testConfig(t)
	cfg.Runs = 1
	b, err := New(cfg, h.deps)
	if err != nil {
		t.Fatal(err)
	}
	r, err := b.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Disks) != 1 || r.Disks[0].Target != "ssdcache" || len(r.Disks[0].Disks) != 2 {
		t.Fatalf("report disks %+v, want the two under the ssdcache target", r.Disks)
	}
	if n := strings.Count(h.progress.String(), "target raw-ssd: no disk figures"); n != 1 {
		t.Errorf("progress says %d times why raw-ssd has no disk figures, want once:\n%s", n, h.progress)
	}
	for _, res := range r.Results {
		if res.Target != "ssdcache" {
			if res.Disks != nil {
				t.Fatalf("%s has disk figures without disks", res.Target)
			}
			continue
		}
		// One step of I/O over fio's runtime (the recorded JSON's), not
		// the wall time around the test (the fake clock's second).
		ms := float64(res.RuntimeMs)
		want := DiskFigures{Disk: "sdb", Role: DiskBelow, ReadIOPS: 100 / (ms / 1000), ReadBytes: 50e6, ReadMBps: 50 / (ms / 1000), AwaitMs: 2,
			QueueDepth: 1500 / ms, Utilization: min(800/ms, 1)}
		if len(res.Disks) != 2 || res.Disks[1] != want {
			t.Fatalf("run %d %s: disk figures %+v, want sdb's %+v", res.Run, res.Test, res.Disks, want)
		}
	}
	var md bytes.Buffer
	if err := WriteMarkdown(&md, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Disks under each target", "| ssdcache | sdb | below | true | - |",
		// 50 MB over the recorded fio run's 55 ms.
		"| 1 | SEQ1M Q8T1 read | sdb | 100% | 909.1 | 0.0 | 1818 | 2.00 | 27.27 |"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("report.md lacks %q:\n%s", want, md.String())
		}
	}
}
