package agent

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/ssdcache/ssdcache/pkg/lvm"
)

// Reasons of the Node Events about a cache pool's missing PVs.
const (
	ReasonMissingPVRemoved    = "MissingPVRemoved"
	ReasonMissingPVNotRemoved = "MissingPVNotRemoved"
	ReasonPoolNotExtended     = "PoolNotExtended"
)

// RepairCache removes the missing PVs of the cache pool once it is up: a
// dead device of a multi-device pool leaves its PV missing, and LVM then
// refuses every lvcreate there, so every attach on the node would fail. It
// acts only on what the pool watch's last scan saw (no LVM command while no
// PV is missing) and, after a removal, sets the pool up again so that a
// device the configuration names joins it at once. Start calls it every
// interval.
func (s *PoolSetup) RepairCache(ctx context.Context) {
	if !s.cfg.Cache.Configured() || !s.isUp(PoolCache) || s.deps.Watch.MissingPVs(s.cfg.Cache.VG) == 0 {
		return
	}
	removed, err := s.removeMissing(ctx, s.cfg.Cache.VG)
	if err != nil || !removed {
		return
	}
	s.extendCache(ctx)
	if err := s.deps.Watch.Scan(ctx); err != nil {
		klog.ErrorS(err, "Reading the volume groups after removing a missing PV")
	}
	s.publish()
}

// removeMissing removes the missing PVs of cache VG vg with the cache LVs on
// them, when no table uses those LVs and ssdcache made every one
// (lvm.Pools.RemoveMissing), and tells the Node what it removed, or once
// why it did not. It reports whether it removed anything.
func (s *PoolSetup) removeMissing(ctx context.Context, vg string) (bool, error) {
	r, err := s.deps.Pools.RemoveMissing(ctx, vg, PoolCache)
	if err != nil {
		note := fmt.Sprintf("cache pool %s misses a device and keeps it (every cache attach there fails until it is removed): %v", vg, err)
		klog.ErrorS(err, "Not removing the missing PVs of the cache pool", "vg", vg)
		if s.firstReport(note) {
			s.nodeEvent(corev1.EventTypeWarning, ReasonMissingPVNotRemoved, "RemoveMissingPV", note)
		}
		return false, err
	}
	s.firstReport("")
	if r.MissingPVs == 0 {
		return false, nil
	}
	note := removedNote(vg, r)
	klog.InfoS("Removed the missing PVs of the cache pool", "vg", vg, "missing", r.MissingPVs, "lvs", lvm.Names(r.LVs))
	s.nodeEvent(corev1.EventTypeNormal, ReasonMissingPVRemoved, "RemoveMissingPV", note)
	return true, nil
}

// firstReport records note as the refusal last told and says whether it is
// news; "" (nothing refused) resets it.
func (s *PoolSetup) firstReport(note string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	news := note != s.missingReported
	s.missingReported = note
	return news && note != ""
}

// removedNote says what a removal took: the dropped caches' LVs, by volume.
func removedNote(vg string, r lvm.Reduced) string {
	var vols []string
	for _, lv := range r.LVs {
		if !slices.Contains(vols, lv.Volume()) {
			vols = append(vols, lv.Volume())
		}
	}
	lvs := "no LV"
	if len(r.LVs) > 0 {
		lvs = fmt.Sprintf("the cache LVs %s (the dropped caches of volumes %s; their HDDs hold all their data)",
			strings.Join(lvm.Names(r.LVs), ", "), strings.Join(vols, ", "))
	}
	return fmt.Sprintf("cache pool %s: removed %d missing PV(s) and %s; the pool goes on with its other devices, and a new device its configuration names is added now",
		vg, r.MissingPVs, lvs)
}

// extendCache sets the up cache pool up again once its missing PVs are
// gone, so that a device its configuration names that is not in the VG yet
// (a selector's match, a listed replacement) joins it now rather than at
// the plugin's next start. A failure (a listed device is gone, refused)
// leaves the pool up on the devices it has, and says so on the Node.
func (s *PoolSetup) extendCache(ctx context.Context) {
	s.setUp(PoolCache, false)
	plans := s.plan()
	p, ok := plans[PoolCache]
	err := p.err
	if !ok {
		err = fmt.Errorf("the cache pool is not configured")
	} else if err == nil {
		s.deps.LVM.UseDevices(s.lvmDevices(plans))
		err = s.apply(ctx, PoolCache, p.cfg)
	}
	s.setUp(PoolCache, true)
	if err == nil {
		s.record(PoolCache, p.cfg.Devices, nil)
		return
	}
	s.deps.LVM.UseDevices(s.lvmDevices(nil))
	note := fmt.Sprintf("cache pool %s goes on with the devices it has; adding the configured devices failed: %v", s.cfg.Cache.VG, err)
	klog.ErrorS(err, "Setting the cache pool up again after removing its missing PVs; it goes on with the devices it has", "vg", s.cfg.Cache.VG)
	s.nodeEvent(corev1.EventTypeWarning, ReasonPoolNotExtended, "SetUpPool", note)
}

// setUp marks a pool up or not, keeping its devices and reason.
func (s *PoolSetup) setUp(role string, up bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.states[role].up = up
}
