package main

import (
	"github.com/spf13/cobra"
)

// configFlag adds --config to cmd.
func configFlag(cmd *cobra.Command, path *string) {
	cmd.Flags().StringVar(path, "config", "", "client configuration written by `podflow up` (default $PODFLOW_CONFIG, ./.podflow/config.json, ~/.podflow/config.json)")
}
