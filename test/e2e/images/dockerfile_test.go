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

// keyFiles names, for each package hack/image/rootfs.sh installs, files
// that prove it is in the image; TestProjectImageMatchesDockerfile looks for
// them. A package added to the script should be added here too.
var keyFiles = map[string][]string{
	"lvm2":                    {"/sbin/lvm", "/etc/lvm/lvm.conf"},
	"dmsetup":                 {"/sbin/dmsetup"},
	"thin-provisioning-tools": {"/usr/sbin/cache_restore", "/usr/sbin/cache_check"},
	"e2fsprogs":               {"/sbin/mkfs.ext4", "/sbin/resize2fs"},
	"xfsprogs":                {"/sbin/mkfs.xfs", "/usr/sbin/xfs_growfs"},
	"util-linux":              {"/sbin/blkid", "/sbin/wipefs", "/usr/bin/lsblk"},
	"fio":                     {"/usr/bin/fio"},
}

func TestRepositoryDockerfileIsUnderstood(t *testing.T) {
	df, err := readDockerfile(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	if df.Suite != "bookworm" || df.BaseImage != "debian:bookworm-slim" {
		t.Errorf("base %q suite %q, want debian:bookworm-slim / bookworm", df.BaseImage, df.Suite)
	}
	if len(df.Steps) != 2 || df.Steps[0].Src != "hack/image/rootfs.sh" || df.Steps[0].Mode&0o111 == 0 ||
		!strings.Contains(df.Steps[1].Run, df.Steps[0].Dest) {
		t.Fatalf("steps %v, want the executable hack/image/rootfs.sh copied and run", df.Steps)
	}
	script := strings.Fields(df.Steps[0].Data)
	for pkg := range keyFiles {
		if !slices.Contains(script, pkg) {
			t.Errorf("keyFiles lists %q, which hack/image/rootfs.sh does not install", pkg)
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
	if df.User == "" || len(df.Entrypoint) == 0 || !strings.Contains(string(text), `-ldflags "`+projectLDFlags+`"`) {
		t.Errorf("user %q entrypoint %q: want both, and the build stage's go build with -ldflags %q", df.User, df.Entrypoint, projectLDFlags)
	}
}

const sampleDockerfile = `# comment
ARG GO_VERSION=1.26
FROM golang:${GO_VERSION}-bookworm AS build
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
	df, err := ParseDockerfile(sampleDockerfile)
	if err != nil {
		t.Fatal(err)
	}
	df.Steps[0].Data, df.Steps[0].Mode = script, 0o755
	return df
}

func TestParseDockerfile(t *testing.T) {
	df, err := ParseDockerfile(sampleDockerfile)
	if err != nil {
		t.Fatal(err)
	}
	want := &Dockerfile{
		BaseImage:  "debian:trixie-slim",
		Suite:      "trixie",
		Steps:      []Step{{Src: "hack/image/rootfs.sh", Dest: "/tmp/rootfs.sh"}, {Run: "/tmp/rootfs.sh  && rm /tmp/rootfs.sh"}},
		Binaries:   []string{"a", "b"},
		BinDir:     "/usr/bin",
		Env:        []string{"DM_DISABLE_UDEV=1", "NOTE=x"},
		User:       "1:2",
		Entrypoint: []string{"/usr/bin/a", "--flag"},
	}
	if !reflect.DeepEqual(df, want) {
		t.Errorf("parsed\n%#v\nwant\n%#v", df, want)
	}
}

func TestParseDockerfileRejectsWhatTheBuilderCannotReproduce(t *testing.T) {
	final := "FROM golang AS build\nFROM debian:bookworm-slim\nRUN true\nCOPY --from=build /out/a /usr/bin/\nENTRYPOINT [\"/a\"]\n"
	cases := map[string]struct{ text, wantErr string }{
		"WORKDIR":           {final + "WORKDIR /x\n", "instruction WORKDIR"},
		"legacy ENV":        {final + "ENV A b\n", "KEY=VALUE"},
		"quoted ENV":        {final + "ENV A=\"b c\"\n", "KEY=VALUE"},
		"COPY out of repo":  {final + "COPY ../a /a\n", "only COPY --from"},
		"COPY with flags":   {final + "COPY --chmod=755 a /a\n", "only COPY --from"},
		"RUN exec form":     {strings.Replace(final, "RUN true", `RUN ["true"]`, 1), "shell form"},
		"shell ENTRYPOINT":  {strings.Replace(final, `["/a"]`, "/a", 1), "JSON (exec) form"},
		"not debian":        {strings.Replace(final, "debian:bookworm-slim", "alpine:3", 1), "debian:<suite>"},
		"no binaries":       {strings.Replace(final, "COPY --from=build /out/a /usr/bin/\n", "", 1), "copies no binaries"},
		"one stage":         {"FROM debian:bookworm\n", "found 1 FROM stages"},
		"binaries not /dir": {strings.Replace(final, "/usr/bin/", "/usr/bin", 1), "ending in /"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := ParseDockerfile(tc.text)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}

func TestRootfsCacheKeyFollowsTheDockerfile(t *testing.T) {
	df := parseSample(t, "#!/bin/sh\napt-get install -y fio\n")
	o := Options{CacheDir: "/c", DebianMirror: DefaultDebianMirror, DebianSecurityMirror: DefaultDebianSecurityMirror}
	base := planRootfs(o, df).cachePath
	if !strings.HasPrefix(base, "/c/e2e/images/rootfs-trixie-") || !strings.HasSuffix(base, ".tar") {
		t.Errorf("cache path %q, want /c/e2e/images/rootfs-trixie-<hash>.tar", base)
	}
	if planRootfs(o, parseSample(t, "#!/bin/sh\napt-get install -y fio xfsprogs\n")).cachePath == base {
		t.Error("changing the COPY'd script did not change the cached layer's name")
	}
	changed := parseSample(t, "#!/bin/sh\napt-get install -y fio\n")
	changed.Steps[1].Run += " && true"
	if planRootfs(o, changed).cachePath == base {
		t.Error("changing the RUN did not change the cached layer's name")
	}
	o.DebianMirror = "http://mirror.example/debian"
	if planRootfs(o, df).cachePath == base {
		t.Error("changing the mirror did not change the cached layer's name")
	}
}
