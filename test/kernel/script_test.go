package kernel

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestGuestScriptPassesTheDeadline runs the guest script with bash on the
// host, a stand-in printing its arguments and environment in place of the
// guest binary: the shell arithmetic is otherwise only exercised in the VM.
func TestGuestScriptPassesTheDeadline(t *testing.T) {
	for _, c := range []struct {
		name    string
		left    time.Duration // until the VM's deadline
		timeout func(secs int) bool
	}{
		{"ahead", 30 * time.Minute, func(secs int) bool {
			want := int((30*time.Minute - guestExitMargin).Seconds())
			return secs <= want && secs >= want-5
		}},
		// Past it, the binary still gets a timeout: 0 would mean none.
		{"passed", -time.Minute, func(secs int) bool { return secs == 1 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			share, guestTmp := filepath.Join(dir, "share"), filepath.Join(dir, "tmp")
			for _, d := range []string{filepath.Join(share, "bin"), guestTmp} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			standIn := filepath.Join(share, "bin", "guest.test")
			if err := os.WriteFile(standIn, []byte("#!/bin/bash\necho \"args: $*\"\necho \"deadline: $SSDCACHE_DEADLINE\"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(c.left)
			script := guestScript(deadline, "^TestX$")
			script = strings.ReplaceAll(script, "/tmp/", guestTmp+"/") // first: dir is under /tmp
			script = strings.ReplaceAll(script, "/vmwork/", share+"/")
			out, err := exec.Command("bash", "-c", script).CombinedOutput()
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			var secs int
			var gotDeadline int64
			for _, line := range strings.Split(string(out), "\n") {
				if args, ok := strings.CutPrefix(line, "args: "); ok {
					f := strings.Fields(args)
					for i := range f[:len(f)-1] {
						if f[i] == "-test.timeout" {
							secs, _ = strconv.Atoi(strings.TrimSuffix(f[i+1], "s"))
						}
					}
				}
				if d, ok := strings.CutPrefix(line, "deadline: "); ok {
					gotDeadline, _ = strconv.ParseInt(d, 10, 64)
				}
			}
			if !c.timeout(secs) {
				t.Errorf("-test.timeout %ds for a VM deadline %v away:\n%s", secs, c.left, out)
			}
			if want := deadline.Add(-guestExitMargin - guestCleanupMargin).Unix(); gotDeadline != want {
				t.Errorf("SSDCACHE_DEADLINE=%d, want %d (before the binary's timeout, leaving time to clean up):\n%s", gotDeadline, want, out)
			}
		})
	}
}
