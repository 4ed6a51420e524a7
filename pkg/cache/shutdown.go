package cache

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/klog/v2"

	"github.com/ssdcache/ssdcache/pkg/dm"
	"github.com/ssdcache/ssdcache/pkg/lvm"
)

// A clean reboot removes every dm device after the filesystems are
// unmounted (systemd-shutdown's detach of device-mapper devices), and
// dm-cache's removal commits the metadata with its clean-shutdown flag set:
// the metadata then maps what the data LV holds, as after a clean unstage.
// The flag alone proves nothing, because every suspend sets it and a cache
// that changes nothing afterwards (a resume of the same table, reads only)
// leaves it set while it serves: a power loss then finds it set too.
//
// So the node plugin, once its own work has stopped (SIGTERM, at a rollout
// or a shutdown), marks each live cache whose flag is clear with the boot
// it runs in (ShutdownTagPrefix). From there until the device goes, only a
// suspend, that is the removal, can set the flag, as long as no plugin
// works on the device: every plugin deletes the marks of its own boot from
// its cache VG before its components start, and from any cache VG it adds
// later (ForgetShutdownMarks). A stage in a later
// boot trusts a marked cache whose flag is set, by turning the mark into
// UnstagedCleanTag (the clean unstage's tag, with the same assumption:
// nothing writes the origin LV between the removal and the next stage but
// ssdcache, through the volume's device). A mark whose flag is clear (power
// lost before the removal), of the same boot, or unreadable is deleted,
// and the cache is filled as before (safety rule 2). A paused cache is not
// marked: the count of the writes it missed lives in the kernel.
const ShutdownTagPrefix = "ssdcache.io/shutdown-boot="

// WithBootID gives the engine the kernel's boot ID
// (/proc/sys/kernel/random/boot_id), which tells a reboot from a restart
// of the node plugin. Without it no cache is marked at shutdown, and marks
// found are deleted.
func WithBootID(id string) Option {
	return func(e *Engine) { e.bootID = id }
}

// MarkCleanShutdown marks the live caches that a clean removal of their
// device would leave trustworthy, and returns their volumes. Call it once
// the node plugin's other components have stopped. It takes each volume's
// lock and keeps it, so that a call still draining cannot suspend the
// device after its mark: the process is about to end.
//
// Its LVM work does not grow with the number of volumes, because kubelet
// kills the plugin soon after SIGTERM: one listing per VG and one lvchange
// for every mark; per volume, only a table read, a flush of the data LV and
// a 4 KiB read of the metadata's superblock.
func (e *Engine) MarkCleanShutdown(ctx context.Context, locks *VolumeLocks) ([]string, error) {
	if e.bootID == "" || e.metadata == nil {
		return nil, nil
	}
	vols, err := e.StagedVolumes(ctx)
	if err != nil {
		return nil, err
	}
	lvs, err := e.lvsByVolume(ctx)
	if err != nil {
		return nil, err
	}
	var marked []string
	var marks []lvm.LV
	var errs []error
	for _, v := range vols {
		if !locks.TryAcquire(v.ID) {
			klog.InfoS("Not marked for a clean shutdown: a call still holds the volume", "volumeID", v.ID)
			continue
		}
		meta, ok, err := e.markableAtShutdown(ctx, v.ID, lvs[v.ID])
		if err != nil {
			errs = append(errs, fmt.Errorf("volume %s: %w", v.ID, err))
		}
		if ok {
			marked, marks = append(marked, v.ID), append(marks, meta)
		}
	}
	if len(marks) == 0 {
		return nil, errors.Join(errs...)
	}
	if err := e.lvm.ChangeTags(ctx, []string{ShutdownTagPrefix + e.bootID}, nil, marks...); err != nil {
		// A mark lvchange did write vouches only for a clean removal, which
		// the next stage checks in the metadata: a partial failure is safe.
		return nil, errors.Join(append(errs, fmt.Errorf("mark %d caches for a clean shutdown: %w", len(marks), err))...)
	}
	klog.InfoS("Marked for a clean shutdown: a clean removal of their devices keeps the caches warm across a reboot", "volumes", marked)
	return marked, errors.Join(errs...)
}

// volumeLVs are a node's LVs by the volume they are tagged with.
type volumeLVs map[string][]lvm.LV

// lvsByVolume lists the cache VGs and the origin VG once each.
func (e *Engine) lvsByVolume(ctx context.Context) (volumeLVs, error) {
	vgs := e.cacheVGs()
	if origin := e.Pools().OriginVG; origin != "" && !slices.Contains(vgs, origin) {
		vgs = append(vgs, origin)
	}
	byVolume := volumeLVs{}
	for _, vg := range vgs {
		lvs, err := e.lvm.ListLVs(ctx, vg)
		if err != nil {
			return nil, fmt.Errorf("list the LVs of %s: %w", vg, err)
		}
		for _, lv := range lvs {
			if id := lv.Volume(); id != "" {
				byVolume[id] = append(byVolume[id], lv)
			}
		}
	}
	return byVolume, nil
}

// markableAtShutdown returns the metadata LV of volumeID's live cache if
// the cache may be marked: a pair keepable as at a clean unstage, whose
// metadata's flag is clear now. lvs are the volume's LVs in every pool.
func (e *Engine) markableAtShutdown(ctx context.Context, volumeID string, lvs []lvm.LV) (lvm.LV, bool, error) {
	table, err := e.dm.Table(ctx, DeviceName(volumeID))
	if err != nil {
		return lvm.LV{}, false, err
	}
	live, ok := table.Target.(dm.CacheTarget)
	if !ok {
		return lvm.LV{}, false, nil
	}
	var cacheLVs []lvm.LV
	var origin dm.DevNum
	for _, lv := range lvs {
		switch lv.Role() {
		case lvm.RoleCacheMetadata, lvm.RoleCacheData:
			cacheLVs = append(cacheLVs, lv)
		case lvm.RoleOrigin:
			if lv.VG == e.Pools().OriginVG && lv.Name == volumeID {
				origin = lv.DevNum
			}
		}
	}
	meta, ok := e.keepablePair(live, cacheLVs, origin)
	if !ok {
		return lvm.LV{}, false, nil
	}
	sb, err := e.metadata.Superblock(ctx, meta.Path)
	if err != nil {
		return lvm.LV{}, false, err
	}
	if sb.CleanShutdown || sb.NeedsCheck {
		klog.InfoS("Not marked for a clean shutdown: a suspend since the cache's load left its metadata marked clean already, so a removal could not be told from a power loss; a reboot fills it from the HDD",
			"volumeID", volumeID, "needsCheck", sb.NeedsCheck)
		return lvm.LV{}, false, nil
	}
	return meta, true, nil
}

// ForgetShutdownMarks deletes the marks of this boot from vg's LVs: a
// plugin of this boot is about to work on them, and its suspends, or a
// drop of a failing cache to linear followed by writes, would make a later
// clean removal vouch for a cache the origin no longer matches. The node
// plugin calls it for its cache VG before any component starts, and
// AddCachePool for every VG it adds; a VG that does not exist has none.
// One listing and at most one lvchange, however many volumes are marked.
func (e *Engine) ForgetShutdownMarks(ctx context.Context, vg string) error {
	if _, err := e.lvm.GetVG(ctx, vg); errors.Is(err, lvm.ErrNotFound) {
		return nil
	}
	lvs, err := e.lvm.ListLVs(ctx, vg)
	if err != nil {
		return fmt.Errorf("list the LVs of %s for shutdown marks: %w", vg, err)
	}
	var marked []lvm.LV
	var tags []string
	for _, lv := range lvs {
		// A reboot's marks stay: the volume's next stage judges them.
		mine := slices.DeleteFunc(shutdownMarks(lv), func(tag string) bool { return e.bootID != "" && tag != ShutdownTagPrefix+e.bootID })
		if len(mine) == 0 {
			continue
		}
		marked = append(marked, lv)
		for _, tag := range mine {
			if !slices.Contains(tags, tag) {
				tags = append(tags, tag)
			}
		}
	}
	if len(marked) == 0 {
		return nil
	}
	// Deleting a tag an LV lacks is nothing, so one lvchange serves all.
	if err := e.lvm.ChangeTags(ctx, nil, tags, marked...); err != nil {
		return fmt.Errorf("delete the shutdown marks of this boot from %d LVs of %s: %w", len(marked), vg, err)
	}
	klog.V(2).InfoS("Deleted the shutdown marks of a plugin of this boot", "vg", vg, "lvs", len(marked))
	return nil
}

func shutdownMarks(lv lvm.LV) []string {
	return slices.DeleteFunc(slices.Clone(lv.Tags), func(t string) bool { return !strings.HasPrefix(t, ShutdownTagPrefix) })
}

// judgeShutdownMark turns the mark of a cache removed cleanly in an
// earlier boot into UnstagedCleanTag and deletes any other mark, before
// Stage looks for that tag. It returns the cache LVs as they are tagged now.
func (e *Engine) judgeShutdownMark(ctx context.Context, volumeID string, obs observed) ([]lvm.LV, error) {
	i := slices.IndexFunc(obs.cacheLVs, func(lv lvm.LV) bool { return len(shutdownMarks(lv)) > 0 })
	if i < 0 {
		return obs.cacheLVs, nil
	}
	lvs := slices.Clone(obs.cacheLVs)
	meta := lvs[i]
	marks := shutdownMarks(meta)
	var add []string
	why := e.distrustShutdownMark(ctx, obs, meta, marks)
	if why == "" {
		add = []string{UnstagedCleanTag}
	}
	if err := e.lvm.ChangeTags(ctx, add, marks, meta); err != nil {
		return nil, fmt.Errorf("judge the shutdown mark of %s/%s: %w", meta.VG, meta.Name, err)
	}
	meta.Tags = append(slices.DeleteFunc(slices.Clone(meta.Tags), func(t string) bool { return slices.Contains(marks, t) }), add...)
	lvs[i] = meta
	if why != "" {
		klog.InfoS("The cache marked at the last shutdown is not trusted; it is filled as after a crash", "volumeID", volumeID, "reason", why)
	} else {
		klog.InfoS("The cache was removed cleanly at the last shutdown; it is kept as after a clean unstage", "volumeID", volumeID)
	}
	return lvs, nil
}

// distrustShutdownMark says why a marked cache may not be trusted, or ""
// when its device was removed cleanly after the mark and before a reboot.
func (e *Engine) distrustShutdownMark(ctx context.Context, obs observed, meta lvm.LV, marks []string) string {
	_, data := activeLV(obs.cacheLVs, lvm.RoleCacheData)
	switch {
	case obs.staged:
		return "its device was still there"
	case e.bootID == "" || e.metadata == nil:
		return "this plugin knows no boot ID or has no metadata tools"
	case len(marks) != 1 || marks[0] == ShutdownTagPrefix+e.bootID:
		return fmt.Sprintf("marked %v, in this boot (%s)", marks, e.bootID)
	case len(obs.cacheLVs) != 2 || !data || meta.Path == "" || meta.DevNum.IsZero():
		return fmt.Sprintf("not an active pair of cache LVs (%d LVs)", len(obs.cacheLVs))
	}
	sb, err := e.metadata.Superblock(ctx, meta.Path)
	switch {
	case err != nil:
		return err.Error()
	case sb.NeedsCheck:
		return "dm-cache marked its metadata as needing a check"
	case !sb.CleanShutdown:
		return "its metadata was not committed by a clean removal (a power loss or a crash after the mark)"
	}
	return ""
}
