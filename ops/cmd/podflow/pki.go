package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/podflow/podflow/ops/processes/up"
)

func init() { register(newPKICmd) }

// newPKICmd issues the transports' certificates of a cluster of several
// machines from the cluster CA (`podflow up` writes DATA/pki/ca.crt and
// ca.key; with --init a new CA is created).
func newPKICmd() *cobra.Command {
	var caDir, kind, name, hosts, out string
	var initCA bool
	cmd := &cobra.Command{Use: "pki", Short: "Issue the certificates of NATS servers, raft peers and bus clients"}
	issue := &cobra.Command{
		Use:   "issue",
		Short: "Issue one certificate and key (PEM) signed by the cluster CA",
		Example: `  podflow pki issue --ca-dir /etc/podflow/pki --init --kind nats-server --name host1 --hosts 10.0.0.1,host1 --out /etc/podflow/pki/nats-host1
  podflow pki issue --ca-dir /etc/podflow/pki --kind raft-peer --name store-1 --hosts 10.0.0.1,host1 --out /etc/podflow/pki/raft-store-1
  podflow pki issue --ca-dir /etc/podflow/pki --kind bus-client --name stage-scheduler --out /etc/podflow/pki/bus-stage-scheduler`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var hs []string
			if hosts != "" {
				hs = strings.Split(hosts, ",")
			}
			r, err := up.IssueCert(caDir, initCA, kind, name, hs, out)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s.crt %s.key (%s, CN %s)\n", out, out, kind, r.CommonName)
			return nil
		},
	}
	f := issue.Flags()
	f.StringVar(&caDir, "ca-dir", ".podflow/pki", "directory of the cluster CA (ca.crt, ca.key)")
	f.BoolVar(&initCA, "init", false, "create the CA when the directory has none")
	f.StringVar(&kind, "kind", "", "nats-server, raft-peer or bus-client")
	f.StringVar(&name, "name", "", "the host, replica or role the certificate names")
	f.StringVar(&hosts, "hosts", "", "comma-separated IP addresses and DNS names of a nats-server or raft-peer certificate")
	f.StringVar(&out, "out", "", "path prefix of the files written: PREFIX.crt, PREFIX.key (kept if they exist)")
	cmd.AddCommand(issue)
	return cmd
}
