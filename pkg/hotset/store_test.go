package hotset

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
)

// leftover makes the temporary file a Save of volumeID that died before its
// rename leaves, named as Save names it, and returns its name.
func leftover(t *testing.T, dir, volumeID string) string {
	t.Helper()
	f, err := os.CreateTemp(dir, ".tmp-"+volumeID+"-*")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("half a set"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return filepath.Base(f.Name())
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	return got
}

// TestDirRemovesTheTemporaryFilesOfACrashedSave: a Save of a volume removes
// the temporary files earlier Saves of it left when the process died
// before renaming them, and a Delete does so too (no Save comes for a
// volume that is gone). The temporary files of other volumes, even one
// whose ID extends this one's ("pvc-1-2" beside "pvc-1"), whose Save may be
// writing them, and files the store did not write stay.
func TestDirRemovesTheTemporaryFilesOfACrashedSave(t *testing.T) {
	dir := t.TempDir()
	d := Dir{Path: dir}
	stale := []string{leftover(t, dir, "pvc-1"), leftover(t, dir, "pvc-1")}
	other := leftover(t, dir, "pvc-1-2")
	foreign := []string{".tmp-pvc-1-notes", ".tmp-pvc-1-", "pvc-1.hotset.bak", other}
	for _, name := range foreign[:3] {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("kept"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, ".tmp-pvc-1-7"), 0o700); err != nil { // a directory: not the store's
		t.Fatal(err)
	}
	foreign = append(foreign, ".tmp-pvc-1-7")

	s := FromBlocks([]uint64{1, 2, 3}, 128)
	if err := d.Save("pvc-1", s); err != nil {
		t.Fatal(err)
	}
	want := slices.Sorted(slices.Values(append(slices.Clone(foreign), "pvc-1.hotset")))
	if got := names(t, dir); !reflect.DeepEqual(got, want) {
		t.Fatalf("after Save of pvc-1 with %v left by a crash: %v, want %v", stale, got, want)
	}
	if got, ok, err := d.Load("pvc-1"); err != nil || !ok || !reflect.DeepEqual(got, s) {
		t.Fatalf("Load = %v, %v, %v; want %v", got, ok, err, s)
	}

	leftover(t, dir, "pvc-1")
	if err := d.Delete("pvc-1"); err != nil {
		t.Fatal(err)
	}
	if err := d.Delete("pvc-1-2"); err != nil {
		t.Fatal(err)
	}
	want = slices.Sorted(slices.Values(slices.DeleteFunc(slices.Clone(foreign), func(n string) bool { return n == other })))
	if got := names(t, dir); !reflect.DeepEqual(got, want) {
		t.Fatalf("after Delete of pvc-1 and pvc-1-2: %v, want %v", got, want)
	}
}

// TestDirDeleteWithoutADirectory: deleting from a store that never saved a
// set (its directory not made yet) is no error.
func TestDirDeleteWithoutADirectory(t *testing.T) {
	d := Dir{Path: filepath.Join(t.TempDir(), "never-made")}
	if err := d.Delete("pvc-1"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := os.Stat(d.Path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Delete made the directory: %v", err)
	}
}
