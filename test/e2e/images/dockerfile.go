package images

import (
	"encoding/json"
	"fmt"
	"path"
	"strings"
)

// Dockerfile holds what the image builder reproduces from the repository's
// Dockerfile. It is read from the file on every build so the OCI image and
// the Docker image cannot drift apart silently.
type Dockerfile struct {
	// BaseImage is the final stage's FROM, e.g. "debian:bookworm-slim".
	BaseImage string
	// Suite is the Debian release the base image is built from ("bookworm").
	Suite string
	// RunScripts are the final stage's RUN commands (shell form) in order,
	// comment lines removed; the builder runs them verbatim in the chroot.
	RunScripts []string
	// Packages are the arguments of every "apt-get install" in RunScripts.
	Packages []string
	// SedEdits are the "sed -i" edits in RunScripts.
	SedEdits []SedEdit
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
	// GoLDFlags is the -ldflags value of the build stage's "go build",
	// with ${VERSION} left unexpanded.
	GoLDFlags string
}

// SedEdit is one "sed -i -e EXPR [-e EXPR...] FILE" command.
type SedEdit struct {
	File        string
	Expressions []string
}

// instruction is one logical Dockerfile line.
type instruction struct {
	line int // 1-based line of the instruction's first physical line
	cmd  string
	args string
}

// ParseDockerfile reads the facts the image builder needs from the text of
// a two-stage Dockerfile (a Go build stage and a Debian final stage). It
// rejects final-stage instructions the builder cannot reproduce, so a new
// WORKDIR or COPY from the context fails the parser test instead of being
// silently missing from the e2e image.
func ParseDockerfile(text string) (*Dockerfile, error) {
	stages := splitStages(logicalLines(text))
	if len(stages) < 2 {
		return nil, fmt.Errorf("Dockerfile: found %d FROM stages, want a build stage and a final stage", len(stages))
	}
	df := &Dockerfile{}
	if err := df.parseBuildStages(stages[:len(stages)-1]); err != nil {
		return nil, err
	}
	if err := df.parseFinalStage(stages[len(stages)-1]); err != nil {
		return nil, err
	}
	return df, df.validate()
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

// parseBuildStages finds the -ldflags of the build stages' "go build".
func (df *Dockerfile) parseBuildStages(stages [][]instruction) error {
	for _, stage := range stages {
		for _, in := range stage {
			if in.cmd != "RUN" || !strings.Contains(in.args, "go build") {
				continue
			}
			words, err := shellWords(in.args)
			if err != nil {
				return fmt.Errorf("Dockerfile line %d: RUN %q: %w", in.line, in.args, err)
			}
			for i, w := range words {
				if w == "-ldflags" && i+1 < len(words) {
					df.GoLDFlags = words[i+1]
				} else if v, ok := strings.CutPrefix(w, "-ldflags="); ok {
					df.GoLDFlags = v
				}
			}
		}
	}
	return nil
}

func (df *Dockerfile) parseFinalStage(stage []instruction) error {
	for _, in := range stage {
		var err error
		switch in.cmd {
		case "FROM":
			err = df.parseFrom(in.args)
		case "ARG":
		case "RUN":
			err = df.parseRun(in.args)
		case "COPY":
			err = df.parseCopy(in.args)
		case "USER":
			df.User = in.args
		case "ENV":
			err = df.parseEnv(in.args)
		case "ENTRYPOINT":
			err = json.Unmarshal([]byte(in.args), &df.Entrypoint)
			if err != nil {
				err = fmt.Errorf("ENTRYPOINT %q: only the JSON (exec) form is supported: %w", in.args, err)
			}
		default:
			err = fmt.Errorf("instruction %s in the final stage is not reproduced by test/e2e/images (supported: FROM, ARG, RUN, COPY --from, ENV, USER, ENTRYPOINT); teach the builder about it", in.cmd)
		}
		if err != nil {
			return fmt.Errorf("Dockerfile line %d: %w", in.line, err)
		}
	}
	return nil
}

// parseEnv takes the KEY=VALUE form (values may be quoted); the legacy
// "ENV KEY VALUE" form is refused rather than guessed at.
func (df *Dockerfile) parseEnv(args string) error {
	words, err := shellWords(args)
	if err != nil {
		return fmt.Errorf("ENV %q: %w", args, err)
	}
	for _, w := range words {
		if k, _, ok := strings.Cut(w, "="); !ok || k == "" {
			return fmt.Errorf("ENV %q: only the KEY=VALUE form is supported", args)
		}
		df.Env = append(df.Env, w)
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

// parseRun records the RUN script and the apt-get install and sed -i
// commands in it; other commands run verbatim and need no parsing.
func (df *Dockerfile) parseRun(script string) error {
	df.RunScripts = append(df.RunScripts, script)
	for _, command := range splitAndList(script) {
		words, err := shellWords(command)
		if err != nil {
			return fmt.Errorf("RUN %q: %w", command, err)
		}
		switch {
		case len(words) > 1 && words[0] == "apt-get" && words[1] == "install":
			df.Packages = append(df.Packages, nonFlags(words[2:])...)
		case len(words) > 0 && words[0] == "sed":
			edit, err := parseSed(words[1:])
			if err != nil {
				return fmt.Errorf("RUN %q: %w", command, err)
			}
			df.SedEdits = append(df.SedEdits, edit)
		}
	}
	return nil
}

func nonFlags(words []string) []string {
	var out []string
	for _, w := range words {
		if !strings.HasPrefix(w, "-") {
			out = append(out, w)
		}
	}
	return out
}

// parseSed accepts "sed -i -e EXPR ... FILE", the only form the Dockerfile uses.
func parseSed(args []string) (SedEdit, error) {
	var edit SedEdit
	inPlace := false
	for i := 0; i < len(args); i++ {
		switch {
		case args[i] == "-i":
			inPlace = true
		case args[i] == "-e" && i+1 < len(args):
			edit.Expressions = append(edit.Expressions, args[i+1])
			i++
		case strings.HasPrefix(args[i], "-"):
			return edit, fmt.Errorf("sed option %q is not supported (allowed: -i, -e EXPR)", args[i])
		case edit.File != "":
			return edit, fmt.Errorf("sed edits one file, got %q and %q", edit.File, args[i])
		default:
			edit.File = args[i]
		}
	}
	if !inPlace || edit.File == "" || len(edit.Expressions) == 0 {
		return edit, fmt.Errorf("sed %q: want sed -i -e EXPR... FILE", strings.Join(args, " "))
	}
	return edit, nil
}

// parseCopy accepts "COPY --from=<stage> SRC... DIR/": the binaries.
func (df *Dockerfile) parseCopy(args string) error {
	words := strings.Fields(args)
	if len(words) < 3 || !strings.HasPrefix(words[0], "--from=") {
		return fmt.Errorf("COPY %q: only COPY --from=<stage> SRC... DIR/ (binaries from the build stage) is supported", args)
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

func (df *Dockerfile) validate() error {
	switch {
	case df.Suite == "":
		return fmt.Errorf("Dockerfile: final stage has no FROM debian:<suite>")
	case len(df.Packages) == 0:
		return fmt.Errorf("Dockerfile: final stage installs no packages with apt-get install")
	case len(df.Binaries) == 0:
		return fmt.Errorf("Dockerfile: final stage copies no binaries")
	case len(df.Entrypoint) == 0:
		return fmt.Errorf("Dockerfile: final stage has no ENTRYPOINT")
	}
	return nil
}

// splitAndList splits a shell script at top-level "&&" and ";".
func splitAndList(script string) []string {
	var out []string
	var cur strings.Builder
	var quote rune
	flush := func() {
		if s := strings.TrimSpace(cur.String()); s != "" {
			out = append(out, s)
		}
		cur.Reset()
	}
	rs := []rune(script)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote == 0 && (r == '\'' || r == '"'):
			quote = r
		case quote == 0 && r == '&' && i+1 < len(rs) && rs[i+1] == '&':
			flush()
			i++
			continue
		case quote == 0 && r == ';':
			flush()
			continue
		}
		cur.WriteRune(r)
	}
	flush()
	return out
}

// shellWords splits one simple command into words with POSIX quoting
// (single quotes literal, double quotes and backslash escapes).
func shellWords(command string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote rune
	rs := []rune(command)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case quote == '\'' && r == '\'', quote == '"' && r == '"':
			quote = 0
		case quote == '\'':
			cur.WriteRune(r)
		case r == '\\' && i+1 < len(rs) && (quote == 0 || strings.ContainsRune(`"\$`+"`", rs[i+1])):
			i++
			cur.WriteRune(rs[i])
		case quote == '"':
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated %c quote", quote)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}
