package main

import (
	"context"

	"k8s.io/klog/v2"

	"github.com/ssdcache/ssdcache/pkg/cache"
	"github.com/ssdcache/ssdcache/pkg/csi"
)

// attachFromVolumeContext is the standalone mode's answer to a staged
// volume (no API server, so no CacheBinding and no agent): it gives the
// volume the cache its volume context asks for, as the kernel suite and
// `make demo` expect. A volume that already has a cache keeps it. A failing
// cache never fails staging: the HDD holds every byte.
func attachFromVolumeContext(e *cache.Engine, locks *cache.VolumeLocks) func(context.Context, csi.StagedVolume) {
	return func(ctx context.Context, v csi.StagedVolume) {
		spec, err := csi.CacheSpecFromContext(v.Context, int64(v.OriginBytes))
		if err != nil || spec == nil {
			if err != nil {
				klog.ErrorS(err, "Volume staged without a cache", "volumeID", v.ID)
			}
			return
		}
		if !locks.TryAcquire(v.ID) {
			klog.InfoS("Volume staged without a cache: another call holds it", "volumeID", v.ID)
			return
		}
		defer locks.Release(v.ID)
		if cached, err := e.IsCached(ctx, v.ID); err == nil && cached {
			return
		}
		if _, err := e.SetCache(ctx, v.ID, spec); err != nil {
			klog.ErrorS(err, "Volume staged without a cache", "volumeID", v.ID)
		}
	}
}
