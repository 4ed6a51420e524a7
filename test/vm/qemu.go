package vm

import (
	"fmt"
	"strconv"
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
// at all, the host root read-only and the share read-write over 9p, the SSD
// as an NVMe controller on a raw file and the HDD as a SCSI disk whose
// backend is the NBD server on a unix socket.
func qemuArgs(cfg Config, p qemuPaths) []string {
	args := []string{
		"-accel", "tcg,thread=multi", "-cpu", "max",
		"-m", strconv.Itoa(cfg.MemoryMiB), "-smp", strconv.Itoa(cfg.CPUs),
		"-nodefaults", "-no-reboot", "-display", "none", "-monitor", "none", "-nic", "none",
		"-serial", "file:" + p.console,
		"-kernel", p.kernel, "-initrd", p.initrd, "-append", kernelCmdline,
		"-virtfs", "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap",
		"-virtfs", "local,path=" + p.share + ",mount_tag=hostwork,security_model=none,multidevs=remap",
	}
	args = append(args,
		"-drive", "if=none,id=ssd,file="+p.ssdImage+",format=raw,cache=writeback,aio=threads,discard=unmap",
		"-device", "nvme,serial="+SSDSerial+",drive=ssd",
	)
	args = append(args,
		"-blockdev", fmt.Sprintf("driver=nbd,node-name=hdd,server.type=unix,server.path=%s,export=hdd", p.nbdSocket),
		"-device", "virtio-scsi-pci,id=scsi0",
		"-device", "scsi-hd,bus=scsi0.0,drive=hdd,serial="+HDDSerial+",rotation_rate=7200",
	)
	return args
}
