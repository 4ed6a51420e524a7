package vm

import (
	"strings"
	"testing"
)

// TestQEMUCommand pins what a boot cannot show went wrong: TCG only, the
// host root read-only, and no way out to the host's network: no NIC at all,
// or only the tap device, with qemu inside the caller's namespace.
func TestQEMUCommand(t *testing.T) {
	for _, tc := range []struct {
		network      *Network
		want, banned []string
	}{
		{nil, []string{"qemu-system-x86_64 ", "-nic none"}, []string{"-netdev", "virtio-net"}},
		{&Network{NetNS: "e2e-ns", Tap: "tap0"}, []string{
			"ip netns exec e2e-ns qemu-system-x86_64 ",
			"-netdev tap,id=net0,ifname=tap0,script=no,downscript=no",
		}, []string{"-nic none"}},
	} {
		cfg, err := withDefaults(Config{WorkDir: "/w", Network: tc.network})
		if err != nil {
			t.Fatal(err)
		}
		name, argv := (&VM{cfg: cfg}).qemuCommand("/s/hdd.sock")
		cmdline := name + " " + strings.Join(argv, " ")
		for _, want := range append(tc.want,
			"-accel tcg", "-nodefaults",
			"path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap",
			"path=/w/share,mount_tag=hostwork",
			"nvme,serial="+SSDSerial, "serial="+HDDSerial,
			"server.type=unix,server.path=/s/hdd.sock,export=hdd",
		) {
			if !strings.Contains(cmdline, want) {
				t.Errorf("qemu command lacks %q:\n%s", want, cmdline)
			}
		}
		// User-mode networking would reach the host's network: never.
		for _, banned := range append(tc.banned, "kvm", "user,", "hostfwd") {
			if strings.Contains(cmdline, banned) {
				t.Errorf("qemu command contains %q:\n%s", banned, cmdline)
			}
		}
	}
}
