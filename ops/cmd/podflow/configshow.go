package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/podflow/podflow/ops/client"
	"github.com/podflow/podflow/ops/processes/plan"
)

// adminLayout is the data directory of the admin's client configuration.
func adminLayout(cfgPath string) (client.Config, plan.Layout, error) {
	cc, err := client.LoadConfig(cfgPath)
	if err != nil {
		return cc, plan.Layout{}, err
	}
	if cc.DataDir == "" {
		return cc, plan.Layout{}, errors.New("the client configuration names no data directory: run this with the configuration `podflow up` wrote")
	}
	return cc, plan.Layout{Dir: cc.DataDir}, nil
}

// newConfigRoleCmd is `podflow config role ROLE`: a process role's bus
// file, as up gives it to the process.
func newConfigRoleCmd() *cobra.Command {
	var cfgPath string
	cmd := &cobra.Command{
		Use:   "role ROLE",
		Short: "Print a process role's bus configuration (stage-scheduler, store, node-NAME, ...)",
		Long: `Print the bus client configuration of a process role as podflow up writes it
(DATA/nats/roles/ROLE.json: the NATS URLs, the role's user and password, its
client certificate): what PODFLOW_NATS_CONFIG names for a process started by
hand. It holds the role's password: keep it as the process's own file.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, l, err := adminLayout(cfgPath)
			if err != nil {
				return err
			}
			b, err := l.ReadRoleConfig(args[0])
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(b)
			return err
		},
	}
	configFlag(cmd, &cfgPath)
	return cmd
}

// newConfigKubeconfigCmd is `podflow config kubeconfig`.
func newConfigKubeconfigCmd() *cobra.Command {
	var cfgPath string
	cmd := &cobra.Command{
		Use:   "kubeconfig",
		Short: "Print the admin's kubeconfig (kubectl against podflow's Kubernetes API)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, l, err := adminLayout(cfgPath)
			if err != nil {
				return err
			}
			b, err := os.ReadFile(l.Kubeconfig())
			if errors.Is(err, os.ErrNotExist) {
				return errors.New("no kubeconfig here: the first server of a cluster of several holds the admin's")
			}
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(b)
			return err
		},
	}
	configFlag(cmd, &cfgPath)
	return cmd
}

// newConfigSealKeyCmd is `podflow config seal-key`.
func newConfigSealKeyCmd() *cobra.Command {
	var cfgPath string
	cmd := &cobra.Command{
		Use:   "seal-key",
		Short: "Print the api stage's public seal key (the sealKey of a client configuration)",
		Long: `Print the public half of the api stage's seal key, hex: bearer tokens a
client publishes on the bus are sealed to it (a client configuration's
sealKey), so that the stream never holds one in clear.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cc, _, err := adminLayout(cfgPath)
			if err != nil {
				return err
			}
			if cc.SealKey == "" {
				return errors.New("the client configuration has no seal key")
			}
			fmt.Fprintln(cmd.OutOrStdout(), cc.SealKey)
			return nil
		},
	}
	configFlag(cmd, &cfgPath)
	return cmd
}
