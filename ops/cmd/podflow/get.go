package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/podflow/podflow/ops/client"
	"github.com/podflow/podflow/services/objects"
)

func init() { register(newGetCmd) }

func newGetCmd() *cobra.Command {
	o := &clientOptions{}
	var all, watch, showManagedFields bool
	var output string
	cmd := &cobra.Command{
		Use:   "get KIND [NAME]",
		Short: "List pods, nodes, services, endpointslices, events, ... like kubectl get",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, err := objects.KindForResource(args[0])
			if err != nil {
				return fmt.Errorf(`the server doesn't have a resource type %q`, args[0])
			}
			p, err := client.NewPrinter(cmd.OutOrStdout(), output, all && kind.Namespaced)
			if err != nil {
				return err
			}
			p.ShowManagedFields = showManagedFields
			ctx := cmd.Context()
			sess, _, err := o.session(ctx)
			if err != nil {
				return err
			}
			defer sess.Close()
			ns := o.ns()
			if all || !kind.Namespaced {
				ns = ""
			}
			g := client.GetOptions{Kind: kind, Namespace: ns, Watch: watch, Printer: p}
			if len(args) == 2 {
				g.Name = args[1]
			}
			return sess.Get(ctx, g, cmd.ErrOrStderr())
		},
	}
	o.flags(cmd)
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "list across all namespaces")
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "after listing, watch for changes")
	cmd.Flags().BoolVar(&showManagedFields, "show-managed-fields", false, "keep the managedFields when printing objects in JSON or YAML format")
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: wide, json, yaml, name, jsonpath=TEMPLATE, custom-columns=HEADER:FIELD,...")
	return cmd
}
