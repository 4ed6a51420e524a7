package images

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// Dockerfile holds what the image builder reproduces from the final stage
// of the repository's Dockerfile. It is read on every build so the OCI
// image and the Docker image cannot drift apart silently.
type Dockerfile struct {
	// Suite is the Debian release of FROM debian:<suite>[-slim].
	Suite string
	// Binaries are the base names COPY'd from the build stage into BinDir;
	// each is built from ./cmd/<name>.
	Binaries []string
	BinDir   string
	// Env (KEY=VALUE, in order), User and Entrypoint are the image's config.
	Env        []string
	User       string
	Entrypoint []string

	steps []string // RUN and COPY from the build context
}

// rootfsSteps must be the final stage's only RUN and COPY from the build
// context: hack/image/debian.sh does just this in its chroot.
var rootfsSteps = []string{"COPY hack/image/rootfs.sh /tmp/", "RUN /tmp/rootfs.sh && rm /tmp/rootfs.sh"}

// readDockerfile parses repoRoot/Dockerfile.
func readDockerfile(repoRoot string) (*Dockerfile, error) {
	p := filepath.Join(repoRoot, "Dockerfile")
	text, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	df, err := parseDockerfile(string(text))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return df, nil
}

// parseDockerfile reads the final stage of a Dockerfile. It rejects
// instructions there that the builder does not reproduce, so a new WORKDIR
// or RUN fails the build instead of being silently missing from the e2e
// image. Continuation lines are not joined: one in the final stage is
// rejected as an unknown instruction.
func parseDockerfile(text string) (*Dockerfile, error) {
	var final []string
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case l == "" || strings.HasPrefix(l, "#"):
		case strings.HasPrefix(strings.ToUpper(l), "FROM "):
			final = []string{l}
		default:
			final = append(final, l)
		}
	}
	df := &Dockerfile{}
	for _, l := range final {
		if err := df.parse(l); err != nil {
			return nil, fmt.Errorf("final stage: %w", err)
		}
	}
	switch {
	case df.Suite == "":
		return nil, fmt.Errorf("no FROM debian:<suite>")
	case !slices.Equal(df.steps, rootfsSteps):
		return nil, fmt.Errorf("final stage: RUN and COPY %q, want %q, which hack/image/debian.sh reproduces; teach it the change", df.steps, rootfsSteps)
	case len(df.Binaries) == 0 || len(df.Entrypoint) == 0:
		return nil, fmt.Errorf("final stage: want binaries COPY'd from the build stage and an ENTRYPOINT")
	}
	return df, nil
}

func (df *Dockerfile) parse(line string) error {
	cmd, args, _ := strings.Cut(line, " ")
	args = strings.TrimSpace(args)
	switch strings.ToUpper(cmd) {
	case "FROM":
		image, _, _ := strings.Cut(args, " ")
		repo, tag, _ := strings.Cut(image, ":")
		if repo != "debian" && repo != "docker.io/library/debian" || tag == "" {
			return fmt.Errorf("FROM %s: want debian:<suite>[-slim], which debootstrap recreates", args)
		}
		df.Suite = strings.TrimSuffix(tag, "-slim")
	case "ARG":
	case "RUN":
		df.steps = append(df.steps, line)
	case "COPY":
		if !strings.HasPrefix(args, "--from=") {
			df.steps = append(df.steps, line)
			return nil
		}
		return df.parseBinaries(args)
	case "USER":
		df.User = args
	case "ENV":
		for _, w := range strings.Fields(args) {
			if k, _, ok := strings.Cut(w, "="); !ok || k == "" || strings.ContainsAny(w, `"'\$`) {
				return fmt.Errorf("ENV %s: want unquoted KEY=VALUE words", args)
			}
			df.Env = append(df.Env, w)
		}
	case "ENTRYPOINT":
		if err := json.Unmarshal([]byte(args), &df.Entrypoint); err != nil {
			return fmt.Errorf("ENTRYPOINT %s: want the JSON (exec) form: %w", args, err)
		}
	default:
		return fmt.Errorf("%s is not reproduced by test/e2e/images (FROM, ARG, RUN, COPY, ENV, USER, ENTRYPOINT are); teach the builder about it", line)
	}
	return nil
}

// parseBinaries reads "COPY --from=<stage> SRC... DIR/", the binaries.
func (df *Dockerfile) parseBinaries(args string) error {
	w := strings.Fields(args)
	if len(w) < 3 || !strings.HasSuffix(w[len(w)-1], "/") || df.BinDir != "" {
		return fmt.Errorf("COPY %s: want one COPY --from=<stage> SRC... DIR/", args)
	}
	df.BinDir = path.Clean(w[len(w)-1])
	for _, src := range w[1 : len(w)-1] {
		df.Binaries = append(df.Binaries, path.Base(src))
	}
	return nil
}
