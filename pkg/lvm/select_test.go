package lvm_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/ssdcache/ssdcache/pkg/blockdev"
	"github.com/ssdcache/ssdcache/pkg/lvm"
)

// fleetNode is one node's disks: two data HDDs, the OS disk (an HDD too,
// with a partition), two NVMe SSDs, and an LV.
func fleetNode() []blockdev.Disk {
	const tb = 1 << 40
	return []blockdev.Disk{
		{Node: "/dev/sda", Links: []string{"/dev/disk/by-id/ata-WDC_OS_1", "/dev/disk/by-id/wwn-0x50014ee0"}, Size: tb / 4, Rotational: true, Model: "WDC WD2500"},
		{Node: "/dev/sda1", Links: []string{"/dev/disk/by-id/ata-WDC_OS_1-part1"}, Size: tb / 8, Rotational: true, Partition: true},
		{Node: "/dev/sdb", Links: []string{"/dev/disk/by-id/ata-ST4000NM_ZC1", "/dev/disk/by-id/wwn-0x5000c500a1"}, Size: 4 * tb, Rotational: true, Model: "ST4000NM0035"},
		{Node: "/dev/sdc", Links: []string{"/dev/disk/by-id/ata-ST4000NM_ZC2", "/dev/disk/by-id/wwn-0x5000c500a2"}, Size: 4 * tb, Rotational: true, Model: "ST4000NM0035"},
		{Node: "/dev/nvme0n1", Links: []string{"/dev/disk/by-id/nvme-Samsung_SSD_980_S1", "/dev/disk/by-id/nvme-eui.0025"}, Size: tb, Model: "Samsung SSD 980"},
		{Node: "/dev/nvme1n1", Links: []string{"/dev/disk/by-id/nvme-Samsung_SSD_980_S2", "/dev/disk/by-id/nvme-eui.0026"}, Size: tb, Model: "Samsung SSD 980"},
		{Node: "/dev/dm-0", Links: []string{"/dev/disk/by-id/dm-name-ssdcache--hdd-pvc--1"}, Size: tb / 2},
	}
}

func sel(t *testing.T, s string) lvm.Selector {
	t.Helper()
	parsed, err := lvm.ParseSelector(s)
	if err != nil {
		t.Fatal(err)
	}
	return parsed
}

func TestSelectorsResolveToByIDPaths(t *testing.T) {
	for _, c := range []struct {
		name, selector string
		paths          []string
		want           []string
	}{
		{"by-id glob names the disk by the matching link", "by-id=/dev/disk/by-id/nvme-Samsung*", nil,
			[]string{"/dev/disk/by-id/nvme-Samsung_SSD_980_S1", "/dev/disk/by-id/nvme-Samsung_SSD_980_S2"}},
		{"model and size leave out the OS disk", "model=ST4000*,min-size=1Ti,rotational=true", nil,
			[]string{"/dev/disk/by-id/ata-ST4000NM_ZC1", "/dev/disk/by-id/ata-ST4000NM_ZC2"}},
		{"wwn links of the large HDDs", "by-id=/dev/disk/by-id/wwn-*,min-size=2Ti", nil,
			[]string{"/dev/disk/by-id/wwn-0x5000c500a1", "/dev/disk/by-id/wwn-0x5000c500a2"}},
		{"non-rotational never matches an LV", "rotational=false", nil,
			[]string{"/dev/disk/by-id/nvme-Samsung_SSD_980_S1", "/dev/disk/by-id/nvme-Samsung_SSD_980_S2"}},
		{"a disk named by path is not added twice", "model=ST4000*", []string{"/dev/disk/by-id/wwn-0x5000c500a1"},
			[]string{"/dev/disk/by-id/wwn-0x5000c500a1", "/dev/disk/by-id/ata-ST4000NM_ZC2"}},
		{"max-size", "max-size=300Gi,rotational=true", nil, []string{"/dev/disk/by-id/ata-WDC_OS_1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := lvm.ResolvePool(fleetNode(), lvm.PoolDevices{VG: "vg", Paths: c.paths, Selector: sel(t, c.selector)})
			if err != nil || !slices.Equal(got, c.want) {
				t.Fatalf("got %v, %v; want %v", got, err, c.want)
			}
		})
	}
}

func TestSelectorMatchingNothingSaysWhatItSaw(t *testing.T) {
	_, err := lvm.ResolvePool(fleetNode(), lvm.PoolDevices{VG: "ssdcache-nvme", Selector: sel(t, "by-id=/dev/disk/by-id/nvme-INTEL*")})
	if !errors.Is(err, lvm.ErrNoDevice) {
		t.Fatalf("err = %v, want ErrNoDevice", err)
	}
	for _, want := range []string{"ssdcache-nvme", `"by-id=/dev/disk/by-id/nvme-INTEL*"`, "/dev/disk/by-id/nvme-Samsung_SSD_980_S1", "/dev/nvme0n1",
		`model "Samsung SSD 980"`, "non-rotational", "by-id, model, min-size, max-size, rotational"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q: %v", want, err)
		}
	}
	if strings.Contains(err.Error(), "part1") || strings.Contains(err.Error(), "dm-name") {
		t.Errorf("error offers a partition or an LV as a candidate: %v", err)
	}
}

func TestSelectorsOfBothPoolsMustNotOverlap(t *testing.T) {
	disks := fleetNode()
	origin := lvm.PoolDevices{VG: "ssdcache-hdd", Selector: sel(t, "min-size=1Ti")}
	cache := lvm.PoolDevices{VG: "ssdcache-nvme", Selector: sel(t, "by-id=/dev/disk/by-id/nvme-*")}
	o, err1 := lvm.ResolvePool(disks, origin)
	c, err2 := lvm.ResolvePool(disks, cache)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	err := lvm.CheckDisjoint(disks, origin, cache, o, c)
	if !errors.Is(err, lvm.ErrAmbiguousDevice) {
		t.Fatalf("err = %v, want ErrAmbiguousDevice", err)
	}
	for _, want := range []string{"/dev/nvme0n1", `selector "min-size=1Ti"`, `selector "by-id=/dev/disk/by-id/nvme-*"`, "ssdcache-hdd", "ssdcache-nvme", "one pool only"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q: %v", want, err)
		}
	}
	origin.Selector = sel(t, "rotational=true,min-size=1Ti")
	if o, err = lvm.ResolvePool(disks, origin); err != nil {
		t.Fatal(err)
	}
	if err := lvm.CheckDisjoint(disks, origin, cache, o, c); err != nil {
		t.Fatalf("disjoint selectors refused: %v", err)
	}
}

func TestParseSelector(t *testing.T) {
	s := sel(t, "by-id=/dev/disk/by-id/ata-ST*, model=ST4000 NM*,min-size=1Ti,max-size=8T,rotational=true")
	if s.String() != "by-id=/dev/disk/by-id/ata-ST*,model=ST4000 NM*,min-size=1Ti,max-size=8T,rotational=true" {
		t.Errorf("String() = %q", s.String())
	}
	if again := sel(t, s.String()); again.String() != s.String() {
		t.Errorf("String() does not parse back: %q", again.String())
	}
	if z := sel(t, ""); !z.IsZero() {
		t.Errorf("empty selector = %+v", z)
	}
	for in, want := range map[string]string{
		"size=1Ti":                       "with keys by-id, model",
		"rotational=yes":                 "want true (HDDs) or false (SSDs)",
		"min-size=-1":                    "positive quantity",
		"min-size=2Ti,max-size=1Ti":      "above max-size",
		"by-id=/dev/sd*":                 "/dev/disk/by-id/<id>",
		"by-id=/dev/disk/by-id/a/b":      "/dev/disk/by-id/<id>",
		"model=[":                        "not a glob pattern",
		"model=a,model=b":                "once per key",
		"by-id=/dev/disk/by-id/nvme-[x-": "not a glob pattern",
	} {
		if _, err := lvm.ParseSelector(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseSelector(%q) = %v, want an error saying %q", in, err, want)
		}
	}
}
