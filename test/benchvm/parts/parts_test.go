package parts

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckRebootKindNamesTheFlagTheValueAndTheKinds(t *testing.T) {
	for _, kind := range []string{PowerCut, CleanReboot} {
		if err := CheckRebootKind(kind); err != nil {
			t.Errorf("%s refused: %v", kind, err)
		}
	}
	for _, kind := range []string{"", "Clean", "powercut"} {
		err := CheckRebootKind(kind)
		if err == nil {
			t.Errorf("reboot kind %q accepted", kind)
			continue
		}
		for _, want := range []string{"reboot-kind", `"` + kind + `"`, PowerCut, CleanReboot} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error for %q lacks %q: %v", kind, want, err)
			}
		}
	}
}

// TestReadRebootOfOlderPartsIsAPowerCut: parts made before the reboot
// kinds have no account, and every reboot step then was a power cut.
func TestReadRebootOfOlderPartsIsAPowerCut(t *testing.T) {
	dir := t.TempDir()
	if r, err := ReadReboot(dir); err != nil || r != (Reboot{Kind: PowerCut}) {
		t.Errorf("ReadReboot without a file = %+v, %v; want a power cut", r, err)
	}
	want := Reboot{Kind: CleanReboot, Marked: true}
	if err := WriteReboot(filepath.Join(dir, "ws-50-reboot"), want); err != nil {
		t.Fatal(err)
	}
	if r, err := ReadReboot(filepath.Join(dir, "ws-50-reboot")); err != nil || r != want {
		t.Errorf("ReadReboot = %+v, %v; want %+v as written", r, err, want)
	}
	if err := os.WriteFile(filepath.Join(dir, RebootFile), []byte(`{"kind": "soft"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if r, err := ReadReboot(dir); err == nil {
		t.Errorf("an account of an unknown kind read as %+v", r)
	}
}
