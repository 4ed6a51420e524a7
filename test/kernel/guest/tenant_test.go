package guest

import (
	"fmt"
	"path/filepath"
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
	writeTenantVG(t, e, dev, originVG)
	t.Cleanup(func() { _, _ = trySh("wipefs -a -q %s", dev) })
	unrestricted, _ := trySh("lvm vgs -o vg_name,vg_uuid,pv_name 2>&1")
	if !strings.Contains(unrestricted, "is used by VGs") {
		t.Fatalf("precondition: unrestricted LVM should see two VGs named %s:\n%s", originVG, unrestricted)
	}
	t.Logf("unrestricted `lvm vgs` with the tenant's label in place:\n%s", unrestricted)

	p.restart()
	other := p.provision(t, "tenant-lvm-other", 64<<20, nil, blockCapability())
	p.stage(t, other)
	p.unstage(t, other)
	if _, err := p.csi.Controller.DeleteVolume(ctx(t), deleteRequest(other)); err != nil {
		t.Fatalf("DeleteVolume with a tenant's VG named %s on the node: %v\n%s", originVG, err, p.diagnose())
	}
	if out := sh(t, "lvm vgs --noheadings -o pv_name --devices %s,%s %s", e.hdd, e.ssd, originVG); strings.Contains(out, "mapper") {
		t.Fatalf("the pool's VG lists the tenant's device: %s", out)
	}
	sh(t, "wipefs -a -q %s", dev)
	p.unstage(t, v)
	if _, err := p.csi.Controller.DeleteVolume(ctx(t), deleteRequest(v)); err != nil {
		t.Fatal(err)
	}
}

// writeTenantVG does what a tenant's pod can do to its Block volume: make it
// a PV of a VG named vg. It runs LVM as the pod would, with a /dev of its
// own (LVM refuses a VG name that exists under its dev dir, as the node's
// pool does in the node's /dev).
func writeTenantVG(t *testing.T, e env, dev, vg string) {
	t.Helper()
	podDev := filepath.Join(e.work, "tenant-dev")
	node := filepath.Join(podDev, "volume")
	sh(t, "mkdir -p %[1]s && rm -f %[2]s && mknod %[2]s b $(dmsetup info -c --noheadings -o major %[3]s) $(dmsetup info -c --noheadings -o minor %[3]s)",
		podDev, node, filepath.Base(dev))
	cfg := fmt.Sprintf(`devices { dir="%[1]s" scan=["%[1]s"] obtain_device_list_from_udev=0 }`, podDev)
	sh(t, "lvm pvcreate -q -y --config '%[1]s' --devices %[2]s %[2]s && lvm vgcreate -q --config '%[1]s' --devices %[2]s %[3]s %[2]s", cfg, node, vg)
}
