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
	// A cache pool LVM no longer finds (its only device died).
	ReasonCachePoolLost          = "CachePoolLost"
	ReasonStaleDevicesRemoved    = "StaleCacheDevicesRemoved"
	ReasonStaleDevicesNotRemoved = "StaleCacheDevicesNotRemoved"
)

// RepairCache removes the missing PVs of the cache pool once it is up: a
// dead device of a multi-device pool leaves its PV missing, and LVM then
// refuses every lvcreate there, so every attach on the node would fail. It
// acts only on what the pool watch's last scan saw (no LVM command while no
// PV is missing) and, after a removal, sets the pool up again so that a
// device the configuration names joins it at once. Start calls it every
// interval.
func (s *PoolSetup) RepairCache(ctx context.Context) {
	if !s.cfg.Cache.Configured() || !s.isUp(PoolCache) {
		return
	}
	if s.deps.Watch.CacheVGLost(s.cfg.Cache.VG) {
		s.cacheLost(ctx)
		return
	}
	if s.deps.Watch.MissingPVs(s.cfg.Cache.VG) == 0 {
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
		if s.report(&s.missingReported, note) {
			s.nodeEvent(corev1.EventTypeWarning, ReasonMissingPVNotRemoved, "RemoveMissingPV", note)
		}
		return false, err
	}
	s.report(&s.missingReported, "")
	if r.MissingPVs == 0 {
		return false, nil
	}
	note := removedNote(vg, r)
	klog.InfoS("Removed the missing PVs of the cache pool", "vg", vg, "missing", r.MissingPVs, "lvs", lvm.Names(r.LVs))
	s.nodeEvent(corev1.EventTypeNormal, ReasonMissingPVRemoved, "RemoveMissingPV", note)
	return true, nil
}

// report records note as the refusal last told in *last and says whether
// it is news; "" (nothing refused) resets it.
func (s *PoolSetup) report(last *string, note string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	news := note != *last
	*last = note
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

// cacheLost handles a cache pool that was up and that LVM no longer finds:
// its only device died (a pool with survivors shows a missing PV instead).
// The pool is no longer up (Warning PoolNotReady says why), and is set up
// again at once, as at the
// plugin's start: apply removes the devices left of the dead VG's LVs
// (removeStale) and makes the VG anew on the configured devices present;
// without one, the set-up retries every interval until the new device
// comes. A Degraded binding is retried once the new VG holds no LV of its
// volume (BindingReconciler.retryOf).
func (s *PoolSetup) cacheLost(ctx context.Context) {
	vg := s.cfg.Cache.VG
	klog.ErrorS(nil, "LVM no longer finds the cache pool; setting it up again on the configured devices", "vg", vg)
	s.mu.Lock()
	s.states[PoolCache].up = false
	s.states[PoolCache].reason = "LVM no longer finds the cache VG (its only device failed or was removed; the caches on it were dropped, " +
		"their volumes read their HDDs); it is made again on the configured devices"
	s.mu.Unlock()
	s.publish() // PoolNotReady, then PoolReady once made again
	s.Attempt(ctx)
}

// removeStale removes the devices the kernel keeps of the cache LVs of
// cache VG vg once LVM no longer finds it, when no table uses them and each
// is one of ssdcache's cache LVs (lvm.Pools.RemoveStale), and tells the
// Node what it removed, or once why it did not: a new VG of that name could
// not activate a new cache LV of those volumes.
func (s *PoolSetup) removeStale(ctx context.Context, vg string) error {
	st, err := s.deps.Pools.RemoveStale(ctx, vg, PoolCache)
	if err != nil {
		note := fmt.Sprintf("cache pool %s: the devices left of its lost LVs are kept, and the pool is not made again until they are gone: %v", vg, err)
		klog.ErrorS(err, "Not removing the devices left of the lost cache pool", "vg", vg)
		if s.report(&s.staleReported, note) {
			s.nodeEvent(corev1.EventTypeWarning, ReasonStaleDevicesNotRemoved, "RemoveStaleDevices", note)
		}
		return err
	}
	s.report(&s.staleReported, "")
	if len(st.Devices) == 0 {
		return nil
	}
	note := fmt.Sprintf("cache pool %s is gone from LVM (its only device failed): removed the devices %s left of its cache LVs (the dropped caches of volumes %s; their HDDs hold all their data); the pool is made again on the configured devices",
		vg, strings.Join(st.DeviceNames(), ", "), strings.Join(st.Volumes(), ", "))
	klog.InfoS("Removed the devices left of the lost cache pool's LVs", "vg", vg, "devices", st.DeviceNames(), "volumes", st.Volumes())
	s.nodeEvent(corev1.EventTypeNormal, ReasonStaleDevicesRemoved, "RemoveStaleDevices", note)
	return nil
}
