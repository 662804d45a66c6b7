// Command conformance is podflow's conformance harness: it starts podflow,
// loads the e2e images into podflow's registry, runs the upstream
// Kubernetes e2e suite's [Conformance] tests against it one test per
// process with a per-test timeout, and prints the table of results.
//
//	conformance run     start podflow, push the images, run the tests, report
//	conformance images  build the e2e images and push them to a registry
//	conformance report  print the table of the JUnit reports of a finished run
//
// `make conformance` builds everything and runs `conformance run`; see
// docs/conformance.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "run":
		err = runRun(ctx, os.Args[2:])
	case "images":
		err = runImages(ctx, os.Args[2:])
	case "report":
		err = runReport(os.Args[2:])
	case "-h", "--help", "help":
		usage()
		return
	default:
		usage()
		os.Exit(2)
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
		os.Exit(2)
	case errors.Is(err, errTestsFailed):
		os.Exit(1)
	case err != nil:
		fmt.Fprintf(os.Stderr, "conformance: %v\n", err)
		os.Exit(3)
	}
}

func usage() {
	fmt.Fprint(os.Stderr, `usage: conformance run|images|report [flags]   (-h for each command's flags)

  run     start podflow, push the e2e images, run the [Conformance] tests, report
  images  build the e2e images and push them to a registry
  report  print the table of the JUnit reports of a finished run (OUT/junit)
`)
}
