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
// stage is what the builder reproduces: bookworm, hack/image/rootfs.sh
// copied and run, the three binaries built from cmd/ with projectLDFlags.
func TestRepositoryDockerfileIsUnderstood(t *testing.T) {
	df, err := readDockerfile(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	if len(df.Steps) != 2 || df.Steps[0].Src != "hack/image/rootfs.sh" || df.Steps[0].Mode&0o111 == 0 ||
		!strings.HasPrefix(df.Steps[1].Run, df.Steps[0].Dest) || df.Suite != "bookworm" {
		t.Fatalf("suite %q, steps %v, want bookworm and the executable hack/image/rootfs.sh copied and run", df.Suite, df.Steps)
	}
	for _, pkg := range rootfsPackages {
		if !slices.Contains(strings.Fields(df.Steps[0].Data), pkg) {
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

const sampleDockerfile = `# comment
ARG GO_VERSION=1.26
FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
RUN go build -o /out/ ./cmd/...

FROM debian:trixie-slim
COPY hack/image/rootfs.sh /tmp/
RUN /tmp/rootfs.sh \
 # a comment inside the continuation, which Docker drops
 && rm /tmp/rootfs.sh
COPY --from=build /out/a /out/b /usr/bin/
ENV DM_DISABLE_UDEV=1 NOTE=x
USER 1:2
ENTRYPOINT ["/usr/bin/a", "--flag"]
`

// parseSample parses sampleDockerfile with script as its COPY'd file.
func parseSample(t *testing.T, script string) *Dockerfile {
	t.Helper()
	df, err := parseDockerfile(sampleDockerfile)
	if err != nil {
		t.Fatal(err)
	}
	df.Steps[0].Data, df.Steps[0].Mode = script, 0o755
	return df
}

func TestParseDockerfile(t *testing.T) {
	want := &Dockerfile{
		Suite:      "trixie",
		Steps:      []Step{{Src: "hack/image/rootfs.sh", Dest: "/tmp/rootfs.sh", Data: "s", Mode: 0o755}, {Run: "/tmp/rootfs.sh  && rm /tmp/rootfs.sh"}},
		Binaries:   []string{"a", "b"},
		BinDir:     "/usr/bin",
		Env:        []string{"DM_DISABLE_UDEV=1", "NOTE=x"},
		User:       "1:2",
		Entrypoint: []string{"/usr/bin/a", "--flag"},
	}
	if df := parseSample(t, "s"); !reflect.DeepEqual(df, want) {
		t.Errorf("parsed\n%#v\nwant\n%#v", df, want)
	}
	final := "FROM golang AS build\nFROM debian:bookworm-slim\nRUN true\nCOPY --from=build /out/a /usr/bin/\nENTRYPOINT [\"/a\"]\n"
	rejected := map[string]struct{ text, wantErr string }{
		"WORKDIR":           {final + "WORKDIR /x\n", "WORKDIR /x is not reproduced"},
		"legacy ENV":        {final + "ENV A b\n", "KEY=VALUE"},
		"quoted ENV":        {final + "ENV A=\"b c\"\n", "KEY=VALUE"},
		"COPY out of repo":  {final + "COPY ../a /a\n", "COPY ../a /a: want"},
		"COPY with flags":   {final + "COPY --chmod=755 a /a\n", "COPY --chmod=755 a /a: want"},
		"binaries not /dir": {strings.Replace(final, "/usr/bin/", "/usr/bin", 1), "COPY --from=build /out/a /usr/bin: want"},
		"RUN exec form":     {strings.Replace(final, "RUN true", `RUN ["true"]`, 1), "shell form"},
		"shell ENTRYPOINT":  {strings.Replace(final, `["/a"]`, "/a", 1), "JSON (exec) form"},
		"not debian":        {strings.Replace(final, "debian:bookworm-slim", "alpine:3", 1), "want debian:<suite>"},
		"no binaries":       {strings.Replace(final, "COPY --from=build /out/a /usr/bin/\n", "", 1), "want binaries"},
	}
	for name, tc := range rejected {
		if _, err := parseDockerfile(tc.text); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: err = %v, want it to contain %q", name, err, tc.wantErr)
		}
	}
}

// TestRootfsCacheKeyFollowsTheDockerfile: what the Debian layer is made of
// names its cache file, so a changed recipe is not served an old layer.
func TestRootfsCacheKeyFollowsTheDockerfile(t *testing.T) {
	o := Options{CacheDir: "/c", DebianMirror: DefaultDebianMirror, DebianSecurityMirror: DefaultDebianSecurityMirror}
	base := planRootfs(o, parseSample(t, "#!/bin/sh\n")).cachePath
	if !strings.HasPrefix(base, "/c/e2e/images/rootfs-trixie-") || !strings.HasSuffix(base, ".tar") {
		t.Errorf("cache path %q, want /c/e2e/images/rootfs-trixie-<hash>.tar", base)
	}
	changes := map[string]func(*Options, *Dockerfile){
		"script":      func(_ *Options, df *Dockerfile) { df.Steps[0].Data += "apt-get install -y fio\n" },
		"script mode": func(_ *Options, df *Dockerfile) { df.Steps[0].Mode = 0o700 },
		"RUN":         func(_ *Options, df *Dockerfile) { df.Steps[1].Run += " && true" },
		"mirror":      func(o *Options, _ *Dockerfile) { o.DebianMirror = "http://mirror.example/debian" },
		"suite":       func(_ *Options, df *Dockerfile) { df.Suite = "bookworm" },
	}
	for name, change := range changes {
		o, df := o, parseSample(t, "#!/bin/sh\n")
		change(&o, df)
		if planRootfs(o, df).cachePath == base {
			t.Errorf("changing the %s did not change the cached layer's name", name)
		}
	}
}
