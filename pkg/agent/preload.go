package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
	"github.com/ssdcache/ssdcache/pkg/cache"
	"github.com/ssdcache/ssdcache/pkg/fileblocks"
)

// preload copies a binding's spec.preloadPaths into its attached read
// cache once per spec generation and node, cache.PreloadBatches at a
// visit, and again at every visit after a failure (the filesystem may not
// be mounted yet). It returns nil when there is nothing to do, or when it
// failed as the status already says.
func (r *BindingReconciler) preload(ctx context.Context, b *ssdv1.CacheBinding) (*ssdv1.PreloadRecord, []note) {
	last := b.Status.LastPreload
	if last != nil && (last.ObservedGeneration != b.Generation || last.NodeName != r.nodeName) {
		last = nil // of other paths, or of another node's cache
	}
	if len(b.Spec.PreloadPaths) == 0 || b.Spec.Mode == ssdv1.ModePaused || (last != nil && last.Error == "" && !last.InProgress) {
		return nil, nil
	}
	vol := b.Status.VolumeHandle
	rep, err := r.engine.Preload(ctx, vol, b.Spec.PreloadPaths)
	rec := &ssdv1.PreloadRecord{ObservedGeneration: b.Generation, NodeName: r.nodeName, Files: int64(rep.Files), FileBytes: int64(rep.FileBytes),
		Bytes: int64(rep.Blocks * rep.BlockBytes), HeldBytes: int64(rep.Held * rep.BlockBytes), LeftBytes: int64(rep.Left * rep.BlockBytes),
		MissingPaths: rep.Missing, Duration: metav1.Duration{Duration: rep.Duration.Round(time.Millisecond)}, CompletionTime: metav1.NewTime(r.clock.Now())}
	if rep.Blocks > 0 && r.metrics != nil { // batches mapped before a failure count too
		r.metrics.add(r.metrics.preloaded, vol, float64(rep.Blocks))
	}
	if errors.Is(err, cache.ErrCacheLeftOut) {
		r.cacheLost(vol, "a preload could not load the cache again: "+err.Error())
	}
	if err != nil {
		rec.Error = preloadError(err, vol, r.nodeName)
		if last != nil && last.Error == rec.Error {
			return nil, nil // told already
		}
		return rec, []note{{corev1.EventTypeWarning, "PreloadFailed", "Preload", rec.Error}}
	}
	if last != nil && last.InProgress { // the visits before this one copied and took this much
		rec.Bytes, rec.Duration.Duration = rec.Bytes+last.Bytes, rec.Duration.Duration+last.Duration.Duration
		rec.HeldBytes = max(0, rec.HeldBytes-last.Bytes)
	}
	if rec.InProgress = rep.More; rec.InProgress {
		return rec, nil // told at the end
	}
	events := []note{{corev1.EventTypeNormal, "CachePreloaded", "Preload", fmt.Sprintf(
		"preloadPaths: %d files of %d bytes; %d bytes copied into the cache in %s, %d there already, %d without a free cache block",
		rec.Files, rec.FileBytes, rec.Bytes, rec.Duration.Duration, rec.HeldBytes, rec.LeftBytes)}}
	if rep.Truncated {
		events[0].text += "; the paths hold more than the cache, and the files beyond its size were not looked at"
	}
	if len(rep.Missing) > 0 {
		events = append(events, note{corev1.EventTypeWarning, "PreloadPathsMissing", "Preload", missingText(b.Spec.PreloadPaths, rep.Missing, vol)})
	}
	return rec, events
}

// preloadError names the field, the value where one is at fault, and what
// is allowed.
func preloadError(err error, vol, node string) string {
	switch {
	case errors.Is(err, fileblocks.ErrNotMounted):
		return fmt.Sprintf("spec.preloadPaths: volume %s has no filesystem mounted on node %s (a raw block volume, or not mounted yet); preloadPaths need a volume of volumeMode Filesystem, in use by a pod", vol, node)
	case errors.Is(err, fileblocks.ErrInvalidPath):
		return fmt.Sprintf("spec.preloadPaths: %v", err)
	case errors.Is(err, cache.ErrNoReadCache):
		return fmt.Sprintf("spec.preloadPaths: volume %s has no live read cache on node %s to preload into", vol, node)
	}
	return fmt.Sprintf("spec.preloadPaths: preloading volume %s failed: %v", vol, err)
}

// missingText lists the missing paths with their indices in spec.preloadPaths.
func missingText(paths, missing []string, vol string) string {
	var named []string
	for _, m := range missing {
		named = append(named, fmt.Sprintf("spec.preloadPaths[%d] %q", slices.Index(paths, m), m))
	}
	return fmt.Sprintf("%s: no such file or directory in volume %s; allowed: paths relative to the root of the volume's filesystem", strings.Join(named, ", "), vol)
}
