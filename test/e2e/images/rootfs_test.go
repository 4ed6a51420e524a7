package images

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"k8s.io/mount-utils"
	"k8s.io/utils/exec"
	testingexec "k8s.io/utils/exec/testing"
)

// recordingExec answers n commands with success and records their argv and
// environment.
func recordingExec(n int, calls *[][2][]string) *testingexec.FakeExec {
	fe := &testingexec.FakeExec{ExactOrder: true}
	for range n {
		fe.CommandScript = append(fe.CommandScript, func(name string, args ...string) exec.Cmd {
			fc := &testingexec.FakeCmd{}
			fc.RunScript = []testingexec.FakeAction{func() ([]byte, []byte, error) {
				*calls = append(*calls, [2][]string{append([]string{name}, args...), fc.Env})
				return nil, nil, nil
			}}
			return testingexec.InitFakeCmd(fc, name, args...)
		})
	}
	return fe
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
	var calls [][2][]string
	mounter := mount.NewFakeMounter(nil)
	b := NewBuilder(recordingExec(2, &calls), mounter)
	if err := b.customizeRootfs(context.Background(), plan, dir, io.Discard); err != nil {
		t.Fatal(err)
	}
	checkFile(t, filepath.Join(dir, "tmp/rootfs.sh"), df.Steps[0].Data) // the RUN would remove it
	if st, err := os.Stat(filepath.Join(dir, "tmp/rootfs.sh")); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("the COPY'd script: %v, %v; want mode 0755", st, err)
	}
	wantScripts := []string{slimScript, df.Steps[1].Run}
	for i, c := range calls {
		if want := []string{"chroot", dir, "/bin/sh", "-c", wantScripts[i]}; !slices.Equal(c[0], want) {
			t.Errorf("command %d = %q, want %q", i, c[0], want)
		}
		if !slices.Contains(c[1], "LC_ALL=C") || !slices.Contains(c[1], "DEBIAN_FRONTEND=noninteractive") {
			t.Errorf("command %d env %q lacks LC_ALL=C or DEBIAN_FRONTEND=noninteractive", i, c[1])
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

// TestWriteRootfsLayer writes a small tree as the Debian layer: numeric
// owners, sub-second mtimes, symlinks, hard links, emptied /dev, /run and
// /tmp, and the same bytes each time.
func TestWriteRootfsLayer(t *testing.T) {
	root := t.TempDir()
	for _, p := range []string{"usr/sbin/mke2fs", "dev/null", "tmp/leftover", "run/lock/x"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte("elf"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mke2fs, mtime := filepath.Join(root, "usr/sbin/mke2fs"), time.Unix(1700000000, 123456789)
	uid, gid := os.Getuid(), os.Getgid()
	if uid == 0 {
		uid, gid = 1234, 5678
	}
	if err := errors.Join(os.Chown(mke2fs, uid, gid), os.Chmod(mke2fs, os.ModeSetuid|0o755), os.Chtimes(mke2fs, mtime, mtime),
		os.Link(mke2fs, filepath.Join(root, "usr/sbin/mkfs.ext4")), os.Symlink("usr/sbin", filepath.Join(root, "sbin"))); err != nil {
		t.Fatal(err)
	}
	b := NewBuilder(exec.New(), nil)
	var layers [][]byte
	for i := range 2 {
		out := filepath.Join(t.TempDir(), "layer.tar")
		if err := b.writeRootfsLayer(context.Background(), root, out); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		layers = append(layers, data)
		if i > 0 && !bytes.Equal(layers[0], data) {
			t.Error("two writes of the same tree differ")
		}
	}
	want := map[string]string{
		"dev/": `dir 755 ""`, "run/": `dir 755 ""`, "sbin": "symlink usr/sbin", "tmp/": `dir 755 ""`, "usr/": `dir 755 ""`, "usr/sbin/": `dir 755 ""`,
		"usr/sbin/mke2fs": fmt.Sprintf("file 4755 %d:%d 3 %d", uid, gid, mtime.UnixNano()), "usr/sbin/mkfs.ext4": "hardlink usr/sbin/mke2fs",
	}
	got := describeTar(t, layers[0])
	if !maps.Equal(got, want) {
		t.Errorf("layer entries\n%v\nwant\n%v", got, want)
	}
}

// describeTar describes each entry of a tar file in a few words.
func describeTar(t *testing.T, data []byte) map[string]string {
	t.Helper()
	out := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(data))
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
			out[hdr.Name] = fmt.Sprintf("dir %o %q", hdr.Mode, hdr.Uname) // numeric owners: no names
		case tar.TypeSymlink:
			out[hdr.Name] = "symlink " + hdr.Linkname
		case tar.TypeLink:
			out[hdr.Name] = "hardlink " + hdr.Linkname
		default:
			out[hdr.Name] = fmt.Sprintf("file %o %d:%d %d %d", hdr.Mode, hdr.Uid, hdr.Gid, hdr.Size, hdr.ModTime.UnixNano())
		}
	}
}
