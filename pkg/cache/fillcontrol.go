package cache

import (
	"context"
	"errors"

	"github.com/ssdcache/ssdcache/pkg/blockdev"
)

// FillControl is what the caller of a change that fills a cache from its
// hot set (an attach, a resume without kept blocks, a resize) says about
// that copy, which can take hours at HDD speed on a large cache.
type FillControl struct {
	// Progress, if set, is called after each part of the copy with the
	// bytes copied so far and the bytes to copy in all.
	Progress func(copied, total uint64)
	// Stop, once closed, stops the copy: the cache then starts cold and
	// the change completes (WarmReport.Stopped), so that what the caller
	// wants next (a new spec, a detach) need not wait for the copy.
	Stop <-chan struct{}
}

type fillControlKey struct{}

// errFillStopped: FillControl.Stop closed during the copy.
var errFillStopped = errors.New("the fill was stopped")

// WithFillControl returns ctx carrying fc for the fills of changes made
// with it.
func WithFillControl(ctx context.Context, fc FillControl) context.Context {
	return context.WithValue(ctx, fillControlKey{}, fc)
}

func fillControlOf(ctx context.Context) FillControl {
	fc, _ := ctx.Value(fillControlKey{}).(FillControl)
	return fc
}

// stopped says whether fc's Stop is closed.
func (fc FillControl) stopped() bool {
	if fc.Stop == nil {
		return false
	}
	select {
	case <-fc.Stop:
		return true
	default:
		return false
	}
}

// stoppable returns ctx cancelled also when fc's Stop closes.
func (fc FillControl) stoppable(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	if fc.Stop != nil {
		go func() {
			select {
			case <-fc.Stop:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	return ctx, cancel
}

// progressPartBytes is how much a fill copies between two progress
// reports: a few seconds of an HDD's sequential reads.
const progressPartBytes = 256 << 20

// inParts splits extents into runs of about partBytes each, in order.
func inParts(extents []blockdev.Extent, partBytes uint64) [][]blockdev.Extent {
	var parts [][]blockdev.Extent
	start, bytes := 0, uint64(0)
	for i, e := range extents {
		bytes += e.Length
		if bytes >= partBytes || i == len(extents)-1 {
			parts = append(parts, extents[start:i+1])
			start, bytes = i+1, 0
		}
	}
	return parts
}
