package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

// applyDecision writes the status fields the controller owns and emits an Event when
// the state changed. The patch carries the resourceVersion, so a concurrent write by
// the node agent makes it fail and the request is retried on fresh data instead of
// overwriting the agent's conditions. It tells whether it wrote.
func (r *BindingReconciler) applyDecision(ctx context.Context, b *ssdv1.CacheBinding, d decision) (bool, error) {
	before := b.DeepCopy()
	setControllerStatus(b, d)
	if equality.Semantic.DeepEqual(before.Status, b.Status) {
		return false, nil
	}
	if err := r.client.Status().Patch(ctx, b, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return false, err
	}
	klog.FromContext(ctx).V(2).Info("Updated status", "binding", klog.KObj(b), "phase", b.Status.Phase, "node", b.Status.NodeName)
	r.recordTransition(before, b, d)
	return true, nil
}

// setControllerStatus applies a decision to the status fields the controller owns.
func setControllerStatus(b *ssdv1.CacheBinding, d decision) {
	st := &b.Status
	wasAdmitted := st.NodeName != ""
	st.ObservedGeneration = b.Generation
	st.ResolvedSizeBytes = d.sizeBytes
	if !d.admit {
		if wasAdmitted {
			st.Cache = nil // figures of a cache this binding no longer has
		}
		st.NodeName, st.VolumeHandle, st.Phase = "", "", ssdv1.PhasePending
		msg := withNote(d.pending.message, d.sizeNote)
		setCondition(b, ssdv1.ConditionPending, metav1.ConditionTrue, d.pending.reason, msg)
		// Ready carries the Pending reason, so the REASON column of `kubectl get
		// cachebindings`, which shows Ready's, says what the binding waits for.
		setCondition(b, ssdv1.ConditionReady, metav1.ConditionFalse, d.pending.reason,
			"the binding is not admitted to a node: "+msg)
		return
	}
	st.NodeName, st.VolumeHandle = d.target.nodeName, d.target.volumeHandle
	msg := fmt.Sprintf("admitted to node %s with %d bytes of cache", d.target.nodeName, d.sizeBytes)
	msg = withNote(withNote(msg, d.resizeBlocked), d.sizeNote)
	setCondition(b, ssdv1.ConditionPending, metav1.ConditionFalse, ssdv1.ReasonAdmitted, msg)
	if !wasAdmitted {
		// Hand-over: from here on the node agent owns Ready and the phase.
		st.Phase = ssdv1.PhaseAdmitted
		setCondition(b, ssdv1.ConditionReady, metav1.ConditionFalse, ssdv1.ReasonAttaching,
			"waiting for the node agent on "+d.target.nodeName+" to attach the cache")
	}
}

func withNote(msg, note string) string {
	if note == "" {
		return msg
	}
	return msg + "; " + note
}

func setCondition(b *ssdv1.CacheBinding, typ string, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: message, ObservedGeneration: b.Generation,
	})
}

// recordTransition emits one Event per state change the controller made.
func (r *BindingReconciler) recordTransition(before, after *ssdv1.CacheBinding, d decision) {
	oldC := meta.FindStatusCondition(before.Status.Conditions, ssdv1.ConditionPending)
	newC := meta.FindStatusCondition(after.Status.Conditions, ssdv1.ConditionPending)
	wasAdmitted, isAdmitted := before.Status.NodeName != "", after.Status.NodeName != ""
	switch {
	case !wasAdmitted && isAdmitted:
		r.recorder.Eventf(after, nil, corev1.EventTypeNormal, ssdv1.ReasonAdmitted, "Admit", "%s", newC.Message)
	case wasAdmitted && !isAdmitted:
		r.recorder.Eventf(after, nil, corev1.EventTypeWarning, "AdmissionRevoked", "Revoke",
			"no longer admitted to node %s: %s", before.Status.NodeName, newC.Message)
	case isAdmitted && before.Status.ResolvedSizeBytes != after.Status.ResolvedSizeBytes:
		r.recorder.Eventf(after, nil, corev1.EventTypeNormal, "Resized", "Resize",
			"cache size is now %d bytes (was %d)", after.Status.ResolvedSizeBytes, before.Status.ResolvedSizeBytes)
	case isAdmitted && d.resizeBlocked != "" && conditionChanged(oldC, newC):
		r.recorder.Eventf(after, nil, corev1.EventTypeWarning, ssdv1.ReasonInsufficientCache, "Resize", "%s", d.resizeBlocked)
	case !isAdmitted && conditionChanged(oldC, newC):
		r.recorder.Eventf(after, nil, pendingEventType(newC.Reason), newC.Reason, "Admit", "%s", newC.Message)
		r.tellClaim(after, newC)
	}
}

// tellClaim repeats a Warning about a binding its StorageClass made on the
// PVC, where the user of a cached class looks: the volume works, uncached.
func (r *BindingReconciler) tellClaim(b *ssdv1.CacheBinding, c *metav1.Condition) {
	owner := metav1.GetControllerOf(b)
	if owner == nil || owner.Kind != "PersistentVolumeClaim" || pendingEventType(c.Reason) != corev1.EventTypeWarning {
		return
	}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: b.Namespace, Name: owner.Name, UID: owner.UID}}
	r.recorder.Eventf(pvc, b, corev1.EventTypeWarning, c.Reason, "Admit",
		"the volume has no cache yet, it serves from its HDD: CacheBinding %s: %s", b.Name, c.Message)
}

func conditionChanged(a, b *metav1.Condition) bool {
	if a == nil || b == nil {
		return a != b
	}
	return a.Status != b.Status || a.Reason != b.Reason || a.Message != b.Message
}

// pendingEventType: waiting for the PVC to bind is normal; the rest needs attention.
func pendingEventType(reason string) string {
	if reason == ssdv1.ReasonPVCNotBound {
		return corev1.EventTypeNormal
	}
	return corev1.EventTypeWarning
}
