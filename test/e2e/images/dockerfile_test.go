package images

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

const repoRoot = "../../.."

// rootfsPackages are the packages hack/image/rootfs.sh installs;
// TestProjectImageMatchesDockerfile checks that the image has them. A
// package added to the script should be added here too.
var rootfsPackages = []string{"lvm2", "dmsetup", "thin-provisioning-tools", "e2fsprogs", "xfsprogs", "util-linux", "fio"}

// TestRepositoryDockerfileIsUnderstood checks that the Dockerfile's final
// stage is what the builder reproduces: bookworm, the executable
// hack/image/rootfs.sh, the three binaries built from cmd/ with
// projectLDFlags.
func TestRepositoryDockerfileIsUnderstood(t *testing.T) {
	df, err := readDockerfile(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(repoRoot, "hack/image/rootfs.sh")
	data, err := os.ReadFile(script)
	if st, _ := os.Stat(script); err != nil || st.Mode()&0o111 == 0 || df.Suite != "bookworm" {
		t.Fatalf("suite %q, %s: %v; want bookworm and an executable script", df.Suite, script, err)
	}
	for _, pkg := range rootfsPackages {
		if !slices.Contains(strings.Fields(string(data)), pkg) {
			t.Errorf("rootfsPackages lists %q, which hack/image/rootfs.sh does not install", pkg)
		}
	}
	for _, name := range df.Binaries {
		if _, err := os.Stat(filepath.Join(repoRoot, "cmd", name, "main.go")); err != nil {
			t.Errorf("Dockerfile copies %q, which is not built from cmd/%s: %v", name, name, err)
		}
	}
	if df.BinDir != "/usr/local/bin" || len(df.Binaries) != 3 {
		t.Errorf("binaries %v into %q, want the three ssdcache-* into /usr/local/bin", df.Binaries, df.BinDir)
	}
	text, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(text), `-ldflags "`+projectLDFlags+`"`) {
		t.Errorf("the build stage's go build has not -ldflags %q", projectLDFlags)
	}
}

// TestParseDockerfile: what the builder does not reproduce in the final
// stage fails the build rather than going missing from the e2e image.
func TestParseDockerfile(t *testing.T) {
	final := `FROM golang AS build
RUN go build -o /out/ ./cmd/...
FROM debian:trixie-slim
# a comment
COPY hack/image/rootfs.sh /tmp/
RUN /tmp/rootfs.sh && rm /tmp/rootfs.sh
COPY --from=build /out/a /out/b /usr/bin/
ENV DM_DISABLE_UDEV=1 NOTE=x
USER 1:2
ENTRYPOINT ["/usr/bin/a", "--flag"]
`
	want := &Dockerfile{Suite: "trixie", Binaries: []string{"a", "b"}, BinDir: "/usr/bin", Env: []string{"DM_DISABLE_UDEV=1", "NOTE=x"},
		User: "1:2", Entrypoint: []string{"/usr/bin/a", "--flag"}, steps: rootfsSteps}
	if df, err := parseDockerfile(final); err != nil || !reflect.DeepEqual(df, want) {
		t.Errorf("parsed\n%#v, %v\nwant\n%#v", df, err, want)
	}
	rejected := map[string]struct{ text, wantErr string }{
		"WORKDIR":          {final + "WORKDIR /x\n", "WORKDIR /x is not reproduced"},
		"another RUN":      {final + "RUN true\n", "hack/image/debian.sh reproduces"},
		"quoted ENV":       {final + "ENV A=\"b c\"\n", "KEY=VALUE"},
		"shell ENTRYPOINT": {final + "ENTRYPOINT /a\n", "JSON (exec) form"},
		"not debian":       {strings.Replace(final, "debian:trixie-slim", "alpine:3", 1), "want debian:<suite>"},
	}
	for name, tc := range rejected {
		if _, err := parseDockerfile(tc.text); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: err = %v, want it to contain %q", name, err, tc.wantErr)
		}
	}
}
