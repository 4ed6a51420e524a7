package mounter

import (
	"path/filepath"
	"testing"
)

func TestPathsAreIdempotent(t *testing.T) {
	var p Paths
	dir := filepath.Join(t.TempDir(), "a", "b")
	file := filepath.Join(dir, "block")
	for i := 0; i < 2; i++ {
		if err := p.MakeDir(dir); err != nil {
			t.Fatal(err)
		}
		if err := p.MakeFile(file); err != nil {
			t.Fatal(err)
		}
	}
	if exists, isDir, err := p.Stat(dir); !exists || !isDir || err != nil {
		t.Fatalf("dir: %v %v %v", exists, isDir, err)
	}
	if exists, isDir, err := p.Stat(file); !exists || isDir || err != nil {
		t.Fatalf("file: %v %v %v", exists, isDir, err)
	}
	for i := 0; i < 2; i++ {
		if err := p.Remove(file); err != nil {
			t.Fatalf("remove %d: %v", i, err)
		}
	}
	if exists, _, err := p.Stat(file); exists || err != nil {
		t.Fatalf("removed file: %v %v", exists, err)
	}
	if err := p.Remove(filepath.Dir(dir)); err == nil {
		t.Fatal("removing a non-empty directory succeeded")
	}
}
