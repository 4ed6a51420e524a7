package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
	"github.com/ssdcache/ssdcache/pkg/cache"
	"github.com/ssdcache/ssdcache/pkg/dm"
)

// EventSource is the reporting controller of the agent's Events.
const EventSource = "ssdcache-node"

// Defaults: figures reach the API server at most once a minute so its load
// does not grow with I/O; bindings are revisited every 30 s to notice a
// volume being staged or unstaged, which raises no API event.
const (
	DefaultFiguresInterval = time.Minute
	DefaultResync          = 30 * time.Second
	busyRetry              = 2 * time.Second
	// preloadContinue: a preload left in progress goes on this soon, after
	// other work on the volume had its turn.
	preloadContinue = time.Second
)

// +kubebuilder:rbac:groups=ssdcache.io,resources=cachebindings,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=ssdcache.io,resources=cachebindings/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// BindingReconciler applies the CacheBindings admitted to this node.
type BindingReconciler struct {
	client          client.Client
	apiReader       client.Reader // uncached: a cache's owner, before detaching it
	recorder        events.EventRecorder
	engine          *cache.Engine
	locks           *cache.VolumeLocks
	samples         *Samples
	metrics         *Metrics
	nodeName        string
	clock           clock.Clock
	figuresInterval time.Duration
	resync          time.Duration
	// cacheLost is told about a cache a failed preload could not load back.
	cacheLost func(volumeID, why string)
	// missingPVs is how many PVs a cache VG misses (PoolWatch.MissingPVs).
	missingPVs func(vg string) uint64
}

// BindingOptions tune a BindingReconciler; zero values take the defaults.
type BindingOptions struct {
	FiguresInterval, Resync time.Duration
	Clock                   clock.Clock
	// Metrics, when set, learn each bound volume's PVC from its binding: the
	// one source of it for a volume staged before the plugin restarted.
	Metrics *Metrics
	// CacheLost (Monitor.CacheLost) is told about a cache that a preload
	// swapped out and could not load back; nil: only the error says so.
	CacheLost func(volumeID, why string)
	// APIReader reads a cache's owning binding from the API server before the
	// cache is detached as unclaimed: the client's cache holds only the
	// bindings labelled with this node (CacheOptions), and one admitted by an
	// older controller, or whose label a user removed, is not among them.
	// Nil reads through the client.
	APIReader client.Reader
	// MissingPVs (PoolWatch.MissingPVs) is how many PVs a cache VG misses:
	// a Degraded binding is retried once its dropped cache's LVs are gone
	// from a pool that misses none (retry.go). Nil counts none.
	MissingPVs func(vg string) uint64
}

// NewBindingReconciler returns the reconciler of node nodeName.
func NewBindingReconciler(c client.Client, rec events.EventRecorder, e *cache.Engine, locks *cache.VolumeLocks,
	samples *Samples, nodeName string, o BindingOptions) *BindingReconciler {
	r := &BindingReconciler{client: c, recorder: rec, engine: e, locks: locks, samples: samples, nodeName: nodeName,
		clock: o.Clock, figuresInterval: o.FiguresInterval, resync: o.Resync, metrics: o.Metrics, cacheLost: o.CacheLost,
		missingPVs: o.MissingPVs}
	if r.clock == nil {
		r.clock = clock.RealClock{}
	}
	if r.figuresInterval <= 0 {
		r.figuresInterval = DefaultFiguresInterval
	}
	if r.resync <= 0 {
		r.resync = DefaultResync
	}
	if r.cacheLost == nil {
		r.cacheLost = func(string, string) {}
	}
	if r.missingPVs == nil {
		r.missingPVs = func(string) uint64 { return 0 }
	}
	r.apiReader = o.APIReader
	if r.apiReader == nil {
		r.apiReader = c
	}
	return r
}

// Reconcile attaches, changes or detaches one binding's cache.
func (r *BindingReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	b := &ssdv1.CacheBinding{}
	if err := r.client.Get(ctx, req.NamespacedName, b); err != nil {
		if apierrors.IsNotFound(err) {
			// Gone without this agent removing its finalizer: its cache, if
			// any, is claimed by no binding now.
			return ctrl.Result{}, r.DetachUnclaimed(ctx)
		}
		return ctrl.Result{}, err
	}
	if b.Status.NodeName != r.nodeName || b.Status.VolumeHandle == "" {
		// Not admitted here (yet, or any more): a cache it had on this node
		// is now claimed by no binding.
		return ctrl.Result{}, r.DetachUnclaimed(ctx)
	}
	if r.metrics != nil {
		r.metrics.SetOwner(b.Status.VolumeHandle, VolumeOwner{Namespace: b.Namespace, PVC: b.Spec.PVCName})
	}
	stop := newFillStop()
	if !r.locks.TryAcquireYielding(b.Status.VolumeHandle, stop.stop) {
		return ctrl.Result{RequeueAfter: busyRetry}, nil
	}
	defer r.locks.Release(b.Status.VolumeHandle)
	if !b.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.detach(ctx, b)
	}
	if b.Status.ResolvedSizeBytes <= 0 {
		return ctrl.Result{}, nil
	}
	out := r.apply(cache.WithFillControl(ctx, r.fillControl(ctx, b, stop)), b)
	if err := r.writeStatus(ctx, b, out); err != nil {
		return ctrl.Result{}, err
	}
	if out.preload != nil && out.preload.InProgress {
		return ctrl.Result{RequeueAfter: preloadContinue}, out.err
	}
	return ctrl.Result{RequeueAfter: r.resync}, out.err
}

// outcome is what apply found or did, as status and an Event.
type outcome struct {
	phase    ssdv1.CacheBindingPhase
	ready    metav1.Condition
	degraded *metav1.Condition
	// retried is set when the binding's automatic retry was attached, or
	// failed (ssdv1.ConditionCacheRetried).
	retried *metav1.Condition
	// warmup is set when a new cache was filled from the volume's hot set.
	warmup *ssdv1.WarmupRecord
	// preload is set when spec.preloadPaths were preloaded, or failed anew.
	preload *ssdv1.PreloadRecord
	events  []note
	err     error
}

type note struct{ kind, reason, action, text string }

func (r *BindingReconciler) apply(ctx context.Context, b *ssdv1.CacheBinding) outcome {
	vol := b.Status.VolumeHandle
	// The kernel's table says enough here; SetCache looks at the LVs itself.
	table, staged, err := r.engine.LiveTable(ctx, vol)
	if err != nil {
		return failed(err, "Inspect")
	}
	if !staged {
		return outcome{phase: ssdv1.PhaseAdmitted, ready: cond(ssdv1.ConditionReady, false, ssdv1.ReasonVolumeNotStaged,
			fmt.Sprintf("volume %s is not staged on node %s; the cache attaches when a pod uses the volume", vol, r.nodeName))}
	}
	out, degraded, retry := r.degraded(ctx, b, table)
	if degraded {
		return out
	}
	if retry == retryNow {
		if err := r.spendRetry(ctx, b); err != nil {
			out = r.stillDegraded(b)
			out.err = err
			return out
		}
	}
	spec := cache.Spec{SizeBytes: uint64(b.Status.ResolvedSizeBytes), Mode: cache.ModeReadCache, Class: b.Spec.DeviceClass,
		Owner: ownerOf(b), Warm: b.Spec.Warmup != ssdv1.WarmupNone}
	// The CRD validated the limit; one it did not (an older CRD) means none.
	if limit, ok, err := ssdv1.ParseWarmupLimit(b.Spec.WarmupLimit); err == nil && ok {
		spec.Warm, spec.WarmLimitBytes = spec.Warm && limit > 0, uint64(limit)
	}
	if b.Spec.Mode == ssdv1.ModePaused {
		spec.Mode = cache.ModePaused
	}
	res, err := r.engine.SetCache(ctx, vol, &spec)
	if err != nil && retry == retryNow {
		return retryFailed(err)
	}
	if err != nil {
		return failed(err, "Attach")
	}
	_, wasCached := table.Target.(dm.CacheTarget)
	out = attached(b, spec, res.Changed, wasCached)
	if retry != retryNone {
		out = retried(out)
	}
	if res.Warmed.Stopped {
		out.events = append(out.events, note{corev1.EventTypeNormal, "CacheWarmupStopped", "Warmup",
			"the warm-up stopped because the binding changed; the cache started cold and the change applies next"})
	}
	if w := res.Warmed; w.Blocks > 0 || w.Kept > 0 {
		out.warmup = &ssdv1.WarmupRecord{Bytes: int64(w.Bytes), Blocks: int64(w.Blocks), WrittenBlocks: int64(w.Dropped), KeptBlocks: int64(w.Kept),
			Duration: metav1.Duration{Duration: w.Duration.Round(time.Millisecond)}, CompletionTime: metav1.NewTime(r.clock.Now())}
		out.events = append(out.events, note{corev1.EventTypeNormal, "CacheWarmed", "Warmup", warmedMessage(w, out.warmup.Duration.Duration)})
	}
	rec, events := r.preload(ctx, b)
	out.preload, out.events = rec, append(out.events, events...)
	return out
}

func warmedMessage(w cache.WarmReport, took time.Duration) string {
	if w.Blocks == 0 {
		// After a pause or a clean unstage: the SSD still held the blocks.
		return fmt.Sprintf("cache came back warm in %s: %d blocks the SSD still held mapped again without reading the origin, %d written meanwhile left out",
			took, w.Kept, w.Dropped)
	}
	return fmt.Sprintf("cache filled from the volume's hot set: %d bytes in %s, %d blocks written meanwhile left out", w.Bytes, took, w.Dropped)
}

// degraded keeps a cache that was dropped for failing detached until the
// binding's spec changes, which is how a user asks for another try, or
// until the dropped cache's LVs are gone from a whole pool (retry.go): then
// it is attached again once per spec generation (retryNow), or found so
// attached (retryDone). The drop is known from the monitor until it is in
// the binding's Degraded condition, and from the condition alone after a
// restart.
func (r *BindingReconciler) degraded(ctx context.Context, b *ssdv1.CacheBinding, table dm.Table) (out outcome, degraded bool, retry retryKind) {
	vol := b.Status.VolumeHandle
	why, dropped := r.samples.Dropped(vol)
	c := meta.FindStatusCondition(b.Status.Conditions, ssdv1.ConditionDegraded)
	recorded := c != nil && c.Status == metav1.ConditionTrue && c.Reason == ssdv1.ReasonCacheDeviceFailed
	if recorded && c.ObservedGeneration < b.Generation {
		r.samples.ClearDropped(vol)
		return outcome{}, false, retryNone
	}
	if !dropped && !recorded {
		return outcome{}, false, retryNone
	}
	if recorded {
		if retry := r.retryOf(ctx, b, table); retry != retryNone {
			r.samples.ClearDropped(vol)
			return outcome{}, false, retry
		}
		return r.stillDegraded(b), true, retryNone
	}
	msg := fmt.Sprintf("the cache device failed (%s) and the cache was dropped; the volume serves every read from its origin; edit the binding's spec to try again", why)
	d := cond(ssdv1.ConditionDegraded, true, ssdv1.ReasonCacheDeviceFailed, msg)
	return outcome{phase: ssdv1.PhaseDegraded, degraded: &d, ready: cond(ssdv1.ConditionReady, false, ssdv1.ReasonCacheDeviceFailed, msg),
		events: []note{{corev1.EventTypeWarning, ssdv1.ReasonCacheDeviceFailed, "DropCache", msg}}}, true, retryNone
}

// stillDegraded keeps a binding as its recorded Degraded condition says:
// already told, so no Event; a restarted agent keeps it dropped.
func (r *BindingReconciler) stillDegraded(b *ssdv1.CacheBinding) outcome {
	c := meta.FindStatusCondition(b.Status.Conditions, ssdv1.ConditionDegraded)
	d := cond(ssdv1.ConditionDegraded, true, ssdv1.ReasonCacheDeviceFailed, c.Message)
	return outcome{phase: ssdv1.PhaseDegraded, degraded: &d, ready: cond(ssdv1.ConditionReady, false, ssdv1.ReasonCacheDeviceFailed, c.Message)}
}

// ownerOf is the owner tag of a binding's cache LVs.
func ownerOf(b *ssdv1.CacheBinding) string {
	return b.Namespace + "/" + b.Name + "/" + string(b.UID)
}

func attached(b *ssdv1.CacheBinding, spec cache.Spec, changed, wasCached bool) outcome {
	phase, reason, verb := ssdv1.PhaseAttached, ssdv1.ReasonAttached, "attached"
	if spec.Mode == cache.ModePaused {
		phase, reason, verb = ssdv1.PhasePaused, ssdv1.ReasonPaused, "paused"
	}
	msg := fmt.Sprintf("cache of %d bytes %s in front of volume %s", spec.SizeBytes, verb, b.Status.VolumeHandle)
	healthy := cond(ssdv1.ConditionDegraded, false, ssdv1.ReasonCacheDeviceHealthy, "the cache device works")
	out := outcome{phase: phase, ready: cond(ssdv1.ConditionReady, true, reason, msg), degraded: &healthy}
	if changed {
		eventReason := "CacheAttached"
		if wasCached {
			eventReason = "CacheChanged"
		}
		out.events = []note{{corev1.EventTypeNormal, eventReason, "Attach", msg}}
	}
	return out
}

func failed(err error, action string) outcome {
	msg := err.Error()
	return outcome{phase: ssdv1.PhaseAdmitted, err: err,
		ready:  cond(ssdv1.ConditionReady, false, action+"Failed", msg),
		events: []note{{corev1.EventTypeWarning, action + "Failed", action, msg}}}
}

func cond(t string, status bool, reason, msg string) metav1.Condition {
	s := metav1.ConditionFalse
	if status {
		s = metav1.ConditionTrue
	}
	return metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg}
}

// detach removes the cache of a binding being deleted, then its finalizer.
func (r *BindingReconciler) detach(ctx context.Context, b *ssdv1.CacheBinding) error {
	if !controllerutil.ContainsFinalizer(b, ssdv1.Finalizer) {
		return nil
	}
	err := r.engine.Detach(ctx, b.Status.VolumeHandle)
	if err != nil && !errors.Is(err, cache.ErrNotStaged) {
		r.recorder.Eventf(b, nil, corev1.EventTypeWarning, "DetachFailed", "Detach", "%v", err)
		return err
	}
	if err := r.engine.ForgetHotSet(b.Status.VolumeHandle); err != nil {
		return err
	}
	r.recorder.Eventf(b, nil, corev1.EventTypeNormal, "CacheDetached", "Detach", "cache detached from volume %s; the volume keeps serving from its origin", b.Status.VolumeHandle)
	before := b.DeepCopy()
	controllerutil.RemoveFinalizer(b, ssdv1.Finalizer)
	return r.client.Patch(ctx, b, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
}
