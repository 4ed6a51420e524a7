package command

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/exec"
	testingexec "k8s.io/utils/exec/testing"
)

func TestRunUsesCLocaleAndKeepsStderr(t *testing.T) {
	fc := &testingexec.FakeCmd{RunScript: []testingexec.FakeAction{func() ([]byte, []byte, error) {
		return nil, nil, testingexec.FakeExitError{Status: 5}
	}}}
	fe := &testingexec.FakeExec{CommandScript: []testingexec.FakeCommandAction{func(cmd string, args ...string) exec.Cmd {
		return testingexec.InitFakeCmd(fc, cmd, args...)
	}}}
	_, err := NewRunner(fe).Run(context.Background(), "dmsetup", "table", "x")
	if !slices.Contains(fc.Env, "LC_ALL=C") {
		t.Errorf("env %v lacks LC_ALL=C", fc.Env)
	}
	var cmdErr *Error
	if !errors.As(err, &cmdErr) || cmdErr.ExitCode != 5 || !strings.Contains(err.Error(), "dmsetup table x") {
		t.Fatalf("err = %#v", err)
	}
}

func TestRunPassesOnlyToolVariables(t *testing.T) {
	fc := &testingexec.FakeCmd{RunScript: []testingexec.FakeAction{func() ([]byte, []byte, error) { return nil, nil, nil }}}
	fe := &testingexec.FakeExec{CommandScript: []testingexec.FakeCommandAction{func(cmd string, args ...string) exec.Cmd {
		return testingexec.InitFakeCmd(fc, cmd, args...)
	}}}
	environ := []string{"DM_DISABLE_UDEV=1", "HOME=/root", "LANG=de_DE.UTF-8", "LVM_SYSTEM_DIR=/etc/lvm-node"}
	if _, err := NewRunner(fe, environ...).Run(context.Background(), "dmsetup", "create", "x"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"LC_ALL=C", "DM_DISABLE_UDEV=1", "LVM_SYSTEM_DIR=/etc/lvm-node"} {
		if !slices.Contains(fc.Env, want) {
			t.Errorf("env %v lacks %s", fc.Env, want)
		}
	}
	for _, kv := range fc.Env {
		if strings.HasPrefix(kv, "LANG=") || strings.HasPrefix(kv, "HOME=") {
			t.Errorf("env %v passes %s: the tools' output must not depend on the node's settings", fc.Env, kv)
		}
	}
}

// A hung tool (a dead disk under a scan, a VG lock never released) is killed
// at the runner's timeout even when the caller has no deadline, and the error
// is a DeadlineExceeded that the CSI boundary maps to its code.
func TestHungCommandKilledAtTheRunnersTimeout(t *testing.T) {
	r := NewRunner(exec.New()).WithTimeout(100 * time.Millisecond)
	start := time.Now()
	_, err := r.Run(context.Background(), "sleep", "30")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want context.DeadlineExceeded", err)
	}
	if elapsed := time.Since(start); elapsed > 10*time.Second {
		t.Fatalf("the command ran %v: not killed at the timeout", elapsed)
	}
	if !strings.Contains(err.Error(), "sleep 30") || !strings.Contains(err.Error(), "deadline exceeded") {
		t.Fatalf("error %q should name the command and the deadline", err)
	}
}

func TestRunnerHasADefaultTimeout(t *testing.T) {
	if r := NewRunner(exec.New()); r.timeout != DefaultTimeout || DefaultTimeout < 5*time.Minute {
		t.Fatalf("default timeout %v: every command needs one, and not shorter than a slow node needs", r.timeout)
	}
}
