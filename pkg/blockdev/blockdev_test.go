package blockdev

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ssdcache/ssdcache/pkg/dm"
)

func TestParseWipefs(t *testing.T) {
	out := []byte(`{
   "signatures": [
      {"device":"vdb", "offset":"0x438", "type":"ext4", "uuid":"5e1d", "label":null},
      {"device":"vdb", "offset":"0x1fe", "type":"dos", "uuid":null, "label":null}
   ]
}`)
	sigs, err := ParseWipefs(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(sigs) != 2 || sigs[0].Type != "ext4" || sigs[1].Type != "dos" || sigs[0].Offset != "0x438" {
		t.Fatalf("got %+v", sigs)
	}
	if sigs, err := ParseWipefs([]byte("\n")); err != nil || sigs != nil {
		t.Fatalf("blank device: %v %v", sigs, err)
	}
	if _, err := ParseWipefs([]byte("{")); err == nil {
		t.Fatal("truncated JSON accepted")
	}
}

func FuzzParseWipefs(f *testing.F) {
	f.Add([]byte(`{"signatures":[{"type":"xfs","offset":"0x0"}]}`))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, out []byte) {
		sigs, err := ParseWipefs(out)
		if err != nil {
			return
		}
		// What parsed must survive a round trip through the same schema.
		again, err := json.Marshal(map[string][]Signature{"signatures": sigs})
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseWipefs(again)
		if err != nil || (len(sigs) > 0 && !reflect.DeepEqual(back, sigs)) {
			t.Fatalf("round trip of %q: %v, %v", out, back, err)
		}
	})
}

// statSysfs lays out sysfs as a node shows it: /sys/dev/block/M:m links to
// each device's directory, /sys/block links to the disks and dm devices, a
// partition is a directory of its disk. stats are the stat files' lines.
func statSysfs(t *testing.T, stats map[string]string) string {
	t.Helper()
	root := t.TempDir()
	// Where the kernel puts each: a dm device under virtual/block, an NVMe
	// namespace under its controller (no block/ in its path), a SCSI disk
	// under its host's block/, a partition inside its disk's directory.
	nvme := filepath.Join(root, "devices", "pci0000:00", "0000:00:04.0", "nvme", "nvme0", "nvme0n1")
	dirs := map[string]struct{ dir, num string }{
		"dm-3":      {filepath.Join(root, "devices", "virtual", "block", "dm-3"), "253:3"},
		"nvme0n1":   {nvme, "259:0"},
		"nvme0n1p1": {filepath.Join(nvme, "nvme0n1p1"), "259:1"},
		"sda":       {filepath.Join(root, "devices", "pci0000:00", "host0", "target0:0:0", "0:0:0:0", "block", "sda"), "8:0"},
	}
	for name, d := range dirs {
		writeFile(t, filepath.Join(d.dir, "stat"), stats[name])
		symlink(t, d.dir, filepath.Join(root, "dev", "block", d.num))
		if name == "nvme0n1p1" {
			writeFile(t, filepath.Join(d.dir, "partition"), "1")
		} else {
			symlink(t, d.dir, filepath.Join(root, "block", name))
		}
	}
	return root
}

func TestReadIOStats(t *testing.T) {
	root := statSysfs(t, map[string]string{
		"dm-3": "    1234        5    8000     100     40        0     160      30        2     120     130        7        1       64        3        9        4\n",
		// Kernels before 4.18 print the first eleven fields only.
		"nvme0n1p1": "1 0 8 2 3 0 16 4 0 5 6\n",
		"nvme0n1":   "1 2 3 4 5 6 7 8 9 10\n",
		"sda":       "3 0 24 1 0 0 0 0 0 1 1\n",
	})
	st, err := ReadIOStats(root, dm.DevNum{Major: 253, Minor: 3})
	if err != nil {
		t.Fatal(err)
	}
	want := IOStats{ReadIOs: 1234, ReadMerges: 5, ReadBytes: 8000 * 512, ReadTicks: 100,
		WriteIOs: 40, WriteBytes: 160 * 512, WriteTicks: 30, InFlight: 2, IOTicks: 120, TimeInQueue: 130,
		DiscardIOs: 7, DiscardMerges: 1, DiscardBytes: 64 * 512, DiscardTicks: 3, FlushIOs: 9, FlushTicks: 4}
	if st != want {
		t.Fatalf("dm-3: got %+v, want %+v", st, want)
	}
	// A partition is read under its disk in /sys/block.
	if st, err := ReadIOStats(root, dm.DevNum{Major: 259, Minor: 1}); err != nil || st.ReadBytes != 8*512 || st.IOTicks != 5 || st.TimeInQueue != 6 || st.DiscardIOs != 0 {
		t.Fatalf("partition with eleven fields: %+v, %v", st, err)
	}
	if _, err := ReadIOStats(root, dm.DevNum{Major: 259, Minor: 0}); err == nil || !strings.Contains(err.Error(), "10 fields") {
		t.Errorf("ten fields: err = %v, want a refusal naming the count", err)
	}
	if st, err := ReadIOStats(root, dm.DevNum{Major: 8, Minor: 0}); err != nil || st.ReadIOs != 3 {
		t.Errorf("a SCSI disk: %+v, %v", st, err)
	}
	if _, err := ReadIOStats(root, dm.DevNum{Major: 8, Minor: 16}); err == nil || !strings.Contains(err.Error(), "8:16") {
		t.Errorf("absent device: err = %v, want an error naming 8:16", err)
	}
	bad := statSysfs(t, map[string]string{"dm-3": "1 2 3 4 5 6 7 8 9 10 x\n"})
	if _, err := ReadIOStats(bad, dm.DevNum{Major: 253, Minor: 3}); err == nil {
		t.Error("a field that is not a number was accepted")
	}
}

func TestIOStatsSince(t *testing.T) {
	prev := IOStats{ReadIOs: 10, ReadBytes: 4096, ReadTicks: 50, WriteIOs: 2, WriteBytes: 512, IOTicks: 1<<32 - 100, TimeInQueue: 1<<32 - 10, InFlight: 3}
	cur := IOStats{ReadIOs: 30, ReadBytes: 12288, ReadTicks: 90, WriteIOs: 2, WriteBytes: 512, IOTicks: 400, TimeInQueue: 20, InFlight: 1}
	want := IOStats{ReadIOs: 20, ReadBytes: 8192, ReadTicks: 40, IOTicks: 500, TimeInQueue: 30, InFlight: 1}
	if got := cur.Since(prev); got != want {
		t.Fatalf("across a wrap of the 32-bit times: %+v, want %+v", got, want)
	}
	// A device re-created under the same number counts from zero.
	again := IOStats{ReadIOs: 3, ReadBytes: 1024, ReadTicks: 5, IOTicks: 6, InFlight: 1}
	if got := again.Since(cur); got != again {
		t.Fatalf("after a re-creation: %+v, want %+v", got, again)
	}
}

// ZeroHead writes only to the device the table will use: a path that opens
// something else (here a regular file, device 0:0) is refused untouched.
func TestZeroHeadRefusesAnotherDevice(t *testing.T) {
	path := filepath.Join(t.TempDir(), "not-the-lv")
	data := []byte("metadata that must survive")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	err := NewHost(nil).ZeroHead(path, dm.DevNum{Major: 253, Minor: 7}, 4096)
	if err == nil || !strings.Contains(err.Error(), "not 253:7") {
		t.Fatalf("err = %v, want a refusal naming the expected device", err)
	}
	if got, _ := os.ReadFile(path); string(got) != string(data) {
		t.Fatalf("refused path was written: %q", got)
	}
}

// inventorySysfs lays out /sys as the kernel does for the inventory:
// /sys/class/block/<name> links to the device's directory, wherever its bus
// puts it, and a partition's directory, with neither queue/ nor device/,
// sits in its disk's. attrs are each device's attribute files.
func inventorySysfs(t *testing.T, root string, attrs map[string]map[string]string) string {
	t.Helper()
	devices := filepath.Join(root, "sys", "devices")
	sda := filepath.Join(devices, "pci0000:00", "host0", "target0:0:0", "0:0:0:0", "block", "sda")
	nvme := filepath.Join(devices, "pci0000:00", "0000:00:04.0", "nvme", "nvme0", "nvme0n1")
	dirs := map[string]string{
		"sda": sda, "sda1": filepath.Join(sda, "sda1"),
		"nvme0n1": nvme, "nvme0n1p2": filepath.Join(nvme, "nvme0n1p2"),
		"dm-0": filepath.Join(devices, "virtual", "block", "dm-0"),
	}
	classBlock := filepath.Join(root, "sys", "class", "block")
	for name, dir := range dirs {
		for k, v := range attrs[name] {
			writeFile(t, filepath.Join(dir, k), v)
		}
		symlink(t, dir, filepath.Join(classBlock, name))
	}
	return classBlock
}

// TestSysInventory reads a tree laid out as /dev/disk/by-id and
// /sys/class/block are: two links of one HDD, a partition of it, an NVMe
// and a partition of it, a dm device, a dangling link of a device that went
// away and a link to a file sysfs does not know.
func TestSysInventory(t *testing.T) {
	root := t.TempDir()
	inv := SysInventory{ByIDDir: filepath.Join(root, "by-id")}
	inv.SysBlock = inventorySysfs(t, root, map[string]map[string]string{
		"sda":       {"size": "7814037168", "queue/rotational": "1", "device/model": "ST4000NM0035-1V4 \n"},
		"sda1":      {"size": "2048", "partition": "1"},
		"nvme0n1":   {"size": "1953525168", "queue/rotational": "0", "device/model": "Samsung SSD 980 PRO 1TB"},
		"nvme0n1p2": {"size": "4096", "partition": "2"},
		// A dm device over HDDs says rotational in its own queue/.
		"dm-0": {"size": "2048", "queue/rotational": "1"},
	})
	dev := filepath.Join(root, "dev")
	for _, name := range []string{"sda", "sda1", "nvme0n1", "nvme0n1p2", "dm-0", "notblock"} {
		writeFile(t, filepath.Join(dev, name), "")
	}
	for link, target := range map[string]string{
		"wwn-0x5000c500a1b2c3d4": "sda", "ata-ST4000NM0035_ZC1": "sda", "ata-ST4000NM0035_ZC1-part1": "sda1",
		"nvme-Samsung_SSD_980_PRO_1TB_S5": "nvme0n1", "nvme-Samsung_SSD_980_PRO_1TB_S5-part2": "nvme0n1p2",
		"dm-name-vg-lv": "dm-0", "ata-gone": "sdz", "ata-nosysfs": "notblock",
	} {
		symlink(t, filepath.Join(dev, target), filepath.Join(inv.ByIDDir, link))
	}
	disks, err := inv.Disks()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Disk{}
	for _, d := range disks {
		got[filepath.Base(d.Node)] = d
	}
	if len(got) != 5 {
		t.Fatalf("disks = %+v, want sda, sda1, nvme0n1, nvme0n1p2 and dm-0", disks)
	}
	sda := got["sda"]
	if sda.Size != 7814037168*512 || !sda.Rotational || sda.Model != "ST4000NM0035-1V4" || sda.Partition || sda.DeviceMapper ||
		!reflect.DeepEqual(sda.Links, []string{filepath.Join(inv.ByIDDir, "ata-ST4000NM0035_ZC1"), filepath.Join(inv.ByIDDir, "wwn-0x5000c500a1b2c3d4")}) {
		t.Errorf("sda = %+v", sda)
	}
	if nvme := got["nvme0n1"]; nvme.Rotational || nvme.Model != "Samsung SSD 980 PRO 1TB" || nvme.Partition {
		t.Errorf("nvme0n1 = %+v", nvme)
	}
	// A partition has no queue/ or device/ of its own: its disk's are read.
	if p := got["sda1"]; !p.Partition || p.Size != 2048*512 || !p.Rotational || p.Model != "ST4000NM0035-1V4" {
		t.Errorf("sda1 = %+v, want a rotational partition of model ST4000NM0035-1V4", p)
	}
	if p := got["nvme0n1p2"]; !p.Partition || p.Size != 4096*512 || p.Rotational || p.Model != "Samsung SSD 980 PRO 1TB" {
		t.Errorf("nvme0n1p2 = %+v, want a non-rotational partition of model Samsung SSD 980 PRO 1TB", p)
	}
	if d := got["dm-0"]; !d.DeviceMapper || d.Partition || !d.Rotational || d.Model != "" {
		t.Errorf("dm-0 = %+v, want a rotational dm device without a model", d)
	}
	if disks, err := (SysInventory{ByIDDir: filepath.Join(root, "none")}).Disks(); err != nil || len(disks) != 0 {
		t.Errorf("without a by-id dir: %v, %v", disks, err)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}
