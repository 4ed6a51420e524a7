package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestBcacheBucketKeepsMoreThan512Buckets(t *testing.T) {
	for cacheMiB, want := range map[int64]string{
		1024: "",     // 2048 default 512 KiB buckets
		512:  "",     // 1024 buckets: enough
		256:  "256k", // 512 default buckets would be refused
		64:   "64k",
	} {
		if got := bcacheBucket(cacheMiB); got != want {
			t.Errorf("bcacheBucket(%d MiB) = %q, want %q", cacheMiB, got, want)
		}
	}
}

func TestLastWarmUpIsTheVolumesLatestLogLine(t *testing.T) {
	log := filepath.Join(t.TempDir(), "ssdcache-node.log")
	lines := `I1202 03:41:53.3 189 warm.go:252] "Filled the cache from the hot set" volumeID="pvc-bench" operation="attach" blocks=9 bytes=589824 kept=0 writtenMeanwhile=0 duration="1.5s"
I1202 03:45:53.3 189 warm.go:252] "Filled the cache from the hot set" volumeID="pvc-bench" operation="attach" blocks=1033 bytes=67698688 kept=0 writtenMeanwhile=0 duration="2.33672074s"
I1202 03:46:53.3 189 warm.go:252] "Filled the cache from the hot set" volumeID="pvc-other" operation="attach" blocks=1 bytes=65536 kept=0 writtenMeanwhile=0 duration="9s"
`
	if err := os.WriteFile(log, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, copied, err := lastWarmUp(log, "pvc-bench"); err != nil || got != 2.33672074 || copied != 67698688 {
		t.Fatalf("lastWarmUp = %v s, %d bytes, %v; want 2.33672074 s and 67698688 bytes, the volume's latest", got, copied, err)
	}
	if _, _, err := lastWarmUp(log, "pvc-none"); err == nil {
		t.Fatal("a volume never warmed gave no error")
	}
	kept := `I1205 18:09:20.900120 173 warm.go:345] "Mapped the kept cache blocks again" volumeID="pvc-bench" operation="attach" blocks=0 bytes=0 kept=62 writtenMeanwhile=4 duration="168.969489ms"
`
	if err := os.WriteFile(log, []byte(lines+kept), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, copied, err := lastWarmUp(log, "pvc-bench"); err != nil || got != 0.168969489 || copied != 0 {
		t.Fatalf("lastWarmUp after a restage that kept the cache = %v s, %d bytes, %v; want 0.168969489 s, nothing copied", got, copied, err)
	}
}

// TestMarkedForShutdownIsThisBootsMarkOnTheVolume: the report says the
// plugin marked the cache only for this boot's mark on one of the volume's
// own LVs.
func TestMarkedForShutdownIsThisBootsMarkOnTheVolume(t *testing.T) {
	const boot = "0d3e-boot"
	lvs := `  pvc-bench.cache-data
  pvc-bench.cache-meta2 ssdcache.io/role=cache-meta,ssdcache.io/shutdown-boot=0d3e-boot
  pvc-other.cache-meta  ssdcache.io/shutdown-boot=0d3e-boot
  raw_hdd
`
	if !markedForShutdown(lvs, "pvc-bench", boot) {
		t.Errorf("the mark on pvc-bench's metadata LV (the second of its names) not found in:\n%s", lvs)
	}
	for _, c := range []struct{ volume, boot string }{{"pvc-bench", "an-earlier-boot"}, {"pvc-none", boot}, {"pvc", boot}} {
		if markedForShutdown(lvs, c.volume, c.boot) {
			t.Errorf("volume %s found marked for boot %s in:\n%s", c.volume, c.boot, lvs)
		}
	}
}
