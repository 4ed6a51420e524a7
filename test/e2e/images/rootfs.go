package images

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"
)

// rootfsFormatVersion changes whenever the way the Debian layer is made
// changes (below), so older cached layers are not reused.
const rootfsFormatVersion = 4

// Mirrors the layer is bootstrapped from; the same ones Debian's images use.
const (
	DefaultDebianMirror         = "http://deb.debian.org/debian"
	DefaultDebianSecurityMirror = "http://deb.debian.org/debian-security"
)

// slimDpkgConfig keeps docs, man pages and translations out of the image,
// as debian:<suite>-slim does (debuerreotype's slimify list).
const slimDpkgConfig = `path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/lintian/overrides/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/man/*
`

// aptCleanConfig is Debian images' docker-clean: apt deletes downloaded
// packages and its binary caches after every run.
const aptCleanConfig = `DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
`

// slimScript removes what debootstrap installed before slimDpkgConfig and
// aptCleanConfig existed.
const slimScript = `set -e
apt-get clean
rm -rf /usr/share/groff/* /usr/share/info/* /usr/share/linda/* /usr/share/lintian/overrides/* /usr/share/locale/* /usr/share/man/*
find /usr/share/doc -mindepth 1 -not -type d -not -name copyright -delete
find /usr/share/doc -mindepth 1 -type d -empty -delete
`

// policyRCD stops package scripts from starting services in the chroot.
const policyRCD = "#!/bin/sh\nexit 101\n"

// rootfsPlan is everything that determines the Debian layer's content;
// its hash names the cached layer.
type rootfsPlan struct {
	FormatVersion  int
	Suite          string
	Mirror         string
	SecurityMirror string
	Steps          []Step
	SlimDpkg       string
	SlimScript     string
	AptClean       string

	cachePath string
	logPath   string
}

func planRootfs(o Options, df *Dockerfile) rootfsPlan {
	p := rootfsPlan{
		FormatVersion: rootfsFormatVersion, Suite: df.Suite,
		Mirror: o.DebianMirror, SecurityMirror: o.DebianSecurityMirror,
		Steps:    df.Steps,
		SlimDpkg: slimDpkgConfig, SlimScript: slimScript, AptClean: aptCleanConfig,
	}
	key, _ := json.Marshal(p) // only strings and ints: cannot fail
	sum := sha256.Sum256(key)
	name := "rootfs-" + df.Suite + "-" + hex.EncodeToString(sum[:8])
	dir := filepath.Join(o.CacheDir, "e2e", "images")
	p.cachePath = filepath.Join(dir, name+".tar")
	p.logPath = filepath.Join(dir, name+".log")
	return p
}

// sourcesList is the apt configuration of the image: the suite, its
// updates and its security updates, like Debian's own images.
func (p rootfsPlan) sourcesList() string {
	return fmt.Sprintf("deb %[1]s %[2]s main\ndeb %[1]s %[2]s-updates main\ndeb %[3]s %[2]s-security main\n",
		p.Mirror, p.Suite, p.SecurityMirror)
}

// debianLayer returns the path of the cached Debian layer for df, building
// it first if no cached copy exists.
func (b *Builder) debianLayer(ctx context.Context, o Options, df *Dockerfile) (string, error) {
	plan := planRootfs(o, df)
	if _, err := os.Stat(plan.cachePath); err == nil {
		o.Logger.Info("Using cached Debian layer", "path", plan.cachePath)
		return plan.cachePath, nil
	}
	if os.Geteuid() != 0 {
		return "", fmt.Errorf("building the Debian layer %s needs root (debootstrap, chroot); run as root or provide the cached file", plan.cachePath)
	}
	if err := os.MkdirAll(filepath.Dir(plan.cachePath), 0o755); err != nil {
		return "", err
	}
	unlock, err := lockFile(ctx, plan.cachePath+".lock")
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(plan.cachePath); err == nil { // built by whoever held the lock
		o.Logger.Info("Using Debian layer built concurrently", "path", plan.cachePath)
		return plan.cachePath, nil
	}
	start := time.Now()
	o.Logger.Info("Building Debian layer (minutes)", "suite", plan.Suite, "steps", joinSteps(plan.Steps), "log", plan.logPath)
	if err := b.buildRootfsLayer(ctx, plan); err != nil {
		return "", fmt.Errorf("building the Debian layer (full log in %s): %w", plan.logPath, err)
	}
	o.Logger.Info("Built Debian layer", "path", plan.cachePath, "duration", time.Since(start).Round(time.Second))
	return plan.cachePath, nil
}

func (b *Builder) buildRootfsLayer(ctx context.Context, plan rootfsPlan) (err error) {
	logFile, err := os.Create(plan.logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	dir, err := os.MkdirTemp(filepath.Dir(plan.cachePath), ".rootfs-build-")
	if err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o755); err != nil { // apt downloads as _apt, which must reach the tree
		return err
	}
	defer func() {
		if cleanupErr := b.removeBuildDir(dir); cleanupErr != nil && err == nil {
			err = cleanupErr
		}
	}()
	if err := b.debootstrap(ctx, plan, dir, logFile); err != nil {
		return err
	}
	if err := b.customizeRootfs(ctx, plan, dir, logFile); err != nil {
		return err
	}
	return b.writeRootfsLayer(ctx, dir, plan.cachePath)
}

func (b *Builder) debootstrap(ctx context.Context, plan rootfsPlan, dir string, log io.Writer) error {
	if _, err := b.exec.LookPath("debootstrap"); err != nil {
		return fmt.Errorf("building the Debian layer needs debootstrap (hack/e2e-assets.sh debootstrap installs it): %w", err)
	}
	c := command{name: "debootstrap", args: []string{"--variant=minbase", plan.Suite, dir, plan.Mirror}, log: log}
	if err := run(ctx, b.exec, c); err != nil {
		return fmt.Errorf("debootstrap of %s from %s failed (is the mirror reachable from this machine?): %w", plan.Suite, plan.Mirror, err)
	}
	return nil
}

// customizeRootfs turns the bootstrapped tree into the Dockerfile's final
// stage: the base image's slim and apt-clean settings, then the
// Dockerfile's steps in order (COPY'd files written into the tree, RUNs
// verbatim in a chroot with /proc mounted), then the build-only files
// removed again.
func (b *Builder) customizeRootfs(ctx context.Context, plan rootfsPlan, dir string, log io.Writer) error {
	if err := prepareChroot(plan, dir); err != nil {
		return err
	}
	if err := b.mounter.Mount("proc", filepath.Join(dir, "proc"), "proc", nil); err != nil {
		return fmt.Errorf("mounting proc in the chroot %s: %w", dir, err)
	}
	steps := append([]Step{{Run: slimScript}}, plan.Steps...)
	for _, s := range steps {
		var err error
		if s.Run != "" {
			err = b.chrootShell(ctx, dir, s.Run, log)
		} else {
			err = copyIntoRoot(dir, s)
		}
		if err != nil {
			return err
		}
	}
	if err := b.mounter.Unmount(filepath.Join(dir, "proc")); err != nil {
		return fmt.Errorf("unmounting proc in the chroot %s: %w", dir, err)
	}
	return finishChroot(dir)
}

func (b *Builder) chrootShell(ctx context.Context, dir, script string, log io.Writer) error {
	env := append(toolEnv(), "DEBIAN_FRONTEND=noninteractive", "HOME=/root")
	fmt.Fprintf(log, "+ chroot %s /bin/sh -c %q\n", dir, script)
	return run(ctx, b.exec, command{name: "chroot", args: []string{dir, "/bin/sh", "-c", script}, env: env, log: log})
}

// copyIntoRoot writes a COPY step's file into the tree at dir as root, as
// docker build does; os.Root keeps symlinks in the tree from leading out.
func copyIntoRoot(dir string, s Step) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	dest := strings.TrimPrefix(s.Dest, "/")
	if err := root.MkdirAll(path.Dir(dest), 0o755); err != nil {
		return fmt.Errorf("COPY %s %s: %w", s.Src, s.Dest, err)
	}
	if err := root.WriteFile(dest, []byte(s.Data), s.Mode); err != nil {
		return fmt.Errorf("COPY %s %s: %w", s.Src, s.Dest, err)
	}
	return root.Chmod(dest, s.Mode) // not masked by the umask
}

// prepareChroot writes the image's apt sources and slim dpkg settings, and
// the build-only policy-rc.d and resolv.conf (for apt-get's DNS lookups).
func prepareChroot(plan rootfsPlan, dir string) error {
	resolv, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		return fmt.Errorf("reading the host's resolv.conf for apt in the chroot: %w", err)
	}
	files := []struct {
		path string
		data string
		mode os.FileMode
	}{
		{"etc/apt/sources.list", plan.sourcesList(), 0o644},
		{"etc/dpkg/dpkg.cfg.d/docker", slimDpkgConfig, 0o644},
		{"etc/apt/apt.conf.d/docker-clean", aptCleanConfig, 0o644},
		{"usr/sbin/policy-rc.d", policyRCD, 0o755},
		{"etc/resolv.conf", string(resolv), 0o644},
	}
	for _, f := range files {
		p := filepath.Join(dir, f.path)
		os.Remove(p) // resolv.conf may be a dangling symlink into the host
		if err := os.WriteFile(p, []byte(f.data), f.mode); err != nil {
			return err
		}
	}
	return nil
}

// finishChroot removes the build-only files; the runtime provides
// resolv.conf and hostname to every container.
func finishChroot(dir string) error {
	if err := os.Remove(filepath.Join(dir, "usr/sbin/policy-rc.d")); err != nil {
		return err
	}
	for _, f := range []string{"etc/resolv.conf", "etc/hostname"} {
		os.Remove(filepath.Join(dir, f)) // a fresh file, not the host's mode
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			return err
		}
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "var/log/*.log"))
	for _, l := range logs {
		os.Remove(l) // build logs (bootstrap, dpkg, alternatives) vary per run
	}
	return nil
}

// removeBuildDir unmounts anything still mounted under dir (a failed build
// may leave /proc mounted) before deleting it, so RemoveAll never walks
// into a live /proc or /dev.
func (b *Builder) removeBuildDir(dir string) error {
	mounts, err := b.mounter.List()
	if err != nil {
		return fmt.Errorf("listing mounts before removing %s: %w", dir, err)
	}
	var under []string
	for _, m := range mounts {
		if m.Path == dir || strings.HasPrefix(m.Path, dir+"/") {
			under = append(under, m.Path)
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(under))) // children first
	for _, p := range under {
		if err := b.mounter.Unmount(p); err != nil {
			return fmt.Errorf("unmounting %s; left %s in place: %w", p, dir, err)
		}
	}
	return os.RemoveAll(dir)
}

// lockFile takes an exclusive flock on p, waiting for another builder (the
// e2e test and a manual run may overlap) rather than debootstrapping twice.
func lockFile(ctx context.Context, p string) (unlock func(), err error) {
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil // closing the file releases the lock
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", p, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for the lock %s held by another build: %w", p, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// writeRootfsLayer tars the tree at dir into the cache file out: owners,
// modes, symlinks, hard links and the mtimes dpkg left, in name order, with
// /dev, /proc, /run, /sys and /tmp kept empty (the runtime mounts fresh
// ones; debootstrap's device nodes do not belong in an image). The file is
// synced before it is renamed into place, so a crash never leaves a
// truncated layer in the cache.
func (b *Builder) writeRootfsLayer(ctx context.Context, dir, out string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	args := append(tarArgs(dir, out+".tmp"), "--sort=name", "--anchored") // .tmp: the build holds the cache lock
	members := make([]string, len(entries))
	for i, e := range entries {
		members[i] = e.Name()
		if slices.Contains([]string{"dev", "proc", "run", "sys", "tmp"}, e.Name()) {
			args = append(args, "--exclude="+e.Name()+"/*")
		}
	}
	if err := b.tar(ctx, args, members...); err != nil {
		return fmt.Errorf("writing the Debian layer %s: %w", out, err)
	}
	f, err := os.Open(out + ".tmp")
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return err
	}
	return os.Rename(out+".tmp", out)
}
