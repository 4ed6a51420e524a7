package guest

import (
	"strings"
	"testing"
)

// A tenant owns its volume's bytes: a Block-mode volume may carry a PV label
// and a volume group named like the node's origin pool. The node's LVM reads
// only the pool devices (--devices), so the node keeps starting, provisioning
// and staging; unrestricted, LVM would find two "ssdcache-hdd" VGs and every
// pool operation on the node would fail.
func TestSafetyTenantLVMLabelIgnored(t *testing.T) {
	e := guestEnv(t)
	p := startPlugin(t, e)
	v := p.provision(t, "tenant-lvm", 64<<20, nil, blockCapability())
	p.stage(t, v)
	dev := "/dev/mapper/ssdcache-" + v.id
	sh(t, "lvm pvcreate -q -y --devices %[1]s %[1]s && lvm vgcreate -q --devices %[1]s %[2]s %[1]s", dev, originVG)
	t.Cleanup(func() { _, _ = trySh("wipefs -a -q %s", dev) })
	unrestricted, _ := trySh("lvm vgs -o vg_name,vg_uuid,pv_name 2>&1")
	t.Logf("unrestricted `lvm vgs` with the tenant's label in place:\n%s", unrestricted)

	p.restart()
	other := p.provision(t, "tenant-lvm-other", 64<<20, nil, blockCapability())
	p.stage(t, other)
	p.unstage(t, other)
	if _, err := p.ctrl.DeleteVolume(ctx(t), deleteRequest(other)); err != nil {
		t.Fatalf("DeleteVolume with a tenant's VG named %s on the node: %v\n%s", originVG, err, p.diagnose())
	}
	if out := sh(t, "lvm vgs --noheadings -o pv_name --devices %s,%s %s", e.hdd, e.ssd, originVG); strings.Contains(out, "mapper") {
		t.Fatalf("the pool's VG lists the tenant's device: %s", out)
	}
	sh(t, "wipefs -a -q %s", dev)
	p.unstage(t, v)
	if _, err := p.ctrl.DeleteVolume(ctx(t), deleteRequest(v)); err != nil {
		t.Fatal(err)
	}
}
