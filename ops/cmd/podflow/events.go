package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/podflow/podflow/ops/client"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
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
			match := func(e *corev1.Event) bool {
				return (kind == "" || e.GetInvolvedObject().GetKind() == kind) && (name == "" || e.GetInvolvedObject().GetName() == name)
			}
			evs, rev, err := objects.List[*corev1.Event](ctx, sess.Store, ns)
			if err != nil {
				return err
			}
			var sel []objects.Object
			var list []*corev1.Event
			for _, e := range evs {
				if match(e) {
					list = append(list, e)
				}
			}
			client.SortEvents(list)
			for _, e := range list {
				sel = append(sel, e)
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
			w, err := sess.Store.Client().Watch(ctx, objects.Events.Prefix(ns), rev)
			if err != nil {
				return err
			}
			defer w.Stop()
			for ev := range w.Events() {
				if ev.Type != raftstore.EventPut {
					continue
				}
				e := &corev1.Event{}
				if objects.Decode(ev.KV, e) != nil || !match(e) {
					continue
				}
				p.Now = time.Now()
				if err := p.Print(objects.Events, []objects.Object{e}, false, false); err != nil {
					return err
				}
			}
			if ctx.Err() != nil {
				return nil
			}
			return w.Err()
		},
	}
	o.flags(cmd)
	cmd.Flags().StringVar(&forObj, "for", "", "only events about this object, e.g. pod/web")
	cmd.Flags().BoolVarP(&follow, "follow", "w", false, "keep printing new events")
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "events of every namespace")
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: json, yaml, name, jsonpath=…, custom-columns=… (default: a table)")
	return cmd
}
