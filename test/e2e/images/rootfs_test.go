package images

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/klog/v2/ktesting"
	"k8s.io/mount-utils"
	"k8s.io/utils/exec"
	testingexec "k8s.io/utils/exec/testing"
)

// recordedCommand is one command a fake exec was asked to run.
type recordedCommand struct {
	argv []string
	env  []string
}

// recordingExec answers n commands with success and records them.
func recordingExec(n int, calls *[]recordedCommand) *testingexec.FakeExec {
	fe := &testingexec.FakeExec{ExactOrder: true}
	for range n {
		fe.CommandScript = append(fe.CommandScript, func(name string, args ...string) exec.Cmd {
			fc := &testingexec.FakeCmd{}
			fc.RunScript = []testingexec.FakeAction{func() ([]byte, []byte, error) {
				*calls = append(*calls, recordedCommand{argv: append([]string{name}, args...), env: fc.Env})
				return nil, nil, nil
			}}
			return testingexec.InitFakeCmd(fc, name, args...)
		})
	}
	return fe
}

func TestDebianLayerReusesTheCachedLayer(t *testing.T) {
	df := parseSample(t, "#!/bin/sh\n")
	o := Options{CacheDir: t.TempDir(), Logger: ktesting.NewLogger(t, ktesting.DefaultConfig)}.withDefaults(ktesting.NewLogger(t, ktesting.DefaultConfig))
	cached := planRootfs(o, df).cachePath
	if err := os.MkdirAll(filepath.Dir(cached), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cached, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var calls []recordedCommand
	b := NewBuilderWithMounter(recordingExec(0, &calls), mount.NewFakeMounter(nil))
	got, err := b.debianLayer(context.Background(), o, df)
	if err != nil || got != cached || len(calls) != 0 {
		t.Fatalf("debianLayer = %q, %v after %d commands; want the cached %q without running anything", got, err, len(calls), cached)
	}
}

func TestCustomizeRootfsRunsTheDockerfileInAChroot(t *testing.T) {
	df := parseSample(t, "#!/bin/sh\napt-get install -y fio\n")
	plan := planRootfs(Options{CacheDir: "/c", DebianMirror: "http://m/debian", DebianSecurityMirror: "http://m/security"}, df)
	dir := t.TempDir()
	for _, d := range []string{"etc/apt/apt.conf.d", "etc/dpkg/dpkg.cfg.d", "usr/sbin", "var/log", "proc"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var calls []recordedCommand
	mounter := mount.NewFakeMounter(nil)
	b := NewBuilderWithMounter(recordingExec(2, &calls), mounter)
	if err := b.customizeRootfs(context.Background(), plan, dir, io.Discard); err != nil {
		t.Fatal(err)
	}
	checkFile(t, filepath.Join(dir, "tmp/rootfs.sh"), df.Steps[0].Data) // the RUN would remove it
	if st, err := os.Stat(filepath.Join(dir, "tmp/rootfs.sh")); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("the COPY'd script: %v, %v; want mode 0755", st, err)
	}
	wantScripts := []string{slimScript, df.Steps[1].Run}
	for i, c := range calls {
		if want := []string{"chroot", dir, "/bin/sh", "-c", wantScripts[i]}; !slices.Equal(c.argv, want) {
			t.Errorf("command %d = %q, want %q", i, c.argv, want)
		}
		if !slices.Contains(c.env, "LC_ALL=C") || !slices.Contains(c.env, "DEBIAN_FRONTEND=noninteractive") {
			t.Errorf("command %d env %q lacks LC_ALL=C or DEBIAN_FRONTEND=noninteractive", i, c.env)
		}
	}
	if len(calls) != len(wantScripts) {
		t.Errorf("ran %d commands, want %d", len(calls), len(wantScripts))
	}
	log := mounter.GetLog()
	if len(log) != 2 || log[0].Action != mount.FakeActionMount || log[0].FSType != "proc" || log[1].Action != mount.FakeActionUnmount {
		t.Errorf("mounter log %+v, want proc mounted for the scripts and unmounted after", log)
	}
	checkFile(t, filepath.Join(dir, "etc/apt/sources.list"), "deb http://m/debian trixie main\ndeb http://m/debian trixie-updates main\ndeb http://m/security trixie-security main\n")
	checkFile(t, filepath.Join(dir, "etc/resolv.conf"), "")
	if _, err := os.Stat(filepath.Join(dir, "usr/sbin/policy-rc.d")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("policy-rc.d left in the image: %v", err)
	}
}

func checkFile(t *testing.T, p, want string) {
	t.Helper()
	got, err := os.ReadFile(p)
	if err != nil || string(got) != want {
		t.Errorf("%s = %q, %v; want %q", p, got, err, want)
	}
}

func TestRemoveBuildDirUnmountsBeforeDeleting(t *testing.T) {
	dir := t.TempDir()
	build := filepath.Join(dir, "build")
	if err := os.MkdirAll(filepath.Join(build, "proc"), 0o755); err != nil {
		t.Fatal(err)
	}
	mounter := mount.NewFakeMounter([]mount.MountPoint{
		{Device: "proc", Path: filepath.Join(build, "proc")},
		{Device: "sysfs", Path: filepath.Join(build, "proc", "sys")},
		{Device: "other", Path: build + "-other"},
	})
	b := NewBuilderWithMounter(recordingExec(0, new([]recordedCommand)), mounter)
	if err := b.removeBuildDir(build); err != nil {
		t.Fatal(err)
	}
	log := mounter.GetLog()
	if len(log) != 2 || log[0].Target != filepath.Join(build, "proc", "sys") || log[1].Target != filepath.Join(build, "proc") {
		t.Errorf("unmounts %+v, want proc/sys then proc, and nothing outside the build dir", log)
	}
	if _, err := os.Stat(build); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("build dir still there: %v", err)
	}
}

func TestRemoveBuildDirKeepsTheDirWhenUnmountFails(t *testing.T) {
	build := t.TempDir()
	mounter := mount.NewFakeMounter([]mount.MountPoint{{Device: "proc", Path: filepath.Join(build, "proc")}})
	mounter.UnmountFunc = func(string) error { return errors.New("busy") }
	b := NewBuilderWithMounter(recordingExec(0, new([]recordedCommand)), mounter)
	if err := b.removeBuildDir(build); err == nil || !strings.Contains(err.Error(), "busy") {
		t.Fatalf("err = %v, want the unmount error", err)
	}
	if _, err := os.Stat(build); err != nil {
		t.Errorf("build dir removed although proc is still mounted: %v", err)
	}
}

func TestWriteDirLayer(t *testing.T) {
	root := t.TempDir()
	mustWrite := func(p, data string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(data), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mustWrite("usr/sbin/mke2fs", "elf")
	mustWrite("dev/null", "not a device in this test")
	mustWrite("tmp/leftover", "x")
	if err := os.Link(filepath.Join(root, "usr/sbin/mke2fs"), filepath.Join(root, "usr/sbin/mkfs.ext4")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("usr/sbin", filepath.Join(root, "sbin")); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "layer.tar")
	if err := writeDirLayer(root, out); err != nil {
		t.Fatal(err)
	}
	entries := readTar(t, out)
	want := map[string]string{
		"dev/": "dir", "sbin": "symlink usr/sbin", "tmp/": "dir", "usr/": "dir", "usr/sbin/": "dir",
		"usr/sbin/mke2fs": "file 3", "usr/sbin/mkfs.ext4": "hardlink usr/sbin/mke2fs",
	}
	if len(entries) != len(want) {
		t.Errorf("layer entries %v, want %v", entries, want)
	}
	for name, w := range want {
		if entries[name] != w {
			t.Errorf("entry %s = %q, want %q", name, entries[name], w)
		}
	}
}

// readTar describes each entry of a tar file in a word or two.
func readTar(t *testing.T, p string) map[string]string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			out[hdr.Name] = "dir"
		case tar.TypeSymlink:
			out[hdr.Name] = "symlink " + hdr.Linkname
		case tar.TypeLink:
			out[hdr.Name] = "hardlink " + hdr.Linkname
		default:
			out[hdr.Name] = "file " + strconv.FormatInt(hdr.Size, 10)
		}
	}
}

func TestLockFileWaitsForTheHolder(t *testing.T) {
	p := filepath.Join(t.TempDir(), "layer.lock")
	unlock, err := lockFile(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := lockFile(cancelled, p); !errors.Is(err, context.Canceled) {
		t.Fatalf("second lock while held: err = %v, want it to wait until cancelled", err)
	}
	unlock()
	unlockAgain, err := lockFile(cancelled, p)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	unlockAgain()
}

func TestDebootstrapFailureNamesTheMirror(t *testing.T) {
	fc := &testingexec.FakeCmd{RunScript: []testingexec.FakeAction{func() ([]byte, []byte, error) {
		return nil, []byte("E: Failed getting release file http://m/debian/dists/bookworm/Release"), testingexec.FakeExitError{Status: 1}
	}}}
	fe := &testingexec.FakeExec{
		LookPathFunc: func(string) (string, error) { return "/usr/sbin/debootstrap", nil },
		CommandScript: []testingexec.FakeCommandAction{func(cmd string, args ...string) exec.Cmd {
			return testingexec.InitFakeCmd(fc, cmd, args...)
		}},
	}
	plan := rootfsPlan{Suite: "bookworm", Mirror: "http://m/debian"}
	err := NewBuilderWithMounter(fe, mount.NewFakeMounter(nil)).debootstrap(context.Background(), plan, "/build", io.Discard)
	for _, want := range []string{"http://m/debian", "mirror reachable", "Failed getting release file"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want it to contain %q", err, want)
		}
	}
	if want := []string{"debootstrap", "--variant=minbase", "bookworm", "/build", "http://m/debian"}; !slices.Equal(fc.Argv, want) {
		t.Errorf("debootstrap args %q, want %q", fc.Argv, want)
	}
}
