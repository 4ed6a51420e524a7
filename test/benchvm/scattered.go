package main

import (
	"path/filepath"

	"github.com/ssdcache/ssdcache/pkg/bench"
	"github.com/ssdcache/ssdcache/test/benchvm/parts"
)

// ssdcacheTarget is ssdcache's target name in the guest's invocations.
const ssdcacheTarget = "ssdcache"

// scatteredPromotions gives the scattered test's figures ssdcache's
// promoted bytes, which fio cannot see: the blocks its node logged as
// promoted during each cold working set's part, times its cache block.
func scatteredPromotions(r *bench.Report, o options) {
	if len(r.Scattered) == 0 {
		return
	}
	dir := filepath.Join(o.outputDir, "parts")
	for _, ws := range o.workingSets {
		partDir := filepath.Join(dir, parts.WorkingSet(ws))
		rep, err := parts.ReadReport(partDir)
		if err != nil {
			continue
		}
		origin, ok, err := parts.ReadOrigin(partDir)
		if err != nil || !ok || origin.BlockBytes == 0 {
			continue
		}
		p := promotionsDuring(filepath.Join(dir, "ssdcache-node.log"), filepath.Join(dir, parts.MetricsLog), rep.StartedAt, rep.FinishedAt)
		r.SetPromoted(ws, ssdcacheTarget, p.blocks*origin.BlockBytes)
	}
}
