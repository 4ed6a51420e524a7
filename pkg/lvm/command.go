package lvm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/ssdcache/ssdcache/pkg/command"
	"github.com/ssdcache/ssdcache/pkg/dm"
)

// Command implements Interface by running lvm with JSON reports.
type Command struct {
	run *command.Runner
	// dm reads and removes the devices of the LVs of a VG LVM no longer
	// finds (KernelLVs), which no lvm command can reach.
	dm *dm.Dmsetup
	// devDir holds LVM's /dev/<vg>/<lv> links ("/dev").
	devDir string
	// config is passed as --config to every command, e.g. to disable udev
	// synchronisation on nodes (or VMs) without udev.
	config string

	mu sync.Mutex
	// devices are the only devices LVM may read (--devices) when restricted.
	devices    string
	restricted bool
}

// ErrNoPoolDevices is returned by a Command restricted to no device at all
// (no pool device resolved on the node yet): LVM would otherwise read every
// block device, the tenants' volumes too.
var ErrNoPoolDevices = errors.New("no pool device known on this node yet; not running LVM")

// NewCommand returns the real LVM layer. config may be empty. devices, when
// given, are the only block devices LVM scans: the node's pool devices.
// Without them LVM reads the label of every block device on the node,
// including the volumes' dm devices, whose content tenants write: a crafted PV
// label there would make a second "ssdcache-hdd" appear, and on a node with
// many volumes every command pays for scanning them all.
func NewCommand(run *command.Runner, config string, devices ...string) *Command {
	c := &Command{run: run, config: config, dm: dm.NewDmsetup(run), devDir: "/dev"}
	if len(devices) > 0 {
		c.UseDevices(devices)
	}
	return c
}

// UseDevices restricts LVM to devices from now on: the node plugin's pool
// devices, which device selectors resolve at run time. An empty list makes
// every command fail with ErrNoPoolDevices instead of scanning the node.
func (c *Command) UseDevices(devices []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.devices, c.restricted = strings.Join(devices, ","), true
}

var _ Interface = (*Command)(nil)

func (c *Command) lvm(ctx context.Context, sub string, args ...string) ([]byte, error) {
	full := []string{sub}
	if c.config != "" {
		full = append(full, "--config", c.config)
	}
	c.mu.Lock()
	devices, restricted := c.devices, c.restricted
	c.mu.Unlock()
	if restricted && devices == "" {
		return nil, fmt.Errorf("lvm %s: %w", sub, ErrNoPoolDevices)
	}
	if devices != "" {
		full = append(full, "--devices", devices)
	}
	return c.run.Run(ctx, "lvm", append(full, args...)...)
}

func (c *Command) report(ctx context.Context, sub, fields string, args ...string) ([]map[string]string, error) {
	base := []string{"--reportformat", "json", "--units", "b", "--nosuffix", "-o", fields}
	out, err := c.lvm(ctx, sub, append(base, args...)...)
	if err != nil {
		return nil, err
	}
	return parseReport(out)
}

// parseReport flattens LVM's {"report":[{"lv":[{...}]}]} into rows.
func parseReport(out []byte) ([]map[string]string, error) {
	var doc struct {
		Report []map[string][]map[string]string `json:"report"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return nil, fmt.Errorf("parse lvm report: %w", err)
	}
	var rows []map[string]string
	for _, section := range doc.Report {
		for _, r := range section {
			rows = append(rows, r...)
		}
	}
	return rows, nil
}

func (c *Command) ListPVs(ctx context.Context) ([]PV, error) {
	rows, err := c.report(ctx, "pvs", "pv_name,vg_name")
	if err != nil {
		return nil, err
	}
	pvs := make([]PV, 0, len(rows))
	for _, r := range rows {
		pvs = append(pvs, PV{Name: r["pv_name"], VG: r["vg_name"]})
	}
	return pvs, nil
}

func (c *Command) GetVG(ctx context.Context, name string) (VG, error) {
	rows, err := c.report(ctx, "vgs", "vg_name,vg_size,vg_free,vg_extent_size,vg_tags,vg_missing_pv_count", name)
	if err != nil {
		var cmdErr *command.Error
		if errors.As(err, &cmdErr) && strings.Contains(cmdErr.Stderr, "not found") {
			return VG{}, fmt.Errorf("volume group %s: %w", name, ErrNotFound)
		}
		return VG{}, err
	}
	if len(rows) != 1 {
		return VG{}, fmt.Errorf("volume group %s: %w", name, ErrNotFound)
	}
	return parseVG(rows[0])
}

func parseVG(r map[string]string) (VG, error) {
	var p numbers
	vg := VG{
		Name: r["vg_name"], Size: p.uint(r, "vg_size"), Free: p.uint(r, "vg_free"),
		ExtentSize: p.uint(r, "vg_extent_size"), Tags: splitTags(r["vg_tags"]), MissingPVs: p.uint(r, "vg_missing_pv_count"),
	}
	return vg, p.err
}

func (c *Command) CreateVG(ctx context.Context, name string, devices, tags []string) error {
	args := []string{"--yes"}
	for _, t := range tags {
		args = append(args, "--addtag", t)
	}
	args = append(append(args, name), devices...)
	_, err := c.lvm(ctx, "vgcreate", args...)
	return err
}

func (c *Command) ExtendVG(ctx context.Context, name string, devices []string) error {
	_, err := c.lvm(ctx, "vgextend", append([]string{"--yes", name}, devices...)...)
	return err
}

func (c *Command) ListLVs(ctx context.Context, vg string) ([]LV, error) {
	rows, err := c.report(ctx, "lvs", "lv_name,vg_name,lv_size,lv_tags,lv_path,lv_kernel_major,lv_kernel_minor,lv_health_status", vg)
	if err != nil {
		return nil, err
	}
	lvs := make([]LV, 0, len(rows))
	for _, r := range rows {
		lv, err := parseLV(r)
		if err != nil {
			return nil, err
		}
		lvs = append(lvs, lv)
	}
	return lvs, nil
}

func parseLV(r map[string]string) (LV, error) {
	var p numbers
	lv := LV{Name: r["lv_name"], VG: r["vg_name"], Size: p.uint(r, "lv_size"), Tags: splitTags(r["lv_tags"]), Path: r["lv_path"],
		Partial: r["lv_health_status"] == "partial"}
	// An inactive LV reports -1 for its kernel numbers.
	if major, minor := r["lv_kernel_major"], r["lv_kernel_minor"]; major != "" && major != "-1" {
		num, err := dm.ParseDevNum(major + ":" + minor)
		if err != nil {
			return LV{}, fmt.Errorf("lv %s: %w", lv.Name, err)
		}
		lv.DevNum = num
	}
	if lv.Path == "" {
		lv.Path = "/dev/" + lv.VG + "/" + lv.Name
	}
	return lv, p.err
}

func (c *Command) CreateLV(ctx context.Context, vg, name string, size uint64, tags []string) (LV, error) {
	args := []string{"--yes", "--name", name, "--size", fmt.Sprintf("%db", size), "--wipesignatures", "y", "--zero", "y"}
	for _, t := range tags {
		args = append(args, "--addtag", t)
	}
	if _, err := c.lvm(ctx, "lvcreate", append(args, vg)...); err != nil {
		var cmdErr *command.Error
		if errors.As(err, &cmdErr) && strings.Contains(cmdErr.Stderr, "Insufficient free space") {
			return LV{}, fmt.Errorf("create %s/%s of %d bytes: %w", vg, name, size, ErrNoSpace)
		}
		return LV{}, err
	}
	return FindLV(ctx, c, vg, name)
}

func (c *Command) ExtendLV(ctx context.Context, vg, name string, size uint64) error {
	_, err := c.lvm(ctx, "lvextend", "--size", fmt.Sprintf("%db", size), vg+"/"+name)
	var cmdErr *command.Error
	if errors.As(err, &cmdErr) && strings.Contains(cmdErr.Stderr, "Insufficient free space") {
		return fmt.Errorf("extend %s/%s to %d bytes: %w", vg, name, size, ErrNoSpace)
	}
	return err
}

func (c *Command) ActivateLV(ctx context.Context, vg, name string) error {
	_, err := c.lvm(ctx, "lvchange", "--activate", "y", vg+"/"+name)
	return err
}

func (c *Command) RemoveLV(ctx context.Context, vg, name string) error {
	_, err := c.lvm(ctx, "lvremove", "--yes", vg+"/"+name)
	var cmdErr *command.Error
	if errors.As(err, &cmdErr) && strings.Contains(cmdErr.Stderr, "Failed to find logical volume") {
		return fmt.Errorf("logical volume %s/%s: %w", vg, name, ErrNotFound)
	}
	return err
}

func (c *Command) ChangeTags(ctx context.Context, add, del []string, lvs ...LV) error {
	var args []string
	for _, t := range add {
		args = append(args, "--addtag", t)
	}
	for _, t := range del {
		args = append(args, "--deltag", t)
	}
	if len(args) == 0 || len(lvs) == 0 {
		return nil
	}
	for _, lv := range lvs {
		args = append(args, lv.VG+"/"+lv.Name)
	}
	_, err := c.lvm(ctx, "lvchange", args...)
	return err
}

func (c *Command) ReduceMissing(ctx context.Context, vg string) error {
	_, err := c.lvm(ctx, "vgreduce", "--removemissing", "--force", vg)
	return err
}

func splitTags(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// numbers parses report fields, keeping the first error.
type numbers struct{ err error }

func (p *numbers) uint(r map[string]string, key string) uint64 {
	v, err := strconv.ParseUint(r[key], 10, 64)
	if err != nil && p.err == nil {
		p.err = fmt.Errorf("lvm report field %s=%q is not a byte count", key, r[key])
	}
	return v
}

// KernelLVs lists the device-mapper devices named as LVs of vg, read from
// the kernel (dmsetup), not from LVM: those of a VG whose only PV died stay
// there after LVM stopped finding the VG.
func (c *Command) KernelLVs(ctx context.Context, vg string) ([]KernelLV, error) {
	devs, err := c.dm.ListWithUUIDs(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the device-mapper devices of %s's LVs: %w", vg, err)
	}
	return kernelLVsOf(devs, vg), nil
}

// RemoveKernelLV removes an LV's device-mapper device (dmsetup remove): the
// kernel refuses while it is open. Then it removes the LV's /dev/<vg>/<lv>
// link, left dangling, and /dev/<vg> once empty, as LVM's deactivation
// would: without udev rules for LVM (the plugin's image disables udev
// synchronisation, so LVM makes those links itself) nothing else does, and
// vgcreate refuses a VG whose /dev/<vg> exists ("already exists in
// filesystem"), as the kernel suite saw.
func (c *Command) RemoveKernelLV(ctx context.Context, d KernelLV) error {
	if err := c.dm.Remove(ctx, d.Device); err != nil {
		return err
	}
	dir := filepath.Join(c.devDir, d.VG)
	link := filepath.Join(dir, d.LV)
	if fi, err := os.Lstat(link); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		if _, err := os.Stat(link); errors.Is(err, os.ErrNotExist) { // dangling: its device is gone
			if err := os.Remove(link); err != nil {
				return fmt.Errorf("remove the link %s of the removed device %s: %w", link, d.Device, err)
			}
		}
	}
	if err := syscall.Rmdir(dir); err != nil && !errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EEXIST) {
		return fmt.Errorf("remove the directory %s of a VG LVM no longer finds: %w", dir, err)
	}
	return nil
}
