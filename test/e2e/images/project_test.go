package images

import (
	"archive/tar"
	"context"
	"errors"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/klog/v2/ktesting"
)

// TestProjectImageMatchesDockerfile keeps the e2e image and the Dockerfile
// in step: the packages hack/image/rootfs.sh installs, its lvm.conf edits,
// apt lists gone, /tmp (where the script was) and the runtime's mount
// points empty, the binaries in place, ENV, USER and ENTRYPOINT as written.
// It debootstraps Debian when the layer is not cached (minutes, root and
// network to deb.debian.org), so it runs only in the e2e (SSDCACHE_E2E=1).
func TestProjectImageMatchesDockerfile(t *testing.T) {
	if testing.Short() || os.Getenv("SSDCACHE_E2E") != "1" {
		t.Skip("builds the Debian layer with debootstrap; set SSDCACHE_E2E=1 to run")
	}
	df, err := readDockerfile(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	const ref = "docker.io/ssdcache/ssdcache:e2e"
	archives, err := Build(context.Background(), Options{RepoRoot: repoRoot, OutDir: t.TempDir(), ProjectRef: ref,
		Logger: ktesting.NewLogger(t, ktesting.DefaultConfig)})
	if err != nil {
		t.Fatal(err)
	}
	img := readArchive(t, archives[0].Path, ref)
	checkConfig(t, img, df.User, df.Env, df.Entrypoint)
	const status, lvmConf = "var/lib/dpkg/status", "etc/lvm/lvm.conf"
	files, contents := imageFiles(t, img, status, lvmConf)
	for _, bin := range df.Binaries {
		p := path.Join(df.BinDir, bin)[1:]
		if h := files[p]; h == nil || h.Typeflag != tar.TypeReg || h.Mode != 0o755 || h.Uid != 0 {
			t.Errorf("/%s: %+v, want a root-owned 0755 file", p, h)
		}
	}
	checkInstalled(t, contents[status], rootfsPackages)
	checkLVMWithoutUdev(t, contents[lvmConf])
	for name, h := range files {
		if strings.HasPrefix(name, "var/lib/apt/lists/") && h.Typeflag == tar.TypeReg {
			t.Errorf("apt list %s left in the image", name)
		}
		if dir, rest, _ := strings.Cut(name, "/"); rest != "" && slices.Contains([]string{"dev", "proc", "run", "sys", "tmp"}, dir) {
			t.Errorf("%s left in the image; the runtime mounts /%s", name, dir)
		}
	}
}

// checkInstalled reads dpkg's status file: each package must be installed.
func checkInstalled(t *testing.T, status string, packages []string) {
	t.Helper()
	installed := map[string]bool{}
	for _, stanza := range strings.Split(status, "\n\n") {
		lines := strings.Split(stanza, "\n")
		if name, ok := strings.CutPrefix(lines[0], "Package: "); ok && slices.Contains(lines, "Status: install ok installed") {
			installed[name] = true
		}
	}
	for _, p := range packages {
		if !installed[p] {
			t.Errorf("package %s is not installed in the image (dpkg status)", p)
		}
	}
}

// checkLVMWithoutUdev checks hack/image/rootfs.sh's lvm.conf edit, whose
// sed would silently change nothing if Debian reworded the file: LVM in the
// container neither waits for udev nor relies on its rules.
func checkLVMWithoutUdev(t *testing.T, conf string) {
	t.Helper()
	lines := map[string]bool{}
	for _, l := range strings.Split(conf, "\n") {
		lines[strings.TrimSpace(l)] = true
	}
	for _, setting := range []string{"udev_sync", "udev_rules"} {
		if !lines[setting+" = 0"] || lines[setting+" = 1"] {
			t.Errorf("/etc/lvm/lvm.conf: want the line %q and not %q; was hack/image/rootfs.sh's sed applied?", setting+" = 0", setting+" = 1")
		}
	}
}

// TestDebianLayerNameFollowsTheScripts: an edit to either script names a
// new cached layer, so that the edit is not served an old one; each
// architecture has its own, and amd64's is named as before there were
// others (the e2e's cached layers stay valid).
func TestDebianLayerNameFollowsTheScripts(t *testing.T) {
	o := Options{RepoRoot: t.TempDir(), CacheDir: "/c"}
	write := func(script, data string) {
		p := filepath.Join(o.RepoRoot, script)
		if err := errors.Join(os.MkdirAll(filepath.Dir(p), 0o755), os.WriteFile(p, []byte(data), 0o755)); err != nil {
			t.Fatal(err)
		}
	}
	name := func(arch string) string {
		p, err := debianLayerPath(o, "bookworm", arch)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	write(debianScript, "a")
	write(rootfsScript, "b")
	base, arm := name("amd64"), name("arm64")
	// sha256("bookworm\n" + "hack/image/debian.sh 1\na" + "hack/image/rootfs.sh 1\nb"), the name before arm64.
	if want := "/c/e2e/images/rootfs-bookworm-8d1f4585ce135d1d.tar"; base != want {
		t.Errorf("cached amd64 layer %q, want %q as before the image had other architectures", base, want)
	}
	if !strings.HasPrefix(arm, "/c/e2e/images/rootfs-bookworm-arm64-") || !strings.HasSuffix(arm, ".tar") {
		t.Errorf("cached arm64 layer %q, want /c/e2e/images/rootfs-bookworm-arm64-<hash>.tar", arm)
	}
	for _, arch := range []string{"amd64", "arm64"} {
		was := name(arch)
		write(rootfsScript, "c")
		if name(arch) == was {
			t.Errorf("editing %s did not rename the cached %s layer", rootfsScript, arch)
		}
		write(rootfsScript, "b")
		write(debianScript, "c")
		if name(arch) == was {
			t.Errorf("editing %s did not rename the cached %s layer", debianScript, arch)
		}
		write(debianScript, "a")
	}
}
