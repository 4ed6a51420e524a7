package agent

import (
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// volumeEventBuffer holds the volume events not yet taken by the binding
// controller; when full, the periodic resync catches up.
const volumeEventBuffer = 256

// VolumeEvents tells the binding reconciler that something happened to a
// volume on this node that no API object shows: NodeStage brought it up, or
// the monitor dropped its failing cache. The bindings of that volume are
// reconciled at once instead of at the next resync.
type VolumeEvents struct {
	ch chan event.TypedGenericEvent[string]
}

// NewVolumeEvents returns an empty event source.
func NewVolumeEvents() *VolumeEvents {
	return &VolumeEvents{ch: make(chan event.TypedGenericEvent[string], volumeEventBuffer)}
}

// Notify queues volumeID's bindings for reconciling; it never blocks.
func (v *VolumeEvents) Notify(volumeID string) {
	select {
	case v.ch <- event.TypedGenericEvent[string]{Object: volumeID}:
	default:
	}
}
