// Package cache puts a dm-cache read cache in front of a volume and takes it
// away again, online. A staged volume is always the device-mapper device
// ssdcache-<volume id>: its table is linear while uncached and a writethrough
// dm-cache target while cached (a paused cache keeps its LVs behind the
// linear table). Every change is a suspend / load / resume of that one
// device, so a filesystem mounted on it never notices.
//
// The engine is declarative: callers say what cache a volume should have, the
// engine observes the kernel's table and the tagged LVs (the only sources of
// truth, safety rule 5), plans the steps between the two (plan.go, pure), and
// applies them (engine.go). A crash between any two steps leaves a state the
// next call converges from.
package cache
