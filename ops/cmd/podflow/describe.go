package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/podflow/podflow/services/objects"
)

func init() { register(newDescribeCmd) }

func newDescribeCmd() *cobra.Command {
	o := &clientOptions{}
	cmd := &cobra.Command{
		Use:   "describe pod|service NAME",
		Short: "Show a pod's spec, status, conditions, container states and events, or a Service's ClusterIP, endpoints and why each selected pod is or is not one, like kubectl describe",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, err := objects.KindForResource(args[0])
			if err != nil || (kind.Name != "Pod" && kind.Name != "Service") {
				return fmt.Errorf("describe supports pods and services (got %q)", args[0])
			}
			ctx := cmd.Context()
			sess, _, err := o.session(ctx)
			if err != nil {
				return err
			}
			defer sess.Close()
			ns := o.ns()
			if kind.Name == "Service" {
				return sess.DescribeService(ctx, cmd.OutOrStdout(), ns, args[1])
			}
			return sess.DescribePod(ctx, cmd.OutOrStdout(), ns, args[1])
		},
	}
	o.flags(cmd)
	return cmd
}
