package lvm

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"k8s.io/utils/exec"
	testingexec "k8s.io/utils/exec/testing"

	"github.com/ssdcache/ssdcache/pkg/command"
	"github.com/ssdcache/ssdcache/pkg/dm"
)

// lvsOutput is what lvm2 2.03 prints for `lvs --reportformat json --units b --nosuffix -o ...`.
const lvsOutput = `  {
      "report": [
          {
              "lv": [
                  {"lv_name":"pvc-1", "vg_name":"ssdcache-hdd", "lv_size":"1073741824", "lv_tags":"ssdcache.io/role=origin,ssdcache.io/volume=pvc-1", "lv_path":"/dev/ssdcache-hdd/pvc-1", "lv_kernel_major":"254", "lv_kernel_minor":"3"},
                  {"lv_name":"old", "vg_name":"ssdcache-hdd", "lv_size":"4194304", "lv_tags":"", "lv_path":"/dev/ssdcache-hdd/old", "lv_kernel_major":"-1", "lv_kernel_minor":"-1"}
              ]
          }
      ]
      ,
      "log": [
      ]
  }
`

type recorded struct {
	cmd  string
	args []string
	env  []string
}

func fakeExec(t *testing.T, calls *[]recorded, outputs ...string) *command.Runner {
	t.Helper()
	fe := &testingexec.FakeExec{ExactOrder: true}
	for _, out := range outputs {
		fe.CommandScript = append(fe.CommandScript, func(cmd string, args ...string) exec.Cmd {
			fc := &testingexec.FakeCmd{}
			fc.RunScript = []testingexec.FakeAction{func() ([]byte, []byte, error) {
				if fc.Stdout != nil {
					_, _ = fc.Stdout.Write([]byte(out))
				}
				return nil, nil, nil
			}}
			c := testingexec.InitFakeCmd(fc, cmd, args...)
			*calls = append(*calls, recorded{cmd: cmd, args: args, env: fc.Env})
			return c
		})
	}
	t.Cleanup(func() {
		if fe.CommandCalls != len(fe.CommandScript) {
			t.Errorf("ran %d commands, expected %d", fe.CommandCalls, len(fe.CommandScript))
		}
	})
	return command.NewRunner(fe)
}

func TestListLVsParsesJSONReport(t *testing.T) {
	var calls []recorded
	c := NewCommand(fakeExec(t, &calls, lvsOutput), "")
	lvs, err := c.ListLVs(context.Background(), "ssdcache-hdd")
	if err != nil {
		t.Fatal(err)
	}
	if len(lvs) != 2 {
		t.Fatalf("got %d LVs", len(lvs))
	}
	if lvs[0].Volume() != "pvc-1" || lvs[0].Role() != RoleOrigin || lvs[0].Size != 1<<30 || lvs[0].DevNum != (dm.DevNum{Major: 254, Minor: 3}) {
		t.Fatalf("lv 0: %+v", lvs[0])
	}
	if !lvs[1].DevNum.IsZero() || lvs[1].Volume() != "" {
		t.Fatalf("inactive untagged lv: %+v", lvs[1])
	}
	if calls[0].cmd != "lvm" || calls[0].args[0] != "lvs" || !slices.Contains(calls[0].args, "json") {
		t.Fatalf("command: %v %v", calls[0].cmd, calls[0].args)
	}
}

func TestCreateLVWipesAndTags(t *testing.T) {
	var calls []recorded
	c := NewCommand(fakeExec(t, &calls, "", lvsOutput), "activation{udev_sync=0}")
	lv, err := c.CreateLV(context.Background(), "ssdcache-hdd", "pvc-1", 1<<30, Tags("pvc-1", RoleOrigin))
	if err != nil {
		t.Fatal(err)
	}
	if lv.Name != "pvc-1" {
		t.Fatalf("lv: %+v", lv)
	}
	want := []string{"lvcreate", "--config", "activation{udev_sync=0}", "--yes", "--name", "pvc-1", "--size", "1073741824b",
		"--wipesignatures", "y", "--zero", "y", "--addtag", "ssdcache.io/volume=pvc-1", "--addtag", "ssdcache.io/role=origin", "ssdcache-hdd"}
	if !slices.Equal(calls[0].args, want) {
		t.Fatalf("lvcreate args:\n got %v\nwant %v", calls[0].args, want)
	}
}

func TestCommandsSeeOnlyThePoolDevices(t *testing.T) {
	var calls []recorded
	c := NewCommand(fakeExec(t, &calls, lvsOutput), "", "/dev/disk/by-id/hdd-1", "/dev/disk/by-id/nvme-1")
	if _, err := c.ListLVs(context.Background(), "ssdcache-hdd"); err != nil {
		t.Fatal(err)
	}
	i := slices.Index(calls[0].args, "--devices")
	if i < 0 || calls[0].args[i+1] != "/dev/disk/by-id/hdd-1,/dev/disk/by-id/nvme-1" {
		t.Fatalf("lvs args %v: want --devices with both pool devices", calls[0].args)
	}
}

// Devices a selector resolved later replace the list; a restriction to no
// device runs no LVM at all rather than one that scans every device.
func TestUseDevicesNeverWidensTheScan(t *testing.T) {
	var calls []recorded
	c := NewCommand(fakeExec(t, &calls, lvsOutput), "")
	c.UseDevices(nil)
	if _, err := c.ListLVs(context.Background(), "ssdcache-hdd"); !errors.Is(err, ErrNoPoolDevices) || len(calls) != 0 {
		t.Fatalf("restricted to nothing: err %v, %d commands run", err, len(calls))
	}
	c.UseDevices([]string{"/dev/disk/by-id/hdd-2"})
	if _, err := c.ListLVs(context.Background(), "ssdcache-hdd"); err != nil {
		t.Fatal(err)
	}
	if i := slices.Index(calls[0].args, "--devices"); i < 0 || calls[0].args[i+1] != "/dev/disk/by-id/hdd-2" {
		t.Fatalf("lvs args %v: want --devices /dev/disk/by-id/hdd-2", calls[0].args)
	}
}

func TestParseReportErrors(t *testing.T) {
	if _, err := parseReport([]byte("not json")); err == nil {
		t.Fatal("garbage accepted")
	}
	_, err := parseLV(map[string]string{"lv_name": "x", "vg_name": "v", "lv_size": "12MiB"})
	if err == nil {
		t.Fatal("size with unit accepted")
	}
}

func TestErrNotFoundIsSentinel(t *testing.T) {
	f := &fakeLister{}
	_, err := FindLV(context.Background(), f, "vg", "missing")
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("err = %v", err)
	}
}

type fakeLister struct{ Interface }

func (fakeLister) ListLVs(context.Context, string) ([]LV, error) { return nil, nil }

func FuzzParseReport(f *testing.F) {
	f.Add([]byte(lvsOutput))
	f.Add([]byte(`{"report":[{"vg":[{"vg_name":"a","vg_size":"1","vg_free":"0","vg_extent_size":"4194304","vg_tags":""}]}]}`))
	f.Fuzz(func(t *testing.T, out []byte) {
		rows, err := parseReport(out)
		if err != nil {
			return
		}
		for _, r := range rows {
			if lv, err := parseLV(r); err == nil && lv.Path == "" {
				t.Fatalf("parsed LV without a path from %q", out)
			}
			_, _ = parseVG(r)
		}
	})
}

func TestChangeTagsIsOneLvchange(t *testing.T) {
	var calls []recorded
	c := NewCommand(fakeExec(t, &calls, ""), "")
	lvs := []LV{{VG: "ssdcache-nvme", Name: "pvc-1.cache-meta"}, {VG: "ssdcache-sata", Name: "pvc-2.cache-meta"}}
	if err := c.ChangeTags(context.Background(), []string{"a=1"}, []string{"b=2"}, lvs...); err != nil {
		t.Fatal(err)
	}
	want := []string{"lvchange", "--addtag", "a=1", "--deltag", "b=2", "ssdcache-nvme/pvc-1.cache-meta", "ssdcache-sata/pvc-2.cache-meta"}
	if len(calls) != 1 || !slices.Equal(calls[0].args, want) {
		t.Fatalf("calls %v, want one with %v", calls, want)
	}
}

// vgsMissingOutput is a VG one of whose two PVs LVM does not find.
const vgsMissingOutput = `{"report":[{"vg":[{"vg_name":"ssdcache-nvme","vg_size":"2147483648","vg_free":"1073741824","vg_extent_size":"4194304","vg_tags":"ssdcache.io/pool=cache","vg_missing_pv_count":"1"}]}]}`

// lvsPartialOutput has a cache LV on the missing PV and one on the survivor.
const lvsPartialOutput = `{"report":[{"lv":[
  {"lv_name":"pvc-1.cache-data", "vg_name":"ssdcache-nvme", "lv_size":"8388608", "lv_tags":"ssdcache.io/volume=pvc-1,ssdcache.io/role=cache-data", "lv_path":"/dev/ssdcache-nvme/pvc-1.cache-data", "lv_kernel_major":"254", "lv_kernel_minor":"7", "lv_health_status":"partial"},
  {"lv_name":"pvc-2.cache-data", "vg_name":"ssdcache-nvme", "lv_size":"8388608", "lv_tags":"ssdcache.io/volume=pvc-2,ssdcache.io/role=cache-data", "lv_path":"/dev/ssdcache-nvme/pvc-2.cache-data", "lv_kernel_major":"254", "lv_kernel_minor":"8", "lv_health_status":""}
]}]}`

func TestMissingPVsAndPartialLVsAreRead(t *testing.T) {
	var calls []recorded
	c := NewCommand(fakeExec(t, &calls, vgsMissingOutput, lvsPartialOutput), "")
	vg, err := c.GetVG(context.Background(), "ssdcache-nvme")
	if err != nil {
		t.Fatal(err)
	}
	if vg.MissingPVs != 1 {
		t.Fatalf("vg %+v: want 1 missing PV", vg)
	}
	if !slices.Contains(strings.Split(calls[0].args[slices.Index(calls[0].args, "-o")+1], ","), "vg_missing_pv_count") {
		t.Fatalf("vgs args %v do not ask for vg_missing_pv_count", calls[0].args)
	}
	lvs, err := c.ListLVs(context.Background(), "ssdcache-nvme")
	if err != nil {
		t.Fatal(err)
	}
	if len(lvs) != 2 || !lvs[0].Partial || lvs[1].Partial {
		t.Fatalf("lvs %+v: want the first partial, the second not", lvs)
	}
	if !strings.Contains(calls[1].args[slices.Index(calls[1].args, "-o")+1], "lv_health_status") {
		t.Fatalf("lvs args %v do not ask for lv_health_status", calls[1].args)
	}
}

func TestReduceMissingIsOneForcedVgreduce(t *testing.T) {
	var calls []recorded
	c := NewCommand(fakeExec(t, &calls, ""), "", "/dev/disk/by-id/nvme-survivor")
	if err := c.ReduceMissing(context.Background(), "ssdcache-nvme"); err != nil {
		t.Fatal(err)
	}
	want := []string{"vgreduce", "--devices", "/dev/disk/by-id/nvme-survivor", "--removemissing", "--force", "ssdcache-nvme"}
	if len(calls) != 1 || calls[0].cmd != "lvm" || !slices.Equal(calls[0].args, want) {
		t.Fatalf("calls %v, want lvm %v", calls, want)
	}
}

func TestKernelLVsAreTheDevicesNamedAsTheVGsLVs(t *testing.T) {
	var calls []recorded
	out := "sdv--nvme-sdv.cache--data|LVM-EYVr0zeaRIYX3ju3PAdhqv9oSwPEKDVzAaK3r6NbCQZdr7nx2hbtkKZ3A0NLLedI|254|3|L--w|0\n" +
		"ssdcache--hdd-sdv|LVM-QnIOSl5srbc3nHfZoJD8Dn9eFov0bXcIHWgGRopDYyFky0EluU5EWcKcm4deKmRy|254|0|L--w|1\n" +
		"sdv--nvme--x-a|LVM-x|254|5|L--w|0\n" +
		"ssdcache-sdv||254|1|L--w|0\n"
	c := NewCommand(fakeExec(t, &calls, out), "")
	devs, err := c.KernelLVs(context.Background(), "sdv-nvme")
	if err != nil {
		t.Fatal(err)
	}
	want := []KernelLV{{Device: "sdv--nvme-sdv.cache--data", VG: "sdv-nvme", LV: "sdv.cache-data",
		UUID: "LVM-EYVr0zeaRIYX3ju3PAdhqv9oSwPEKDVzAaK3r6NbCQZdr7nx2hbtkKZ3A0NLLedI", DevNum: dm.DevNum{Major: 254, Minor: 3}}}
	if !slices.EqualFunc(devs, want, func(a, b KernelLV) bool { return a == b }) {
		t.Fatalf("devices %+v, want %+v", devs, want)
	}
	if got := devs[0].VGUUID(); got != "EYVr0zeaRIYX3ju3PAdhqv9oSwPEKDVz" {
		t.Fatalf("VG UUID %q", got)
	}
	if calls[0].cmd != "dmsetup" {
		t.Fatalf("ran %s, want dmsetup", calls[0].cmd)
	}
}

func TestSplitDMNameUndoesDMName(t *testing.T) {
	for _, c := range []struct{ vg, lv string }{{"ssdcache-nvme", "pvc-1.cache-meta"}, {"a", "b"}, {"x--y", "z"}} {
		if vg, lv, ok := SplitDMName(DMName(c.vg, c.lv)); !ok || vg != c.vg || lv != c.lv {
			t.Errorf("SplitDMName(DMName(%q, %q)) = %q, %q, %v", c.vg, c.lv, vg, lv, ok)
		}
	}
	for _, name := range []string{"ssdcache-pvc", "vg-lv-real", "novg", "-lv", "vg-"} {
		if vg, lv, ok := SplitDMName(name); ok && name != "ssdcache-pvc" {
			t.Errorf("SplitDMName(%q) = %q, %q: not an LV's device name", name, vg, lv)
		}
	}
}

// The removal of a lost VG's LV device takes its dangling /dev/<vg>/<lv>
// link and the emptied /dev/<vg> with it: vgcreate refuses a VG whose
// /dev/<vg> exists.
func TestRemoveKernelLVRemovesItsDanglingLinkAndEmptyVGDir(t *testing.T) {
	var calls []recorded
	c := NewCommand(fakeExec(t, &calls, "", ""), "")
	c.devDir = t.TempDir()
	dir := c.devDir + "/sdv-nvme"
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, lv := range []string{"sdv.cache-data", "sdv.cache-meta"} {
		if err := os.Symlink("../dm-404", dir+"/"+lv); err != nil {
			t.Fatal(err)
		}
	}
	d := KernelLV{Device: "sdv--nvme-sdv.cache--data", VG: "sdv-nvme", LV: "sdv.cache-data"}
	if err := c.RemoveKernelLV(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if want := []string{"remove", "--retry", d.Device}; calls[0].cmd != "dmsetup" || !slices.Equal(calls[0].args, want) {
		t.Fatalf("ran %v, want dmsetup %v", calls[0], want)
	}
	if _, err := os.Lstat(dir + "/sdv.cache-data"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the link is still there: %v", err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("/dev/<vg> went while it held another link: %v", err)
	}
	d.Device, d.LV = "sdv--nvme-sdv.cache--meta", "sdv.cache-meta"
	if err := c.RemoveKernelLV(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the emptied /dev/<vg> is still there: %v", err)
	}
}
