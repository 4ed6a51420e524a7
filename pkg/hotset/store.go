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
// (cache.ValidateVolumeID): they hold no '/'. Saves of one volume must not
// overlap (the engine makes them under the volume's lock): each removes the
// temporary files earlier Saves of the volume left. A Delete, which
// Engine.ForgetHotSet makes without the lock, may remove the file of a Save
// it overlaps, which then fails: the set of a volume being forgotten is not
// saved again.
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
// a crash leaves the old set or the new one, never half of either, and
// maybe the temporary file, which the volume's next Save or its Delete
// removes.
func (d Dir) Save(volumeID string, s Set) error {
	name, err := d.file(volumeID)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(d.Path, 0o700); err != nil {
		return err
	}
	// First, so that leftovers filling the disk leave room for the new set.
	// A leftover that cannot be removed does not keep the set from being
	// saved; the next Save or the Delete tries again.
	_ = d.removeTemps(volumeID)
	tmp, err := os.CreateTemp(d.Path, tempPattern(volumeID))
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

// Delete removes the volume's set and any temporary file a crashed Save of
// it left: no later Save of a volume that is gone would.
func (d Dir) Delete(volumeID string) error {
	name, err := d.file(volumeID)
	if err != nil {
		return err
	}
	if err := os.Remove(name); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return d.removeTemps(volumeID)
}

// tempPattern is the os.CreateTemp pattern of the volume's temporary files:
// its '*' becomes a decimal number.
func tempPattern(volumeID string) string { return ".tmp-" + volumeID + "-*" }

// isTempOf says whether a file name is one of the volume's temporary files:
// the pattern's prefix followed by digits only. Volume IDs may hold '-', and
// the digits alone tell ".tmp-a-1-123" (of volume a-1) from a file of
// volume a, whose Save may be writing it.
func isTempOf(name, volumeID string) bool {
	digits, ok := strings.CutPrefix(name, strings.TrimSuffix(tempPattern(volumeID), "*"))
	return ok && digits != "" && strings.Trim(digits, "0123456789") == ""
}

// removeTemps removes the volume's temporary files: those a Save that died
// between writing one and renaming it left, and, from Delete, the one a
// Save it overlaps is writing (see Dir).
func (d Dir) removeTemps(volumeID string) error {
	entries, err := os.ReadDir(d.Path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if !e.Type().IsRegular() || !isTempOf(e.Name(), volumeID) {
			continue
		}
		if err := os.Remove(filepath.Join(d.Path, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
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
