package cluster

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"
)

// netnsDir is where `ip netns add` mounts a named namespace.
const netnsDir = "/var/run/netns"

// Listen opens a TCP listener on address (127.0.0.1:0, say) inside the
// cluster's network namespace, where Helm's, Kubectl's and Shell's commands
// run: the namespace's loopback is its own, so a server of the test process
// is reachable by those commands only on a socket made in there.
func (c *Cluster) Listen(address string) (net.Listener, error) {
	return c.ns.Listen(address)
}

// Listen opens a TCP listener on address inside the namespace. A socket
// belongs to the namespace of the thread that made it, so it is made on a
// thread moved into the namespace and back; its server then runs on any
// thread.
func (n *Netns) Listen(address string) (net.Listener, error) {
	type result struct {
		l   net.Listener
		err error
	}
	done := make(chan result, 1)
	// A goroutine of its own: if the thread cannot be moved back, it stays
	// locked and Go ends it with the goroutine, so no other goroutine ever
	// runs in the namespace.
	go func() {
		runtime.LockOSThread()
		l, back, err := n.listenHere(address)
		if back {
			runtime.UnlockOSThread()
		}
		done <- result{l, err}
	}()
	r := <-done
	return r.l, r.err
}

// listenHere runs on a locked thread; back says the thread is in its own
// namespace again.
func (n *Netns) listenHere(address string) (l net.Listener, back bool, err error) {
	own, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return nil, true, fmt.Errorf("listening in namespace %s: the thread's own namespace: %w", n.Name, err)
	}
	defer own.Close()
	path := filepath.Join(netnsDir, n.Name)
	target, err := os.Open(path)
	if err != nil {
		return nil, true, fmt.Errorf("listening in namespace %s: %w", n.Name, err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		return nil, true, fmt.Errorf("listening in namespace %s: setns %s: %w", n.Name, path, err)
	}
	l, listenErr := net.Listen("tcp", address)
	if err := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); err != nil {
		if l != nil {
			l.Close()
		}
		return nil, false, fmt.Errorf("listening in namespace %s: moving the thread back: %w", n.Name, err)
	}
	if listenErr != nil {
		return nil, true, fmt.Errorf("listening on %s in namespace %s: %w", address, n.Name, listenErr)
	}
	return l, true, nil
}
