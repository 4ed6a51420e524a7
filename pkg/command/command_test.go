package command

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

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
