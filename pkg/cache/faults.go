package cache

import "context"

// FaultPoints lets the kernel test suite kill the node plugin at a named
// point of a multi-step change, to prove that every step is safe to crash in
// (safety rule 5). Production wiring passes NoFaults.
type FaultPoints interface {
	// Reached is called before each step with a name like "attach/zero-metadata".
	Reached(ctx context.Context, point string)
}

// NoFaults is the FaultPoints of a production node.
type NoFaults struct{}

func (NoFaults) Reached(context.Context, string) {}
