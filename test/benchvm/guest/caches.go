package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ssdcache/ssdcache/pkg/dm"
	"github.com/ssdcache/ssdcache/pkg/hotset"
	"github.com/ssdcache/ssdcache/test/benchvm/parts"
	"github.com/ssdcache/ssdcache/test/vm/guest"
)

// cache is one caching layer under test. Create builds it cold on fixed
// regions of the disks; Restage takes it down and brings it up again as a
// node does when the volume's last pod goes and a new one starts (its data
// and its cache devices stay); AfterReboot brings it up in the VM's second
// boot (reboot.go); Destroy removes it so the next Create starts cold again
// on the same regions.
type cache interface {
	Name() string
	Create(ctx context.Context) (benchTarget, error)
	Restage(ctx context.Context) (parts.Restage, error)
	AfterReboot(ctx context.Context) (benchTarget, parts.Restage, error)
	Destroy(ctx context.Context) error
}

// regions are where lvmcache and bcache put their origin and cache LVs in
// the bench VG.
type regions struct {
	hddPV, ssdPV        string
	originMiB, cacheMiB int64
}

// timed runs down (nil: nothing to take down), then up, and records how
// long each took.
func timed(target string, down, up func() error) (parts.Restage, error) {
	r := parts.Restage{Target: target}
	start := time.Now()
	if down != nil {
		if err := down(); err != nil {
			return r, err
		}
		r.DownSeconds = time.Since(start).Seconds()
	}
	start = time.Now()
	err := up()
	r.UpSeconds = time.Since(start).Seconds()
	return r, err
}

// ssdcacheLayer is a volume of the real node plugin, provisioned, staged and
// published through CSI.
type ssdcacheLayer struct {
	plugin      *guest.Plugin
	volumeBytes int64
	cacheSize   string
	stateDir    string // the plugin's, where it keeps hot sets
	vol         *guest.Volume
}

func (s *ssdcacheLayer) Name() string { return "ssdcache" }

func (s *ssdcacheLayer) Create(ctx context.Context) (benchTarget, error) {
	v, err := s.plugin.CreateVolume(ctx, "pvc-bench", s.volumeBytes, s.cacheSize)
	if err != nil {
		return benchTarget{}, err
	}
	s.vol = v
	return benchTarget{name: s.Name(), path: v.Target, dmName: guest.DMName(v.ID)}, nil
}

// Restage is NodeUnpublish and NodeUnstage, then NodeStage and
// NodePublish: the plugin saves the cache's hot set at unstage and fills the
// new cache from it at stage.
func (s *ssdcacheLayer) Restage(ctx context.Context) (parts.Restage, error) {
	var hot int64
	r, err := timed(s.Name(), func() error {
		err := s.plugin.Unstage(ctx, s.vol)
		if err == nil {
			hot, err = s.hotSetBytes()
		}
		return err
	}, func() error { return s.plugin.StageAndPublish(ctx, s.vol) })
	if err != nil {
		return r, err
	}
	r.HotSetBytes = hot
	return r, s.addWarmUp(&r)
}

// hotSetBytes is the size of the hot set the plugin saved for the volume,
// read before a stage fills the cache from it. The volume must have one:
// its cache held blocks.
func (s *ssdcacheLayer) hotSetBytes() (int64, error) {
	set, ok, err := hotset.InStateDir(s.stateDir).Load(s.vol.ID)
	if err != nil || !ok {
		return 0, fmt.Errorf("the hot set of %s: found %v, %v", s.vol.ID, ok, err)
	}
	return int64(set.Sectors()) * dm.SectorSize, nil
}

// addWarmUp adds the plugin's account of the volume's new fill: its time
// and the bytes it copied from the origin (none when the cache kept its
// blocks).
func (s *ssdcacheLayer) addWarmUp(r *parts.Restage) error {
	var err error
	r.WarmUpSeconds, r.WarmBytes, err = lastWarmUp(s.plugin.LogPath(), s.vol.ID)
	return err
}

// warmUpLine is the plugin's account of a new cache's fill: copied from the
// hot set, or mapped again from what the cache kept (bytes=0).
const warmUpLine = `"(?:Filled the cache from the hot set|Mapped the kept cache blocks again)" volumeID="%s".* bytes=(\d+) .*duration="([^"]+)"`

// lastWarmUp is the duration and the bytes copied from the origin of the
// plugin's last warm-up log line for the volume.
func lastWarmUp(logPath, volumeID string) (seconds float64, copied int64, err error) {
	log, err := os.ReadFile(logPath)
	if err != nil {
		return 0, 0, err
	}
	lines := regexp.MustCompile(fmt.Sprintf(warmUpLine, regexp.QuoteMeta(volumeID))).FindAllSubmatch(log, -1)
	if len(lines) == 0 {
		return 0, 0, fmt.Errorf("%s: no warm-up of %s logged", logPath, volumeID)
	}
	last := lines[len(lines)-1]
	if copied, err = strconv.ParseInt(string(last[1]), 10, 64); err != nil {
		return 0, 0, err
	}
	d, err := time.ParseDuration(string(last[2]))
	return d.Seconds(), copied, err
}

func (s *ssdcacheLayer) Destroy(ctx context.Context) error {
	if s.vol == nil {
		return nil
	}
	err := s.plugin.Delete(ctx, s.vol)
	s.vol = nil
	return err
}

// lvmcacheLayer is LVM's cache: an origin LV on the HDD and a cache pool on
// the SSD joined with lvconvert --type cache, writethrough, default policy
// (smq) and chunk size.
type lvmcacheLayer struct{ regions }

func (l *lvmcacheLayer) Name() string { return "lvmcache" }

func (l *lvmcacheLayer) Create(ctx context.Context) (benchTarget, error) {
	if err := lvcreate(ctx, "lvmcache", l.originMiB, l.hddPV); err != nil {
		return benchTarget{}, err
	}
	if _, err := guest.Run(ctx, "lvcreate", "--yes", "--type", "cache-pool",
		"-L", fmt.Sprintf("%dm", l.cacheMiB), "-n", "lvmcache_pool", benchVG, l.ssdPV); err != nil {
		return benchTarget{}, err
	}
	_, err := guest.Run(ctx, "lvconvert", "--yes", "--type", "cache", "--cachemode", "writethrough",
		"--cachepool", benchVG+"/lvmcache_pool", benchVG+"/lvmcache")
	return lvmcacheTarget, err
}

var lvmcacheTarget = benchTarget{name: "lvmcache", path: "/dev/" + benchVG + "/lvmcache", dmName: benchVG + "-lvmcache"}

// Restage deactivates and activates the cached LV; LVM keeps the cache
// pool's mappings across a clean deactivation.
func (l *lvmcacheLayer) Restage(ctx context.Context) (parts.Restage, error) {
	lvchange := func(flag string) func() error {
		return func() error {
			_, err := guest.Run(ctx, "lvchange", flag, benchVG+"/lvmcache")
			return err
		}
	}
	return timed(l.Name(), lvchange("-an"), lvchange("-ay"))
}

// Destroy removes the cached LV; LVM removes its attached cache pool with
// it, and a pool left behind by a failed lvconvert is removed too.
func (l *lvmcacheLayer) Destroy(ctx context.Context) error {
	for _, lv := range []string{"lvmcache", "lvmcache_pool"} {
		out, err := guest.Run(ctx, "lvs", "--noheadings", "-o", "lv_name", benchVG)
		if err != nil {
			return err
		}
		if !slices.Contains(strings.Fields(out), lv) {
			continue
		}
		if _, err := guest.Run(ctx, "lvremove", "--yes", benchVG+"/"+lv); err != nil {
			return err
		}
	}
	return nil
}

// bcacheLayer is bcache with make-bcache's defaults (writethrough): a
// backing LV on the HDD and a cache LV on the SSD. The device is reached
// through a stable symlink because the bcacheN number is the kernel's choice.
type bcacheLayer struct {
	regions
	link      string
	step      func(format string, args ...any) // progress line
	dev, cset string                           // bcacheN and the cache set's sysfs dir while it exists
}

// The bcache layer's backing and cache LVs.
const (
	bcacheBacking = "/dev/" + benchVG + "/bcache_origin"
	bcacheCache   = "/dev/" + benchVG + "/bcache_cache"
)

func (b *bcacheLayer) Name() string { return "bcache" }

func (b *bcacheLayer) Create(ctx context.Context) (benchTarget, error) {
	if err := lvcreate(ctx, "bcache_origin", b.originMiB, b.hddPV); err != nil {
		return benchTarget{}, err
	}
	if err := lvcreate(ctx, "bcache_cache", b.cacheMiB, b.ssdPV); err != nil {
		return benchTarget{}, err
	}
	// Formatting both at once makes the backing device join the cache set
	// when both are registered.
	args := []string{"--wipe-bcache", "-B", bcacheBacking, "-C", bcacheCache}
	if bucket := bcacheBucket(b.cacheMiB); bucket != "" {
		args = append(args, "--bucket", bucket)
	}
	if _, err := guest.Run(ctx, "make-bcache", args...); err != nil {
		return benchTarget{}, err
	}
	for _, d := range []string{bcacheCache, bcacheBacking} {
		// udev may have registered it already; a second registration fails
		// harmlessly, a real failure shows as an unattached device below.
		if err := register(d); err != nil {
			b.step("bcache: registering %s: %v", d, err)
		}
	}
	return b.attachCacheSet(ctx)
}

// attachCacheSet attaches the registered backing device to the cache set
// on the cache LV, tunes it and links it.
func (b *bcacheLayer) attachCacheSet(ctx context.Context) (benchTarget, error) {
	cset, err := csetUUID(ctx, bcacheCache)
	if err == nil {
		err = b.attach(ctx, cset)
	}
	return benchTarget{name: b.Name(), path: b.link}, err
}

// setCacheMode switches between writethrough (the bench's) and writearound
// (writes bypass the cache, reads still fill it).
func (b *bcacheLayer) setCacheMode(mode string) error {
	if err := os.WriteFile("/sys/block/"+b.dev+"/bcache/cache_mode", []byte(mode), 0o644); err != nil {
		return fmt.Errorf("bcache cache_mode %s: %w", mode, err)
	}
	return nil
}

// bcacheBucket returns a bucket size for small caches, or "" for
// make-bcache's default (512 KiB). Linux refuses a cache set of 512 buckets
// or fewer ("ca->sb.nbuckets is too small"), which a cache of 256 MiB has
// at the default size; only then is the bucket made smaller.
func bcacheBucket(cacheMiB int64) string {
	const minBuckets = 1024
	kib := int64(512)
	for kib > 4 && cacheMiB*1024/kib < minBuckets {
		kib /= 2
	}
	if kib == 512 {
		return ""
	}
	return fmt.Sprintf("%dk", kib)
}

// registerAgain registers a backing device that was just stopped: the
// kernel refuses it (EINVAL) until the stop has released it, and udev may
// register it first, which is as good.
func registerAgain(ctx context.Context, dev string) error {
	real, err := filepath.EvalSymlinks(dev)
	if err != nil {
		return err
	}
	registered := "/sys/block/" + filepath.Base(real) + "/bcache/dev"
	return guest.Poll(ctx, "bcache to register "+dev+" again", 30*time.Second, 200*time.Millisecond, func() (bool, string, error) {
		if _, err := os.Stat(registered); err == nil {
			return true, "", nil
		}
		err := register(dev)
		return err == nil, fmt.Sprint(err), nil
	})
}

func register(dev string) error {
	real, err := filepath.EvalSymlinks(dev)
	if err != nil {
		return err
	}
	return os.WriteFile("/sys/fs/bcache/register", []byte(real), 0o200)
}

// csetUUID reads the cache set UUID from the cache device's superblock.
func csetUUID(ctx context.Context, cacheDev string) (string, error) {
	out, err := guest.Run(ctx, "bcache-super-show", cacheDev)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "cset.uuid" {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("bcache-super-show %s: no cset.uuid in:\n%s", cacheDev, out)
}

// attach finds the bcache device over the backing LV, attaches it to the
// cache set (make-bcache -B -C does not always do it on registration),
// waits until it is attached, then tunes it and points the stable link at it.
func (b *bcacheLayer) attach(ctx context.Context, cset string) error {
	real, err := filepath.EvalSymlinks(bcacheBacking)
	if err != nil {
		return err
	}
	sys := "/sys/block/" + filepath.Base(real) + "/bcache"
	if err := guest.WaitForPath(ctx, sys+"/dev", 30*time.Second); err != nil {
		return fmt.Errorf("bcache did not register %s: %w", bcacheBacking, err)
	}
	if _, err := os.Stat(sys + "/cache"); err != nil {
		if err := os.WriteFile(sys+"/attach", []byte(cset), 0o200); err != nil {
			return fmt.Errorf("attaching %s to cache set %s: %w", bcacheBacking, cset, err)
		}
	}
	if err := guest.WaitForPath(ctx, sys+"/cache", 30*time.Second); err != nil {
		state, _ := os.ReadFile(sys + "/state")
		return fmt.Errorf("bcache backing %s not attached to a cache set (state %q): %w", bcacheBacking, strings.TrimSpace(string(state)), err)
	}
	dev, err := filepath.EvalSymlinks(sys + "/dev")
	if err != nil {
		return err
	}
	csetDir, err := filepath.EvalSymlinks(sys + "/cache")
	if err != nil {
		return err
	}
	b.dev, b.cset = filepath.Base(dev), csetDir
	if err := b.tune(); err != nil {
		return err
	}
	_ = os.Remove(b.link)
	return os.Symlink("/dev/"+b.dev, b.link)
}

// tune sets bcache up as its users do for a read cache: by default it
// bypasses every sequential read of 4 MiB or more and any read while the
// SSD looks congested, which keeps it below raw HDD speed in the bench.
// The settings do not outlive the device.
func (b *bcacheLayer) tune() error {
	for path, value := range map[string]string{
		"/sys/block/" + b.dev + "/bcache/sequential_cutoff": "0",
		b.cset + "/congested_read_threshold_us":             "0",
		b.cset + "/congested_write_threshold_us":            "0",
	} {
		err := os.WriteFile(path, []byte(value), 0o644)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			b.step("bcache: %s is not in this kernel; left as it is", path)
		case err != nil:
			return fmt.Errorf("bcache tuning: %w", err)
		}
	}
	return nil
}

// Restage stops the bcache device and registers its backing device again:
// it rejoins its cache set, whose contents bcache keeps.
func (b *bcacheLayer) Restage(ctx context.Context) (parts.Restage, error) {
	stop := func() error {
		if err := os.WriteFile("/sys/block/"+b.dev+"/bcache/stop", []byte("1"), 0o200); err != nil {
			return fmt.Errorf("stopping %s: %w", b.dev, err)
		}
		return waitGone(ctx, "/sys/block/"+b.dev)
	}
	start := func() error {
		if err := registerAgain(ctx, bcacheBacking); err != nil {
			return err
		}
		return b.attach(ctx, filepath.Base(b.cset))
	}
	return timed(b.Name(), stop, start)
}

func (b *bcacheLayer) Destroy(ctx context.Context) error {
	if b.dev != "" {
		if err := os.WriteFile("/sys/block/"+b.dev+"/bcache/stop", []byte("1"), 0o200); err != nil {
			return fmt.Errorf("stopping %s: %w", b.dev, err)
		}
		if err := os.WriteFile(b.cset+"/stop", []byte("1"), 0o200); err != nil {
			return fmt.Errorf("stopping cache set %s: %w", b.cset, err)
		}
		if err := waitGone(ctx, b.cset, "/sys/block/"+b.dev); err != nil {
			return err
		}
		b.dev, b.cset = "", ""
	}
	_ = os.Remove(b.link)
	for _, lv := range []string{"bcache_origin", "bcache_cache"} {
		if _, err := guest.Run(ctx, "wipefs", "--all", "/dev/"+benchVG+"/"+lv); err != nil {
			return err
		}
		if _, err := guest.Run(ctx, "lvremove", "--yes", benchVG+"/"+lv); err != nil {
			return err
		}
	}
	return nil
}

func waitGone(ctx context.Context, paths ...string) error {
	return guest.Poll(ctx, fmt.Sprintf("%v to go after stop", paths), 60*time.Second, 200*time.Millisecond, func() (bool, string, error) {
		for _, p := range paths {
			if _, err := os.Stat(p); !os.IsNotExist(err) {
				return false, p + " is still there", nil
			}
		}
		return true, "", nil
	})
}

// lvcreate makes a plain LV in the bench VG on the given PV, so each layer
// always lands on the same region of its disk.
func lvcreate(ctx context.Context, name string, mib int64, pv string) error {
	_, err := guest.Run(ctx, "lvcreate", "--yes", "--wipesignatures", "y", "-L", fmt.Sprintf("%dm", mib), "-n", name, benchVG, pv)
	return err
}

// originReads is the block layer's count of bytes read from the volume's
// origin LV so far: the device its dm-cache table (or, while the cache is
// swapped out, its linear table) maps the volume's reads to.
func (s *ssdcacheLayer) originReads(ctx context.Context) (parts.Origin, error) {
	table, err := guest.Run(ctx, "dmsetup", "table", guest.DMName(s.vol.ID))
	if err != nil {
		return parts.Origin{}, err
	}
	dev, blockSectors, err := originOf(table)
	if err != nil {
		return parts.Origin{}, err
	}
	stat, err := os.ReadFile("/sys/dev/block/" + dev + "/stat")
	if err != nil {
		return parts.Origin{}, err
	}
	fields := strings.Fields(string(stat))
	if len(fields) < 3 {
		return parts.Origin{}, fmt.Errorf("%s: stat %q has no sectors-read field", dev, stat)
	}
	sectors, err := strconv.ParseInt(fields[2], 10, 64)
	return parts.Origin{Device: dev, ReadBytes: sectors * dm.SectorSize, BlockBytes: blockSectors * dm.SectorSize}, err
}

// originOf is the origin device (major:minor) of a one-line cache or
// linear table, and the cache's block size in sectors (0 for linear).
func originOf(table string) (dev string, blockSectors int64, err error) {
	f := strings.Fields(table)
	switch {
	case len(f) >= 7 && f[2] == "cache":
		blockSectors, err = strconv.ParseInt(f[6], 10, 64)
		return f[5], blockSectors, err
	case len(f) >= 4 && f[2] == "linear":
		return f[3], 0, nil
	}
	return "", 0, fmt.Errorf("table %q: neither cache nor linear", table)
}
