package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/ops/client"
	"github.com/podflow/podflow/ops/processes/roles"
	"github.com/podflow/podflow/raftstore"
)

// podflow store: run a raftstore replica and administer the cluster.
func init() {
	register(func() *cobra.Command {
		var conn storeConnFlags
		cmd := &cobra.Command{
			Use:   "store",
			Short: "Run and administer raftstore, podflow's replicated state store",
		}
		conn.add(cmd)
		cmd.AddCommand(storeRunCmd(&conn), storeStatusCmd(&conn), storeAddVoterCmd(&conn), storeRemoveCmd(&conn), storeRewriteEncryptedCmd(&conn))
		return cmd
	})
}

// storeConnFlags is how a store command reaches the bus. A replica (`store
// run`, as `podflow up` starts it) names its NATS server and user with
// flags or PODFLOW_NATS_*; the administration commands find the running
// system through the client configuration, as every client command does,
// unless given a NATS URL or user.
type storeConnFlags struct {
	url, user, password, subject, config string
	cmd                                  *cobra.Command
	// tls: the CA of the bus's and the raft peers' certificates, and this
	// process's bus client certificate (NATS over TLS when tls.CAFile is set).
	tls bus.TLSFiles
}

func (f *storeConnFlags) add(cmd *cobra.Command) {
	f.cmd = cmd
	url := os.Getenv("PODFLOW_NATS_URL")
	if url == "" {
		url = nats.DefaultURL
	}
	cmd.PersistentFlags().StringVar(&f.url, "nats-url", url, "NATS server URL (env PODFLOW_NATS_URL; status, add-voter and remove default to the client configuration's)")
	cmd.PersistentFlags().StringVar(&f.user, "nats-user", os.Getenv("PODFLOW_NATS_USER"), "NATS user (env PODFLOW_NATS_USER)")
	cmd.PersistentFlags().StringVar(&f.password, "nats-password", os.Getenv("PODFLOW_NATS_PASSWORD"), "NATS password (env PODFLOW_NATS_PASSWORD)")
	cmd.PersistentFlags().StringVar(&f.subject, "subject", raftstore.DefaultSubject, "store subject prefix")
	cmd.PersistentFlags().StringVar(&f.config, "config", "", "client configuration written by 'podflow up' (default $PODFLOW_CONFIG, ./.podflow/config.json, ~/.podflow/config.json)")
	cmd.PersistentFlags().StringVar(&f.tls.CAFile, "tls-ca", "", "CA certificate (PEM) of the NATS servers and raft peers: dial NATS over TLS")
	cmd.PersistentFlags().StringVar(&f.tls.CertFile, "nats-tls-cert", "", "client certificate (PEM) presented to NATS (with --tls-ca)")
	cmd.PersistentFlags().StringVar(&f.tls.KeyFile, "nats-tls-key", "", "key (PEM) of --nats-tls-cert")
}

// explicit reports whether the bus was named by flags or environment
// rather than by the client configuration.
func (f *storeConnFlags) explicit() bool {
	pf := f.cmd.PersistentFlags()
	return pf.Changed("nats-url") || pf.Changed("nats-user") || os.Getenv("PODFLOW_NATS_URL") != "" || os.Getenv("PODFLOW_NATS_USER") != ""
}

// connect dials the bus the flags name, trying for up to ten seconds.
func (f *storeConnFlags) connect(ctx context.Context, name string) (*bus.Conn, error) {
	cfg := bus.DefaultConfig()
	cfg.Name, cfg.URLs, cfg.User, cfg.Password, cfg.TLSFiles = name, strings.Split(f.url, ","), f.user, f.password, f.tls
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return bus.Connect(ctx, cfg)
}

// client connects a store client for the administration commands; closeFn
// ends its connection.
func (f *storeConnFlags) client(ctx context.Context) (c *raftstore.Client, closeFn func(), err error) {
	const name = "podflow store client"
	var nc *nats.Conn
	sc := raftstore.DefaultClientConfig()
	if f.explicit() {
		bc, err := f.connect(ctx, name)
		if err != nil {
			return nil, nil, err
		}
		nc, closeFn = bc.NATS(), bc.Close
	} else {
		sess, err := openCLI(ctx, f.config, name)
		if err != nil {
			return nil, nil, err
		}
		nc, closeFn = sess.Bus.NATS(), sess.Close
		if bc, err := bus.ReadClientConfig(sess.Config.NATS); err == nil {
			sc = client.StoreClientConfig(bc.User)
		}
	}
	sc.Subject = f.subject
	if c, err = raftstore.NewClient(nc, sc); err != nil {
		closeFn()
		return nil, nil, err
	}
	return c, closeFn, nil
}

func storeRunCmd(conn *storeConnFlags) *cobra.Command {
	cfg := raftstore.DefaultConfig()
	var bootstrap, peerAddrs, logLevel, raftCert, raftKey, raftCA, encConfig string
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run one store replica until interrupted",
		Example: `  podflow store run --id s1 --data-dir /var/lib/podflow/s1 --raft-addr 127.0.0.1:7001 \
    --raft-tls-ca pki/ca.crt --raft-tls-cert pki/raft-s1.crt --raft-tls-key pki/raft-s1.key \
    --bootstrap s1=127.0.0.1:7001,s2=127.0.0.1:7002,s3=127.0.0.1:7003 --nats-url nats://127.0.0.1:4222
  podflow store run --id s4 --data-dir /var/lib/podflow/s4 --raft-addr 127.0.0.1:7004 --join \
    --raft-tls-ca pki/ca.crt --raft-tls-cert pki/raft-s4.crt --raft-tls-key pki/raft-s4.key`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			peers, err := raftstore.ParsePeers(bootstrap)
			if err != nil {
				return err
			}
			cfg.Bootstrap = peers
			dials, err := raftstore.ParsePeers(peerAddrs)
			if err != nil {
				return fmt.Errorf("--peer-addrs: %w", err)
			}
			for _, p := range dials {
				if cfg.PeerAddrs == nil {
					cfg.PeerAddrs = map[string]string{}
				}
				cfg.PeerAddrs[p.ID] = p.Address
			}
			cfg.Subject = conn.subject
			if raftCA == "" {
				raftCA = conn.tls.CAFile
			}
			if raftCert == "" || raftKey == "" || raftCA == "" {
				return fmt.Errorf("--raft-tls-cert, --raft-tls-key and --raft-tls-ca (or --tls-ca) are required: raft speaks mutual TLS only, on loopback too (podflow pki issue --kind raft-peer)")
			}
			if cfg.TLS, err = raftstore.MutualTLS(raftstore.TLSFiles{CertFile: raftCert, KeyFile: raftKey, CAFile: raftCA}, raftstore.PeerGroup); err != nil {
				return err
			}
			if encConfig != "" {
				if cfg.Encryption, err = raftstore.LoadEncryptionConfig(encConfig); err != nil {
					return err
				}
			}
			cfg.LogLevel = logLevel
			bc, err := conn.connect(cmd.Context(), "podflow store "+cfg.ID)
			if err != nil {
				return err
			}
			// A replica that stops has nothing to flush: its writes are in raft.
			defer bc.NATS().Close()
			return roles.StoreReplica(cmd.Context(), cfg, bc.NATS(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.ID, "id", "", "replica ID, stable across restarts (required)")
	f.StringVar(&cfg.DataDir, "data-dir", "", "directory of the raft log, stable store and snapshots (required)")
	f.StringVar(&cfg.RaftAddr, "raft-addr", "127.0.0.1:7001", "raft TCP bind address")
	f.StringVar(&cfg.AdvertiseAddr, "advertise-addr", "", "raft address peers dial (default: the bind address)")
	f.StringVar(&raftCert, "raft-tls-cert", "", "raft peer certificate (PEM, group "+raftstore.PeerGroup+", server and client auth): mutual TLS between replicas, verified against --raft-tls-ca (required)")
	f.StringVar(&raftKey, "raft-tls-key", "", "key (PEM) of --raft-tls-cert (required)")
	f.StringVar(&raftCA, "raft-tls-ca", "", "CA certificate (PEM) of the raft peers' certificates (default --tls-ca)")
	f.StringVar(&encConfig, "encryption-provider-config", "", "EncryptionConfiguration file (kube-apiserver's, mode 0600): values of the resources it names (secrets) are encrypted at rest with its first provider's key (secretbox, aesgcm or identity); every replica needs the same file")
	f.StringVar(&bootstrap, "bootstrap", "", "initial voters id1=addr1,id2=addr2,... (used only on an empty data dir)")
	f.StringVar(&peerAddrs, "peer-addrs", "", "dial these peers here instead of at their raft address, id1=addr1,... (podflow chaos routes each link through its fault-injecting relay)")
	joinUsage := "on an empty data dir, ask the running cluster to add this replica"
	deprecatedAlias(f, "join", "join-existing", func(f *pflag.FlagSet) {
		f.BoolVar(&cfg.Join, "join-existing", false, joinUsage)
		f.BoolVar(&cfg.Join, "join", false, joinUsage)
	})
	f.Int64Var(&cfg.HistoryRevisions, "history-revisions", cfg.HistoryRevisions, "revisions of change history kept for watches")
	f.DurationVar(&cfg.HeartbeatTimeout, "heartbeat-timeout", cfg.HeartbeatTimeout, "raft heartbeat timeout")
	f.DurationVar(&cfg.ElectionTimeout, "election-timeout", cfg.ElectionTimeout, "raft election timeout")
	f.Uint64Var(&cfg.SnapshotThreshold, "snapshot-threshold", cfg.SnapshotThreshold, "log entries between snapshots, at least: a replica raises it with its state's size (docs/store.md)")
	f.StringVar(&logLevel, "log-level", "warn", "raft log level (trace, debug, info, warn, error)")
	_ = cmd.MarkFlagRequired("id")
	_ = cmd.MarkFlagRequired("data-dir")
	return cmd
}

func storeStatusCmd(conn *storeConnFlags) *cobra.Command {
	var wait time.Duration
	var output dataOutput
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the leader, term, commit and applied indexes and every replica's state",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := output.validate(); err != nil {
				return err
			}
			c, closeConn, err := conn.client(cmd.Context())
			if err != nil {
				return err
			}
			defer closeConn()
			ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Second)
			defer cancel()
			sts, err := c.Status(ctx, wait)
			if err != nil {
				return err
			}
			if done, err := output.print(cmd.OutOrStdout(), map[string]any{"replicas": sts}); done {
				return err
			}
			return client.PrintStoreStatus(cmd.OutOrStdout(), sts)
		},
	}
	cmd.Flags().DurationVar(&wait, "timeout", 500*time.Millisecond, "how long to wait for every replica to answer")
	outputFlag(cmd, &output)
	deprecatedAlias(cmd.Flags(), "wait", "timeout", func(f *pflag.FlagSet) { f.DurationVar(&wait, "wait", 500*time.Millisecond, "") })
	return cmd
}

func storeAddVoterCmd(conn *storeConnFlags) *cobra.Command {
	var nonvoter bool
	cmd := &cobra.Command{
		Use:   "add-voter ID ADDR",
		Short: "Add a voting replica (its raft address host:port) to the cluster, or promote a non-voter",
		Long: `Add a voting replica, or promote a non-voter. With --nonvoter, add a non-voter
(it gets every write and serves stale reads, but neither votes nor counts for
a quorum), as etcd's learners: a replica that catches up before it votes, or
a fourth or sixth replica beyond an odd number of voters.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, closeConn, err := conn.client(cmd.Context())
			if err != nil {
				return err
			}
			defer closeConn()
			add, what := c.AddVoter, "voter"
			if nonvoter {
				add, what = c.AddNonvoter, "non-voter"
			}
			if err := add(cmd.Context(), args[0], args[1]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "added %s %s at %s\n", what, args[0], args[1])
			return nil
		},
	}
	cmd.Flags().BoolVar(&nonvoter, "nonvoter", false, "add a non-voter (it does not vote nor count for a quorum)")
	return cmd
}

func storeRemoveCmd(conn *storeConnFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "remove ID",
		Short: "Remove a replica from the cluster",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, closeConn, err := conn.client(cmd.Context())
			if err != nil {
				return err
			}
			defer closeConn()
			if err := c.RemoveServer(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "removed %s\n", args[0])
			return nil
		},
	}
}

func storeRewriteEncryptedCmd(conn *storeConnFlags) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "rewrite-encrypted",
		Short: "Rewrite every value encrypted at rest with the first key of the replicas' encryption configuration",
		Long: `Rewrite every value under the store's encryption configuration that is not
sealed with its first provider's key: the step of a key rotation between making
the new key first on every replica and dropping the old one (as kube-apiserver's
"kubectl get secrets -A -o json | kubectl replace -f -").`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, closeConn, err := conn.client(cmd.Context())
			if err != nil {
				return err
			}
			defer closeConn()
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			n, err := c.RewriteEncrypted(ctx)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "rewrote %d values\n", n)
			return nil
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "how long to wait for the rewrite")
	return cmd
}
