package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/podflow/podflow/ops/client"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/objects"
)

func init() { register(newEventsCmd) }

func newEventsCmd() *cobra.Command {
	o := &clientOptions{}
	var forObj, output string
	var follow, all bool
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Kubernetes Events (Scheduled, Pulled, FailedScheduling, BackOff, ...), like kubectl events",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			sess, _, err := o.session(ctx)
			if err != nil {
				return err
			}
			defer sess.Close()
			ns := o.ns()
			if all {
				ns = ""
			}
			kind, name := "", ""
			if forObj != "" {
				k, n, ok := strings.Cut(forObj, "/")
				if !ok {
					return fmt.Errorf("--for takes KIND/NAME, e.g. pod/web")
				}
				kk, err := objects.KindForResource(k)
				if err != nil {
					return err
				}
				kind, name = kk.Name, n
			}
			sel, rev, err := sess.EventsFor(ctx, ns, kind, name)
			if err != nil {
				return err
			}
			p, err := client.NewPrinter(cmd.OutOrStdout(), output, all)
			if err != nil {
				return err
			}
			asList := output == "json" || output == "yaml" // one List, as kubectl events -o json
			if len(sel) == 0 && !follow && !asList {
				fmt.Fprintln(cmd.ErrOrStderr(), "No events found.")
				return nil
			}
			if err := p.Print(objects.Events, sel, true, asList); err != nil {
				return err
			}
			if !follow {
				return nil
			}
			return sess.FollowEvents(ctx, ns, kind, name, rev, func(e *corev1.Event) error {
				p.Now = time.Now()
				return p.Print(objects.Events, []objects.Object{e}, false, false)
			})
		},
	}
	o.flags(cmd)
	cmd.Flags().StringVar(&forObj, "for", "", "only events about this object, e.g. pod/web")
	cmd.Flags().BoolVarP(&follow, "follow", "w", false, "keep printing new events")
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "events of every namespace")
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: json, yaml, name, jsonpath=…, custom-columns=… (default: a table)")
	return cmd
}
