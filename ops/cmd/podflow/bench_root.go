package main

import "github.com/spf13/cobra"

// benchCommands are the `podflow bench` subcommands, registered by their
// own files with registerBench.
var benchCommands []func() *cobra.Command

func registerBench(f func() *cobra.Command) { benchCommands = append(benchCommands, f) }

func init() {
	registerBench(newBenchPipelineCmd)
	register(func() *cobra.Command {
		cmd := &cobra.Command{
			Use:   "bench",
			Short: "Benchmarks: medians and percentiles, never pass/fail",
		}
		for _, f := range benchCommands {
			cmd.AddCommand(f())
		}
		return cmd
	})
}
