package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/utils/exec"
	testingexec "k8s.io/utils/exec/testing"

	"github.com/ssdcache/ssdcache/pkg/bench"
	"github.com/ssdcache/ssdcache/pkg/command"
	"github.com/ssdcache/ssdcache/pkg/dm"
	"github.com/ssdcache/ssdcache/pkg/version"
)

func TestParseFlags(t *testing.T) {
	opts, err := parseFlags([]string{
		"-target", "raw-ssd=/dev/vdb", "-target", "raw-hdd=/dev/vdc,ssdcache=/mnt/v/bench.dat",
		"-dm-cache", "ssdcache=/dev/mapper/ssdcache-pvc-1",
		"-working-sets", "25%,50%", "-working-sets", "75%", "-cache-size", "1Gi",
		"-runs", "6", "-interval", "2m", "-ssd-ref", "raw-ssd", "-hdd-ref", "raw-hdd",
		"-read-only", "-io-limit", "64Mi", "-output-dir", "/tmp/x",
	}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c := opts.config
	if len(c.Targets) != 3 || c.Targets[2].DMDevice != "/dev/mapper/ssdcache-pvc-1" || c.Targets[0].DMDevice != "" {
		t.Errorf("targets %+v", c.Targets)
	}
	if len(c.WorkingSets) != 3 || c.WorkingSets[2].Bytes != 768<<20 || c.WorkingSets[2].OffsetBytes != 768<<20 {
		t.Errorf("working sets %+v", c.WorkingSets)
	}
	if len(c.Tests) != 4 || c.Tests[0].Direction != bench.Read || c.PlotTest != "seq1m-q8t1-read" {
		t.Errorf("read-only default tests %+v, plot %q", c.Tests, c.PlotTest)
	}
	if c.IOLimit != 64<<20 || c.Interval.Minutes() != 2 || opts.outputDir != "/tmp/x" {
		t.Errorf("io-limit %d, interval %s, output %q", c.IOLimit, c.Interval, opts.outputDir)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("parsed config does not validate: %v", err)
	}
}

func TestParseFlagsErrors(t *testing.T) {
	base := []string{"-target", "a=/dev/a", "-working-sets", "1Mi"}
	cases := map[string][]string{
		"dm-cache":     append(base, "-dm-cache", "b=/dev/mapper/x"),
		"working-sets": {"-target", "a=/dev/a", "-working-sets", "10%"},
		"tests":        append(base, "-tests", "seq2m"),
		"io-limit":     append(base, "-io-limit", "much"),
		"unexpected":   append(base, "extra"),
		"target":       {"-target", "/dev/a", "-working-sets", "1Mi"},
		"time-limit":   append(base, "-time-limit", "-5m"),
	}
	for field, args := range cases {
		_, err := parseFlags(args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: err = %v, want it to name %q", field, err, field)
		}
	}
	if _, err := parseFlags([]string{"-h"}, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: err = %v, want flag.ErrHelp", err)
	}
}

func TestRunExitCodes(t *testing.T) {
	sys := system{exec: &testingexec.FakeExec{}, pod: noPod(), stderr: io.Discard}
	if code := run(context.Background(), []string{"-runs", "x"}, sys); code != 2 {
		t.Errorf("bad flag: exit %d, want 2", code)
	}
	if code := run(context.Background(), []string{"-target", "a=/dev/a", "-working-sets", "1Mi", "-ssd-ref", "b"}, sys); code != 2 {
		t.Errorf("invalid config: exit %d, want 2", code)
	}
}

// --version needs no targets, runs nothing and exits 0.
func TestRunPrintsVersion(t *testing.T) {
	var stdout bytes.Buffer
	fe := &testingexec.FakeExec{} // no CommandScript: any command fails the test
	code := run(context.Background(), []string{"--version"}, system{exec: fe, pod: noPod(), stdout: &stdout, stderr: io.Discard})
	want := "ssdcache-bench " + version.Version + " ("
	if code != 0 || !strings.HasPrefix(stdout.String(), want) || fe.CommandCalls != 0 {
		t.Errorf("--version: exit %d, stdout %q, %d commands; want 0, %q..., none", code, stdout.String(), fe.CommandCalls, want)
	}
}

const cacheStatus = "0 2097152 cache 8 10/4096 512 37/1984 4294967290 12 7 3 1 36 0 1 writethrough 2 migration_threshold 2048 smq 0 rw -"

func fakeDmsetup(t *testing.T, outputs ...string) (*testingexec.FakeExec, *[][]string) {
	t.Helper()
	var calls [][]string
	fe := &testingexec.FakeExec{ExactOrder: true}
	for _, out := range outputs {
		fe.CommandScript = append(fe.CommandScript, func(cmd string, args ...string) exec.Cmd {
			calls = append(calls, append([]string{cmd}, args...))
			return testingexec.InitFakeCmd(&testingexec.FakeCmd{RunScript: []testingexec.FakeAction{
				func() ([]byte, []byte, error) { return []byte(out + "\n"), nil, nil },
			}}, cmd, args...)
		})
	}
	return fe, &calls
}

func TestDMCacheCountersSample(t *testing.T) {
	fe, calls := fakeDmsetup(t, cacheStatus)
	c := dmCacheCounters{dm: dm.NewDmsetup(command.NewRunner(fe))}
	got, err := c.Sample(context.Background(), "/dev/mapper/ssdcache-pvc-1")
	if err != nil {
		t.Fatal(err)
	}
	want := bench.Counters{ReadHits: 4294967290, ReadMisses: 12, WriteHits: 7, WriteMisses: 3, Demotions: 1, Promotions: 36}
	if got != want {
		t.Errorf("counters %+v, want %+v", got, want)
	}
	if strings.Join((*calls)[0], " ") != "dmsetup status --noflush ssdcache-pvc-1" {
		t.Errorf("ran %v, want dmsetup status --noflush <name>", (*calls)[0])
	}
}

func TestCountersFromStatusErrors(t *testing.T) {
	cases := map[string]string{
		"0 2097152 linear":                 "no cache table now", // bench.ErrNoCacheTable: a promotion's swap
		"0 2097152 cache Fail":             "cache reports Fail",
		"0 10 cache x\n10 10 cache y":      "found 2",
		"0 2097152 cache 8 10/4096 512 0/": "dm device v",
	}
	for status, want := range cases {
		_, err := countersFromStatus("v", status)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want %q", status, err, want)
		}
		if swapped := status == "0 2097152 linear"; errors.Is(err, bench.ErrNoCacheTable) != swapped {
			t.Errorf("%q: err = %v, is ErrNoCacheTable: want %v", status, err, swapped)
		}
	}
}

func FuzzCountersFromStatus(f *testing.F) {
	f.Add(cacheStatus)
	f.Add("0 2097152 cache Fail")
	f.Add("0 1024 linear\n1024 2048 cache 8 10/4096 512 0/1984 0 0 0 0 0 0 0 1 writethrough 2 migration_threshold 2048 smq 0 rw -")
	f.Fuzz(func(t *testing.T, status string) {
		c, err := countersFromStatus("fuzz", status)
		if err != nil {
			return
		}
		// Accepted lines come from dm.ParseCacheStatus; check our conversion kept the fields apart.
		for _, line := range strings.Split(status, "\n") {
			if st, perr := dm.ParseCacheStatus(line); perr == nil && !st.Failed {
				if st.ReadHits != c.ReadHits || st.Promotions != c.Promotions || st.Demotions != c.Demotions {
					t.Fatalf("counters %+v do not match the parsed status %+v", c, st)
				}
				return
			}
		}
		t.Fatalf("accepted %q without a parseable cache line", status)
	})
}

// -prepare-only lays out the tree in a real directory, runs nothing else and
// writes no report.
func TestRunPrepareOnlyLaysOutTheTree(t *testing.T) {
	dir, out := t.TempDir(), filepath.Join(t.TempDir(), "report")
	fe := &testingexec.FakeExec{} // no CommandScript: any command (fio) fails the test
	args := []string{"-target", "vol=" + dir, "-working-sets", "2Mi", "-tests", "tree-read", "-prepare-only", "-output-dir", out}
	if code := run(context.Background(), args, system{exec: fe, pod: noPod(), stderr: io.Discard}); code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}
	trees, _ := filepath.Glob(filepath.Join(dir, "ssdcache-bench-tree-*", "d000", "d00", "f000000.bin"))
	if len(trees) != 1 || fe.CommandCalls != 0 {
		t.Errorf("tree files %v, %d commands; want the tree's first file, no command", trees, fe.CommandCalls)
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("report dir %s: %v; want none", out, err)
	}
}
