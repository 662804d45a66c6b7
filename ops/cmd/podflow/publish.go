package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/ops/client"
	"github.com/podflow/podflow/proto/corev1"
)

func newPublishCmd() *cobra.Command {
	o := &clientOptions{}
	var file string
	var count int
	cmd := &cobra.Command{
		Use:   "publish -f FILE",
		Short: "Publish PodRequested events straight onto the bus (fire-and-forget)",
		Long: `Publish a PodRequested event for each Pod in FILE onto the JetStream events
stream, without waiting for the outcome: follow it with ` + "`podflow get pods -w`" + `
or the stream itself. With --count N, publishes N copies named NAME-0..N-1.`,
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
			var futures []*bus.PubFuture
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
					if count <= 0 {
						fmt.Fprintf(cmd.OutOrStdout(), "pod/%s requested (request %s)\n", p.GetMetadata().GetName(), env.GetRequestId())
					}
				}
			}
			for _, f := range futures {
				if _, err := f.Wait(ctx); err != nil {
					return err
				}
			}
			if count > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "%d PodRequested events published\n", len(futures))
			}
			return nil
		},
	}
	o.flags(cmd)
	cmd.Flags().StringVarP(&file, "filename", "f", "", "manifest with one or more Pods")
	cmd.Flags().IntVar(&count, "count", 0, "publish this many copies of each pod, suffixed -0, -1, ...")
	return cmd
}
