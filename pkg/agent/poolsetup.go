package agent

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/ssdcache/ssdcache/pkg/blockdev"
	"github.com/ssdcache/ssdcache/pkg/lvm"
)

// DefaultPoolRetryInterval is how often a pool whose devices are missing or
// refused is set up again: a disk plugged in or wiped meanwhile makes the
// node ready without a restart.
const DefaultPoolRetryInterval = 30 * time.Second

// Pool roles, the label values of ssdcache_node_pool_ready.
const (
	PoolOrigin = "origin"
	PoolCache  = "cache"
)

// PoolSpec is one pool the node sets up: its VG and devices (paths and/or a
// selector), and the devices the operator allows to be wiped.
type PoolSpec struct {
	lvm.PoolDevices
	Adopt []string
}

// PoolSetupConfig says which pools a node sets up.
type PoolSetupConfig struct {
	NodeName string
	Origin   PoolSpec
	// Cache left without devices runs the node uncached.
	Cache       PoolSpec
	DeviceClass string
	// Interval between two attempts while a pool is not up (DefaultPoolRetryInterval).
	Interval time.Duration
	Clock    clock.WithTicker
}

// PoolEnsurer creates or checks a pool, removes the missing PVs of a cache
// pool and the devices left of a cache pool LVM no longer finds (lvm.Pools).
type PoolEnsurer interface {
	Ensure(ctx context.Context, cfg lvm.PoolConfig) (lvm.VG, error)
	RemoveMissing(ctx context.Context, vg, role string) (lvm.Reduced, error)
	RemoveStale(ctx context.Context, vg, role string) (lvm.Stale, error)
}

// LVMDevices restricts LVM to the pool devices (lvm.Command).
type LVMDevices interface {
	UseDevices(devices []string)
}

// PoolSetupDeps are the OS seams and the parts told of a pool coming up.
type PoolSetupDeps struct {
	Inventory blockdev.Inventory
	Pools     PoolEnsurer
	LVM       LVMDevices
	Watch     *PoolWatch
	// OnCacheUp gives the engine the cache pool (cache.Engine.AddCachePool).
	OnCacheUp func(ctx context.Context, class, vg string) error
	Metrics   *Metrics
	// Events, when set, records each change of a pool's state on the Node.
	Events events.EventRecorder
}

// PoolSetup brings the node's pools up and keeps trying while one is not:
// a node whose disks are missing or refused stays running and reports why
// (readiness, CSI Probe, an Event on its Node, ssdcache_node_pool_ready)
// instead of crash-looping, and becomes ready once the disks are usable.
type PoolSetup struct {
	cfg  PoolSetupConfig
	deps PoolSetupDeps

	mu     sync.Mutex
	states map[string]*poolState
	// missingReported is the last refusal to remove the cache pool's missing
	// PVs that an Event told, to tell each once.
	missingReported string
	// staleReported is the same for the devices left of a lost cache pool.
	staleReported string
}

// poolState is one pool's outcome so far.
type poolState struct {
	up bool
	// devices are the ones the pool was set up with, kept in LVM's device
	// list while other pools are retried.
	devices []string
	// reason is why the pool is not up; "" once it is.
	reason string
	// reported is the last state published (log, Event), to publish changes only.
	reported string
}

// NewPoolSetup returns a set-up that has not tried yet.
func NewPoolSetup(cfg PoolSetupConfig, deps PoolSetupDeps) *PoolSetup {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultPoolRetryInterval
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	s := &PoolSetup{cfg: cfg, deps: deps, states: map[string]*poolState{PoolOrigin: {reason: "not set up yet"}}}
	if cfg.Cache.Configured() {
		s.states[PoolCache] = &poolState{reason: "not set up yet"}
	}
	return s
}

// Start tries at once, then every interval until every pool is up; it is a
// controller-runtime Runnable. It first publishes the state again: an
// attempt made before the manager started may have had its Event dropped.
func (s *PoolSetup) Start(ctx context.Context) error {
	s.mu.Lock()
	for _, st := range s.states {
		st.reported = ""
	}
	s.mu.Unlock()
	ticker := s.cfg.Clock.NewTicker(s.cfg.Interval)
	defer ticker.Stop()
	for {
		if s.allUp() {
			s.publish() // says nothing new after the first time
		} else {
			s.Attempt(ctx)
		}
		s.RepairCache(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C():
		}
	}
}

// Attempt sets up every pool that is not up yet, once.
func (s *PoolSetup) Attempt(ctx context.Context) {
	plans := s.plan()
	s.deps.LVM.UseDevices(s.lvmDevices(plans))
	changed := false
	for _, role := range []string{PoolOrigin, PoolCache} {
		p, ok := plans[role]
		if !ok {
			continue
		}
		err := p.err
		if err == nil {
			err = s.apply(ctx, role, p.cfg)
		}
		changed = s.record(role, p.cfg.Devices, err) || changed
	}
	if changed {
		// Readiness reads the watch: let it see the new pool now, not at its next tick.
		if err := s.deps.Watch.Scan(ctx); err != nil {
			klog.ErrorS(err, "Reading the volume groups after pool set-up")
		}
	}
	s.publish()
}

// poolPlan is what one attempt does with a pool that is not up.
type poolPlan struct {
	cfg lvm.PoolConfig
	err error
}

// plan resolves the devices of the pools not up yet. A disk both pools
// select fails both: neither may take it first.
func (s *PoolSetup) plan() map[string]poolPlan {
	plans := map[string]poolPlan{}
	disks, err := s.deps.Inventory.Disks()
	if err != nil {
		err = fmt.Errorf("listing the node's disks: %w", err)
	}
	for role, spec := range s.specs() {
		if s.isUp(role) {
			continue
		}
		p := poolPlan{err: err, cfg: lvm.PoolConfig{VG: spec.VG, Role: role}}
		if err == nil {
			p.cfg.Devices, p.err = lvm.ResolvePool(disks, spec.PoolDevices)
			p.cfg.Adopt = slices.DeleteFunc(slices.Clone(spec.Adopt), func(d string) bool { return !slices.Contains(p.cfg.Devices, d) })
		}
		plans[role] = p
	}
	if err == nil && s.cfg.Cache.Configured() {
		s.checkDisjoint(disks, plans)
	}
	return plans
}

// checkDisjoint fails the pools being set up when a disk is among both
// pools' devices: those resolved now or, for a pool already up, those it
// was set up with.
func (s *PoolSetup) checkDisjoint(disks []blockdev.Disk, plans map[string]poolPlan) {
	devices := map[string][]string{}
	for _, role := range []string{PoolOrigin, PoolCache} {
		if p, ok := plans[role]; ok {
			if p.err != nil {
				return // nothing to compare with
			}
			devices[role] = p.cfg.Devices
			continue
		}
		s.mu.Lock()
		devices[role] = s.states[role].devices
		s.mu.Unlock()
	}
	err := lvm.CheckDisjoint(disks, s.cfg.Origin.PoolDevices, s.cfg.Cache.PoolDevices, devices[PoolOrigin], devices[PoolCache])
	if err == nil {
		return
	}
	for role, p := range plans {
		p.err = err
		plans[role] = p
	}
}

// specs are the configured pools.
func (s *PoolSetup) specs() map[string]PoolSpec {
	out := map[string]PoolSpec{PoolOrigin: s.cfg.Origin}
	if s.cfg.Cache.Configured() {
		out[PoolCache] = s.cfg.Cache
	}
	return out
}

// lvmDevices is every device LVM may read during this attempt: those of the
// pools already up and those resolved for the others.
func (s *PoolSetup) lvmDevices(plans map[string]poolPlan) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []string
	for role, st := range s.states {
		devices := st.devices
		if p, ok := plans[role]; ok {
			devices = p.cfg.Devices
		}
		for _, d := range devices {
			if !slices.Contains(all, d) {
				all = append(all, d)
			}
		}
	}
	slices.Sort(all)
	return all
}

// apply creates or checks one pool and tells the node of a cache pool. A
// cache VG that misses a PV is reduced first: LVM would refuse to extend it;
// one LVM no longer finds has the devices left of its LVs removed first:
// they hold the names the new VG's LVs need.
func (s *PoolSetup) apply(ctx context.Context, role string, cfg lvm.PoolConfig) error {
	if role == PoolCache {
		if _, err := s.removeMissing(ctx, cfg.VG); err != nil {
			return err
		}
		if err := s.removeStale(ctx, cfg.VG); err != nil {
			return err
		}
	}
	if _, err := s.deps.Pools.Ensure(ctx, cfg); err != nil {
		return err
	}
	if role == PoolCache {
		if err := s.deps.OnCacheUp(ctx, s.cfg.DeviceClass, cfg.VG); err != nil {
			return err
		}
		s.deps.Watch.SetCacheVGs([]string{cfg.VG})
	}
	return nil
}

// record keeps one pool's outcome and says whether it came up now.
func (s *PoolSetup) record(role string, devices []string, err error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.states[role]
	if err != nil {
		st.reason = err.Error()
		return false
	}
	st.up, st.devices, st.reason = true, devices, ""
	return true
}

func (s *PoolSetup) isUp(role string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.states[role].up
}

func (s *PoolSetup) allUp() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.states {
		if !st.up {
			return false
		}
	}
	return true
}

// Ready reports, from memory, whether the node can serve volumes: its
// origin pool is set up and the pool watch finds it. A cache pool that is
// not up leaves the node ready, uncached.
func (s *PoolSetup) Ready() error {
	s.mu.Lock()
	origin := *s.states[PoolOrigin]
	s.mu.Unlock()
	if !origin.up {
		return fmt.Errorf("origin pool %s is not set up (retried every %v): %s", s.cfg.Origin.VG, s.cfg.Interval, origin.reason)
	}
	return s.deps.Watch.Ready()
}

// publish logs each pool's state, sets ssdcache_node_pool_ready and
// records an Event on the Node, when the state changed since last time.
func (s *PoolSetup) publish() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for role, st := range s.states {
		if s.deps.Metrics != nil {
			s.deps.Metrics.SetNodePoolReady(role, st.up)
		}
		state := st.reason
		if st.up {
			state = fmt.Sprintf("up on %v", st.devices)
		}
		if state == st.reported {
			continue
		}
		st.reported = state
		s.announce(role, s.specs()[role].VG, *st)
	}
}

// announce logs a pool's new state and records it on the Node.
func (s *PoolSetup) announce(role, vg string, st poolState) {
	eventType, reason := corev1.EventTypeNormal, "PoolReady"
	note := fmt.Sprintf("%s pool %s is up on %v", role, vg, st.devices)
	if st.up {
		klog.InfoS("Pool set up", "pool", role, "vg", vg, "devices", st.devices)
	} else {
		eventType, reason = corev1.EventTypeWarning, "PoolNotReady"
		note = fmt.Sprintf("%s pool %s is not set up; retrying every %v: %s", role, vg, s.cfg.Interval, st.reason)
		if role == PoolCache {
			note += "; volumes are served uncached meanwhile"
		}
		klog.ErrorS(nil, "Pool not set up; retrying", "pool", role, "vg", vg, "interval", s.cfg.Interval, "reason", st.reason)
	}
	s.nodeEvent(eventType, reason, "SetUpPool", note)
}

// nodeEvent records an Event on the Node, when there is a recorder.
func (s *PoolSetup) nodeEvent(eventType, reason, action, note string) {
	if s.deps.Events == nil {
		return
	}
	// Node Events name the Node by its name as UID, as kubelet's do.
	node := &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: s.cfg.NodeName, UID: types.UID(s.cfg.NodeName)}
	s.deps.Events.Eventf(node, nil, eventType, reason, action, "%s", note)
}
