package guest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// loopDisk makes a loop device backed by a file, runs prepare on it and
// links it under /dev/disk/by-id as udev would for a real disk.
func loopDisk(t *testing.T, e env, name string, prepare string) (byID, node string) {
	t.Helper()
	file := filepath.Join(e.work, name+".img")
	sh(t, "truncate -s 64M %s", file)
	node = sh(t, "losetup --find --show %s", file)
	t.Cleanup(func() { _, _ = trySh("losetup -d %s", node) })
	if prepare != "" {
		sh(t, prepare, node)
	}
	byID = "/dev/disk/by-id/ssdcache-test-" + name
	sh(t, "ln -sf %s %s", node, byID)
	t.Cleanup(func() { _ = os.Remove(byID) })
	return byID, node
}

// Safety rule 3 on real devices: a disk named in the pool list that carries
// a filesystem or a partition table is refused and left byte for byte as it
// was, the plugin running not ready and saying why (it retries: the
// operator may wipe the disk); a kernel device name is refused before
// anything is looked at, and the plugin exits, as no retry can fix it.
func TestSafetyRule3_RefusesDisksInUse(t *testing.T) {
	e := guestEnv(t)
	cases := []struct {
		name, prepare, device, want string
	}{
		{"ext4", "mkfs.ext4 -q %s", "", "carries a ext4 signature"},
		{"gpt", "echo 'label: gpt' | sfdisk -q %s", "", "carries a gpt signature"},
		{"kernel-name", "", "/dev/loop-kernel-name", "only stable /dev/disk/by-id/<id> paths"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			byID, node := loopDisk(t, e, c.name, c.prepare)
			device := byID
			if c.device != "" {
				device = node
			}
			before := sh(t, "dd if=%s bs=1M count=4 status=none | sha256sum", node)
			if c.device == "" {
				p := startUnready(t, e, "safety-"+c.name, "--origin-vg=safety-"+c.name, "--origin-devices="+device)
				p.waitNotReady(c.want)
				if !strings.Contains(p.log.String(), device) {
					t.Fatalf("refusal does not name %s:\n%s", device, p.log)
				}
				p.stop()
			} else {
				out, err := runNodeToExit(e, "--origin-vg=safety-"+c.name, "--origin-devices="+device)
				if err == nil {
					t.Fatalf("ssdcache-node accepted %s:\n%s", device, out)
				}
				if !strings.Contains(out, c.want) || !strings.Contains(out, device) {
					t.Fatalf("refusal does not say %q about %s (%v):\n%s", c.want, device, err, out)
				}
			}
			if after := sh(t, "dd if=%s bs=1M count=4 status=none | sha256sum", node); after != before {
				t.Fatalf("refused device %s was written to", device)
			}
		})
	}
}

// An operator may adopt a device explicitly: then its signature is wiped.
func TestAdoptedDiskIsTaken(t *testing.T) {
	e := guestEnv(t)
	byID, node := loopDisk(t, e, "adopt", "mkfs.ext4 -q %s")
	p := launch(t, e, filepath.Join(e.work, "adopt.sock"), []string{"--origin-vg=adopt-hdd", "--origin-devices=" + byID, "--adopt-devices=" + byID})
	if out := sh(t, "pvs --noheadings -o vg_name %s", node); strings.TrimSpace(out) != "adopt-hdd" {
		t.Fatalf("adopted device is in VG %q", out)
	}
	p.stop()
	sh(t, "vgremove -y adopt-hdd && pvremove -y %s", node)
}

// runNodeToExit runs ssdcache-node expecting it to refuse its flags and
// stop by itself, and returns its output and how it ended. It may take until
// the suite's deadline, but one that serves its CSI socket has accepted the
// flags and would never stop: it is killed then, and the error says so.
func runNodeToExit(e env, args ...string) (string, error) {
	socket := filepath.Join(e.work, "refused.sock")
	_ = os.Remove(socket) // left by an earlier case that was accepted
	all := append([]string{"--agent=false", "--node-name=" + nodeName, "--csi-endpoint=unix://" + socket, "--metrics-address="}, args...)
	cmd := exec.Command(e.nodeBin, all...)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return "", err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var exitErr error
	err := poll("ssdcache-node to exit", 100*time.Millisecond, func() (bool, string, error) {
		select {
		case exitErr = <-exited:
			return true, "", nil
		default:
		}
		if _, err := os.Stat(socket); err == nil {
			return false, "", fmt.Errorf("it serves its CSI socket %s: it accepted the flags", socket)
		}
		return false, "still running; its last log lines:\n" + lastLines(out.String(), 5), nil
	})
	if err != nil {
		_ = cmd.Process.Kill()
		<-exited
		return out.String(), err
	}
	return out.String(), exitErr
}
