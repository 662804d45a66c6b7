package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/ops/client"
	"github.com/podflow/podflow/proto/apiv1"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
)

func init() { register(newDeleteCmd) }

func clonePod(p *corev1.Pod) *corev1.Pod { return proto.CloneOf(p) }

func newDeleteCmd() *cobra.Command {
	o := &clientOptions{}
	var grace int64
	var wait bool
	var cascade string
	cmd := &cobra.Command{
		Use:   "delete KIND NAME...",
		Short: "Delete objects (a pod is stopped gracefully on its node, then removed)",
		Args:  cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, err := objects.KindForResource(args[0])
			if err != nil {
				return fmt.Errorf(`the server doesn't have a resource type %q`, args[0])
			}
			policy, ok := cascadePolicies[cascade]
			if !ok {
				return fmt.Errorf(`invalid cascade value (%s). Must be "background", "foreground", or "orphan"`, cascade)
			}
			ctx := cmd.Context()
			sess, token, err := o.session(ctx)
			if err != nil {
				return err
			}
			defer sess.Close()
			ns := o.ns()
			failed := 0
			for _, name := range args[1:] {
				req := &apiv1.ObjectRequest{Token: token, Verb: "delete", Kind: kind.Resource, Namespace: ns, Name: name,
					PropagationPolicy: proto.String(policy)}
				if cmd.Flags().Changed("grace-period") {
					req.GracePeriodSeconds = proto.Int64(grace)
				}
				if _, err := sess.ObjectRequest(ctx, req); err != nil {
					fmt.Fprintln(cmd.ErrOrStderr(), err)
					failed++
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s %q deleted\n", strings.ToLower(kind.Name), name)
				if wait && kind.Name == objects.Pods.Name {
					if err := sess.WaitGone(ctx, kind, ns, name); err != nil {
						return err
					}
				}
			}
			if failed > 0 {
				return client.SilentError{Err: fmt.Errorf("%d deletion(s) failed", failed)}
			}
			return nil
		},
	}
	o.flags(cmd)
	cmd.Flags().Int64Var(&grace, "grace-period", 30, "seconds the pod's containers get between SIGTERM and SIGKILL")
	cmd.Flags().BoolVar(&wait, "wait", true, "wait until the pod is gone from the store")
	cmd.Flags().StringVar(&cascade, "cascade", "background", `what becomes of the object's dependents, as kubectl's --cascade: "background" (the garbage collector deletes them), "foreground" (the object stays, marked, until they are gone) or "orphan" (they stay, without this owner)`)
	return cmd
}

// cascadePolicies map --cascade to DeleteOptions.propagationPolicy, as
// kubectl does.
var cascadePolicies = map[string]string{
	"background": stage.PropagationBackground,
	"foreground": stage.PropagationForeground,
	"orphan":     stage.PropagationOrphan,
}
