package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ssdcache/ssdcache/pkg/bench"
	"github.com/ssdcache/ssdcache/test/vm/guest"
)

// treePass is the application-load profile: on freshly created caches every
// target gets an ext4 filesystem holding ssdcache-bench's tree, laid out
// while the caches keep none of it, and ssdcache-bench times reading the
// whole tree run after run.
func treePass(ctx context.Context, o options, l layout, part string) error {
	targets, err := createCaches(ctx, o, l, part)
	if err == nil {
		err = measureTrees(ctx, o, l, part, targets)
	}
	return errors.Join(err, destroyCaches(ctx, l, part))
}

func measureTrees(ctx context.Context, o options, l layout, part string, targets []benchTarget) (err error) {
	var dirs []benchTarget
	defer func() { err = errors.Join(err, unmountAll(ctx, dirs)) }()
	args, err := layOutUncached(ctx, o, l, part, targets, &dirs)
	if err != nil {
		return err
	}
	for _, t := range targets {
		if t.dmName != "" {
			if status, err := guest.Run(ctx, "dmsetup", "status", t.dmName); err == nil {
				o.Step("%s: %s after the layout: %s", part, t.name, status)
			}
		}
	}
	// The page cache holds the tree's directories and inodes from the
	// layout; run 1 reads them from the disks as an application's first
	// start after boot does.
	if _, err := guest.Run(ctx, "sh", "-c", "sync && echo 3 > /proc/sys/vm/drop_caches"); err != nil {
		return err
	}
	return o.RunBench(ctx, benchArgs(o, args, part, o.Runs, nil))
}

// layOutUncached makes the filesystems, mounts them (into dirs, for the
// caller to unmount) and runs ssdcache-bench's layout, with bcache in
// writearound mode meanwhile: in writethrough it caches every write, so
// the inode tables, the journal and the tree would start warm. dm-cache in
// writethrough mode promotes a written block only when smq finds it hot;
// its occupancy after the layout goes to the log. It returns the
// ssdcache-bench arguments of the tree's targets.
func layOutUncached(ctx context.Context, o options, l layout, part string, targets []benchTarget, dirs *[]benchTarget) (args []string, err error) {
	for _, c := range l.caches {
		if b, ok := c.(*bcacheLayer); ok {
			if err := b.setCacheMode("writearound"); err != nil {
				return nil, err
			}
			defer func() { err = errors.Join(err, b.setCacheMode("writethrough")) }()
		}
	}
	for _, t := range targets {
		dir := filepath.Join(o.WorkDir, "trees", t.name)
		if err := mountNewFS(ctx, t.path, dir); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", part, t.name, err)
		}
		*dirs = append(*dirs, benchTarget{name: t.name, path: dir, dmName: t.dmName})
	}
	args = append(targetArgs(*dirs), "-working-sets", o.treeWorkingSet, "-tests", bench.TreeTest.ID)
	if err := o.RunBench(ctx, append(benchArgs(o, args, part, o.Runs, nil), "-prepare-only")); err != nil {
		return nil, fmt.Errorf("%s: laying out the trees: %w", part, err)
	}
	return args, nil
}

func mountNewFS(ctx context.Context, device, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// Initialised inode tables and journal now, not by a kernel thread
	// writing while the runs measure.
	if _, err := guest.Run(ctx, "mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", device); err != nil {
		return err
	}
	_, err := guest.Run(ctx, "mount", device, dir)
	return err
}

func unmountAll(ctx context.Context, dirs []benchTarget) error {
	var errs []error
	for _, d := range dirs {
		if _, err := guest.Run(ctx, "umount", d.path); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
