package logging

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"k8s.io/klog/v2"
)

// childEnv makes the test binary, run again by TestJSONFormat, log one
// message with the flags in its value and exit: a logger is applied once per
// process, so each format needs a process of its own.
const childEnv = "SSDCACHE_LOGGING_CHILD_ARGS"

func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv(childEnv); ok {
		fs := flag.NewFlagSet("child", flag.ContinueOnError)
		o := AddFlags(fs)
		if err := fs.Parse(strings.Fields(args)); err != nil {
			os.Exit(3)
		}
		if err := o.Apply(); err != nil {
			os.Stderr.WriteString("apply: " + err.Error() + "\n")
			os.Exit(2)
		}
		klog.InfoS("Attached cache", "volumeID", "pvc-1")
		klog.Flush()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func runChild(t *testing.T, args string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+args)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if exit, ok := err.(*exec.ExitError); ok {
		return out.String(), errb.String(), exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), 0
}

func TestJSONFormat(t *testing.T) {
	stdout, stderr, code := runChild(t, "--logging-format=json -v=2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	all := strings.TrimSpace(stdout + stderr)
	var line map[string]any
	if err := json.NewDecoder(strings.NewReader(all)).Decode(&line); err != nil {
		t.Fatalf("not JSON: %q: %v", all, err)
	}
	if line["msg"] != "Attached cache" || line["volumeID"] != "pvc-1" {
		t.Fatalf("want msg and volumeID as fields, got %v", line)
	}
}

func TestTextFormatIsTheDefault(t *testing.T) {
	stdout, stderr, code := runChild(t, "")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	all := stdout + stderr
	if !strings.Contains(all, `"Attached cache" volumeID="pvc-1"`) || strings.HasPrefix(strings.TrimSpace(all), "{") {
		t.Fatalf("want klog's text line, got %q", all)
	}
}

func TestUnknownFormatIsRefused(t *testing.T) {
	_, stderr, code := runChild(t, "--logging-format=xml")
	if code != 2 || !strings.Contains(stderr, "xml") {
		t.Fatalf("want exit 2 naming the format, got %d: %q", code, stderr)
	}
}

func TestFlagsAreRegistered(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	AddFlags(fs)
	for _, name := range []string{"logging-format", "v", "vmodule"} {
		if fs.Lookup(name) == nil {
			t.Errorf("flag --%s missing", name)
		}
	}
}
