package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/podflow/podflow/ops/processes/join"
	"github.com/podflow/podflow/ops/processes/plan"
)

func init() { register(newTokenCmd) }

// newTokenCmd is `podflow token`: the join tokens of a cluster of several
// machines.
func newTokenCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Manage the join tokens of a cluster of several machines",
	}
	cmd.AddCommand(newTokenCreateCmd())
	return cmd
}

func newTokenCreateCmd() *cobra.Command {
	o := &clientOptions{}
	var ttl time.Duration
	var agent bool
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a join token (podflow up --join ADDR --token T)",
		Long: `Create a join token for podflow up --join, as kubeadm token create: a
bootstrap token stored as the Secret kube-system/bootstrap-token-<id>, valid
for --ttl, prefixed with the hash of the cluster CA so that the joiner
verifies the cluster it joins. --agent makes a token that joins node agents
only (up --join --agent), not servers. Delete the Secret to revoke it.
Run it as the admin, with the configuration of a server.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sess, _, err := o.session(cmd.Context())
			if err != nil {
				return err
			}
			defer sess.Close()
			if sess.Config.DataDir == "" {
				return errors.New("the client configuration names no data directory: run this with the configuration up wrote on a server")
			}
			ca, err := os.ReadFile(plan.Layout{Dir: sess.Config.DataDir}.PKI("ca.crt"))
			if err != nil {
				return fmt.Errorf("the cluster CA certificate: %w", err)
			}
			usage := join.UsageServer
			if agent {
				usage = join.UsageAgent
			}
			tok, err := join.CreateToken(cmd.Context(), sess.Store, ca, ttl, usage)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), tok)
			return nil
		},
	}
	o.flags(cmd)
	cmd.Flags().DurationVar(&ttl, "ttl", 24*time.Hour, "how long the token is valid (0: until its Secret is deleted)")
	cmd.Flags().BoolVar(&agent, "agent", false, "a token that joins node agents only")
	return cmd
}
