// Package mounterfake fakes mounting for unit tests and in-process csi-sanity:
// mounts live in memory (mount-utils' FakeMounter), while the directories
// and files a CO hands over are real paths in the test's temp dir.
package mounterfake

import (
	"fmt"
	"os"
	"sync"

	mount "k8s.io/mount-utils"

	"github.com/ssdcache/ssdcache/pkg/mounter"
)

// Mounter is a fake mounter.Interface.
type Mounter struct {
	*mount.FakeMounter
	mounter.Paths
	mu sync.Mutex
	// Formatted maps a device to the filesystem FormatAndMount put on it.
	Formatted map[string]string
	// Resized lists devices ResizeFS was called for.
	Resized []string
}

// New returns a fake with no mounts.
func New() *Mounter {
	return &Mounter{FakeMounter: mount.NewFakeMounter(nil), Formatted: map[string]string{}}
}

var _ mounter.Interface = (*Mounter)(nil)

func (m *Mounter) FormatAndMount(source, target, fstype string, options []string) error {
	m.mu.Lock()
	if have, ok := m.Formatted[source]; ok && have != fstype {
		m.mu.Unlock()
		return fmt.Errorf("%s holds %s, cannot mount as %s", source, have, fstype)
	}
	m.Formatted[source] = fstype
	m.mu.Unlock()
	return m.Mount(source, target, fstype, options)
}

func (m *Mounter) MountExisting(source, target, fstype string, options []string) error {
	m.mu.Lock()
	have := m.Formatted[source]
	m.mu.Unlock()
	if have == "" {
		return fmt.Errorf("%s: %w", source, mounter.ErrNoFilesystem)
	}
	if have != fstype {
		return fmt.Errorf("%s holds %s, not %s", source, have, fstype)
	}
	return m.Mount(source, target, fstype, options)
}

func (m *Mounter) MountedFrom(path, device string) (bool, string, error) {
	source, refs, err := mount.GetDeviceNameFromMount(m.FakeMounter, path)
	if err != nil || refs == 0 {
		return false, source, err
	}
	return source == device, source, nil
}

func (m *Mounter) BindMount(source, target string, readOnly bool) error {
	opts := []string{"bind"}
	if readOnly {
		opts = append(opts, "ro")
	}
	return m.Mount(source, target, "", opts)
}

func (m *Mounter) Unmount(target string) error {
	mounted, err := m.IsMountPoint(target)
	if err != nil || !mounted {
		return nil
	}
	return m.FakeMounter.Unmount(target)
}

// MountRefs works like the real one: bind mounts share their source's device.
func (m *Mounter) MountRefs(path string) ([]string, error) { return m.GetMountRefs(path) }

func (m *Mounter) IsMountPoint(path string) (bool, error) {
	if _, err := os.Stat(path); err != nil {
		return false, err
	}
	return m.FakeMounter.IsMountPoint(path)
}

func (m *Mounter) ResizeFS(device, _ string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.Resized = append(m.Resized, device)
	return nil
}

// FSStats reports a fixed 1 GiB filesystem for mounted paths.
func (m *Mounter) FSStats(path string) (mounter.FSStats, error) {
	mounted, err := m.IsMountPoint(path)
	if err != nil {
		return mounter.FSStats{}, err
	}
	if !mounted {
		return mounter.FSStats{}, fmt.Errorf("%s is not mounted", path)
	}
	return mounter.FSStats{TotalBytes: 1 << 30, AvailableBytes: 1<<30 - 1<<20, UsedBytes: 1 << 20,
		TotalInodes: 65536, FreeInodes: 65520, UsedInodes: 16}, nil
}
