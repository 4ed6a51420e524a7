package main

import (
	"maps"
	"testing"

	"github.com/ssdcache/ssdcache/test/vm/guest"
)

// The second boot stages the volume the first left, with everything
// NodeStageVolume needs, the capability included.
func TestRebootVolumeSurvivesTheShare(t *testing.T) {
	dir := t.TempDir()
	want := &guest.Volume{ID: "pvc-bench", Context: map[string]string{"ssdcache.io/cache-size": "256Mi"},
		Capability: guest.BlockCapability(), Staging: "/var/lib/kubelet/staging/pvc-bench", Target: "/var/lib/kubelet/publish/pvc-bench/pod"}
	if err := saveRebootVolume(dir, want); err != nil {
		t.Fatal(err)
	}
	got, err := loadRebootVolume(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != want.ID || !maps.Equal(got.Context, want.Context) || got.Staging != want.Staging || got.Target != want.Target ||
		got.Capability.GetBlock() == nil || got.Capability.GetAccessMode() == nil {
		t.Errorf("after the round trip %+v, want %+v with a block capability", got, want)
	}
}
