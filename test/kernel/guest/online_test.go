package guest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ssdcache/ssdcache/pkg/cache"
	"github.com/ssdcache/ssdcache/pkg/dm"
)

// TestOnlineCacheOpsUnderIO attaches, resizes, pauses, resumes and detaches
// the cache of a mounted ext4 volume while fio writes and verifies and a
// reader re-reads a checksummed data set: no I/O error, data intact, fsck clean.
func TestOnlineCacheOpsUnderIO(t *testing.T) {
	e := guestEnv(t)
	// The test changes the cache with an engine of its own, whose locks the
	// plugin does not share: the plugin must not promote on the volume meanwhile.
	p := startPlugin(t, e, "--promote-interval=0")
	v := p.provision(t, "online", 512<<20, nil, fsCapability("ext4"))
	p.stage(t, v)
	p.publish(t, v)
	expectLinear(t, v.id)
	sums := dataset(t, v.target, 24)

	writer := childCommand(t, "fio", "--name=online", "--filename="+filepath.Join(v.target, "fio.dat"), "--size=32M",
		"--rw=randwrite", "--bs=64k", "--direct=1", "--ioengine=libaio", "--iodepth=4",
		"--verify=crc32c", "--verify_fatal=1", "--do_verify=1", "--loops=3", "--randrepeat=0")
	writerOut := &lockedBuffer{}
	writer.Stdout, writer.Stderr = writerOut, writerOut
	if err := writer.Start(); err != nil {
		t.Fatal(err)
	}
	stop := filepath.Join(e.work, "online.stop")
	reader := childCommand(t, "bash", "-c", fmt.Sprintf(
		`n=0; while [ ! -e %s ]; do for f in %s/file-*; do dd if=$f of=/dev/null iflag=direct bs=1M status=none || exit 1; done; n=$((n+1)); done; echo "reader passes: $n"`,
		stop, v.target))
	readerOut := &lockedBuffer{}
	reader.Stdout, reader.Stderr = readerOut, readerOut
	if err := reader.Start(); err != nil {
		t.Fatal(err)
	}

	eng := realEngine(cache.NoFaults{})
	steps := []struct {
		name  string
		spec  *cache.Spec
		check func()
	}{
		{"attach 64Mi", &cache.Spec{SizeBytes: 64 << 20, Mode: cache.ModeReadCache}, func() { expectCacheMode(t, v.id, dm.Writethrough) }},
		{"resize to 128Mi", &cache.Spec{SizeBytes: 128 << 20, Mode: cache.ModeReadCache}, func() { expectCacheMode(t, v.id, dm.Writethrough) }},
		{"pause", &cache.Spec{SizeBytes: 128 << 20, Mode: cache.ModePaused}, func() { expectPaused(t, v.id) }},
		{"resume", &cache.Spec{SizeBytes: 128 << 20, Mode: cache.ModeReadCache, Warm: true}, func() { expectCacheMode(t, v.id, dm.Writethrough) }},
		{"detach", nil, func() { expectLinear(t, v.id) }},
		{"attach again", &cache.Spec{SizeBytes: 64 << 20, Mode: cache.ModeReadCache}, func() { expectCacheMode(t, v.id, dm.Writethrough) }},
	}
	for _, s := range steps {
		time.Sleep(2 * time.Second) // let fio and the reader run between changes
		start := time.Now()
		if _, err := eng.SetCache(ctx(t), v.id, s.spec); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		s.check()
		t.Logf("%s: done in %v; status %s", s.name, time.Since(start).Round(time.Millisecond), sh(t, "dmsetup status --noflush %s", cache.DeviceName(v.id)))
	}
	if err := waitChild(writer); err != nil {
		t.Fatalf("fio saw an error during the cache changes: %v\n%s", err, writerOut)
	}
	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := waitChild(reader); err != nil {
		t.Fatalf("reader saw an error during the cache changes: %v\n%s", err, readerOut)
	}
	t.Logf("fio verified its writes; %s", readerOut)
	verify(t, sums)

	p.teardownKeep(t, v)
	sh(t, "e2fsck -fn /dev/%s/%s", originVG, v.id)
	if _, err := p.csi.Controller.DeleteVolume(ctx(t), deleteRequest(v)); err != nil {
		t.Fatal(err)
	}
	if got := cacheLVs(t, v.id); len(got) != 0 {
		t.Fatalf("cache LVs left after unstage: %v", got)
	}
}
