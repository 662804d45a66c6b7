package main

import (
	"context"
	"fmt"
	"io"
	"math"

	"github.com/spf13/cobra"

	"github.com/podflow/podflow/ops/client"
	"github.com/podflow/podflow/ops/console"
	"github.com/podflow/podflow/ops/processes/plan"
)

func init() { register(newConsoleCmd) }

func newConsoleCmd() *cobra.Command {
	o := &clientOptions{}
	var listen, tokens string
	cmd := &cobra.Command{
		Use:   "console",
		Short: "Serve the live web console of a running system on loopback",
		Long: `Serve the web console (ops/console) against the running system of the
client configuration: the pipeline of stages with their backlog and replicas,
the pods with the stuck ones first, a pod's journey as a waterfall, and the
nodes, updated live. ` + "`podflow up`" + ` serves one too and prints its address.

It answers on loopback only, read-only, to the bearer tokens of the Kubernetes
API's token file (DATA/tokens.csv; the admin's token is in config.json), sent
as "Authorization: Bearer" or typed into its login form.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			// Fail fast when nothing answers, as every command; once
			// connected, ride out restarts of the bus for as long as
			// the console serves.
			cli := client.DefaultCLI()
			cli.MaxReconnects = math.MaxInt32
			sess, err := client.OpenCLI(ctx, o.config, "podflow-console", cli)
			if err != nil {
				return err
			}
			defer sess.Close()
			return runConsole(ctx, sess, listen, tokens, cmd.OutOrStdout())
		},
	}
	configFlag(cmd, &o.config)
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:8089", "loopback address to serve on")
	cmd.Flags().StringVar(&tokens, "token-file", "", "token file of the accepted tokens (default: DATA/tokens.csv of the configuration)")
	return cmd
}

// runConsole serves the console on listen until ctx is done.
func runConsole(ctx context.Context, sess *client.Session, listen, tokens string, out io.Writer) error {
	l, err := console.Listen(listen)
	if err != nil {
		return err
	}
	layout := plan.Layout{Dir: sess.Config.DataDir}
	if tokens == "" {
		tokens = layout.Tokens()
	}
	fmt.Fprintf(out, "console: http://%s/ (log in with a token of %s)\n", l.Addr(), tokens)
	src := &console.BusSource{Sess: sess, MetricsFile: layout.Metrics(),
		Journals: []string{layout.Processes(), layout.Faults()}}
	return console.Serve(ctx, l, src, console.TokenFile(tokens))
}
