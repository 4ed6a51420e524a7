package vm

import (
	"strings"
	"testing"
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
