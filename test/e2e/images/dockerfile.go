package images

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Dockerfile holds what the image builder reproduces from the final stage
// of the repository's Dockerfile. It is read on every build so the OCI
// image and the Docker image cannot drift apart silently.
type Dockerfile struct {
	// Suite is the Debian release of FROM debian:<suite>[-slim].
	Suite string
	// Steps are the final stage's RUNs and COPYs from the build context, in
	// order; RUNs run verbatim in the chroot.
	Steps []Step
	// Binaries are the base names COPY'd from the build stage into BinDir;
	// each is built from ./cmd/<name>.
	Binaries []string
	BinDir   string
	// Env (KEY=VALUE, in order), User and Entrypoint are the image's config.
	Env        []string
	User       string
	Entrypoint []string
}

// Step is a RUN (shell form, run with /bin/sh -c in the chroot) or a COPY of
// one file from the build context: Src (relative to the repository root) to
// Dest in the image, with the file's Data and Mode. Its JSON is part of the
// cached Debian layer's name.
type Step struct {
	Run       string      `json:",omitempty"`
	Src, Dest string      `json:",omitempty"`
	Data      string      `json:",omitempty"`
	Mode      os.FileMode `json:",omitempty"`
}

func (s Step) String() string {
	if s.Run != "" {
		return "RUN " + s.Run
	}
	return "COPY " + s.Src + " " + s.Dest
}

// readDockerfile parses repoRoot/Dockerfile and reads the files its COPY
// steps take from the build context.
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
	for i, s := range df.Steps {
		if s.Src == "" {
			continue
		}
		st, err := os.Stat(filepath.Join(repoRoot, s.Src))
		if err != nil {
			return nil, fmt.Errorf("%s: COPY %s: %w", p, s.Src, err)
		}
		data, err := os.ReadFile(filepath.Join(repoRoot, s.Src))
		if err != nil {
			return nil, fmt.Errorf("%s: COPY %s: %w", p, s.Src, err)
		}
		df.Steps[i].Data, df.Steps[i].Mode = string(data), st.Mode().Perm()
	}
	return df, nil
}

// parseDockerfile reads the final stage of a Dockerfile. It rejects
// instructions there that the builder does not reproduce, so a new WORKDIR
// fails the build instead of being silently missing from the e2e image.
func parseDockerfile(text string) (*Dockerfile, error) {
	lines := logicalLines(text)
	final := -1
	for i, l := range lines {
		if strings.HasPrefix(strings.ToUpper(l), "FROM ") {
			final = i
		}
	}
	if final < 0 {
		return nil, fmt.Errorf("no FROM")
	}
	df := &Dockerfile{}
	for _, l := range lines[final:] {
		if err := df.parse(l); err != nil {
			return nil, fmt.Errorf("final stage: %w", err)
		}
	}
	if len(df.Binaries) == 0 || len(df.Entrypoint) == 0 {
		return nil, fmt.Errorf("final stage: want binaries COPY'd from the build stage and an ENTRYPOINT")
	}
	return df, nil
}

// logicalLines joins continuation lines and drops comments, as Docker does:
// a comment line inside a continued RUN is removed, not passed to the shell.
func logicalLines(text string) []string {
	var out []string
	cur := ""
	for _, raw := range strings.Split(text, "\n") {
		l := strings.TrimSpace(raw)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if head, ok := strings.CutSuffix(l, `\`); ok {
			cur += head + " "
			continue
		}
		out = append(out, cur+l)
		cur = ""
	}
	return out
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
		if strings.HasPrefix(args, "[") || strings.HasPrefix(args, "--") {
			return fmt.Errorf("RUN %s: want the shell form without flags", args)
		}
		df.Steps = append(df.Steps, Step{Run: args})
	case "COPY":
		return df.parseCopy(args)
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

// parseCopy accepts "COPY --from=<stage> SRC... DIR/" (the binaries) and
// "COPY FILE /DEST" (one file from the build context, e.g. a script to RUN).
func (df *Dockerfile) parseCopy(args string) error {
	w := strings.Fields(args)
	if len(w) == 2 && filepath.IsLocal(w[0]) && path.IsAbs(w[1]) {
		dest := w[1]
		if strings.HasSuffix(dest, "/") {
			dest = path.Join(dest, path.Base(w[0]))
		}
		df.Steps = append(df.Steps, Step{Src: path.Clean(w[0]), Dest: path.Clean(dest)})
		return nil
	}
	if len(w) < 3 || !strings.HasPrefix(w[0], "--from=") || !strings.HasSuffix(w[len(w)-1], "/") || df.BinDir != "" {
		return fmt.Errorf("COPY %s: want one COPY --from=<stage> SRC... DIR/ (binaries) and COPY FILE /DEST (one file from the context)", args)
	}
	df.BinDir = path.Clean(w[len(w)-1])
	for _, src := range w[1 : len(w)-1] {
		df.Binaries = append(df.Binaries, path.Base(src))
	}
	return nil
}
