package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
)

// ProfileDirEnv names a directory in which every podflow process started
// with it in its environment (and its children: `podflow up` passes its
// environment on) writes a CPU profile of its whole life, as
// <role>-<pid>.pprof. `podflow bench pipeline --profile-dir` sets it.
const ProfileDirEnv = "PODFLOW_CPUPROFILE_DIR"

// StartProfile starts that profile when the environment asks for one; the
// returned stop writes it out (a process killed with SIGKILL leaves an
// empty file).
func StartProfile(args []string) (stop func()) {
	dir := os.Getenv(ProfileDirEnv)
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d.pprof", profileName(args), os.Getpid())))
	if err != nil {
		fmt.Fprintln(os.Stderr, "cpu profile:", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintln(os.Stderr, "cpu profile:", err)
		f.Close()
		return func() {}
	}
	return func() { pprof.StopCPUProfile(); f.Close() }
}

// profileName is the role of a command line: its leading words up to the
// first flag ("stage-scheduler"), and the replica's or node's name when a
// flag gives it ("stage-scheduler-scheduler-1", "store-store-2").
func profileName(args []string) string {
	var words []string
	for i, a := range args {
		if strings.HasPrefix(a, "-") {
			break
		}
		words = append(words, args[i])
	}
	for i, a := range args[:max(len(args)-1, 0)] {
		switch a {
		case "--replica", "--node", "--server-name", "--name", "--id":
			words = append(words, args[i+1])
		}
	}
	if len(words) == 0 {
		return "podflow"
	}
	return strings.Map(func(r rune) rune {
		if r == '/' || r == ' ' || r == os.PathSeparator {
			return '_'
		}
		return r
	}, strings.Join(words, "-"))
}
