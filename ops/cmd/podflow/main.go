// Command podflow is every podflow process role and client in one binary:
// store replicas, lifecycle stages, node agents, the registry, `up` (the
// whole system as supervised child processes) and the client commands.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/podflow/podflow/nodeagent/linux/container"
	"github.com/podflow/podflow/ops/bench"
	"github.com/podflow/podflow/ops/client"
)

// commands are registered by the files of this package, one role or client
// command per file, through register.
var commands []func() *cobra.Command

func register(f func() *cobra.Command) { commands = append(commands, f) }

// requestTimeout is the global --request-timeout, as kubectl's: it bounds
// every request of a client command (see clientOptions.session).
var requestTimeout string

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "podflow",
		Short:         "The Kubernetes pod-creation lifecycle as a distributed actor system",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&requestTimeout, "request-timeout", "0",
		"the length of time to wait before giving up on a single server request, e.g. 1s, 2m (a bare integer is seconds); 0 keeps each request's default")
	for _, f := range commands {
		root.AddCommand(f())
	}
	return root
}

func main() {
	// A re-exec'd container shim or init runs its role and exits here,
	// before any command or goroutine starts.
	if container.RunHelper() {
		return
	}
	setGC()
	stopProfile := bench.StartProfile(os.Args[1:])
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRoot().ExecuteContext(ctx)
	stop()
	stopProfile()
	if err != nil {
		printError(os.Stderr, err)
		os.Exit(exitCode(err))
	}
}

// printError prints a command's error as kubectl does: an error from the
// server as it is (`Error from server (NotFound): ...`), any other after
// "error: "; nothing for an error that says it was reported already.
func printError(w io.Writer, err error) {
	var se *client.StatusError
	switch s, ok := err.(interface{ Silent() bool }); {
	case ok && s.Silent():
	case errors.As(err, &se):
		fmt.Fprintln(w, err)
	default:
		fmt.Fprintln(w, "error:", err)
	}
}

// exitCoder lets a command choose its exit status (kubectl exits 1 on any
// error; podflow chaos exits 2 on an invariant violation, for instance).
type exitCoder interface{ ExitCode() int }

func exitCode(err error) int {
	if ec, ok := err.(exitCoder); ok {
		return ec.ExitCode()
	}
	return 1
}
