package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The PKI and the node's configuration files are proven by the e2e's start:
// every component authenticates with them, or the cluster never comes up.

func TestPollSaysWhatItSawLast(t *testing.T) {
	c := &Cluster{} // no VM booted
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	n := 0
	err := c.poll(ctx, "the answer", 10*time.Millisecond, func() (bool, string, error) {
		n++
		return false, fmt.Sprintf("look %d", n), nil
	})
	if err == nil || !strings.Contains(err.Error(), "the answer: not within") || !strings.Contains(err.Error(), "last seen: look") {
		t.Fatalf("poll: %v", err)
	}
	giveUp := errors.New("it cannot come any more")
	if err := c.poll(context.Background(), "the answer", time.Millisecond, func() (bool, string, error) {
		return false, "", giveUp
	}); !errors.Is(err, giveUp) {
		t.Fatalf("poll after check's error: %v", err)
	}
}

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
