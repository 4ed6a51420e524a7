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
// of the repository's Dockerfile. It is read from the file on every build so
// the OCI image and the Docker image cannot drift apart silently. RUN
// commands are not interpreted: they run verbatim in the chroot, and the
// script they run (hack/image/rootfs.sh) is COPY'd from the repository.
type Dockerfile struct {
	// BaseImage is the final stage's FROM, e.g. "debian:bookworm-slim".
	BaseImage string
	// Suite is the Debian release the base image is built from ("bookworm").
	Suite string
	// Steps are the final stage's RUNs and COPYs from the build context, in order.
	Steps []Step
	// Binaries are the base names the final stage copies from the build
	// stage; each is built from ./cmd/<name>.
	Binaries []string
	// BinDir is where the binaries are copied to ("/usr/local/bin").
	BinDir string
	// Env are the final stage's ENV settings as KEY=VALUE, in order.
	Env []string
	// User and Entrypoint are the final stage's USER and ENTRYPOINT.
	User       string
	Entrypoint []string
}

// Step is a RUN (shell form, run with /bin/sh -c in the chroot) or a COPY of
// one file from the build context: Src (relative to the repository root) to
// Dest in the image, with the file's Data and Mode (see readDockerfile).
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

// instruction is one logical Dockerfile line.
type instruction struct {
	line int // 1-based line of the instruction's first physical line
	cmd  string
	args string
}

// readDockerfile parses repoRoot/Dockerfile and reads the files its COPY
// steps take from the build context.
func readDockerfile(repoRoot string) (*Dockerfile, error) {
	p := filepath.Join(repoRoot, "Dockerfile")
	text, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	df, err := ParseDockerfile(string(text))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	for i, s := range df.Steps {
		if s.Src == "" {
			continue
		}
		src := filepath.Join(repoRoot, s.Src)
		st, err := os.Stat(src)
		if err != nil {
			return nil, fmt.Errorf("%s: COPY %s: %w", p, s.Src, err)
		}
		data, err := os.ReadFile(src)
		if err != nil {
			return nil, fmt.Errorf("%s: COPY %s: %w", p, s.Src, err)
		}
		df.Steps[i].Data, df.Steps[i].Mode = string(data), st.Mode().Perm()
	}
	return df, nil
}

// ParseDockerfile reads the final stage of a multi-stage Dockerfile (a Go
// build stage, then a Debian final stage). It rejects final-stage
// instructions the builder cannot reproduce, so a new WORKDIR fails the
// parser test instead of being silently missing from the e2e image.
func ParseDockerfile(text string) (*Dockerfile, error) {
	stages := splitStages(logicalLines(text))
	if len(stages) < 2 {
		return nil, fmt.Errorf("Dockerfile: found %d FROM stages, want a build stage and a final stage", len(stages))
	}
	df := &Dockerfile{}
	for _, in := range stages[len(stages)-1] {
		if err := df.parse(in); err != nil {
			return nil, fmt.Errorf("Dockerfile line %d: %w", in.line, err)
		}
	}
	switch {
	case df.Suite == "":
		return nil, fmt.Errorf("Dockerfile: final stage has no FROM debian:<suite>")
	case len(df.Binaries) == 0:
		return nil, fmt.Errorf("Dockerfile: final stage copies no binaries")
	case len(df.Entrypoint) == 0:
		return nil, fmt.Errorf("Dockerfile: final stage has no ENTRYPOINT")
	}
	return df, nil
}

// logicalLines joins continuation lines and drops comments, as Docker does:
// a comment line inside a continued RUN is removed, not passed to the shell.
func logicalLines(text string) []instruction {
	var out []instruction
	var cur strings.Builder
	start := 0
	for i, raw := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(raw)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		if strings.HasSuffix(trimmed, `\`) {
			cur.WriteString(strings.TrimSuffix(trimmed, `\`) + " ")
			continue
		}
		cur.WriteString(trimmed)
		out = append(out, newInstruction(start, cur.String()))
		cur.Reset()
	}
	if cur.Len() > 0 {
		out = append(out, newInstruction(start, cur.String()))
	}
	return out
}

func newInstruction(line int, s string) instruction {
	cmd, args, _ := strings.Cut(s, " ")
	return instruction{line: line, cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)}
}

// splitStages groups instructions by FROM; ARGs before the first FROM are
// dropped (they only parameterise FROM lines).
func splitStages(ins []instruction) [][]instruction {
	var stages [][]instruction
	for _, in := range ins {
		if in.cmd == "FROM" {
			stages = append(stages, nil)
		}
		if len(stages) > 0 {
			stages[len(stages)-1] = append(stages[len(stages)-1], in)
		}
	}
	return stages
}

func (df *Dockerfile) parse(in instruction) error {
	switch in.cmd {
	case "FROM":
		return df.parseFrom(in.args)
	case "ARG":
	case "RUN":
		if strings.HasPrefix(in.args, "[") || strings.HasPrefix(in.args, "--") {
			return fmt.Errorf("RUN %q: only the shell form without flags is supported", in.args)
		}
		df.Steps = append(df.Steps, Step{Run: in.args})
	case "COPY":
		return df.parseCopy(in.args)
	case "USER":
		df.User = in.args
	case "ENV":
		for _, w := range strings.Fields(in.args) {
			if k, _, ok := strings.Cut(w, "="); !ok || k == "" || strings.ContainsAny(w, `"'\$`) {
				return fmt.Errorf("ENV %q: only unquoted KEY=VALUE words are supported", in.args)
			}
			df.Env = append(df.Env, w)
		}
	case "ENTRYPOINT":
		if err := json.Unmarshal([]byte(in.args), &df.Entrypoint); err != nil {
			return fmt.Errorf("ENTRYPOINT %q: only the JSON (exec) form is supported: %w", in.args, err)
		}
	default:
		return fmt.Errorf("instruction %s in the final stage is not reproduced by test/e2e/images (supported: FROM, ARG, RUN, COPY, ENV, USER, ENTRYPOINT); teach the builder about it", in.cmd)
	}
	return nil
}

// parseFrom accepts debian:<suite> and debian:<suite>-slim, the images the
// builder can recreate with debootstrap.
func (df *Dockerfile) parseFrom(args string) error {
	df.BaseImage = strings.Fields(args)[0]
	repo, tag, ok := strings.Cut(df.BaseImage, ":")
	if !ok || (repo != "debian" && repo != "docker.io/library/debian") {
		return fmt.Errorf("FROM %q: the final stage must be debian:<suite>[-slim]", df.BaseImage)
	}
	df.Suite = strings.TrimSuffix(tag, "-slim")
	return nil
}

// parseCopy accepts "COPY --from=<stage> SRC... DIR/" (the binaries) and
// "COPY FILE /DEST" (one file from the build context, e.g. a script to RUN).
func (df *Dockerfile) parseCopy(args string) error {
	words := strings.Fields(args)
	if len(words) == 2 && filepath.IsLocal(words[0]) && path.IsAbs(words[1]) {
		dest := words[1]
		if strings.HasSuffix(dest, "/") {
			dest = path.Join(dest, path.Base(words[0]))
		}
		df.Steps = append(df.Steps, Step{Src: path.Clean(words[0]), Dest: path.Clean(dest)})
		return nil
	}
	if len(words) < 3 || !strings.HasPrefix(words[0], "--from=") {
		return fmt.Errorf("COPY %q: only COPY --from=<stage> SRC... DIR/ (binaries from the build stage) and COPY FILE /DEST (one file from the context) are supported", args)
	}
	dest := words[len(words)-1]
	if !strings.HasSuffix(dest, "/") {
		return fmt.Errorf("COPY %q: destination %q must be a directory ending in /", args, dest)
	}
	if df.BinDir != "" && df.BinDir != path.Clean(dest) {
		return fmt.Errorf("COPY %q: binaries go to %s and %s; one directory is supported", args, df.BinDir, dest)
	}
	df.BinDir = path.Clean(dest)
	for _, src := range words[1 : len(words)-1] {
		df.Binaries = append(df.Binaries, path.Base(src))
	}
	return nil
}
