package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/apiserver/pki"
)

func init() { register(newPKICmd) }

// certKinds are the certificates `podflow pki issue` makes: what each
// proves and to whom (see docs/multi-machine.md).
var certKinds = map[string]struct {
	prefix string
	group  string
	peer   bool
}{
	"nats-server": {"podflow:nats:", bus.ServerGroup, true},     // a NATS server: clients and routes
	"raft-peer":   {"podflow:raft:", raftstore.PeerGroup, true}, // a store replica's raft transport
	"bus-client":  {"podflow:bus:", "", false},                  // a process's NATS client (CN its role)
}

// certRequest is the certificate of kind (a key of certKinds) for name.
func certRequest(kind, name string, hosts []string) pki.Request {
	k := certKinds[kind]
	r := pki.Request{CommonName: k.prefix + name, Hosts: hosts, Server: k.peer, Peer: k.peer}
	if k.group != "" {
		r.Groups = []string{k.group}
	}
	return r
}

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
			k, ok := certKinds[kind]
			if !ok {
				return fmt.Errorf("--kind %q: want nats-server, raft-peer or bus-client", kind)
			}
			if name == "" || out == "" {
				return errors.New("--name and --out are required")
			}
			var hs []string
			if hosts != "" {
				hs = strings.Split(hosts, ",")
			}
			if k.peer && len(hs) == 0 {
				return fmt.Errorf("a %s certificate needs --hosts (the addresses its peers dial)", kind)
			}
			certFile, keyFile := filepath.Join(caDir, "ca.crt"), filepath.Join(caDir, "ca.key")
			ca, err := pki.LoadCA(certFile, keyFile)
			if errors.Is(err, os.ErrNotExist) && initCA {
				if err = os.MkdirAll(caDir, 0o700); err == nil {
					if ca, err = pki.NewCA("podflow-ca"); err == nil {
						err = ca.WriteFiles(certFile, keyFile)
					}
				}
			}
			if err != nil {
				return fmt.Errorf("cluster CA in %q: %w", caDir, err)
			}
			r := certRequest(kind, name, hs)
			if err := issueOnce(ca, out+".crt", out+".key", r); err != nil {
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
