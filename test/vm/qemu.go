package vm

import (
	"cmp"
	"strconv"

	"github.com/ssdcache/ssdcache/test/vm/hddsim/nbd"
)

// kernelCmdline keeps the console quiet (serial output is slow under TCG)
// but shows warnings such as I/O errors and dm messages.
const kernelCmdline = "console=ttyS0 panic=-1 loglevel=4 mitigations=off tsc=reliable random.trust_cpu=on"

// qemuCommand is the program and arguments that start qemu: TCG only, the
// host root read-only and the share read-write over 9p, no network device
// unless cfg.Network names a tap device (then qemu runs inside the caller's
// network namespace), the SSD as an NVMe controller on a raw file and the
// HDD as a SCSI disk whose backend is the NBD server on nbdSocket.
func (v *VM) qemuCommand(nbdSocket string) (string, []string) {
	cfg, n := v.cfg, v.cfg.Network
	args := []string{
		"-accel", "tcg,thread=multi", "-cpu", "max",
		"-m", strconv.Itoa(cfg.MemoryMiB), "-smp", strconv.Itoa(cfg.CPUs),
		"-nodefaults", "-no-reboot", "-display", "none", "-monitor", "none",
		"-serial", "file:" + v.consolePath(),
		"-kernel", v.kernel, "-initrd", v.initrd, "-append", kernelCmdline,
		"-virtfs", "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap",
		"-virtfs", "local,path=" + v.ShareDir() + ",mount_tag=hostwork,security_model=none,multidevs=remap",
	}
	if n == nil {
		args = append(args, "-nic", "none")
	} else {
		args = append(args,
			"-netdev", "tap,id=net0,ifname="+n.Tap+",script=no,downscript=no",
			"-device", "virtio-net-pci,netdev=net0,mac="+cmp.Or(n.MAC, "52:54:00:00:00:02"))
	}
	args = append(args,
		"-drive", "if=none,id=ssd,file="+v.SSDImage()+",format=raw,cache=writeback,aio=threads,discard=unmap",
		"-device", "nvme,serial="+SSDSerial+",drive=ssd",
		// No discard= on the HDD: left at ignore, qemu sends hddsim no
		// trim, which it does not offer.
		"-blockdev", "driver=nbd,node-name=hdd,server.type=unix,server.path="+nbdSocket+",export="+nbd.ExportName,
		"-device", "virtio-scsi-pci,id=scsi0",
		"-device", "scsi-hd,bus=scsi0.0,drive=hdd,serial="+HDDSerial+",rotation_rate=7200",
	)
	if n == nil {
		return cfg.QEMU, args
	}
	// `ip netns exec` execs qemu in place, so the pid, Pdeathsig and the
	// kill on the boot's context still reach qemu itself.
	return "ip", append([]string{"netns", "exec", n.NetNS, cfg.QEMU}, args...)
}
