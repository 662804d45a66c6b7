package simshell

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/interp"
	"mvdan.cc/sh/v3/syntax"
)

// Container is what a command runs in.
type Container struct {
	Key            Key
	Namespace, Pod string
	IP             string
	// Env is the container's environment (NAME=VALUE), as the agent
	// resolved it; HOSTNAME, HOME and PATH are added when missing.
	Env []string
	// Files are the read-only files it sees (path → content: its
	// volumes' files under their mount paths, /etc/hostname, …) and
	// ReadOnly the directories nothing may be written under.
	Files    map[string][]byte
	ReadOnly []string
}

// Net answers the HTTP requests of wget inside the simulated cluster.
type Net interface {
	// Get fetches url from a pod of namespace (names resolve as the
	// cluster DNS resolves them there). An error is what wget prints.
	Get(ctx context.Context, namespace, url string) ([]byte, error)
}

// Shell runs commands in simulated containers: the commands below, over
// each container's simulated filesystem (FS) and the cluster's simulated
// network (Net); any other command is refused at once with a clear
// message and exit code 127. Scripts (sh -c, an interactive sh) run in a
// POSIX shell interpreter (mvdan.cc/sh), so variables, ;, &&, ||, pipes,
// redirections, if, for and while work.
type Shell struct {
	FS  *FS
	Net Net // nil: wget refuses
	// Sleep waits d or until ctx ends (nil: the wall clock).
	Sleep func(ctx context.Context, d time.Duration) error
}

// IO is a command's standard streams; Stdin nil is /dev/null.
type IO struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	TTY            bool
}

// Commands lists the commands the shell runs besides the shell's own
// builtins (echo, printf, test, cd, pwd, read, export, exit, …).
func Commands() []string {
	out := make([]string, 0, len(commands))
	for name := range commands {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// cmdEnv is what a command runs with.
type cmdEnv struct {
	sh      *Shell
	c       *Container
	v       *View
	dir     string
	env     expand.Environ
	stdin   io.Reader
	out, eo io.Writer
	tty     bool
}

type command func(ctx context.Context, e *cmdEnv, args []string) int

var commands map[string]command

func init() {
	commands = map[string]command{
		"cat": cmdCat, "ls": cmdLs, "env": cmdEnvironment, "printenv": cmdPrintenv, "sleep": cmdSleep,
		"hostname": cmdHostname, "wget": cmdWget, "mkdir": cmdMkdir, "rm": cmdRm, "touch": cmdTouch,
		"date": cmdDate, "uname": cmdUname, "id": cmdID, "whoami": cmdWhoami, "head": cmdHead, "tail": cmdTail,
		"wc": cmdWc, "tar": cmdTar, "sh": cmdSh, "ash": cmdSh, "bash": cmdSh, "true": cmdTrue, "false": cmdFalse,
		"echo": cmdBuiltin, "test": cmdBuiltin, "[": cmdBuiltin, "pwd": cmdBuiltin, "printf": cmdBuiltin,
	}
}

// notSimulated are commands of a real image the runtime does not run.
func notFound(e *cmdEnv, name string) int {
	fmt.Fprintf(e.eo, "sh: %s: command not found (podflow's simulated runtime runs: %s)\n", name, strings.Join(Commands(), " "))
	return 127
}

// env is the environment of c's processes.
func (c *Container) environ() []string {
	env := slices.Clone(c.Env)
	has := func(k string) bool {
		return slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, k+"=") })
	}
	if !has("HOSTNAME") {
		env = append(env, "HOSTNAME="+c.Pod)
	}
	if !has("HOME") {
		env = append(env, "HOME=/root")
	}
	if !has("PATH") {
		env = append(env, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	}
	return env
}

func (s *Shell) newEnv(c *Container, st IO) *cmdEnv {
	out, eo := st.Stdout, st.Stderr
	if out == nil {
		out = io.Discard
	}
	if eo == nil {
		eo = out
	}
	return &cmdEnv{sh: s, c: c, v: s.FS.View(c.Key, c.Files, c.ReadOnly), dir: "/",
		env: expand.ListEnviron(c.environ()...), stdin: st.Stdin, out: out, eo: eo, tty: st.TTY}
}

// Exec runs argv in container c (kubectl exec) and returns its exit code.
func (s *Shell) Exec(ctx context.Context, c *Container, argv []string, st IO) int {
	if len(argv) == 0 {
		return 0
	}
	e := s.newEnv(c, st)
	if st.TTY {
		e.out = crlf(e.out)
		e.eo = e.out
	}
	return e.run(ctx, argv)
}

// run runs one command.
func (e *cmdEnv) run(ctx context.Context, argv []string) int {
	name := path.Base(argv[0])
	cmd, ok := commands[name]
	if !ok {
		return notFound(e, argv[0])
	}
	return cmd(ctx, e, argv)
}

// Program returns what a container with command argv (its command and
// args, or the image's default: sh for busybox, alpine, debian and
// ubuntu) runs, or nil when the shell cannot run it: a command it does
// not know, or a script calling one. stdin says whether the container
// has a stdin (an interactive sh without one exits at once, as with
// /dev/null).
func (s *Shell) Program(c *Container, image string, argv []string) func(ctx context.Context, st IO) int {
	if len(argv) == 0 {
		argv = ImageDefault(image)
	}
	if len(argv) == 0 {
		return nil
	}
	name := path.Base(argv[0])
	if _, ok := commands[name]; !ok {
		return nil
	}
	if isShell(name) {
		script, ok := shScript(argv[1:])
		if ok && !runnable(script) {
			return nil
		}
	}
	return func(ctx context.Context, st IO) int { return s.Exec(ctx, c, argv, st) }
}

// ImageDefault is the default command of the images whose default the
// runtime knows (a shell), nil for any other.
func ImageDefault(image string) []string {
	repo := image
	if i := strings.LastIndexByte(repo, '/'); i >= 0 {
		repo = repo[i+1:]
	}
	repo, _, _ = strings.Cut(repo, "@")
	repo, _, _ = strings.Cut(repo, ":")
	switch repo {
	case "busybox", "alpine", "debian", "ubuntu", "bash":
		return []string{"sh"}
	}
	return nil
}

func isShell(name string) bool { return name == "sh" || name == "ash" || name == "bash" }

// shScript is the script of `sh -c SCRIPT …`.
func shScript(args []string) (string, bool) {
	for i, a := range args {
		if a == "-c" && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

// runnable reports whether script parses and every command it calls by a
// literal name is a builtin or one of the shell's commands.
func runnable(script string) bool {
	f, err := syntax.NewParser().Parse(strings.NewReader(script), "")
	if err != nil {
		return false
	}
	ok := true
	syntax.Walk(f, func(n syntax.Node) bool {
		ce, isCall := n.(*syntax.CallExpr)
		if !isCall || len(ce.Args) == 0 {
			return true
		}
		name := ce.Args[0].Lit()
		if name == "" {
			return true // computed: decided when it runs
		}
		if _, known := commands[path.Base(name)]; !known && !interp.IsBuiltin(name) {
			ok = false
		}
		return ok
	})
	return ok
}

// newRunner is an interpreter whose commands are the shell's and whose
// files are the container's.
func (e *cmdEnv) newRunner(stdin io.Reader, params []string) (*interp.Runner, error) {
	opts := []interp.RunnerOption{
		interp.Env(e.env),
		interp.Dir(e.dir),
		interp.StdIO(stdin, e.out, e.eo),
		interp.ExecHandlers(func(interp.ExecHandlerFunc) interp.ExecHandlerFunc {
			return func(ctx context.Context, args []string) error {
				hc := interp.HandlerCtx(ctx)
				sub := *e
				sub.dir, sub.env, sub.out, sub.eo = hc.Dir, hc.Env, hc.Stdout, hc.Stderr
				sub.stdin = hc.Stdin
				if f, ok := hc.Stdin.(*os.File); ok && f == nil {
					sub.stdin = nil
				}
				if code := sub.run(ctx, args); code != 0 {
					return interp.ExitStatus(uint8(code))
				}
				return nil
			}
		}),
		interp.OpenHandler(e.open),
		interp.StatHandler(e.statFile),
		interp.ReadDirHandler2(e.readDir),
	}
	if len(params) > 0 {
		opts = append(opts, interp.Params(append([]string{"--"}, params...)...))
	}
	return interp.New(opts...)
}

// exitCode is the status of an interpreter's run.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if es, ok := errors.AsType[interp.ExitStatus](err); ok {
		return int(es)
	}
	return 1
}

// script runs src (sh -c) with positional params.
func (e *cmdEnv) script(ctx context.Context, src string, params []string) int {
	f, err := syntax.NewParser().Parse(strings.NewReader(src), "")
	if err != nil {
		fmt.Fprintf(e.eo, "sh: syntax error: %v\n", err)
		return 2
	}
	r, err := e.newRunner(e.stdin, params)
	if err != nil {
		fmt.Fprintf(e.eo, "sh: %v\n", err)
		return 2
	}
	err = r.Run(ctx, f)
	if ctx.Err() != nil {
		return 130
	}
	if err != nil && !isStatus(err) {
		fmt.Fprintf(e.eo, "sh: %v\n", err)
	}
	return exitCode(err)
}

func isStatus(err error) bool {
	_, ok := errors.AsType[interp.ExitStatus](err)
	return ok
}

// cmdSh is sh: `sh -c SCRIPT [NAME ARGS…]`, or an interactive shell on
// stdin (none: it exits 0 at once, as on /dev/null).
func cmdSh(ctx context.Context, e *cmdEnv, args []string) int {
	if script, ok := shScript(args[1:]); ok {
		var params []string
		for i, a := range args {
			if a == "-c" && i+2 < len(args) {
				params = args[i+3:]
			}
		}
		return e.script(ctx, script, params)
	}
	if len(args) > 1 && !strings.HasPrefix(args[1], "-") {
		b, err := e.v.ReadFile(Clean(e.dir, args[1]))
		if err != nil {
			fmt.Fprintf(e.eo, "sh: can't open '%s': %v\n", args[1], err)
			return 2
		}
		return e.script(ctx, string(b), args[2:])
	}
	if e.stdin == nil {
		return 0
	}
	return e.interactive(ctx)
}

// crlf writes \n as \r\n, as a terminal's output processing does.
func crlf(w io.Writer) io.Writer {
	if _, ok := w.(crlfWriter); ok {
		return w
	}
	return crlfWriter{w}
}

type crlfWriter struct{ w io.Writer }

func (c crlfWriter) Write(b []byte) (int, error) {
	if _, err := c.w.Write([]byte(strings.ReplaceAll(strings.ReplaceAll(string(b), "\r\n", "\n"), "\n", "\r\n"))); err != nil {
		return 0, err
	}
	return len(b), nil
}
