// Package agent is the node side of ssdcache's control plane, run inside
// ssdcache-node:
//
//   - Monitor watches every staged volume's dm-cache status: it drops a
//     failing cache to a linear table within a health interval (safety rule
//     4) and turns 32-bit kernel counters into Prometheus series.
//   - BindingReconciler applies the CacheBindings admitted to this node
//     through the cache engine's online attach, detach, resize and pause, and
//     writes conditions, phase and cache figures into their status.
//   - PoolWatch reads the volume groups in the background; readiness, the
//     CSI Probe and the capacity report answer from what it last saw.
//   - CapacityReporter tells the controller how much cache this node has.
package agent
