package dm

import (
	"context"
	"slices"
	"testing"

	"k8s.io/utils/exec"
	testingexec "k8s.io/utils/exec/testing"

	"github.com/ssdcache/ssdcache/pkg/command"
)

func TestRemoveRetriesWhileTheDeviceIsBusy(t *testing.T) {
	var got []string
	fe := &testingexec.FakeExec{CommandScript: []testingexec.FakeCommandAction{func(cmd string, args ...string) exec.Cmd {
		got = append([]string{cmd}, args...)
		return testingexec.InitFakeCmd(&testingexec.FakeCmd{RunScript: []testingexec.FakeAction{
			func() ([]byte, []byte, error) { return nil, nil, nil }}}, cmd, args...)
	}}}
	if err := NewDmsetup(command.NewRunner(fe)).Remove(context.Background(), "ssdcache-pvc-1"); err != nil {
		t.Fatal(err)
	}
	if want := []string{"dmsetup", "remove", "--retry", "ssdcache-pvc-1"}; !slices.Equal(got, want) {
		t.Fatalf("ran %v, want %v", got, want)
	}
}
