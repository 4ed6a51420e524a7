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

func TestListWithUUIDsReadsEachDevicesUUID(t *testing.T) {
	var got []string
	out := "ssdcache--nvme-pvc--1.cache--data|LVM-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAABBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB|252|3|L--w|0\n" +
		"ssdcache-pvc-1||252|1|L--w|1\n"
	fe := &testingexec.FakeExec{CommandScript: []testingexec.FakeCommandAction{func(cmd string, args ...string) exec.Cmd {
		got = append([]string{cmd}, args...)
		fc := &testingexec.FakeCmd{}
		fc.RunScript = []testingexec.FakeAction{func() ([]byte, []byte, error) {
			_, _ = fc.Stdout.Write([]byte(out))
			return nil, nil, nil
		}}
		return testingexec.InitFakeCmd(fc, cmd, args...)
	}}}
	devs, err := NewDmsetup(command.NewRunner(fe)).ListWithUUIDs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"dmsetup", "info", "-c", "--noheadings", "--separator", "|", "-o", "name,uuid,major,minor,attr,open"}; !slices.Equal(got, want) {
		t.Fatalf("ran %v, want %v", got, want)
	}
	want := []Device{
		{Name: "ssdcache--nvme-pvc--1.cache--data", UUID: "LVM-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAABBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB", DevNum: DevNum{Major: 252, Minor: 3}},
		{Name: "ssdcache-pvc-1", DevNum: DevNum{Major: 252, Minor: 1}, OpenCount: 1},
	}
	if !slices.Equal(devs, want) {
		t.Fatalf("devices %+v, want %+v", devs, want)
	}
	if _, err := parseUUIDList("a|b|c\n"); err == nil {
		t.Fatal("a short line parsed")
	}
}
