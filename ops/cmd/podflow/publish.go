package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/ops/client"
	"github.com/podflow/podflow/proto/corev1"
)

func newPublishCmd() *cobra.Command {
	o := &clientOptions{}
	var file string
	var count int
	var wait bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "publish -f FILE",
		Short: "Publish PodRequested events straight onto the bus; --wait reports each pod's fate",
		Long: `Publish a PodRequested event for each Pod in FILE onto the JetStream events
stream. With --count N, publishes N copies named NAME-0..N-1.

Without --wait it returns once the stream has the events, and says how to
follow them (` + "`podflow trace pod NAME -f`" + `). With --wait it follows each pod
through the pipeline until its fate is known, within --timeout:

  pod/NAME scheduled to NODE                          created and placed: exit 0
  Error from server (REASON): MESSAGE                 refused by a stage (the api's
                                                      authorization, admission, ...): exit 1
  pod/NAME created, unschedulable: FailedScheduling   stored, but no node fits it: exit 2

A pod whose fate is not known by --timeout is reported and the exit is 1.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return fmt.Errorf("must specify -f FILE")
			}
			objs, err := client.ReadManifest(file)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			sess, token, err := o.session(ctx)
			if err != nil {
				return err
			}
			defer sess.Close()
			sealedToken, err := sess.BusToken(token) // never in clear on the stream
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			var futures []*bus.PubFuture
			var keys []string
			for _, mo := range objs {
				pod, ok := mo.Message.(*corev1.Pod)
				if !ok {
					return fmt.Errorf("publish takes Pods; %s is a %s", file, mo.Kind)
				}
				for i := range max(count, 1) {
					p := pod
					if count > 0 {
						p = clonePod(pod)
						p.Metadata.Name = fmt.Sprintf("%s-%d", pod.GetMetadata().GetName(), i)
					}
					if o.namespace != "" {
						p.Metadata.Namespace = o.namespace
					}
					env := client.PodRequested(p, sealedToken)
					f, err := sess.Bus.PublishAsync(env)
					if err != nil {
						return err
					}
					futures = append(futures, f)
					keys = append(keys, env.GetNamespace()+"/"+env.GetPodName())
					if count <= 0 && !wait {
						fmt.Fprintf(out, "pod/%s requested (request %s)\n", p.GetMetadata().GetName(), env.GetRequestId())
					}
				}
			}
			var first uint64
			for _, f := range futures {
				ack, err := f.Wait(ctx)
				if err != nil {
					return err
				}
				if first == 0 || ack.Sequence < first {
					first = ack.Sequence
				}
			}
			if !wait {
				if count > 0 {
					fmt.Fprintf(out, "%d PodRequested events published\n", len(futures))
				}
				if len(keys) > 0 {
					ns, name, _ := strings.Cut(keys[0], "/")
					fmt.Fprintf(out, "follow with: podflow trace pod %s -f -n %s (or publish --wait)\n", name, ns)
				}
				return nil
			}
			wctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			return sess.WaitFates(wctx, first, keys, count > 0, out, cmd.ErrOrStderr())
		},
	}
	o.flags(cmd)
	cmd.Flags().StringVarP(&file, "filename", "f", "", "manifest with one or more Pods")
	cmd.Flags().IntVar(&count, "count", 0, "publish this many copies of each pod, suffixed -0, -1, ...")
	cmd.Flags().BoolVar(&wait, "wait", false, "follow each pod until it is scheduled, refused or found unschedulable, and exit non-zero unless scheduled")
	cmd.Flags().DurationVar(&timeout, "timeout", time.Minute, "with --wait, how long to wait for the pods' fate")
	return cmd
}
