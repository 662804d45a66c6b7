package main

import (
	"github.com/spf13/cobra"

	"github.com/podflow/podflow/ops/processes/up"
)

func init() { register(newNodeCmd) }

// newNodeCmd is `podflow node`: the hosts of a cluster of several
// machines.
func newNodeCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "node", Short: "Manage the hosts of a cluster of several machines"}
	cmd.AddCommand(newNodeRemoveCmd())
	return cmd
}

func newNodeRemoveCmd() *cobra.Command {
	o := &clientOptions{}
	cmd := &cobra.Command{
		Use:   "remove HOST",
		Short: "Remove a host from the cluster: its store replica, its NATS server, its nodes",
		Long: `Remove a host of a cluster of several machines, stopped first: its store
replica leaves the raft configuration (RemoveServer), the first server
removes its NATS server from the JetStream meta group, and its Nodes, their
Leases and its host record are deleted. A server can also leave by itself:
stop its podflow up, then run podflow up --leave there.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sess, _, err := o.session(cmd.Context())
			if err != nil {
				return err
			}
			defer sess.Close()
			return up.RemoveHost(cmd.Context(), sess.Bus, sess.Store.Client(), args[0], cmd.OutOrStdout())
		},
	}
	o.flags(cmd)
	return cmd
}
