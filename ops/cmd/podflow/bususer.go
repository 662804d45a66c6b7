package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/ops/processes/up"
)

func init() { register(newConfigCmd) }

// newConfigCmd is `podflow config`: the client configurations of podflow's
// users.
func newConfigCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Manage the configurations of podflow's users",
	}
	cmd.AddCommand(newBusUserCmd(), newConfigRoleCmd(), newConfigKubeconfigCmd(), newConfigSealKeyCmd())
	return cmd
}

// newBusUserCmd is `podflow config bus-user NAME`.
func newBusUserCmd() *cobra.Command {
	var cfgPath string
	var remove bool
	cmd := &cobra.Command{
		Use:   "bus-user NAME",
		Short: "Give an API user its own bus identity (or take it away with --remove)",
		Long: `Give the API user NAME (as its bearer token authenticates it: a name of the
token file, system:serviceaccount:NS:NAME, ...) a NATS user of its own on
this podflow's bus. It may ask the api front door and read its own replies,
nothing else, and the api stage answers NAME's requests only into NAME's
inbox: no other bus user can read them. The running NATS server takes the
user within a second.

Writes, readable by their owner only, DATA/nats/users/user-NAME.json (the
bus credentials) and DATA/nats/users/user-NAME.config.json (a client
configuration using them, without a token), and with up --cluster a client
certificate of the cluster CA: hand them to NAME, who runs podflow with
--config and its own token. Run it again to print the paths;
--remove deletes the user, and the server disconnects it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cc, l, err := adminLayout(cfgPath)
			if err != nil {
				return err
			}
			name := args[0]
			if remove {
				if err := up.RemoveBusUser(l, name); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "bus user %s removed\n", bus.UserRole(name))
				return nil
			}
			u, err := up.AddBusUser(l, cc, name)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "bus user %s for %q\n  bus credentials:      %s\n  client configuration: %s\n",
				u.User, name, l.UserBusConfig(name), l.UserClientConfig(name))
			return nil
		},
	}
	configFlag(cmd, &cfgPath)
	cmd.Flags().BoolVar(&remove, "remove", false, "remove the user's bus identity")
	return cmd
}
