// Package lvmfake is an in-memory LVM for unit tests.
package lvmfake

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/ssdcache/ssdcache/pkg/dm"
	"github.com/ssdcache/ssdcache/pkg/lvm"
)

const extent = 4 << 20

// LVM is a fake lvm.Interface with extent-rounded sizes and free-space accounting.
type LVM struct {
	mu  sync.Mutex
	vgs map[string]*lvm.VG
	lvs map[string][]lvm.LV // by VG
	pvs []lvm.PV
	// lost is the size of each VG's missing PVs (LosePV).
	lost map[string]uint64
	// kernel are the LV devices left of VGs LVM no longer finds (LoseVG, AddKernelLV).
	kernel []lvm.KernelLV
	next   uint32
	// DeviceSize gives the size of a device added to a VG (default 10 GiB).
	DeviceSize func(device string) uint64
	// Resolve maps a device path to the PV name reported by ListPVs.
	Resolve func(device string) string
	// FailOn makes the named operation ("createlv", "removelv", ...) fail once.
	FailOn map[string]error
	// Record, when set, receives every mutating call.
	Record func(event string)
}

// New returns an empty fake.
func New() *LVM {
	return &LVM{
		vgs: map[string]*lvm.VG{}, lvs: map[string][]lvm.LV{}, lost: map[string]uint64{}, FailOn: map[string]error{},
		DeviceSize: func(string) uint64 { return 10 << 30 },
		Resolve:    func(d string) string { return d },
	}
}

var _ lvm.Interface = (*LVM)(nil)

// AddVG creates a VG of size bytes directly, for tests that skip pool setup.
func (f *LVM) AddVG(name string, size uint64, tags ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.vgs[name] = &lvm.VG{Name: name, Size: size, Free: size, ExtentSize: extent, Tags: tags}
}

// AddPV registers a physical volume (of vg, or "" for an orphan).
func (f *LVM) AddPV(name, vg string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pvs = append(f.pvs, lvm.PV{Name: name, VG: vg})
}

func (f *LVM) record(op, detail string) error {
	if f.Record != nil {
		f.Record("lvm " + op + " " + detail)
	}
	if err, ok := f.FailOn[op]; ok {
		delete(f.FailOn, op)
		return err
	}
	return nil
}

func roundUp(n uint64) uint64 { return (n + extent - 1) / extent * extent }

func (f *LVM) ListPVs(context.Context) ([]lvm.PV, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.pvs), nil
}

func (f *LVM) GetVG(_ context.Context, name string) (lvm.VG, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	vg, ok := f.vgs[name]
	if !ok {
		return lvm.VG{}, fmt.Errorf("volume group %s: %w", name, lvm.ErrNotFound)
	}
	return *vg, nil
}

func (f *LVM) CreateVG(_ context.Context, name string, devices, tags []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("createvg", fmt.Sprint(name, devices)); err != nil {
		return err
	}
	if _, ok := f.vgs[name]; ok {
		return fmt.Errorf("volume group %s already exists", name)
	}
	f.vgs[name] = &lvm.VG{Name: name, ExtentSize: extent, Tags: tags}
	f.addDevices(name, devices)
	return nil
}

func (f *LVM) ExtendVG(_ context.Context, name string, devices []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("extendvg", fmt.Sprint(name, devices)); err != nil {
		return err
	}
	if _, ok := f.vgs[name]; !ok {
		return fmt.Errorf("volume group %s: %w", name, lvm.ErrNotFound)
	}
	if err := f.refuseMissing(name); err != nil {
		return err
	}
	f.addDevices(name, devices)
	return nil
}

func (f *LVM) addDevices(vg string, devices []string) {
	for _, d := range devices {
		size := f.DeviceSize(d)
		f.vgs[vg].Size += size
		f.vgs[vg].Free += size
		f.pvs = append(f.pvs, lvm.PV{Name: f.Resolve(d), VG: vg})
	}
}

func (f *LVM) ListLVs(_ context.Context, vg string) ([]lvm.LV, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.vgs[vg]; !ok {
		return nil, fmt.Errorf("volume group %s: %w", vg, lvm.ErrNotFound)
	}
	out := slices.Clone(f.lvs[vg])
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (f *LVM) CreateLV(_ context.Context, vg, name string, size uint64, tags []string) (lvm.LV, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("createlv", fmt.Sprintf("%s/%s %d", vg, name, size)); err != nil {
		return lvm.LV{}, err
	}
	g, ok := f.vgs[vg]
	if !ok {
		return lvm.LV{}, fmt.Errorf("volume group %s: %w", vg, lvm.ErrNotFound)
	}
	if err := f.refuseMissing(vg); err != nil {
		return lvm.LV{}, err
	}
	if f.index(vg, name) >= 0 {
		return lvm.LV{}, fmt.Errorf("logical volume %s/%s already exists", vg, name)
	}
	size = roundUp(size)
	if size > g.Free {
		return lvm.LV{}, fmt.Errorf("create %s/%s: %w", vg, name, lvm.ErrNoSpace)
	}
	g.Free -= size
	f.next++
	lv := lvm.LV{Name: name, VG: vg, Size: size, Tags: slices.Clone(tags), Path: "/dev/" + vg + "/" + name,
		DevNum: dm.DevNum{Major: 254, Minor: f.next}}
	f.lvs[vg] = append(f.lvs[vg], lv)
	return lv, nil
}

func (f *LVM) index(vg, name string) int {
	return slices.IndexFunc(f.lvs[vg], func(lv lvm.LV) bool { return lv.Name == name })
}

func (f *LVM) ExtendLV(_ context.Context, vg, name string, size uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("extendlv", fmt.Sprintf("%s/%s %d", vg, name, size)); err != nil {
		return err
	}
	i := f.index(vg, name)
	if i < 0 {
		return fmt.Errorf("logical volume %s/%s: %w", vg, name, lvm.ErrNotFound)
	}
	lv := &f.lvs[vg][i]
	size = roundUp(size)
	if size <= lv.Size {
		return fmt.Errorf("new size of %s/%s matches or is below the existing size", vg, name)
	}
	if size-lv.Size > f.vgs[vg].Free {
		return fmt.Errorf("extend %s/%s: %w", vg, name, lvm.ErrNoSpace)
	}
	f.vgs[vg].Free -= size - lv.Size
	lv.Size = size
	return nil
}

// Deactivate makes an LV inactive, as after a reboot without autoactivation.
func (f *LVM) Deactivate(vg, name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if i := f.index(vg, name); i >= 0 {
		f.lvs[vg][i].DevNum = dm.DevNum{}
	}
}

func (f *LVM) ActivateLV(_ context.Context, vg, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("activatelv", vg+"/"+name); err != nil {
		return err
	}
	i := f.index(vg, name)
	if i < 0 {
		return fmt.Errorf("logical volume %s/%s: %w", vg, name, lvm.ErrNotFound)
	}
	if f.lvs[vg][i].DevNum.IsZero() {
		f.next++
		f.lvs[vg][i].DevNum = dm.DevNum{Major: 254, Minor: f.next}
	}
	return nil
}

func (f *LVM) ChangeTags(_ context.Context, add, del []string, lvs ...lvm.LV) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	names := make([]string, len(lvs))
	for i, lv := range lvs {
		names[i] = lv.VG + "/" + lv.Name
	}
	if err := f.record("changetags", fmt.Sprintf("%s +%v -%v", strings.Join(names, " "), add, del)); err != nil {
		return err
	}
	var errs []error
	for _, ref := range lvs {
		i := f.index(ref.VG, ref.Name)
		if i < 0 {
			errs = append(errs, fmt.Errorf("logical volume %s/%s: %w", ref.VG, ref.Name, lvm.ErrNotFound))
			continue
		}
		lv := &f.lvs[ref.VG][i]
		lv.Tags = slices.DeleteFunc(lv.Tags, func(t string) bool { return slices.Contains(del, t) })
		for _, t := range add {
			if !slices.Contains(lv.Tags, t) {
				lv.Tags = append(lv.Tags, t)
			}
		}
	}
	return errors.Join(errs...)
}

func (f *LVM) RemoveLV(_ context.Context, vg, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("removelv", vg+"/"+name); err != nil {
		return err
	}
	i := f.index(vg, name)
	if i < 0 {
		return fmt.Errorf("logical volume %s/%s: %w", vg, name, lvm.ErrNotFound)
	}
	if err := f.refuseMissing(vg); err != nil {
		return err
	}
	f.vgs[vg].Free += f.lvs[vg][i].Size
	f.lvs[vg] = slices.Delete(f.lvs[vg], i, i+1)
	return nil
}

// refuseMissing fails as LVM does for a change of a VG with missing PVs.
func (f *LVM) refuseMissing(vg string) error {
	if g, ok := f.vgs[vg]; ok && g.MissingPVs > 0 {
		return fmt.Errorf("Cannot change VG %s while PVs are missing", vg)
	}
	return nil
}

// LosePV makes vg's PV on device missing, as a dead disk does: LVM no
// longer lists the PV, the VG counts it missing and lvs on it turn partial.
func (f *LVM) LosePV(vg, device string, lvs ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.vgs[vg].MissingPVs++
	f.lost[vg] += f.DeviceSize(device)
	f.pvs = slices.DeleteFunc(f.pvs, func(pv lvm.PV) bool { return pv.Name == f.Resolve(device) })
	for _, name := range lvs {
		if i := f.index(vg, name); i >= 0 {
			f.lvs[vg][i].Partial = true
		}
	}
}

// ReduceMissing removes vg's missing PVs and the partial LVs, as
// vgreduce --removemissing --force does.
func (f *LVM) ReduceMissing(_ context.Context, vg string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("reducemissing", vg); err != nil {
		return err
	}
	g, ok := f.vgs[vg]
	if !ok {
		return fmt.Errorf("volume group %s: %w", vg, lvm.ErrNotFound)
	}
	for _, lv := range f.lvs[vg] {
		if lv.Partial {
			g.Free += lv.Size
		}
	}
	f.lvs[vg] = slices.DeleteFunc(f.lvs[vg], func(lv lvm.LV) bool { return lv.Partial })
	g.Size -= min(g.Size, f.lost[vg])
	g.Free -= min(g.Free, f.lost[vg])
	g.MissingPVs, f.lost[vg] = 0, 0
	return nil
}

// LoseVG makes vg vanish from LVM, as the death of its only PV does: LVM
// no longer lists the VG, its LVs or its PV, while the kernel keeps the
// devices of its active LVs (KernelLVs), each with an LVM UUID.
func (f *LVM) LoseVG(vg string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	vgUUID := fmt.Sprintf("%032x", len(f.kernel)+1)
	for i, lv := range f.lvs[vg] {
		if lv.DevNum.IsZero() {
			continue
		}
		f.kernel = append(f.kernel, lvm.KernelLV{Device: lvm.DMName(vg, lv.Name), VG: vg, LV: lv.Name,
			UUID: "LVM-" + vgUUID + fmt.Sprintf("%032x", i+1), DevNum: lv.DevNum})
	}
	delete(f.vgs, vg)
	delete(f.lvs, vg)
	delete(f.lost, vg)
	f.pvs = slices.DeleteFunc(f.pvs, func(pv lvm.PV) bool { return pv.VG == vg })
}

// AddKernelLV adds a device named as an LV, which LVM does not list.
func (f *LVM) AddKernelLV(d lvm.KernelLV) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.kernel = append(f.kernel, d)
}

func (f *LVM) KernelLVs(_ context.Context, vg string) ([]lvm.KernelLV, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []lvm.KernelLV
	for _, d := range f.kernel {
		if d.VG == vg {
			out = append(out, d)
		}
	}
	for _, lv := range f.lvs[vg] {
		if !lv.DevNum.IsZero() {
			out = append(out, lvm.KernelLV{Device: lvm.DMName(vg, lv.Name), VG: vg, LV: lv.Name, DevNum: lv.DevNum})
		}
	}
	return out, nil
}

func (f *LVM) RemoveKernelLV(_ context.Context, d lvm.KernelLV) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("removedevice", d.Device); err != nil {
		return err
	}
	i := slices.IndexFunc(f.kernel, func(k lvm.KernelLV) bool { return k.Device == d.Device })
	if i < 0 {
		return fmt.Errorf("device %s: %w", d.Device, dm.ErrNotFound)
	}
	f.kernel = slices.Delete(f.kernel, i, i+1)
	return nil
}
