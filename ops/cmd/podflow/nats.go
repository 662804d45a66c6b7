package main

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/ops/processes/roles"
)

func init() { register(newNATSCmd) }

// newNATSCmd runs the embedded NATS JetStream server as its own process, so
// that `podflow up` can supervise it and chaos can kill it like any role.
func newNATSCmd() *cobra.Command {
	cfg := bus.DefaultEmbeddedConfig("")
	var clientConfig, routes, tags string
	var tlsFiles bus.TLSFiles
	cmd := &cobra.Command{
		Use:   "nats",
		Short: "Run the embedded NATS JetStream server",
		Long: `Run podflow's embedded NATS server with JetStream (file storage under
--data-dir). Clients authenticate with credentials generated at first start
and kept in DATA-DIR/creds.json; --client-config writes the URL and admin
credentials for other podflow processes.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if routes != "" {
				cfg.Routes = strings.Split(routes, ",")
			}
			if tags != "" {
				cfg.Tags = strings.Split(tags, ",")
			}
			if tlsFiles != (bus.TLSFiles{}) {
				var err error
				if cfg.TLS, cfg.ClusterTLS, err = roles.NATSTLS(tlsFiles); err != nil {
					return err
				}
			}
			return roles.NATS(cmd.Context(), cfg, clientConfig, tlsFiles)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DataDir, "data-dir", "", "directory for JetStream data and credentials")
	f.StringVar(&cfg.Host, "host", cfg.Host, "address to listen on")
	f.IntVar(&cfg.Port, "port", 4222, "client port (0 picks a free one)")
	f.BoolVar(&cfg.SyncAlways, "sync-always", false, "fsync every JetStream write before acknowledging it")
	f.StringVar(&cfg.ServerName, "server-name", "podflow", "server name (unique within a cluster)")
	f.StringVar(&cfg.ClusterName, "cluster-name", "", "join a NATS cluster of this name (JetStream clustering)")
	f.IntVar(&cfg.ClusterPort, "cluster-port", 0, "port for route connections from the other servers")
	f.StringVar(&routes, "routes", "", "the other servers' routes, e.g. nats-route://127.0.0.1:6223,nats-route://127.0.0.1:6224")
	f.StringVar(&cfg.ClusterAdvertise, "cluster-advertise", "", "the route address told to the other servers (dialled only when they learn of this one by gossip); podflow chaos sets one that refuses, so that every route runs through its relays")
	f.StringVar(&tags, "tags", "", "server tags (comma-separated): streams placed by tag land only on servers with them")
	f.StringVar(&cfg.CredsPath, "creds", "", "credentials file shared by the servers of a cluster (default DATA-DIR/creds.json)")
	f.BoolVar(&cfg.Log, "log", true, "log to stderr (start-up, and every publish or subscription a user's permissions refuse)")
	f.StringVar(&clientConfig, "client-config", "", "write the client configuration (URL, admin credentials) to this file")
	f.StringVar(&tlsFiles.CAFile, "tls-ca", "", "CA certificate (PEM): clients must present a certificate it signed (TLSVerify), routes one of group "+bus.ServerGroup)
	f.StringVar(&tlsFiles.CertFile, "tls-cert", "", "server certificate (PEM, server and client auth, group "+bus.ServerGroup+") for the client and route listeners")
	f.StringVar(&tlsFiles.KeyFile, "tls-key", "", "key (PEM) of --tls-cert")
	return cmd
}
