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
