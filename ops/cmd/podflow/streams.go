package main

import (
	"time"

	"github.com/spf13/cobra"
)

func init() { register(newStreamsCmd) }

func newStreamsCmd() *cobra.Command {
	o := &clientOptions{}
	var since, budget time.Duration
	var output dataOutput
	cmd := &cobra.Command{
		Use:   "streams",
		Short: "The JetStream streams and every stage's consumer, the replicas working, and the stuck pods",
		Long: `For each stream: messages and bytes. For each stage's durable consumer:
pending, ack pending, redelivered, ack floor and waiting pulls (what
` + "`nats consumer report`" + ` shows), and the replicas answering right now with
what each has handled. Then the stuck pods: pods that exist (not deleted),
are not Ready and have made no progress for --budget (an event that only
repeats where the pod is, as the scheduler's retries, is no progress),
named with the stage they wait in and why.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := output.validate(); err != nil {
				return err
			}
			ctx := cmd.Context()
			sess, _, err := o.session(ctx)
			if err != nil {
				return err
			}
			defer sess.Close()
			rep, err := sess.ReadStreams(ctx, since, budget)
			if err != nil {
				return err
			}
			if done, err := output.print(cmd.OutOrStdout(), rep); done {
				return err
			}
			return rep.Print(cmd.OutOrStdout())
		},
	}
	configFlag(cmd, &o.config)
	outputFlag(cmd, &output)
	cmd.Flags().DurationVar(&since, "since", 15*time.Minute, "look for stuck pods among the events of this window")
	cmd.Flags().DurationVar(&budget, "budget", 10*time.Second, "a pod not Ready that made no progress for this long is stuck")
	return cmd
}
