package images

import (
	"archive/tar"
	"context"
	"errors"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
)

const (
	// enableEnv must be "1" for the tests that debootstrap Debian (minutes
	// when not cached, root and network to deb.debian.org).
	enableEnv = "SSDCACHE_E2E"
	// containerdEnv names a directory with containerd and ctr binaries for
	// the import test (the e2e harness caches them).
	containerdEnv = "SSDCACHE_CONTAINERD_DIR"
	projectRef    = "docker.io/ssdcache/ssdcache:e2e"
)

func skipUnlessEnabled(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the Debian layer with debootstrap; skipped under -short")
	}
	if os.Getenv(enableEnv) != "1" {
		t.Skipf("builds the Debian layer with debootstrap (root, network to deb.debian.org); set %s=1 to run", enableEnv)
	}
}

func buildProject(t *testing.T, outDir string) Archive {
	t.Helper()
	o := Options{RepoRoot: repoRoot, OutDir: outDir, ProjectRef: projectRef,
		Logger: ktesting.NewLogger(t, ktesting.DefaultConfig)}
	archives, err := Build(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return archives[0]
}

// TestProjectImageMatchesDockerfile keeps the e2e image and the Dockerfile
// in step: the packages hack/image/rootfs.sh installs, its lvm.conf edits,
// apt lists gone, /tmp (where the script was) and the runtime's mount
// points empty, the binaries in place, ENV, USER and ENTRYPOINT as written.
func TestProjectImageMatchesDockerfile(t *testing.T) {
	skipUnlessEnabled(t)
	df, err := readDockerfile(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	img := readArchive(t, buildProject(t, t.TempDir()).Path, projectRef)
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
// new cached layer, so that the edit is not served an old one.
func TestDebianLayerNameFollowsTheScripts(t *testing.T) {
	o := Options{RepoRoot: t.TempDir(), CacheDir: "/c"}
	write := func(script, data string) {
		p := filepath.Join(o.RepoRoot, script)
		if err := errors.Join(os.MkdirAll(filepath.Dir(p), 0o755), os.WriteFile(p, []byte(data), 0o755)); err != nil {
			t.Fatal(err)
		}
	}
	name := func() string {
		p, err := debianLayerPath(o, "bookworm")
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	write(debianScript, "a")
	write(rootfsScript, "b")
	base := name()
	if !strings.HasPrefix(base, "/c/e2e/images/rootfs-bookworm-") || !strings.HasSuffix(base, ".tar") {
		t.Errorf("cached layer %q, want /c/e2e/images/rootfs-bookworm-<hash>.tar", base)
	}
	write(rootfsScript, "c")
	if name() == base {
		t.Errorf("editing %s did not rename the cached layer", rootfsScript)
	}
	write(rootfsScript, "b")
	write(debianScript, "c")
	if name() == base {
		t.Errorf("editing %s did not rename the cached layer", debianScript)
	}
}

// TestArchivesImportIntoContainerd imports the archives into a private
// containerd as the e2e guest does, and checks the names it gives them.
func TestArchivesImportIntoContainerd(t *testing.T) {
	skipUnlessEnabled(t)
	bin := os.Getenv(containerdEnv)
	if bin == "" {
		t.Skipf("set %s to a directory holding containerd and ctr (v2.x) to run", containerdEnv)
	}
	outDir := t.TempDir()
	pause := buildPause(t)
	archives, err := Build(context.Background(), Options{OutDir: outDir,
		Binaries: []BinaryImage{{Ref: "localhost/ssdcache/pause:e2e", Binary: pause, Entrypoint: []string{"/pause"}}}})
	if err != nil {
		t.Fatal(err)
	}
	archives = append(archives, buildProject(t, outDir))
	ctr := startContainerd(t, bin)
	for _, a := range archives {
		ctr("images", "import", "--local", "--snapshotter", "native", "--platform", "linux/amd64", a.Path)
	}
	names := strings.Fields(ctr("images", "ls", "-q"))
	for _, a := range archives {
		if !slices.Contains(names, a.Ref) {
			t.Errorf("containerd lists images %q after import, want %s", names, a.Ref)
		}
	}
}

// startContainerd runs containerd on a socket in a temp dir until the test
// ends and returns a function that runs ctr against it in namespace k8s.io.
func startContainerd(t *testing.T, bin string) func(args ...string) string {
	dir := t.TempDir()
	sock := filepath.Join(dir, "containerd.sock")
	config := "version = 3\nroot = \"" + dir + "/root\"\nstate = \"" + dir + "/state\"\n[grpc]\naddress = \"" + sock + "\"\n"
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	daemon := exec.Command(filepath.Join(bin, "containerd"), "--config", filepath.Join(dir, "config.toml"))
	logFile, err := os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	daemon.Stdout, daemon.Stderr = logFile, logFile
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { daemon.Wait(); close(exited) }()
	t.Cleanup(func() {
		daemon.Process.Kill()
		<-exited
	})
	ctr := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(filepath.Join(bin, "ctr"), append([]string{"-a", sock, "-n", "k8s.io"}, args...)...)
		cmd.Env = append(os.Environ(), "LC_ALL=C")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("ctr %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	// No deadline of its own: a busy machine starts containerd slowly, and
	// the test's timeout ends the wait.
	for _, err := os.Stat(sock); err != nil; _, err = os.Stat(sock) {
		select {
		case <-exited:
			t.Fatalf("containerd exited (%s) before creating %s:\n%s", daemon.ProcessState, sock, readLog(dir))
		case <-time.After(100 * time.Millisecond):
		}
	}
	return ctr
}

func readLog(dir string) string {
	log, _ := os.ReadFile(filepath.Join(dir, "containerd.log"))
	return string(log)
}
