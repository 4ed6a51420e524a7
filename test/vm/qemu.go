package vm

import (
	"strconv"

	"github.com/ssdcache/ssdcache/test/vm/hddsim/nbd"
)

// qemuPaths are the host files one boot uses.
type qemuPaths struct {
	kernel, initrd, console string
	share, ssdImage         string
	nbdSocket               string
}

// kernelCmdline keeps the console quiet (serial output is slow under TCG)
// but shows warnings such as I/O errors and dm messages.
const kernelCmdline = "console=ttyS0 panic=-1 loglevel=4 mitigations=off tsc=reliable random.trust_cpu=on"

// qemuArgs builds the emulator's command line: TCG only, no network device
// unless cfg.Network names a tap device, the host root read-only and the share read-write over 9p, the SSD
// as an NVMe controller on a raw file and the HDD as a SCSI disk whose
// backend is the NBD server on a unix socket.
func qemuArgs(cfg Config, p qemuPaths) []string {
	args := []string{
		"-accel", "tcg,thread=multi", "-cpu", "max",
		"-m", strconv.Itoa(cfg.MemoryMiB), "-smp", strconv.Itoa(cfg.CPUs),
		"-nodefaults", "-no-reboot", "-display", "none", "-monitor", "none",
		"-serial", "file:" + p.console,
		"-kernel", p.kernel, "-initrd", p.initrd, "-append", kernelCmdline,
		"-virtfs", "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap",
		"-virtfs", "local,path=" + p.share + ",mount_tag=hostwork,security_model=none,multidevs=remap",
	}
	args = append(args, nicArgs(cfg.Network)...)
	args = append(args,
		"-drive", "if=none,id=ssd,file="+p.ssdImage+",format=raw,cache=writeback,aio=threads,discard=unmap",
		"-device", "nvme,serial="+SSDSerial+",drive=ssd",
	)
	// No discard= on the HDD: left at ignore, qemu sends hddsim no trim,
	// which it does not offer.
	args = append(args,
		"-blockdev", "driver=nbd,node-name=hdd,server.type=unix,server.path="+p.nbdSocket+",export="+nbd.ExportName,
		"-device", "virtio-scsi-pci,id=scsi0",
		"-device", "scsi-hd,bus=scsi0.0,drive=hdd,serial="+HDDSerial+",rotation_rate=7200",
	)
	return args
}

func nicArgs(n *Network) []string {
	if n == nil {
		return []string{"-nic", "none"}
	}
	mac := n.MAC
	if mac == "" {
		mac = "52:54:00:00:00:02"
	}
	return []string{
		"-netdev", "tap,id=net0,ifname=" + n.Tap + ",script=no,downscript=no",
		"-device", "virtio-net-pci,netdev=net0,mac=" + mac,
	}
}

// qemuCommand is the program and arguments that start qemu: inside the
// caller's network namespace when the guest has a NIC.
func qemuCommand(cfg Config, args []string) (string, []string) {
	if cfg.Network == nil {
		return cfg.QEMU, args
	}
	return "ip", append([]string{"netns", "exec", cfg.Network.NetNS, cfg.QEMU}, args...)
}
