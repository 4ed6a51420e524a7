package images

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
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

func cacheDir(tb testing.TB) string {
	if d := os.Getenv("CACHE_DIR"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		tb.Fatal(err)
	}
	return filepath.Join(home, ".cache", "ssdcache")
}

func buildProject(t *testing.T, outDir string) Archive {
	t.Helper()
	o := Options{RepoRoot: repoRoot, CacheDir: cacheDir(t), OutDir: outDir, ProjectRef: projectRef,
		Logger: ktesting.NewLogger(t, ktesting.DefaultConfig)}
	archives, err := Build(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return archives[0]
}

// TestProjectImageMatchesDockerfile keeps the e2e image and the Dockerfile
// in step: every keyFiles package installed and its files present,
// hack/image/rootfs.sh's lvm.conf edits applied, apt lists and the script
// itself gone, the binaries in place, ENV, USER and ENTRYPOINT as written.
func TestProjectImageMatchesDockerfile(t *testing.T) {
	skipUnlessEnabled(t)
	df, err := readDockerfile(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	archive := buildProject(t, t.TempDir())
	desc, img := readArchive(t, archive.Path)
	if desc.Annotations[annotationContainerdName] != projectRef {
		t.Errorf("index annotations %v, want %s=%s", desc.Annotations, annotationContainerdName, projectRef)
	}
	checkConfig(t, img, df.User, df.Env, df.Entrypoint)
	fsys := newImageFS(t, img)
	var packages []string
	for pkg, files := range keyFiles {
		packages = append(packages, pkg)
		for _, f := range files {
			if h := fsys.resolve(f); h == nil || h.Typeflag != tar.TypeReg {
				t.Errorf("package %s: %s is not a file in the image", pkg, f)
			}
		}
	}
	for _, bin := range df.Binaries {
		p := path.Join(df.BinDir, bin)
		if h := fsys.resolve(p); h == nil || h.Mode&0o111 == 0 || h.Uid != 0 {
			t.Errorf("%s: %+v, want a root-owned executable", p, h)
		}
	}
	checkInstalled(t, fsys.read("/var/lib/dpkg/status"), packages)
	checkLVMWithoutUdev(t, fsys.read("/etc/lvm/lvm.conf"))
	if len(fsys.glob("var/lib/apt/lists/")) > 0 {
		t.Errorf("apt lists left in the image: %v", fsys.glob("var/lib/apt/lists/")[:1])
	}
	for _, s := range df.Steps { // the Dockerfile's RUN deletes the script it copies
		if s.Src != "" && fsys.resolve(s.Dest) != nil {
			t.Errorf("%s (COPY %s) left in the image", s.Dest, s.Src)
		}
	}
}

// checkInstalled reads dpkg's status file: each package must be installed.
func checkInstalled(t *testing.T, status string, packages []string) {
	t.Helper()
	installed := map[string]bool{}
	for _, stanza := range strings.Split(status, "\n\n") {
		var name string
		for _, line := range strings.Split(stanza, "\n") {
			if v, ok := strings.CutPrefix(line, "Package: "); ok {
				name = v
			}
			if line == "Status: install ok installed" {
				installed[name] = true
			}
		}
	}
	for _, p := range packages {
		if !installed[p] {
			t.Errorf("package %s is not installed in the image (dpkg status)", p)
		}
	}
}

// checkLVMWithoutUdev checks hack/image/rootfs.sh's lvm.conf edit: LVM in
// the container neither waits for udev nor relies on its rules.
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
	// No fixed deadline: a busy machine starts containerd slowly. The
	// wait ends with the test's own time, less a minute to report.
	deadline := time.Now().Add(time.Hour)
	if d, ok := t.Deadline(); ok {
		deadline = d.Add(-time.Minute)
	}
	for start := time.Now(); ; time.Sleep(100 * time.Millisecond) {
		if _, err := os.Stat(sock); err == nil {
			return ctr
		}
		select {
		case <-exited:
			t.Fatalf("containerd exited (%s) before creating %s:\n%s", daemon.ProcessState, sock, readLog(dir))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("containerd, still running, did not create %s in %v:\n%s", sock, time.Since(start).Round(time.Second), readLog(dir))
		}
	}
}

func readLog(dir string) string {
	log, _ := os.ReadFile(filepath.Join(dir, "containerd.log"))
	return string(log)
}

// imageFS is the merged file list of an image's layers with each regular
// file's content kept for the few files a test reads.
type imageFS struct {
	t       *testing.T
	headers map[string]*tar.Header
	layers  []v1.Layer
}

func newImageFS(t *testing.T, img v1.Image) *imageFS {
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	return &imageFS{t: t, headers: imageFiles(t, img), layers: layers}
}

// resolve follows symlinks in every component of p (merged /usr makes
// /sbin/lvm really usr/sbin/lvm) and returns the final entry.
func (f *imageFS) resolve(p string) *tar.Header {
	parts := strings.Split(strings.Trim(p, "/"), "/")
	cur := ""
	for hops := 0; len(parts) > 0 && hops < 40; hops++ {
		next := path.Join(cur, parts[0])
		h := f.headers[next]
		if h == nil {
			return nil
		}
		if h.Typeflag == tar.TypeSymlink {
			target := h.Linkname
			if !strings.HasPrefix(target, "/") {
				target = path.Join(cur, target)
			}
			parts = append(strings.Split(strings.Trim(path.Clean(target), "/"), "/"), parts[1:]...)
			cur = ""
			continue
		}
		if h.Typeflag == tar.TypeLink {
			h = f.headers[h.Linkname]
		}
		cur, parts = next, parts[1:]
		if len(parts) == 0 {
			return h
		}
	}
	return nil
}

// read returns the content of the regular file p from the topmost layer
// holding it.
func (f *imageFS) read(p string) string {
	f.t.Helper()
	name := strings.Trim(p, "/")
	content := ""
	for _, l := range f.layers {
		rc, err := l.Uncompressed()
		if err != nil {
			f.t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			hdr, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				f.t.Fatal(err)
			}
			if strings.TrimSuffix(hdr.Name, "/") == name {
				data, err := io.ReadAll(tr)
				if err != nil {
					f.t.Fatal(err)
				}
				content = string(data)
			}
		}
		rc.Close()
	}
	return content
}

// glob lists the regular files under the directory prefix dir.
func (f *imageFS) glob(dir string) []string {
	var out []string
	for name, h := range f.headers {
		if strings.HasPrefix(name, dir) && h.Typeflag == tar.TypeReg {
			out = append(out, name)
		}
	}
	return out
}
