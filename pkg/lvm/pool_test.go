package lvm_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ssdcache/ssdcache/pkg/blockdev"
	"github.com/ssdcache/ssdcache/pkg/blockdev/blockdevfake"
	"github.com/ssdcache/ssdcache/pkg/lvm"
	"github.com/ssdcache/ssdcache/pkg/lvm/lvmfake"
)

const (
	blank = "/dev/disk/by-id/nvme-blank"
	ext4  = "/dev/disk/by-id/nvme-ext4"
	gpt   = "/dev/disk/by-id/ata-gpt"
	pv    = "/dev/disk/by-id/ata-foreign-pv"
	held  = "/dev/disk/by-id/ata-held"
)

func world() (*lvmfake.LVM, *blockdevfake.Devices) {
	dev := blockdevfake.New()
	dev.Add(blank, blockdevfake.Device{Node: "/dev/nvme0n1", Size: 10 << 30})
	dev.Add(ext4, blockdevfake.Device{Node: "/dev/nvme1n1", Size: 10 << 30, Signatures: []blockdev.Signature{{Type: "ext4", Offset: "0x438"}}})
	dev.Add(gpt, blockdevfake.Device{Node: "/dev/sda", Size: 10 << 30, Signatures: []blockdev.Signature{{Type: "gpt", Offset: "0x200"}, {Type: "PMBR", Offset: "0x1fe"}}})
	dev.Add(pv, blockdevfake.Device{Node: "/dev/sdb", Size: 10 << 30, Signatures: []blockdev.Signature{{Type: blockdev.LVMMember, Offset: "0x218"}}})
	dev.Add(held, blockdevfake.Device{Node: "/dev/sdc", Size: 10 << 30, Holders: []string{"dm-7"}})
	l := lvmfake.New()
	l.Resolve = func(d string) string { n, _ := dev.Resolve(d); return n }
	l.AddPV("/dev/sdb", "homevg")
	return l, dev
}

// Safety rule 3: a device carrying a filesystem, a partition table or a
// foreign LVM signature is refused, and nothing is written to it.
func TestSafetyRule3_RefusesDevicesInUse(t *testing.T) {
	for _, tc := range []struct {
		device, want string
	}{
		{ext4, "carries a ext4 signature at offset 0x438"},
		{gpt, "carries a gpt signature"},
		{pv, `belongs to volume group "homevg"`},
		// A plain dm-crypt or multipath map leaves no signature: holders show it.
		{held, "is in use by dm-7"},
	} {
		t.Run(tc.device, func(t *testing.T) {
			l, dev := world()
			var writes []string
			l.Record = func(e string) { writes = append(writes, e) }
			dev.Record = func(e string) { writes = append(writes, e) }
			_, err := lvm.NewPools(l, dev).Ensure(context.Background(), lvm.PoolConfig{VG: "ssdcache-nvme", Role: "cache", Devices: []string{blank, tc.device}})
			if !errors.Is(err, lvm.ErrDeviceInUse) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.device) {
				t.Fatalf("err = %v, want ErrDeviceInUse mentioning %q and the device", err, tc.want)
			}
			if len(writes) != 0 {
				t.Fatalf("refusal wrote to devices: %v", writes)
			}
		})
	}
}

func TestSafetyRule3_OnlyByIDPaths(t *testing.T) {
	l, dev := world()
	for _, bad := range []string{"/dev/nvme0n1", "/dev/disk/by-id/", "/dev/disk/by-id/../../sda", "nvme-x"} {
		_, err := lvm.NewPools(l, dev).Ensure(context.Background(), lvm.PoolConfig{VG: "vg", Role: "cache", Devices: []string{bad}})
		if !errors.Is(err, lvm.ErrInvalidDevice) || !strings.Contains(err.Error(), "/dev/disk/by-id/") {
			t.Errorf("%s: err = %v", bad, err)
		}
	}
}

func TestAdoptWipesOnlyNamedDevice(t *testing.T) {
	l, dev := world()
	vg, err := lvm.NewPools(l, dev).Ensure(context.Background(), lvm.PoolConfig{
		VG: "ssdcache-nvme", Role: "cache", Devices: []string{blank, ext4}, Adopt: []string{ext4},
	})
	if err != nil {
		t.Fatal(err)
	}
	if vg.Size != 20<<30 {
		t.Fatalf("vg size %d", vg.Size)
	}
	if sigs, _ := dev.Signatures(context.Background(), ext4); len(sigs) != 0 {
		t.Fatalf("adopted device still has %v", sigs)
	}
}

func TestEnsureIsIdempotentAndExtends(t *testing.T) {
	l, dev := world()
	pools := lvm.NewPools(l, dev)
	cfg := lvm.PoolConfig{VG: "ssdcache-nvme", Role: "cache", Devices: []string{blank}}
	if _, err := pools.Ensure(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	// Second start: the device now carries our LVM signature and must be recognised, not refused.
	if err := dev.Wipe(context.Background(), blank); err != nil {
		t.Fatal(err)
	}
	dev.Add(blank, blockdevfake.Device{Node: "/dev/nvme0n1", Size: 10 << 30, Signatures: []blockdev.Signature{{Type: blockdev.LVMMember}}})
	vg, err := pools.Ensure(context.Background(), cfg)
	if err != nil || vg.Size != 10<<30 {
		t.Fatalf("restart: vg %+v err %v", vg, err)
	}
	dev.Add("/dev/disk/by-id/nvme-new", blockdevfake.Device{Node: "/dev/nvme2n1", Size: 10 << 30})
	cfg.Devices = append(cfg.Devices, "/dev/disk/by-id/nvme-new")
	if vg, err = pools.Ensure(context.Background(), cfg); err != nil || vg.Size != 20<<30 {
		t.Fatalf("extend: vg %+v err %v", vg, err)
	}
}

func TestRefusesForeignVGWithOurName(t *testing.T) {
	l, dev := world()
	l.AddVG("ssdcache-nvme", 1<<30)
	_, err := lvm.NewPools(l, dev).Ensure(context.Background(), lvm.PoolConfig{VG: "ssdcache-nvme", Role: "cache", Devices: []string{blank}})
	if !errors.Is(err, lvm.ErrDeviceInUse) || !strings.Contains(err.Error(), "not an ssdcache pool") {
		t.Fatalf("err = %v", err)
	}
}

// Restricted to its pool devices (--devices), LVM names each PV by its by-id
// path, not its kernel name: a restarted plugin must still recognise the
// pool's own members, which carry an LVM signature, instead of refusing them.
func TestEnsureRecognisesMembersNamedByID(t *testing.T) {
	l, dev := world()
	l.Resolve = func(d string) string { return d }
	cfg := lvm.PoolConfig{VG: "ssdcache-nvme", Role: "cache", Devices: []string{blank}}
	if _, err := lvm.NewPools(l, dev).Ensure(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	dev.Add(blank, blockdevfake.Device{Node: "/dev/nvme0n1", Size: 10 << 30, Signatures: []blockdev.Signature{{Type: blockdev.LVMMember, Offset: "0x218"}}})
	var writes []string
	l.Record = func(e string) { writes = append(writes, e) }
	if _, err := lvm.NewPools(l, dev).Ensure(context.Background(), cfg); err != nil {
		t.Fatalf("second Ensure (a restart): %v", err)
	}
	if len(writes) != 0 {
		t.Fatalf("second Ensure changed the pool: %v", writes)
	}
}

// missingWorld is a cache pool on two devices, the second of which died
// with volume pvc-1's cache on it; pvc-2's cache sits on the survivor.
func missingWorld(t *testing.T) (*lvmfake.LVM, *blockdevfake.Devices, *[]string) {
	t.Helper()
	l, dev := world()
	ctx := context.Background()
	l.AddVG("ssdcache-nvme", 20<<30, lvm.PoolTagPrefix+"cache")
	for _, vol := range []string{"pvc-1", "pvc-2"} {
		for name, role := range map[string]lvm.Role{".cache-data": lvm.RoleCacheData, ".cache-meta": lvm.RoleCacheMetadata} {
			lv, err := l.CreateLV(ctx, "ssdcache-nvme", vol+name, 1<<30, lvm.Tags(vol, role))
			if err != nil {
				t.Fatal(err)
			}
			dev.Add(lv.Path, blockdevfake.Device{Node: fmt.Sprintf("/dev/dm-%d", lv.DevNum.Minor)})
		}
	}
	l.LosePV("ssdcache-nvme", "/dev/disk/by-id/nvme-dead", "pvc-1.cache-data", "pvc-1.cache-meta")
	var writes []string
	l.Record = func(e string) { writes = append(writes, e) }
	return l, dev, &writes
}

// The dropped caches' LVs go with the missing PV; the survivor's stay and
// the VG can be changed again.
func TestRemoveMissingTakesOnlyTheDroppedCachesLVs(t *testing.T) {
	l, dev, writes := missingWorld(t)
	ctx := context.Background()
	got, err := lvm.NewPools(l, dev).RemoveMissing(ctx, "ssdcache-nvme", "cache")
	if err != nil {
		t.Fatal(err)
	}
	if got.MissingPVs != 1 || len(got.LVs) != 2 || got.LVs[0].Volume() != "pvc-1" || got.LVs[1].Volume() != "pvc-1" {
		t.Fatalf("reduced %+v, want 1 PV and pvc-1's two LVs", got)
	}
	if len(*writes) != 1 || (*writes)[0] != "lvm reducemissing ssdcache-nvme" {
		t.Fatalf("writes %v, want one vgreduce", *writes)
	}
	left, _ := l.ListLVs(ctx, "ssdcache-nvme")
	if len(left) != 2 || left[0].Volume() != "pvc-2" {
		t.Fatalf("left %+v, want pvc-2's LVs", left)
	}
	if _, err := l.CreateLV(ctx, "ssdcache-nvme", "pvc-3.cache-data", 1<<20, nil); err != nil {
		t.Fatalf("the reduced VG still refuses changes: %v", err)
	}
	again, err := lvm.NewPools(l, dev).RemoveMissing(ctx, "ssdcache-nvme", "cache")
	if err != nil || again.MissingPVs != 0 || len(*writes) != 2 {
		t.Fatalf("second call: %+v %v, writes %v; want nothing done", again, err, *writes)
	}
}

// A cache LV on the missing PV that a table still uses (its cache was not
// dropped), or an LV ssdcache did not make, stops the removal: nothing is
// changed and the error names them.
func TestRemoveMissingRefusesLVsInUseOrUnknown(t *testing.T) {
	for _, tc := range []struct {
		name    string
		prepare func(*lvmfake.LVM, *blockdevfake.Devices)
		want    string
	}{
		{"held by a live table", func(l *lvmfake.LVM, dev *blockdevfake.Devices) {
			lv, _ := lvm.FindLV(context.Background(), l, "ssdcache-nvme", "pvc-1.cache-data")
			d, _ := dev.Resolve(lv.Path)
			dev.Add(lv.Path, blockdevfake.Device{Node: d, Holders: []string{"dm-9"}})
		}, "pvc-1.cache-data (used by dm-9)"},
		{"holders unreadable", func(l *lvmfake.LVM, dev *blockdevfake.Devices) {
			dev.Remove("/dev/ssdcache-nvme/pvc-1.cache-meta")
		}, "pvc-1.cache-meta (reading its holders"},
		// Made before the PV went missing (the fake, as LVM, refuses lvcreate after).
		{"unknown LV", nil, "not ssdcache cache LVs: notes (tags [team=a])"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, dev, writes := missingWorld(t)
			if tc.prepare == nil {
				l, dev = world()
				l.AddVG("ssdcache-nvme", 20<<30, lvm.PoolTagPrefix+"cache")
				_, _ = l.CreateLV(context.Background(), "ssdcache-nvme", "notes", 1<<20, []string{"team=a"})
				l.LosePV("ssdcache-nvme", "/dev/disk/by-id/nvme-dead", "notes")
				writes = &[]string{}
				l.Record = func(e string) { *writes = append(*writes, e) }
			} else {
				tc.prepare(l, dev)
			}
			_, err := lvm.NewPools(l, dev).RemoveMissing(context.Background(), "ssdcache-nvme", "cache")
			if !errors.Is(err, lvm.ErrMissingPVInUse) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrMissingPVInUse naming %q", err, tc.want)
			}
			if len(*writes) != 0 {
				t.Fatalf("a refusal changed LVM: %v", *writes)
			}
		})
	}
}

// A same-named VG without ssdcache's pool tag is never reduced.
func TestRemoveMissingLeavesForeignVGs(t *testing.T) {
	l, dev := world()
	l.AddVG("ssdcache-nvme", 20<<30)
	l.LosePV("ssdcache-nvme", "/dev/disk/by-id/nvme-dead")
	if _, err := lvm.NewPools(l, dev).RemoveMissing(context.Background(), "ssdcache-nvme", "cache"); !errors.Is(err, lvm.ErrMissingPVInUse) {
		t.Fatalf("err = %v, want a refusal", err)
	}
}

// lostWorld is a single-device cache VG holding pvc-1's and pvc-2's cache
// LVs whose device died: LVM no longer finds the VG, the kernel keeps the
// LVs' devices. holders are what the kernel lists stacked on pvc-1's data
// LV's device.
func lostWorld(t *testing.T, holders ...string) (*lvmfake.LVM, *blockdevfake.Devices, *[]string) {
	t.Helper()
	l, dev := world()
	ctx := context.Background()
	l.AddVG("ssdcache-nvme", 20<<30, lvm.PoolTagPrefix+"cache")
	for _, name := range []string{"pvc-1.cache-data", "pvc-1.cache-meta", "pvc-2.cache-data", "pvc-2.cache-meta2"} {
		lv, err := l.CreateLV(ctx, "ssdcache-nvme", name, 1<<30, nil)
		if err != nil {
			t.Fatal(err)
		}
		d := blockdevfake.Device{Node: fmt.Sprintf("/dev/dm-%d", lv.DevNum.Minor)}
		if name == "pvc-1.cache-data" {
			d.Holders = holders
		}
		dev.Add("/dev/mapper/"+lvm.DMName("ssdcache-nvme", name), d)
	}
	l.LoseVG("ssdcache-nvme")
	var writes []string
	l.Record = func(e string) { writes = append(writes, e) }
	return l, dev, &writes
}

// The devices left of a lost single-device cache VG's cache LVs are
// removed, so that a new VG of the name can activate those volumes' LVs.
func TestRemoveStaleTakesTheLostVGsCacheLVDevices(t *testing.T) {
	l, dev, writes := lostWorld(t)
	ctx := context.Background()
	got, err := lvm.NewPools(l, dev).RemoveStale(ctx, "ssdcache-nvme", "cache")
	if err != nil {
		t.Fatal(err)
	}
	want := "lvm removedevice ssdcache--nvme-pvc--1.cache--data,lvm removedevice ssdcache--nvme-pvc--1.cache--meta," +
		"lvm removedevice ssdcache--nvme-pvc--2.cache--data,lvm removedevice ssdcache--nvme-pvc--2.cache--meta2"
	if strings.Join(*writes, ",") != want {
		t.Fatalf("writes %v, want %s", *writes, want)
	}
	if len(got.Devices) != 4 || strings.Join(got.Volumes(), ",") != "pvc-1,pvc-2" {
		t.Fatalf("removed %+v (volumes %v), want 4 devices of pvc-1 and pvc-2", got, got.Volumes())
	}
	if left, _ := l.KernelLVs(ctx, "ssdcache-nvme"); len(left) != 0 {
		t.Fatalf("devices left: %+v", left)
	}
	again, err := lvm.NewPools(l, dev).RemoveStale(ctx, "ssdcache-nvme", "cache")
	if err != nil || len(again.Devices) != 0 || len(*writes) != 4 {
		t.Fatalf("second call: %+v %v; want nothing done", again, err)
	}
}

// Nothing is removed, and the error names the devices, while one is used or
// is not provably a cache LV of one lost ssdcache VG; a VG LVM finds is
// never touched.
func TestRemoveStaleRefusesDevicesInUseOrUnknown(t *testing.T) {
	for _, tc := range []struct {
		name    string
		holders []string
		prepare func(*lvmfake.LVM, *blockdevfake.Devices)
		want    string
	}{
		{name: "stacked", holders: []string{"dm-9"}, want: "used by dm-9"},
		{name: "open", prepare: func(l *lvmfake.LVM, _ *blockdevfake.Devices) {
			l.AddKernelLV(lvm.KernelLV{Device: "ssdcache--nvme-pvc--3.cache--data", VG: "ssdcache-nvme", LV: "pvc-3.cache-data",
				UUID: "LVM-" + strings.Repeat("0", 31) + "1" + strings.Repeat("9", 32), OpenCount: 1})
		}, want: "ssdcache--nvme-pvc--3.cache--data (open 1 times)"},
		{name: "not a cache LV", prepare: func(l *lvmfake.LVM, _ *blockdevfake.Devices) {
			l.AddKernelLV(lvm.KernelLV{Device: "ssdcache--nvme-home", VG: "ssdcache-nvme", LV: "home", UUID: "LVM-" + strings.Repeat("0", 31) + "1" + strings.Repeat("8", 32)})
		}, want: "ssdcache--nvme-home (LV home"},
		{name: "not made by LVM", prepare: func(l *lvmfake.LVM, _ *blockdevfake.Devices) {
			l.AddKernelLV(lvm.KernelLV{Device: "ssdcache--nvme-pvc--4.cache--data", VG: "ssdcache-nvme", LV: "pvc-4.cache-data", UUID: "CRYPT-x"})
		}, want: "pvc-4.cache-data"},
		{name: "of another VG of the name", prepare: func(l *lvmfake.LVM, _ *blockdevfake.Devices) {
			l.AddKernelLV(lvm.KernelLV{Device: "ssdcache--nvme-pvc--5.cache--data", VG: "ssdcache-nvme", LV: "pvc-5.cache-data", UUID: "LVM-" + strings.Repeat("7", 64)})
		}, want: "pvc-5.cache-data"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, dev, writes := lostWorld(t, tc.holders...)
			if tc.prepare != nil {
				tc.prepare(l, dev)
			}
			_, err := lvm.NewPools(l, dev).RemoveStale(context.Background(), "ssdcache-nvme", "cache")
			if !errors.Is(err, lvm.ErrStaleInUse) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrStaleInUse naming %q", err, tc.want)
			}
			if len(*writes) != 0 {
				t.Fatalf("removed %v despite the refusal", *writes)
			}
		})
	}
	t.Run("VG found", func(t *testing.T) {
		l, dev, writes := lostWorld(t)
		l.AddVG("ssdcache-nvme", 20<<30, lvm.PoolTagPrefix+"cache")
		if got, err := lvm.NewPools(l, dev).RemoveStale(context.Background(), "ssdcache-nvme", "cache"); err != nil || len(got.Devices) != 0 || len(*writes) != 0 {
			t.Fatalf("RemoveStale of a VG LVM finds: %+v %v, writes %v; want nothing done", got, err, *writes)
		}
	})
}

// The names RemoveStale takes for cache LVs are those of pkg/cache's.
func TestCacheLVVolume(t *testing.T) {
	for name, want := range map[string]string{"pvc-1.cache-data": "pvc-1", "pvc-1.cache-meta": "pvc-1", "pvc-1.cache-meta2": "pvc-1",
		"pvc-1": "", ".cache-data": "", "pvc-1.cache-data.x": "", "home": ""} {
		if got, ok := lvm.CacheLVVolume(name); got != want || ok != (want != "") {
			t.Errorf("CacheLVVolume(%q) = %q, %v; want %q", name, got, ok, want)
		}
	}
}
