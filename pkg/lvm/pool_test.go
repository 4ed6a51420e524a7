package lvm_test

import (
	"context"
	"errors"
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
