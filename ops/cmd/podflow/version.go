package main

import (
	"runtime"
	"time"

	"github.com/spf13/cobra"

	"github.com/podflow/podflow/ops/client"
	"github.com/podflow/podflow/ops/console"
	"github.com/podflow/podflow/services/apiserver"
	"github.com/podflow/podflow/services/stage"
)

func init() { register(newVersionCmd) }

func newVersionCmd() *cobra.Command {
	var clientOnly bool
	var config string
	var output dataOutput
	cmd := &cobra.Command{
		Use:   "version",
		Short: "The client's version, the running system's and each of its processes'",
		Long: `Print podflow's version (and the Kubernetes API version it serves) for the
client, and with a running system its server (the api stage's replicas)
and every process answering the stages' ping, with its PID and start
time: a process still running an older build shows here. --client skips
the system.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := output.validate(); err != nil {
				return err
			}
			rep := client.VersionReport{Client: client.VersionInfo{Podflow: stage.BuildVersion(), Kubernetes: apiserver.KubernetesVersion(), Platform: runtime.GOOS + "/" + runtime.GOARCH}}
			var sysErr error
			if !clientOnly {
				ctx := cmd.Context()
				sess, err := openCLI(ctx, config, "podflow-version")
				if err != nil {
					sysErr = err
				} else {
					defer sess.Close()
					for _, p := range console.Ping(ctx, sess.Bus.NATS(), 500*time.Millisecond) {
						rep.Components = append(rep.Components, client.ComponentInfo{Stage: p.Stage, Replica: p.Replica, PID: p.PID, Version: p.Version, Started: p.Started})
						if p.Stage == "api" && rep.Server == nil {
							rep.Server = &client.VersionInfo{Podflow: p.Version, Kubernetes: apiserver.KubernetesVersion(), Platform: rep.Client.Platform}
						}
					}
				}
			}
			out := cmd.OutOrStdout()
			if done, err := output.print(out, rep); done {
				if err == nil {
					err = sysErr
				}
				return err
			}
			if err := rep.Print(out); err != nil {
				return err
			}
			return sysErr
		},
	}
	configFlag(cmd, &config)
	outputFlag(cmd, &output)
	cmd.Flags().BoolVar(&clientOnly, "client", false, "print the client's version only")
	return cmd
}
