// Package guest holds the kernel suite's tests that run inside the VM, as
// root, against the real ssdcache-node on real dm-cache, LVM and
// filesystems. The host side (package kernel) builds this package with
// `go test -c`, boots the VM and runs the binary there. Outside the VM every
// test skips: they need SSDCACHE_GUEST=1 and the devices it names.
package guest
