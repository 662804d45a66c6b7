package container

import (
	"fmt"
	"os"
)

// The helper protocol between Start, the shim and the init. The role and
// the container directory travel in the environment (the init builds the
// command's environment from the spec, so they never reach the container).
const (
	envRole = "_PODFLOW_CONTAINER_ROLE"
	envDir  = "_PODFLOW_CONTAINER_DIR"
	// envGo set: the init or exec helper has a go pipe (cgroup v1) to
	// wait on (awaitGo), on initGoFD or execGoFD.
	envGo = "_PODFLOW_CONTAINER_GO"

	roleShim = "shim"
	roleInit = "init"
	roleExec = "exec"
)

// RunHelper runs the shim, init, exec or PID namespace holder role when this process was re-exec'd as
// one, and then exits the process; otherwise it returns false at once. Call
// it first thing in main (and TestMain), before any goroutine is started.
func RunHelper() bool {
	role := os.Getenv(envRole)
	if role == "" {
		return false
	}
	dir := os.Getenv(envDir)
	var err error
	switch role {
	case roleShim:
		err = runShim(dir)
	case roleInit:
		runInit(dir) // exits or execs
	case roleExec:
		runExec(dir) // exits or execs
	case roleHolder:
		err = runHolder(dir) // returns only on error
	default:
		err = fmt.Errorf("unknown helper role %q", role)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "podflow container %s: %v\n", role, err)
		os.Exit(1)
	}
	os.Exit(0)
	return true
}
