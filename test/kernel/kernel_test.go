// Package kernel is the kernel suite's host side: it builds ssdcache-node
// and the guest test binary (package guest), boots Debian's kernel under
// qemu with an emulated NVMe and a simulated HDD, runs the guest tests there
// against real dm-cache, LVM and filesystems, and reports each guest test as
// a subtest here. Run it with `make test-kernel`.
package kernel

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ssdcache/ssdcache/test/vm"
)

// build compiles the binaries the guest runs into the VM's share dir.
func build(t *testing.T, share string) {
	t.Helper()
	bin := filepath.Join(share, "bin")
	for _, args := range [][]string{
		{"build", "-trimpath", "-o", filepath.Join(bin, "ssdcache-node"), "github.com/ssdcache/ssdcache/cmd/ssdcache-node"},
		{"test", "-c", "-trimpath", "-o", filepath.Join(bin, "guest.test"), "github.com/ssdcache/ssdcache/test/kernel/guest"},
	} {
		cmd := exec.Command("go", args...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// guestScript runs the guest test binary with the environment it expects.
func guestScript(run string, extraEnv ...string) string {
	env := strings.Join(append([]string{
		"SSDCACHE_GUEST=1", "SSDCACHE_NODE_BIN=/vmwork/bin/ssdcache-node", "SSDCACHE_HDD=" + vm.HDDByID,
		"SSDCACHE_SSD=" + vm.SSDByID, "SSDCACHE_WORK=/tmp/kernel", "SSDCACHE_SHARE=" + vm.GuestWorkDir,
	}, extraEnv...), " ")
	return fmt.Sprintf("mkdir -p /tmp/kernel && cd /tmp/kernel && %s /vmwork/bin/guest.test -test.v -test.timeout 20m -test.run '%s' 2>&1", env, run)
}

func newVM(t *testing.T) (*vm.VM, string) {
	t.Helper()
	dir := t.TempDir()
	v, err := vm.New(vm.Config{WorkDir: dir, Timeout: 20 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	build(t, v.ShareDir())
	return v, dir
}

// report turns the guest's `go test -v` output into subtests here, so each
// guest test passes or fails on its own line of the host's results.
func report(t *testing.T, res *vm.Result) {
	t.Helper()
	results := parseGoTest(res.Stdout)
	for _, r := range results {
		t.Run(r.name, func(t *testing.T) {
			switch r.outcome {
			case "SKIP":
				t.Skip(r.output)
			case "FAIL":
				t.Fatalf("in the VM:\n%s", r.output)
			}
			t.Log(r.output)
		})
	}
	if !res.Finished || res.ExitCode != 0 || len(results) == 0 {
		t.Fatalf("guest tests: finished=%v exit=%d timedOut=%v after %v\n--- output\n%s\n--- boot log\n%s\n--- console tail\n%s",
			res.Finished, res.ExitCode, res.TimedOut, res.Duration, res.Stdout, res.BootLog, tail(res.Console, 40))
	}
	t.Logf("guest run took %v; simulated HDD: %d requests, %v busy", res.Duration.Round(time.Second), res.HDDOps, res.HDDBusy.Round(time.Millisecond))
}

type goTestResult struct{ name, outcome, output string }

var resultLine = regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): (\S+) \(`)

// parseGoTest returns the top-level tests of `go test -v` output with the
// lines each one logged.
func parseGoTest(out string) []goTestResult {
	var results []goTestResult
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "=== RUN") && !strings.Contains(line, "/") {
			lines = lines[:0]
		}
		lines = append(lines, line)
		m := resultLine.FindStringSubmatch(line)
		if m == nil || strings.Contains(m[2], "/") {
			continue
		}
		results = append(results, goTestResult{name: m[2], outcome: m[1], output: strings.Join(lines, "\n")})
	}
	return results
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TestKernel runs every guest test in one boot: csi-sanity on the real
// driver, online cache changes under I/O, online expansion of a cached xfs
// volume, SSD failure, crashes at fault points, device safety.
func TestKernel(t *testing.T) {
	vm.SkipUnlessEnabled(t)
	v, _ := newVM(t)
	run := "^Test(RealSanity|OnlineCacheOpsUnderIO|ExpandCachedXFS|Safety.*|AdoptedDiskIsTaken)$"
	if only := os.Getenv("SSDCACHE_GUEST_RUN"); only != "" {
		run = only // to work on one guest test
	}
	res, err := v.Run(context.Background(), guestScript(run))
	if err != nil {
		t.Fatal(err)
	}
	report(t, res)
}

// TestPowerLoss cuts the VM's power while a cached volume is being
// overwritten, boots again on the same disks and restages: stale cache
// metadata is discarded and every acknowledged write is there.
func TestPowerLoss(t *testing.T) {
	vm.SkipUnlessEnabled(t)
	v, _ := newVM(t)
	b, err := v.Start(context.Background(), guestScript("^TestPowerLossWrite$", "SSDCACHE_POWERLOSS=write"))
	if err != nil {
		t.Fatal(err)
	}
	acked := filepath.Join(v.ShareDir(), "powerloss.acked")
	if err := waitForLines(acked, 300, 10*time.Minute); err != nil {
		b.Kill()
		res, _ := b.Wait()
		t.Fatalf("%v\n%s", err, res.Stdout)
	}
	b.Kill()
	first, err := b.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if first.Finished {
		t.Fatalf("the writer finished before the power was cut:\n%s", first.Stdout)
	}
	t.Logf("power cut after %v:\n%s", first.Duration.Round(time.Second), first.Stdout)
	res, err := v.Run(context.Background(), guestScript("^TestPowerLossVerify$", "SSDCACHE_POWERLOSS=verify"))
	if err != nil {
		t.Fatal(err)
	}
	report(t, res)
}

func waitForLines(path string, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if data, err := os.ReadFile(path); err == nil && strings.Count(string(data), "\n") >= n {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("fewer than %d acknowledged writes in %s after %v", n, path, timeout)
}
