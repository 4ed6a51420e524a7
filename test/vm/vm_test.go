package vm

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

func TestQEMUArgsHaveNoNetworkAndUseTCG(t *testing.T) {
	cfg, err := withDefaults(Config{WorkDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Join(qemuArgs(cfg, qemuPaths{nbdSocket: "/s/hdd.sock", share: "/w/share", ssdImage: "/w/ssd.img"}), " ")
	for _, want := range []string{
		"-accel tcg", "-nodefaults", "-nic none",
		"path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap",
		"path=/w/share,mount_tag=hostwork",
		"nvme,serial=" + SSDSerial, "serial=" + HDDSerial,
		"server.type=unix,server.path=/s/hdd.sock,export=hdd",
	} {
		if !strings.Contains(args, want) {
			t.Errorf("qemu args lack %q:\n%s", want, args)
		}
	}
	for _, banned := range []string{"kvm", "user,", "-netdev", "virtio-net"} {
		if strings.Contains(args, banned) {
			t.Errorf("qemu args contain %q:\n%s", banned, args)
		}
	}
}

func TestQEMUOnTapRunsInsideTheNamespace(t *testing.T) {
	cfg, err := withDefaults(Config{WorkDir: t.TempDir(), Network: &Network{NetNS: "e2e-ns", Tap: "tap0"}})
	if err != nil {
		t.Fatal(err)
	}
	name, argv := qemuCommand(cfg, qemuArgs(cfg, qemuPaths{}))
	cmdline := name + " " + strings.Join(argv, " ")
	if !strings.HasPrefix(cmdline, "ip netns exec e2e-ns qemu-system-x86_64 ") {
		t.Errorf("qemu does not start inside the namespace: %s", cmdline)
	}
	if !strings.Contains(cmdline, "-netdev tap,id=net0,ifname=tap0,script=no,downscript=no") {
		t.Errorf("no tap NIC: %s", cmdline)
	}
	// User-mode networking would reach the host's network: never.
	for _, banned := range []string{"user,", "-nic user", "hostfwd", "-nic none"} {
		if strings.Contains(cmdline, banned) {
			t.Errorf("qemu command contains %q: %s", banned, cmdline)
		}
	}
}

func TestConfigValidationNamesField(t *testing.T) {
	for _, c := range []struct {
		cfg   Config
		field string
	}{
		{Config{}, "WorkDir"},
		{Config{WorkDir: "x", HDDSize: 1 << 20}, "HDDSize"},
		{Config{WorkDir: "x", SSDSize: 3<<30 + 1}, "SSDSize"},
		{Config{WorkDir: "x", MemoryMiB: 128}, "MemoryMiB"},
		{Config{WorkDir: "x", CPUs: 64}, "CPUs"},
		{Config{WorkDir: "x", Network: &Network{Tap: "tap0"}}, "Network"},
	} {
		if _, err := withDefaults(c.cfg); err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("withDefaults(%+v) = %v, want error naming %s", c.cfg, err, c.field)
		}
	}
}

func TestNewWithoutSetupSaysWhatToRun(t *testing.T) {
	_, err := New(Config{WorkDir: t.TempDir(), CacheDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "hack/vm/setup.sh") {
		t.Fatalf("New() = %v, want a hint to run hack/vm/setup.sh", err)
	}
}

// TestVMKeepsDisksAcrossBootsAndPowerCut boots the real VM three times on
// the same work dir: the first writes data to both disks by their by-id
// links and exits 3; the second verifies it, then is killed while it runs;
// the third verifies it again.
func TestVMKeepsDisksAcrossBootsAndPowerCut(t *testing.T) {
	SkipUnlessEnabled(t)
	ctx := context.Background()
	v, err := New(Config{WorkDir: t.TempDir(), HDDSize: 256 << 20, SSDSize: 128 << 20, Timeout: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	const write = `set -e
for d in ` + HDDByID + ` ` + SSDByID + `; do
  yes "$d" | head -c 4194304 | dd of=$d bs=1M oflag=direct status=none
done
sync; echo written; exit 3`
	res, err := v.Run(ctx, write)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Finished || res.ExitCode != 3 || !strings.Contains(res.Stdout, "written") {
		t.Fatalf("first boot: finished=%v exit=%d stdout=%q stderr=%q\n%s", res.Finished, res.ExitCode, res.Stdout, res.Stderr, res.BootLog)
	}
	const verify = `set -e
for d in ` + HDDByID + ` ` + SSDByID + `; do
  cmp <(yes "$d" | head -c 4194304) <(head -c 4194304 $d)
done
echo verified`
	b, err := v.Start(ctx, verify+"; sleep 600")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, b, "verified", 3*time.Minute)
	b.Kill()
	res, err = b.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if res.Finished || res.ExitCode != -1 {
		t.Fatalf("killed boot reported finished=%v exit=%d", res.Finished, res.ExitCode)
	}
	res, err = v.Run(ctx, verify)
	if err != nil || !res.Finished || res.ExitCode != 0 {
		t.Fatalf("third boot: err=%v res=%+v", err, res)
	}
	t.Logf("last boot took %v; simulated HDD %d requests", res.Duration.Round(time.Second), res.HDDOps)
}

// waitFor polls the running boot's stdout for text.
func waitFor(t *testing.T, b *Boot, text string, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		data, _ := os.ReadFile(b.StdoutPath())
		if strings.Contains(string(data), text) {
			return
		}
		select {
		case <-b.Done():
			res, _ := b.Wait()
			t.Fatalf("guest ended before printing %q: exit %d\nstdout %q\nstderr %q", text, res.ExitCode, res.Stdout, res.Stderr)
		case <-deadline:
			b.Kill()
			t.Fatalf("%q not printed after %v: %q", text, timeout, data)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
