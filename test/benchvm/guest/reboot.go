package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/utils/exec"

	pkgcache "github.com/ssdcache/ssdcache/pkg/cache" // beside this package's own cache interface
	"github.com/ssdcache/ssdcache/pkg/command"
	"github.com/ssdcache/ssdcache/pkg/dm"
	"github.com/ssdcache/ssdcache/pkg/mounter"
	"github.com/ssdcache/ssdcache/test/benchvm/parts"
	"github.com/ssdcache/ssdcache/test/vm/guest"
)

// The reboot step: the working set -reboot-working-set runs last in the
// VM's first boot and leaves ssdcache's cache up; ssdcache-node is stopped
// with SIGTERM, as a shutdown stops a node's pods (it marks each live cache
// it can vouch for; kubelet unstages nothing). Then, by -reboot-kind:
//
//   - power-cut: the guest syncs and powers off with ssdcache's device up,
//     a power loss for ssdcache; after the reboot its cache is not trusted
//     and is filled from the hot set (safety rule 2);
//   - clean: what is mounted from ssdcache's device is unmounted and the
//     device removed, as systemd-shutdown unmounts the filesystems and
//     detaches device-mapper devices at a clean reboot; dm-cache commits
//     its metadata clean, and a marked cache is kept across the reboot.
//
// The host boots the same disks again with -after-reboot, where every
// cache is brought up as a node's boot and kubelet bring it up again, and
// every target runs once more.
//
// The peers shut down cleanly whatever the kind: lvmcache's dm-cache trusts
// its metadata after a power-off only when it was shut down cleanly, and
// otherwise takes every cached block as dirty and writes it back to the HDD
// all targets share, during ssdcache's warm-up and the runs after the
// reboot (the raw HDD read at a third of its speed after the reboot of
// docs/bench-example), or LVM refuses to activate it until a manual repair.
// So lvmcache is deactivated before the power-off, as a clean shutdown
// does; bcache's devices are stopped by its kernel reboot notifier at the
// power-off.

// rebootStateFile, in the share's output dir, is what the first boot
// leaves the second: the ssdcache volume, as kubelet keeps it in its own
// state across a reboot.
const rebootStateFile = "reboot-volume.json"

func beforeReboot(ctx context.Context, o options, l layout) error {
	part := parts.WorkingSet(o.rebootWorkingSet)
	if err := passUp(ctx, o, l, part, o.Runs, readArgs(o, o.rebootWorkingSet), true); err != nil {
		return errors.Join(err, destroyCaches(ctx, l, part))
	}
	if err := saveRebootVolume(o.OutputDir, l.ssdcache.vol); err != nil {
		return err
	}
	for _, c := range l.caches {
		if s, ok := c.(cleanShutdown); ok {
			if err := s.ShutDown(ctx); err != nil {
				return fmt.Errorf("%s: shutting %s down: %w", part, c.Name(), err)
			}
			o.Step("%s: %s shut down cleanly", part, c.Name())
		}
	}
	marked, err := l.ssdcache.DownForReboot(ctx, o.rebootKind)
	if err != nil {
		return fmt.Errorf("%s: ssdcache before a %s reboot: %w", part, o.rebootKind, err)
	}
	if o.rebootKind == parts.CleanReboot {
		o.Step("%s: ssdcache-node stopped (cache marked: %v), %s removed as a clean shutdown does; the VM powers off", part, marked, guest.DMName(l.ssdcache.vol.ID))
	} else {
		o.Step("%s: ssdcache-node stopped (cache marked: %v), its device left up; the VM powers off without taking it down", part, marked)
	}
	return parts.WriteReboot(filepath.Join(o.OutputDir, part+parts.RebootedSuffix), parts.Reboot{Kind: o.rebootKind, Marked: marked})
}

func afterReboot(ctx context.Context, o options, l layout) error {
	part := parts.WorkingSet(o.rebootWorkingSet) + parts.RebootedSuffix
	vol, err := loadRebootVolume(o.OutputDir)
	if err != nil {
		return fmt.Errorf("%s: the volume the first boot left: %w", part, err)
	}
	l.ssdcache.vol = vol
	targets := l.rawTargets()
	var figures []parts.Restage
	for _, c := range l.caches {
		t, f, err := c.AfterReboot(ctx)
		if err != nil {
			return errors.Join(fmt.Errorf("%s: bringing %s up: %w", part, c.Name(), err), destroyCaches(ctx, l, part))
		}
		o.Step("%s: %s up again in %.1fs, %d bytes warmed", part, c.Name(), f.UpSeconds, f.WarmBytes)
		targets, figures = append(targets, t), append(figures, f)
	}
	describe(ctx, o, part)
	err = parts.WriteRestage(filepath.Join(o.OutputDir, part), figures)
	if err == nil {
		err = o.RunBench(ctx, benchArgs(o, targetArgs(targets), part, 1, readArgs(o, o.rebootWorkingSet)))
	}
	return errors.Join(err, destroyCaches(ctx, l, part))
}

// saveRebootVolume keeps what kubelet would know of the volume.
func saveRebootVolume(dir string, v *guest.Volume) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, rebootStateFile), data, 0o644)
}

func loadRebootVolume(dir string) (*guest.Volume, error) {
	data, err := os.ReadFile(filepath.Join(dir, rebootStateFile))
	if err != nil {
		return nil, err
	}
	v := &guest.Volume{}
	if err := json.Unmarshal(data, v); err != nil {
		return nil, fmt.Errorf("%s: %w", rebootStateFile, err)
	}
	return v, nil
}

// AfterReboot is NodeStageVolume and NodePublishVolume, as kubelet calls
// them for a pod's volume after the node rebooted: the plugin keeps a
// cache it marked at SIGTERM whose device a clean shutdown removed, and
// otherwise fills a new cache from the hot set it saved last.
func (s *ssdcacheLayer) AfterReboot(ctx context.Context) (benchTarget, parts.Restage, error) {
	t := benchTarget{name: s.Name(), path: s.vol.Target, dmName: guest.DMName(s.vol.ID)}
	hot, err := s.hotSetBytes()
	if err != nil {
		return t, parts.Restage{Target: s.Name()}, err
	}
	r, err := timed(s.Name(), nil, func() error { return s.plugin.StageAndPublish(ctx, s.vol) })
	r.HotSetBytes = hot
	if err == nil {
		err = s.addWarmUp(&r)
	}
	return t, r, err
}

// DownForReboot stops ssdcache-node with SIGTERM, as a node's shutdown stops its
// pods, and says whether it marked the volume's cache for a clean shutdown.
// For a clean reboot it then unmounts what is mounted from the volume's
// device (the pod's bind mount of it) and removes the device, as
// systemd-shutdown does after stopping the services, with the plugin's own
// unmount and removal (which retries while udev holds the device); not
// NodeUnpublish or NodeUnstage, which kubelet does not call at a shutdown.
// The cache's LVs stay active: linear, they hold no state to commit.
func (s *ssdcacheLayer) DownForReboot(ctx context.Context, kind string) (marked bool, err error) {
	s.plugin.Stop()
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return false, err
	}
	lvs, err := guest.Run(ctx, "lvs", "--noheadings", "-o", "lv_name,lv_tags")
	if err != nil {
		return false, err
	}
	marked = markedForShutdown(lvs, s.vol.ID, strings.TrimSpace(string(boot)))
	if kind != parts.CleanReboot {
		return marked, nil
	}
	host := mounter.NewHost(exec.New())
	for _, path := range []string{s.vol.Target, s.vol.Staging} {
		if err := host.Unmount(path); err != nil {
			return marked, fmt.Errorf("unmounting %s: %w", path, err)
		}
	}
	return marked, dm.NewDmsetup(command.NewRunner(exec.New(), os.Environ()...)).Remove(ctx, guest.DMName(s.vol.ID))
}

// markedForShutdown says whether one of the volume's cache LVs (named
// "<volume ID>.cache-…") carries the shutdown mark of boot, in lvs's
// "lv_name lv_tags" lines (tags comma-separated).
func markedForShutdown(lvs, volumeID, boot string) bool {
	for _, line := range strings.Split(lvs, "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && strings.HasPrefix(f[0], volumeID+".") && slices.Contains(strings.Split(f[1], ","), pkgcache.ShutdownTagPrefix+boot) {
			return true
		}
	}
	return false
}

// cleanShutdown is a cache a node's clean shutdown takes down before the
// power-off.
type cleanShutdown interface {
	ShutDown(ctx context.Context) error
}

// ShutDown deactivates the cached LV, as a clean shutdown does: dm-cache
// then writes its metadata clean and keeps its mappings across the reboot.
func (l *lvmcacheLayer) ShutDown(ctx context.Context) error {
	_, err := guest.Run(ctx, "lvchange", "-an", benchVG+"/lvmcache")
	return err
}

// AfterReboot activates the cached LV; udev's LVM autoactivation usually
// did so at boot already (test/vm/README.md), so its time is mostly that of
// an lvchange that finds nothing to do.
func (l *lvmcacheLayer) AfterReboot(ctx context.Context) (benchTarget, parts.Restage, error) {
	r, err := timed(l.Name(), nil, func() error {
		_, err := guest.Run(ctx, "lvchange", "-ay", benchVG+"/lvmcache")
		return err
	})
	return lvmcacheTarget, r, err
}

// AfterReboot registers the backing and cache LVs, as bcache's udev rules
// do at boot, and tunes the device again (sysfs settings do not persist).
func (b *bcacheLayer) AfterReboot(ctx context.Context) (t benchTarget, r parts.Restage, err error) {
	r, err = timed(b.Name(), nil, func() error {
		for _, lv := range []string{bcacheBacking, bcacheCache} {
			if _, err := guest.Run(ctx, "lvchange", "-ay", lv); err != nil {
				return err
			}
			if err := register(lv); err != nil {
				b.step("bcache: registering %s: %v", lv, err) // udev may have done it
			}
		}
		t, err = b.attachCacheSet(ctx)
		return err
	})
	return t, r, err
}
