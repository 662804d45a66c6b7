package main

import (
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// configFlag adds --config to cmd.
func configFlag(cmd *cobra.Command, path *string) {
	cmd.Flags().StringVar(path, "config", "", "client configuration written by 'podflow up' (default $PODFLOW_CONFIG, ./.podflow/config.json, ~/.podflow/config.json)")
}

// deprecatedAlias keeps the old name of a renamed flag working: define
// adds it to f (bound to the new flag's variable), and it is hidden from
// the help and prints "Flag --old has been deprecated, use --name
// instead" when used. A flag name has one meaning across commands; an
// odd one is renamed this way.
func deprecatedAlias(f *pflag.FlagSet, old, name string, define func(*pflag.FlagSet)) {
	define(f)
	_ = f.MarkDeprecated(old, "use --"+name+" instead")
}
