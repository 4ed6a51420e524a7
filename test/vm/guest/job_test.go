package guest

import (
	"flag"
	"strings"
	"testing"
	"time"
)

func TestRegisterDefaultsAndValidate(t *testing.T) {
	var o Options
	fs := flag.NewFlagSet("guest", flag.ContinueOnError)
	o.Register(fs, "demo", 10*time.Second)
	if err := fs.Parse([]string{"-ssd", "/dev/disk/by-id/nvme-x"}); err != nil {
		t.Fatal(err)
	}
	if o.WorkDir != "/tmp/demo" || o.Runtime != 10*time.Second || o.CacheMiB != 256 || o.Runs != 6 {
		t.Fatalf("defaults: %+v", o)
	}
	err := o.Validate()
	if err == nil || !strings.Contains(err.Error(), "-hdd") {
		t.Fatalf("missing -hdd: err = %v, want it named", err)
	}
	o.HDD = "/dev/disk/by-id/ata-y"
	if err := o.Validate(); err != nil {
		t.Fatalf("complete flags refused: %v", err)
	}
}
