package client

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// VersionReport is what `podflow version` prints (-o json|yaml as is).
type VersionReport struct {
	Client     VersionInfo     `json:"clientVersion"`
	Server     *VersionInfo    `json:"serverVersion,omitempty"`
	Components []ComponentInfo `json:"components,omitempty"`
}

// VersionInfo is one side's build: podflow's version, the Kubernetes API
// version it serves, and the platform.
type VersionInfo struct {
	Podflow    string `json:"podflow"`
	Kubernetes string `json:"kubernetes"`
	Platform   string `json:"platform"`
}

// ComponentInfo is one process that answered the stages' ping.
type ComponentInfo struct {
	Stage   string    `json:"stage"`
	Replica string    `json:"replica"`
	PID     int       `json:"pid"`
	Version string    `json:"version"`
	Started time.Time `json:"started"`
}

// Print writes the report as kubectl version does, then a table of the
// components.
func (rep VersionReport) Print(out io.Writer) error {
	fmt.Fprintf(out, "Client Version: podflow %s, Kubernetes API %s, %s\n", rep.Client.Podflow, rep.Client.Kubernetes, rep.Client.Platform)
	if rep.Server != nil {
		fmt.Fprintf(out, "Server Version: podflow %s, Kubernetes API %s\n", rep.Server.Podflow, rep.Server.Kubernetes)
	}
	if len(rep.Components) == 0 {
		return nil
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 2, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STAGE\tREPLICA\tPID\tVERSION\tUP")
	for _, c := range rep.Components {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", c.Stage, c.Replica, c.PID, c.Version, HumanDuration(time.Since(c.Started)))
	}
	return tw.Flush()
}
