package main

import (
	"flag"
	"strings"
	"testing"
)

// deviceClassOf parses args with the node plugin's two class flags and resolves them.
func deviceClassOf(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var o options
	fs := flag.NewFlagSet("ssdcache-node", flag.ContinueOnError)
	fs.StringVar(&o.deviceClass, "device-class", "nvme", "")
	fs.StringVar(&o.cacheClass, "cache-class", "", "")
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	err := o.resolveDeviceClass(setFlags(fs))
	return o.deviceClass, err
}

// --device-class names the class; --cache-class, its old name, still does
// (with a warning), alone or agreeing with it; the two disagreeing is refused
// with both flags and values named.
func TestDeviceClassFlagAndItsDeprecatedName(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "nvme"},
		{[]string{"--device-class=sata"}, "sata"},
		{[]string{"--cache-class=sata"}, "sata"},
		{[]string{"--cache-class=sata", "--device-class=sata"}, "sata"},
	} {
		if got, err := deviceClassOf(t, c.args...); err != nil || got != c.want {
			t.Errorf("%v: device class %q, %v; want %q", c.args, got, err, c.want)
		}
	}
	_, err := deviceClassOf(t, "--device-class=nvme", "--cache-class=sata")
	if err == nil || !strings.Contains(err.Error(), `--device-class="nvme" and --cache-class="sata"`) {
		t.Errorf("differing flags: %v, want both named", err)
	}
}
