package hotset

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// Store keeps one hot set per volume.
type Store interface {
	// Load returns the volume's set; ok is false when there is none.
	Load(volumeID string) (s Set, ok bool, err error)
	// Save replaces the volume's set, atomically.
	Save(volumeID string, s Set) error
	// Delete forgets the volume's set; deleting none is not an error.
	Delete(volumeID string) error
}

// suffix ends the name of every set's file.
const suffix = ".hotset"

// Dir stores each set as a file in a directory on the node's root disk, so
// that it survives a reboot. Volume IDs are validated by the caller
// (cache.ValidateVolumeID): they hold no '/'.
type Dir struct {
	Path string
}

var _ Store = Dir{}

// InStateDir is the store under a node plugin's --state-dir.
func InStateDir(stateDir string) Dir { return Dir{Path: filepath.Join(stateDir, "hotsets")} }

func (d Dir) file(volumeID string) (string, error) {
	if volumeID == "" || strings.ContainsAny(volumeID, "/\x00") || volumeID == "." || volumeID == ".." {
		return "", fmt.Errorf("hot set of volume %q: not a usable file name", volumeID)
	}
	return filepath.Join(d.Path, volumeID+suffix), nil
}

func (d Dir) Load(volumeID string) (Set, bool, error) {
	name, err := d.file(volumeID)
	if err != nil {
		return Set{}, false, err
	}
	data, err := os.ReadFile(name)
	if errors.Is(err, os.ErrNotExist) {
		return Set{}, false, nil
	}
	if err != nil {
		return Set{}, false, err
	}
	s, err := Decode(data)
	return s, err == nil, err
}

// Save writes a temporary file, syncs it and renames it over the old one:
// a crash leaves the old set or the new one, never half of either.
func (d Dir) Save(volumeID string, s Set) error {
	name, err := d.file(volumeID)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(d.Path, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(d.Path, ".tmp-"+volumeID+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	if _, err := tmp.Write(s.Encode()); err != nil {
		tmp.Close()
		return err
	}
	if err := errors.Join(tmp.Sync(), tmp.Close()); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), name)
}

func (d Dir) Delete(volumeID string) error {
	name, err := d.file(volumeID)
	if err != nil {
		return err
	}
	if err := os.Remove(name); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// Memory keeps sets in memory: for tests of the code that uses a Store.
type Memory struct {
	mu   sync.Mutex
	sets map[string]Set
}

var _ Store = (*Memory)(nil)

func (m *Memory) Load(volumeID string) (Set, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.sets[volumeID]
	return s, ok, nil
}

func (m *Memory) Save(volumeID string, s Set) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sets == nil {
		m.sets = map[string]Set{}
	}
	m.sets[volumeID] = s
	return nil
}

func (m *Memory) Delete(volumeID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.sets, volumeID)
	return nil
}
