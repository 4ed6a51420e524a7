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
//
// Where things are:
//   - engine.go, apply.go, plan.go: the engine, its steps and their plan;
//     ops.go: the operations callers ask for (stage, attach, detach, grow,
//     health); spec.go, origin.go: what a cache and a volume's origin are;
//     locks.go: one change per volume at a time.
//   - fill.go: filling a cache, the one mechanism behind every way blocks
//     get into it: copy from the origin with writes counted, drop the
//     copies written meanwhile, map the rest. Its entries say what to copy:
//     warm.go the hot set (and keeps it), kept.go nothing, mapping again
//     what a paused or cleanly unstaged cache held, promote.go the blocks
//     reads brought, preload.go the blocks of named files (by promotion).
//     fillcontrol.go lets a caller stop a fill and see its progress.
//   - metaswap.go: a promotion mapped over a second metadata LV while the
//     cache serves; layout.go: what a live cache maps, known to the engine
//     from its last load, which lets a promotion copy while it serves.
//   - shutdown.go: the mark that lets a clean reboot keep a cache.
//   - faults.go: the fault points the kernel suite kills the plugin at.
package cache
