package guest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	vmguest "github.com/ssdcache/ssdcache/test/vm/guest"
)

// Waits in the guest have no fixed deadline of their own (see the suite's
// time budget in package kernel): every wait runs until the suite's
// deadline, which the host derives from its own `go test -timeout` and
// passes as SSDCACHE_DEADLINE, unix seconds, a few minutes before the guest
// binary's -test.timeout, so that a wait that gives up can still report what
// it saw and clean up.
var suiteDeadline = sync.OnceValues(func() (time.Time, error) {
	s := os.Getenv("SSDCACHE_DEADLINE")
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SSDCACHE_DEADLINE=%q: want the suite's deadline in unix seconds (the host sets it)", s)
	}
	return time.Unix(sec, 0), nil
})

// TestMain gives the binary a -test.timeout that ends at SSDCACHE_TEST_END,
// unix seconds from the host (see guestExitMargin in package kernel). The
// timeout counts from the binary's start, which only the guest knows
// (booting takes a while); the guest's clock starts from the host's (qemu's
// RTC) and keeps pace with it under TCG. At least 1s: 0 means no timeout.
func TestMain(m *testing.M) {
	flag.Parse()
	if sec, err := strconv.ParseInt(os.Getenv("SSDCACHE_TEST_END"), 10, 64); err == nil {
		left := max(time.Until(time.Unix(sec, 0)), time.Second)
		fmt.Printf("guest clock %s UTC; waits end at %s, the test binary's timeout in %v\n",
			time.Now().UTC().Format(time.TimeOnly), deadline().UTC().Format(time.TimeOnly), left.Round(time.Second))
		if err := flag.Set("test.timeout", left.String()); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}

// deadline is when the guest's waits give up (see suiteDeadline; guestEnv
// has checked that it is set).
func deadline() time.Time {
	d, _ := suiteDeadline()
	return d
}

// ctx is the context of a test's calls to the plugin and the cache library:
// it ends at the suite's deadline, as one call can take minutes on a busy
// machine.
func ctx(t testing.TB) context.Context {
	c, cancel := context.WithDeadline(context.Background(), deadline())
	t.Cleanup(cancel)
	return c
}

func poll(what string, interval time.Duration, check func() (done bool, saw string, err error)) error {
	return vmguest.Poll(context.Background(), what, time.Until(deadline()), interval, check)
}

// childCommand is a child process the test starts and waits for with
// waitChild: it is killed if it still runs at the suite's deadline.
func childCommand(t testing.TB, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx(t), name, args...)
}

// waitChild waits for a child of childCommand. When the deadline killed it,
// the error says so instead of a bare "signal: killed", and is not an
// *exec.ExitError: no caller mistakes it for a fault point's SIGKILL.
func waitChild(cmd *exec.Cmd) error {
	err := cmd.Wait()
	if err != nil && !time.Now().Before(deadline()) {
		return fmt.Errorf("still running at the suite's deadline: killed (%s; %v)", deadline().Format(time.TimeOnly), err)
	}
	return err
}

// killedBySIGKILL says that a process ended on SIGKILL, as a fault point
// (killAt) ends it.
func killedBySIGKILL(err error) bool {
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) {
		return false
	}
	ws, ok := exitErr.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}
