// Package kernel is the kernel suite's host side: it builds ssdcache-node
// and the guest test binary (package guest), boots Debian's kernel under
// qemu with an emulated NVMe and a simulated HDD, runs the guest tests there
// against real dm-cache, LVM and filesystems, and reports each guest test as
// a subtest here. Run it with `make test-kernel`.
package kernel

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ssdcache/ssdcache/test/vm"
	"github.com/ssdcache/ssdcache/test/vm/job"
)

// The suite's time budget. On a busy machine the emulated guest runs several
// times slower than on an idle one (the suite takes about 11 minutes alone;
// one CI run on a shared machine needed 2.5 times that), so no wait, host or
// guest, has a fixed deadline of its own: all are bounded by what
// `go test -timeout` (50m in hack/test-kernel.sh) leaves,
// less the margins below, which let whoever gives up first still report.
const (
	// reportMargin is kept after the last boot for the host to parse and
	// report its output.
	reportMargin = time.Minute
	// guestExitMargin: the guest binary's -test.timeout fires this long
	// before qemu is cut off, so that its panic, with every goroutine's
	// stack, reaches the output and the guest powers off by itself.
	guestExitMargin = time.Minute
	// guestCleanupMargin: the guest's waits give up this long before its
	// -test.timeout, so that a wait that failed can report what it saw, stop
	// the plugin gracefully (up to 2 minutes) and clean up.
	guestCleanupMargin = 3 * time.Minute
)

// suiteDeadline is when the last boot of a test must be over.
func suiteDeadline(t *testing.T) time.Time {
	d, ok := t.Deadline()
	if !ok { // go test -timeout 0: no limit given; keep hack/test-kernel.sh's
		d = time.Now().Add(50 * time.Minute)
	}
	return d.Add(-reportMargin)
}

// guestScript runs the guest test binary with the environment it expects,
// its deadlines set by the margins above from deadline, when qemu will be
// cut off. The binaries run from the
// guest's tmpfs: the share is 9p without a page cache, so every start read
// all of a 60 MiB binary through it again (2 s a start under emulation,
// against 0.3 s from tmpfs).
func guestScript(deadline time.Time, run string, extraEnv ...string) string {
	testEnd := deadline.Add(-guestExitMargin)
	env := strings.Join(append([]string{
		"SSDCACHE_GUEST=1", "SSDCACHE_NODE_BIN=/tmp/bin/ssdcache-node", "SSDCACHE_HDD=" + vm.HDDByID,
		"SSDCACHE_SSD=" + vm.SSDByID, "SSDCACHE_WORK=/tmp/kernel", "SSDCACHE_SHARE=" + vm.GuestWorkDir,
		"SSDCACHE_TEST_END=" + strconv.FormatInt(testEnd.Unix(), 10),
		"SSDCACHE_DEADLINE=" + strconv.FormatInt(testEnd.Add(-guestCleanupMargin).Unix(), 10),
	}, extraEnv...), " ")
	return fmt.Sprintf(`mkdir -p /tmp/kernel && cd /tmp/kernel && cp -r /vmwork/bin /tmp/bin || exit 1
%s /tmp/bin/guest.test -test.v -test.run '%s' 2>&1
`, env, run)
}

// newVM prepares a VM in a new work dir, with the binaries the guest runs
// (ssdcache-node and this suite's guest half) in its share dir, for one boot
// that must be done by deadline. ssdSize 0 is the VM's default.
func newVM(t *testing.T, deadline time.Time, ssdSize int64) (*vm.VM, string) {
	t.Helper()
	dir := t.TempDir()
	v := vmUntil(t, vm.Config{WorkDir: dir, SSDSize: ssdSize}, deadline)
	bin := filepath.Join(v.ShareDir(), "bin")
	for _, b := range []vm.GoBuild{
		{Packages: []string{"github.com/ssdcache/ssdcache/cmd/ssdcache-node"}, Out: filepath.Join(bin, "ssdcache-node")},
		{Packages: []string{"github.com/ssdcache/ssdcache/test/kernel/guest"}, Out: filepath.Join(bin, "guest.test"), Test: true},
	} {
		if err := b.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	return v, dir
}

// vmUntil is the VM of cfg for one boot that qemu ends by deadline at the
// latest. vm.Config.Timeout counts from the start of each boot, so a later
// boot on the same disks (TestPowerLoss) takes a new VM value with what is
// left; disks and share dir carry over, as they live in cfg.WorkDir.
func vmUntil(t *testing.T, cfg vm.Config, deadline time.Time) *vm.VM {
	t.Helper()
	cfg.Timeout = time.Until(deadline)
	if cfg.Timeout <= 0 {
		t.Fatalf("no time left to boot the VM: the suite's deadline (%s) passed %v ago", deadline.Format(time.TimeOnly), -cfg.Timeout.Round(time.Second))
	}
	v, err := vm.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// runGuest boots v on the guest tests that match run, with the extra
// environment, and turns their `go test -v` output into subtests here, so
// each guest test passes or fails on its own line of the host's results.
func runGuest(t *testing.T, v *vm.VM, deadline time.Time, run string, extraEnv ...string) {
	t.Helper()
	res, err := v.Run(context.Background(), guestScript(deadline, run, extraEnv...))
	if err != nil {
		t.Fatal(err)
	}
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
			res.Finished, res.ExitCode, res.TimedOut, res.Duration, res.Stdout, res.BootLog, job.Tail(res.Console, 40))
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
	for _, line := range strings.Split(out, "\n") {
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

// Which guest tests each boot runs: TestKernel's default, TestStress's and
// TestPowerLoss's two boots; the rest run only when named.
const (
	kernelGuestRun = "^Test(KernelReadsMatchDmsetup|RealSanity|OnlineCacheOpsUnderIO|PausedUnderConcurrentWrites|PauseResumesWarmWithoutTheHDD|ExpandCachedXFS|Safety.*|AdoptedDiskIsTaken|WarmRestage|WarmUpUnderWrites|PromotionUnderWrites|FilledCacheHandedOverToSmq|PreloadNamedFiles|NodeReadyAfterDiskAppears|MissedReadsAreTheBlocksTheCacheSentToTheOrigin|PromotionOfAVolumeWithAPartialLastBlock|UnstageAfterAKillBetweenSuspendAndResume|CacheLVsTakeTheirFootprint|HungSSDHoldsUpNoOtherVolume|MissingCachePVRemovedAndReattached|LostSingleDeviceCachePoolMadeAgain)$"
	stressGuestRun = "^TestStressParallelVolumes$"
	powerLossWrite = "^TestPowerLossWrite$"
	powerLossCheck = "^TestPowerLossVerify$"
)

// TestKernel runs the guest tests of make test-kernel in one boot.
func TestKernel(t *testing.T) {
	vm.SkipUnlessEnabled(t)
	deadline := suiteDeadline(t)
	v, _ := newVM(t, deadline, 0)
	run := kernelGuestRun
	if only := os.Getenv("SSDCACHE_GUEST_RUN"); only != "" {
		run = only // to work on one guest test
	}
	var env []string
	if rounds := os.Getenv("SSDCACHE_HUNG_ROUNDS"); rounds != "" {
		env = append(env, "SSDCACHE_HUNG_ROUNDS="+rounds) // repeats TestHungSSDHoldsUpNoOtherVolume
	}
	runGuest(t, v, deadline, run, env...)
}

// TestStress runs the guest's TestStressParallelVolumes for make stress, which
// sets SSDCACHE_STRESS_ROUNDS; the SSD is 2 GiB, not 1, so every volume can
// hold a cache.
func TestStress(t *testing.T) {
	vm.SkipUnlessEnabled(t)
	rounds := os.Getenv("SSDCACHE_STRESS_ROUNDS")
	if rounds == "" {
		t.Skip("long run: make stress sets SSDCACHE_STRESS_ROUNDS")
	}
	deadline := suiteDeadline(t)
	v, _ := newVM(t, deadline, 2<<30)
	runGuest(t, v, deadline, stressGuestRun, "SSDCACHE_STRESS_ROUNDS="+rounds)
}

// TestPowerLoss cuts the VM's power while a cached volume is being
// overwritten, boots again on the same disks and restages: stale cache
// metadata is discarded and every acknowledged write is there.
func TestPowerLoss(t *testing.T) {
	vm.SkipUnlessEnabled(t)
	deadline := suiteDeadline(t)
	// The writing boot gets at most half of what is left: the verifying
	// boot needs the rest.
	writeDeadline := time.Now().Add(time.Until(deadline) / 2)
	v, dir := newVM(t, writeDeadline, 0)
	b, err := v.Start(context.Background(), guestScript(writeDeadline, powerLossWrite, "SSDCACHE_POWERLOSS=write"))
	if err != nil {
		t.Fatal(err)
	}
	acked := filepath.Join(v.ShareDir(), "powerloss.acked")
	waitErr := waitForLines(b, acked, 300)
	b.Kill()
	first, err := b.Wait()
	if err != nil {
		t.Fatal(errors.Join(waitErr, err))
	}
	if waitErr != nil {
		t.Fatalf("%v\n--- guest output\n%s\n--- console tail\n%s", waitErr, first.Stdout, job.Tail(first.Console, 40))
	}
	if first.Finished {
		t.Fatalf("the writer finished before the power was cut:\n%s", first.Stdout)
	}
	t.Logf("power cut after %v:\n%s", first.Duration.Round(time.Second), first.Stdout)
	runGuest(t, vmUntil(t, vm.Config{WorkDir: dir}, deadline), deadline, powerLossCheck, "SSDCACHE_POWERLOSS=verify")
}

// waitForLines waits until the guest has acknowledged n writes in path,
// polling until the boot ends: the boot's timeout is this wait's deadline.
func waitForLines(b *vm.Boot, path string, n int) error {
	start := time.Now()
	saw := "no file yet"
	for {
		if data, err := os.ReadFile(path); err == nil {
			lines := strings.Count(string(data), "\n")
			if lines >= n {
				return nil
			}
			saw = fmt.Sprintf("%d lines, the last %q", lines, job.Tail(string(data), 1))
		}
		select {
		case <-b.Done():
			return fmt.Errorf("waiting for %d acknowledged writes in %s: the VM stopped after %v (the guest test ended, or the boot's deadline passed); last read: %s",
				n, path, time.Since(start).Round(time.Second), saw)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
