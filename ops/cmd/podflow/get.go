package main

import (
	"fmt"
	"strings"

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
			var kinds []objects.Kind
			for _, r := range strings.Split(args[0], ",") {
				k, err := objects.KindForResource(r)
				if err != nil {
					return fmt.Errorf(`the server doesn't have a resource type %q`, r)
				}
				kinds = append(kinds, k)
			}
			kind := kinds[0]
			if len(kinds) > 1 && watch {
				return fmt.Errorf("you may only specify a single resource type")
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
			name := ""
			if len(args) == 2 {
				name = args[1]
			}
			if len(kinds) > 1 {
				if all {
					ns = ""
				} else {
					ns = o.ns()
				}
				return sess.GetKinds(ctx, kinds, ns, name, p, cmd.ErrOrStderr())
			}
			return sess.Get(ctx, client.GetOptions{Kind: kind, Namespace: ns, Watch: watch, Printer: p, Name: name}, cmd.ErrOrStderr())
		},
	}
	o.flags(cmd)
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "list across all namespaces")
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "after listing, watch for changes")
	cmd.Flags().BoolVar(&showManagedFields, "show-managed-fields", false, "keep the managedFields when printing objects in JSON or YAML format")
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: wide, json, yaml, name, jsonpath=TEMPLATE, custom-columns=HEADER:FIELD,...")
	return cmd
}
