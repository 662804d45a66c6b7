package main

import (
	"fmt"
	"runtime"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/podflow/podflow/ops/client"
	"github.com/podflow/podflow/ops/console"
	"github.com/podflow/podflow/services/apiserver"
	"github.com/podflow/podflow/services/stage"
)

func init() { register(newVersionCmd) }

// versionReport is what `podflow version` prints.
type versionReport struct {
	Client     versionInfo     `json:"clientVersion"`
	Server     *versionInfo    `json:"serverVersion,omitempty"`
	Components []componentInfo `json:"components,omitempty"`
}

type versionInfo struct {
	Podflow    string `json:"podflow"`
	Kubernetes string `json:"kubernetes"`
	Platform   string `json:"platform"`
}

type componentInfo struct {
	Stage   string    `json:"stage"`
	Replica string    `json:"replica"`
	PID     int       `json:"pid"`
	Version string    `json:"version"`
	Started time.Time `json:"started"`
}

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
			rep := versionReport{Client: versionInfo{Podflow: stage.BuildVersion(), Kubernetes: apiserver.KubernetesVersion(), Platform: runtime.GOOS + "/" + runtime.GOARCH}}
			var sysErr error
			if !clientOnly {
				ctx := cmd.Context()
				sess, err := openCLI(ctx, config, "podflow-version")
				if err != nil {
					sysErr = err
				} else {
					defer sess.Close()
					for _, p := range console.Ping(ctx, sess.Bus.NATS(), 500*time.Millisecond) {
						rep.Components = append(rep.Components, componentInfo{Stage: p.Stage, Replica: p.Replica, PID: p.PID, Version: p.Version, Started: p.Started})
						if p.Stage == "api" && rep.Server == nil {
							rep.Server = &versionInfo{Podflow: p.Version, Kubernetes: apiserver.KubernetesVersion(), Platform: rep.Client.Platform}
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
			fmt.Fprintf(out, "Client Version: podflow %s, Kubernetes API %s, %s\n", rep.Client.Podflow, rep.Client.Kubernetes, rep.Client.Platform)
			if rep.Server != nil {
				fmt.Fprintf(out, "Server Version: podflow %s, Kubernetes API %s\n", rep.Server.Podflow, rep.Server.Kubernetes)
			}
			if len(rep.Components) > 0 {
				fmt.Fprintln(out)
				tw := tabwriter.NewWriter(out, 2, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "STAGE\tREPLICA\tPID\tVERSION\tUP")
				for _, c := range rep.Components {
					fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", c.Stage, c.Replica, c.PID, c.Version, client.HumanDuration(time.Since(c.Started)))
				}
				tw.Flush()
			}
			return sysErr
		},
	}
	configFlag(cmd, &config)
	outputFlag(cmd, &output)
	cmd.Flags().BoolVar(&clientOnly, "client", false, "print the client's version only")
	return cmd
}
