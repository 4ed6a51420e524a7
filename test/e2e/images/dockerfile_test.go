package images

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ssdcache/ssdcache/pkg/version"
)

const repoRoot = "../../.."

// keyFiles names, for each package the Dockerfile installs, files that
// prove it is in the image; TestProjectImageMatchesDockerfile looks for
// them. A package added to the Dockerfile must be added here too.
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
	for _, pkg := range df.Packages {
		if len(keyFiles[pkg]) == 0 {
			t.Errorf("Dockerfile installs %q but keyFiles has no files proving it is in the image; add some", pkg)
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
	if len(df.SedEdits) == 0 || df.SedEdits[0].File != "/etc/lvm/lvm.conf" {
		t.Errorf("sed edits %+v, want the lvm.conf udev edits", df.SedEdits)
	}
	if df.User == "" || len(df.Entrypoint) == 0 || !strings.Contains(df.GoLDFlags, "-X "+version.Symbol+"=${VERSION}") {
		t.Errorf("user %q entrypoint %q ldflags %q: want all three, the ldflags setting %s", df.User, df.Entrypoint, df.GoLDFlags, version.Symbol)
	}
}

const sampleDockerfile = `# comment
ARG GO_VERSION=1.26
FROM golang:${GO_VERSION}-bookworm AS build
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/ssdcache/ssdcache/pkg/version.Version=${VERSION}" -o /out/ ./cmd/...

FROM debian:trixie-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends lvm2 fio \
 # a comment inside the continuation, which Docker drops
 && sed -i -e 's/^\(\s*\)# udev_sync = 1/\1udev_sync = 0/' -e "s/a b/c/" /etc/lvm/lvm.conf
COPY --from=build /out/a /out/b /usr/bin/
ENV DM_DISABLE_UDEV=1 NOTE="two words"
USER 1:2
ENTRYPOINT ["/usr/bin/a", "--flag"]
`

func TestParseDockerfile(t *testing.T) {
	df, err := ParseDockerfile(sampleDockerfile)
	if err != nil {
		t.Fatal(err)
	}
	want := &Dockerfile{
		BaseImage: "debian:trixie-slim",
		Suite:     "trixie",
		RunScripts: []string{`apt-get update  && apt-get install -y --no-install-recommends lvm2 fio  && ` +
			`sed -i -e 's/^\(\s*\)# udev_sync = 1/\1udev_sync = 0/' -e "s/a b/c/" /etc/lvm/lvm.conf`},
		Packages:   []string{"lvm2", "fio"},
		SedEdits:   []SedEdit{{File: "/etc/lvm/lvm.conf", Expressions: []string{`s/^\(\s*\)# udev_sync = 1/\1udev_sync = 0/`, "s/a b/c/"}}},
		Binaries:   []string{"a", "b"},
		BinDir:     "/usr/bin",
		Env:        []string{"DM_DISABLE_UDEV=1", "NOTE=two words"},
		User:       "1:2",
		Entrypoint: []string{"/usr/bin/a", "--flag"},
		GoLDFlags:  "-s -w -X github.com/ssdcache/ssdcache/pkg/version.Version=${VERSION}",
	}
	if !reflect.DeepEqual(df, want) {
		t.Errorf("parsed\n%#v\nwant\n%#v", df, want)
	}
}

func TestParseDockerfileRejectsWhatTheBuilderCannotReproduce(t *testing.T) {
	final := "FROM golang AS build\nFROM debian:bookworm-slim\nRUN apt-get install -y fio\nCOPY --from=build /out/a /usr/bin/\nENTRYPOINT [\"/a\"]\n"
	cases := map[string]struct{ text, wantErr string }{
		"WORKDIR":           {final + "WORKDIR /x\n", "instruction WORKDIR"},
		"legacy ENV":        {final + "ENV A b\n", "KEY=VALUE"},
		"COPY from context": {strings.Replace(final, "COPY --from=build /out/a", "COPY a", 1), "only COPY --from"},
		"shell ENTRYPOINT":  {strings.Replace(final, `["/a"]`, "/a", 1), "JSON (exec) form"},
		"not debian":        {strings.Replace(final, "debian:bookworm-slim", "alpine:3", 1), "debian:<suite>"},
		"sed option":        {final + "RUN sed -E -i -e s/a/b/ /f\n", `sed option "-E"`},
		"no packages":       {strings.Replace(final, "apt-get install -y fio", "true", 1), "installs no packages"},
		"one stage":         {"FROM debian:bookworm\n", "found 1 FROM stages"},
		"open quote":        {final + "RUN sed -i -e 's/a/b /f\n", "unterminated ' quote"},
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

func TestShellWords(t *testing.T) {
	got, err := shellWords(`a 'b c' "d \"e\" \n" f\ g`)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a", "b c", `d "e" \n`, "f g"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestRootfsCacheKeyFollowsTheDockerfile(t *testing.T) {
	df, err := ParseDockerfile(sampleDockerfile)
	if err != nil {
		t.Fatal(err)
	}
	o := Options{CacheDir: "/c", DebianMirror: DefaultDebianMirror, DebianSecurityMirror: DefaultDebianSecurityMirror}
	base := planRootfs(o, df).cachePath
	if !strings.HasPrefix(base, "/c/e2e/images/rootfs-trixie-") || !strings.HasSuffix(base, ".tar") {
		t.Errorf("cache path %q, want /c/e2e/images/rootfs-trixie-<hash>.tar", base)
	}
	changed, err := ParseDockerfile(strings.Replace(sampleDockerfile, "lvm2 fio", "lvm2 fio xfsprogs", 1))
	if err != nil {
		t.Fatal(err)
	}
	if planRootfs(o, changed).cachePath == base {
		t.Error("adding a package did not change the cached layer's name")
	}
	o.DebianMirror = "http://mirror.example/debian"
	if planRootfs(o, df).cachePath == base {
		t.Error("changing the mirror did not change the cached layer's name")
	}
}
