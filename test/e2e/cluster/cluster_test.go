package cluster

import (
	"os"
	"path/filepath"
	"testing"
)

// The cluster's start is the e2e's first step: the PKI, the node's configs
// and the waits are proven there, and a start that fails says what it
// awaited and what it saw last. What the e2e rarely sees is tested here.

func TestSoftLockupIsFoundOnTheConsole(t *testing.T) {
	console := filepath.Join(t.TempDir(), "console.log")
	if line := softLockup(console); line != "" {
		t.Errorf("no console yet: %q", line)
	}
	lockup := "[   61.407231] watchdog: BUG: soft lockup - CPU#0 stuck for 23s! [kubelet:277]"
	if err := os.WriteFile(console, []byte("[    5.1] booting\n"+lockup+"\n[   62.0] more\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if line := softLockup(console); line != lockup {
		t.Errorf("softLockup = %q, want the console's line %q", line, lockup)
	}
}
