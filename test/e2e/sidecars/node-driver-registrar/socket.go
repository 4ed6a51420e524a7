package main

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"k8s.io/klog/v2"
)

// registrationSocketPath is where kubelet's plugin watcher finds the driver.
func registrationSocketPath(dir, driverName string) (string, error) {
	// The name comes from the plugin; a separator would put the socket elsewhere.
	if driverName == "" || strings.ContainsRune(driverName, filepath.Separator) {
		return "", fmt.Errorf("CSI driver name %q: cannot name a registration socket (must be non-empty, without %q)", driverName, filepath.Separator)
	}
	return filepath.Join(dir, driverName+"-reg.sock"), nil
}

// listenRegistrationSocket replaces a stale socket and listens on a new one
// that only its owner may use (kubelet runs as root), as upstream does.
func listenRegistrationSocket(path string) (net.Listener, error) {
	if err := removeStaleSocket(path); err != nil {
		return nil, err
	}
	oldMask := syscall.Umask(0o077)
	lis, err := net.Listen("unix", path)
	syscall.Umask(oldMask)
	if err != nil {
		return nil, fmt.Errorf("listen on registration socket %s: %w", path, err)
	}
	klog.InfoS("Registration server listening", "socketPath", path)
	return lis, nil
}

// removeStaleSocket deletes a socket left by a killed predecessor. Anything
// else at that path is an error, never deleted.
func removeStaleSocket(path string) error {
	info, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("inspect registration socket %s: %w", path, err)
	}
	if info.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("registration socket path %s holds a non-socket (mode %s); refusing to remove it", path, info.Mode())
	}
	if err := removeSocket(path); err != nil {
		return err
	}
	klog.InfoS("Removed stale registration socket", "socketPath", path)
	return nil
}

// removeSocket deletes the socket; already gone is fine.
func removeSocket(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove registration socket %s: %w", path, err)
	}
	return nil
}

// socketExists reports whether path is a socket; another kind of file is an error.
func socketExists(path string) (bool, error) {
	info, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("inspect registration socket %s: %w", path, err)
	}
	if info.Mode().Type() != fs.ModeSocket {
		return false, fmt.Errorf("registration socket path %s is not a socket (mode %s)", path, info.Mode())
	}
	return true, nil
}
