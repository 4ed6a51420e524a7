// Package vm boots Debian's kernel under qemu (software emulation) with an
// emulated NVMe SSD and a simulated HDD, runs a bash script inside and brings
// its output and exit code back. The guest's root is the host's root, shared
// read-only over 9p with a tmpfs overlay, so every host tool and every binary
// placed in the shared work dir runs inside unchanged.
//
//	v, err := vm.New(vm.Config{WorkDir: dir})
//	res, err := v.Run(ctx, "ls -l /dev/disk/by-id")
//
// Disk images live in WorkDir and survive between boots of the same VM, so a
// test can kill qemu mid-write (Boot.Kill) and boot again on the same disks.
package vm

import (
	"cmp"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/ssdcache/ssdcache/test/vm/hddsim/nbd"
)

// Guest-visible names. The by-id links are created by the guest's udevd from
// the serials below; the node plugin must only be given these paths.
const (
	GuestWorkDir = "/vmwork"
	HDDSerial    = "SSDCACHE-HDD-0"
	SSDSerial    = "SSDCACHE-NVME-0"
	HDDByID      = "/dev/disk/by-id/scsi-0QEMU_QEMU_HARDDISK_" + HDDSerial
	SSDByID      = "/dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_" + SSDSerial
	// EnableEnv must be "1" for SkipUnlessEnabled to let a VM test run.
	EnableEnv = "SSDCACHE_VM"
)

//go:embed guest_init.sh
var guestInit []byte

// Config describes the VM. Zero fields take the defaults noted.
type Config struct {
	// WorkDir holds hdd.img, ssd.img, console.log and share/ (the guest's
	// /vmwork). Required; created if missing.
	WorkDir string
	// CacheDir is where hack/vm/setup.sh put the kernel and initramfs
	// (default $CACHE_DIR or ~/.cache/ssdcache).
	CacheDir string
	// HDDSize and SSDSize are the disk sizes in bytes (4 GiB and 1 GiB).
	HDDSize, SSDSize int64
	// MemoryMiB (2048) and CPUs (2) size the guest.
	MemoryMiB, CPUs int
	// Timeout bounds one boot, script included (10 minutes).
	Timeout time.Duration
	// QEMU is the emulator binary (qemu-system-x86_64).
	QEMU string
	// Network, when set, gives the guest one virtio NIC on a tap device inside
	// a network namespace the caller created; nil means no NIC at all.
	Network *Network
	// Logger receives progress messages (klog.Background()).
	Logger *klog.Logger
}

// Network puts the guest's NIC on tap device Tap inside network namespace
// NetNS: qemu itself runs in that namespace (through `ip netns exec`), so the
// guest can reach only what the caller placed there. qemu's user-mode
// networking is never used.
type Network struct {
	NetNS, Tap string
	// MAC of the guest's NIC (52:54:00:00:00:02 when empty).
	MAC string
}

// VM is a prepared work dir plus the kernel to boot; boot it with Run or Start.
type VM struct {
	cfg    Config
	kernel string
	initrd string
	logger klog.Logger
}

// New validates cfg, fills defaults, finds the cached kernel and initramfs
// and prepares the work dir and disk images (kept if they already exist).
func New(cfg Config) (*VM, error) {
	cfg, err := withDefaults(cfg)
	if err != nil {
		return nil, err
	}
	kernel, initrd, err := locateKernel(cfg.CacheDir)
	if err != nil {
		return nil, err
	}
	v := &VM{cfg: cfg, kernel: kernel, initrd: initrd, logger: *cfg.Logger}
	if err := v.prepare(); err != nil {
		return nil, err
	}
	return v, nil
}

func withDefaults(cfg Config) (Config, error) {
	if cfg.WorkDir == "" {
		return cfg, errors.New("vm: Config.WorkDir is empty: give a directory for disk images and the shared dir")
	}
	abs, err := filepath.Abs(cfg.WorkDir)
	if err != nil {
		return cfg, fmt.Errorf("vm: Config.WorkDir=%q: %w", cfg.WorkDir, err)
	}
	cfg.WorkDir = abs
	cfg.CacheDir = cmp.Or(cfg.CacheDir, os.Getenv("CACHE_DIR"))
	if cfg.CacheDir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return cfg, fmt.Errorf("vm: Config.CacheDir is empty and no home dir: %w", err)
		}
		cfg.CacheDir = filepath.Join(home, ".cache", "ssdcache")
	}
	cfg.HDDSize = cmp.Or(cfg.HDDSize, 4<<30)
	cfg.SSDSize = cmp.Or(cfg.SSDSize, 1<<30)
	cfg.MemoryMiB = cmp.Or(cfg.MemoryMiB, 2048)
	cfg.CPUs = cmp.Or(cfg.CPUs, 2)
	cfg.Timeout = cmp.Or(cfg.Timeout, 10*time.Minute)
	cfg.QEMU = cmp.Or(cfg.QEMU, "qemu-system-x86_64")
	if cfg.Logger == nil {
		l := klog.Background()
		cfg.Logger = &l
	}
	return cfg, validate(cfg)
}

func validate(cfg Config) error {
	const mib = 1 << 20
	switch {
	case cfg.HDDSize < 64*mib || cfg.HDDSize%mib != 0:
		return fmt.Errorf("vm: Config.HDDSize=%d: must be a multiple of 1 MiB and at least 64 MiB", cfg.HDDSize)
	case cfg.SSDSize < 64*mib || cfg.SSDSize%mib != 0:
		return fmt.Errorf("vm: Config.SSDSize=%d: must be a multiple of 1 MiB and at least 64 MiB", cfg.SSDSize)
	case cfg.MemoryMiB < 512:
		return fmt.Errorf("vm: Config.MemoryMiB=%d: at least 512 is needed (the guest root's upper layer is in RAM)", cfg.MemoryMiB)
	case cfg.CPUs < 1 || cfg.CPUs > 8:
		return fmt.Errorf("vm: Config.CPUs=%d: must be 1-8", cfg.CPUs)
	case cfg.Timeout < 0:
		return fmt.Errorf("vm: Config.Timeout=%v: must be > 0", cfg.Timeout)
	case cfg.Network != nil && (cfg.Network.NetNS == "" || cfg.Network.Tap == ""):
		return fmt.Errorf("vm: Config.Network=%+v: NetNS and Tap are both required", *cfg.Network)
	}
	return nil
}

// locateKernel picks the newest kernel version that setup.sh prepared.
func locateKernel(cacheDir string) (kernel, initrd string, err error) {
	dirs, _ := filepath.Glob(filepath.Join(cacheDir, "vm", "*", "initrd.gz"))
	sort.Strings(dirs)
	for i := len(dirs) - 1; i >= 0; i-- {
		dir := filepath.Dir(dirs[i])
		if _, err := os.Stat(filepath.Join(dir, "vmlinuz")); err == nil {
			return filepath.Join(dir, "vmlinuz"), dirs[i], nil
		}
	}
	return "", "", fmt.Errorf("vm: no kernel and initramfs under %s/vm/<version>/: run hack/vm/setup.sh", cacheDir)
}

func (v *VM) prepare() error {
	if err := os.MkdirAll(v.guestFile(""), 0o755); err != nil {
		return fmt.Errorf("vm: creating work dir: %w", err)
	}
	// The HDD's image is opened by the NBD server at boot; the SSD's is a
	// plain sparse file that qemu opens. Existing images keep their contents.
	f, err := nbd.OpenFile(v.SSDImage(), v.cfg.SSDSize)
	if err != nil {
		return fmt.Errorf("vm: SSD image (Config.SSDSize=%d): %w", v.cfg.SSDSize, err)
	}
	return f.Close()
}

// ShareDir is the host directory the guest sees read-write at GuestWorkDir.
// Put host-built binaries (CGO_ENABLED=0) here before booting.
func (v *VM) ShareDir() string { return filepath.Join(v.cfg.WorkDir, "share") }

// HDDImage is the simulated HDD's backing file.
func (v *VM) HDDImage() string { return filepath.Join(v.cfg.WorkDir, "hdd.img") }

// SSDImage is the emulated NVMe's backing file.
func (v *VM) SSDImage() string { return filepath.Join(v.cfg.WorkDir, "ssd.img") }

// consolePath is the host file receiving the guest's serial console.
func (v *VM) consolePath() string { return filepath.Join(v.cfg.WorkDir, "console.log") }

// guestFile is a file the harness and guest_init.sh exchange: the script,
// its output and exit code, the init's boot log.
func (v *VM) guestFile(name string) string { return filepath.Join(v.ShareDir(), ".vm", name) }

// SkipUnlessEnabled skips t unless SSDCACHE_VM=1 and -short is off: booting
// a VM takes root-free but slow software emulation and the cached kernel.
func SkipUnlessEnabled(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("boots a VM: skipped under -short")
	}
	if os.Getenv(EnableEnv) != "1" {
		t.Skipf("boots a VM: set %s=1 (after hack/vm/setup.sh) to run", EnableEnv)
	}
}
