package main

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	corev1 "github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/nodelogs"
	"github.com/podflow/podflow/services/objects"
)

func init() { register(newLogsCmd) }

func newLogsCmd() *cobra.Command {
	o := &clientOptions{}
	var (
		ctrName                  string
		follow, prev, timestamps bool
		tail, limitBytes         int64
		since                    time.Duration
	)
	cmd := &cobra.Command{
		Use:   "logs POD",
		Short: "Print the logs of a container of a pod, like kubectl logs",
		Long: `Print a container's stdout and stderr (the current log file: rotated ones are not read, as kubelet). The pod's Linux node agent serves its
log files (CRI format, under its data directory) over NATS request-reply on
podflow.ops.logs.<node>, so this works from anywhere on the bus. With -f
the output follows until the container exits or the command is interrupted.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			sess, _, err := o.session(ctx)
			if err != nil {
				return err
			}
			defer sess.Close()
			ns := o.ns()
			pod, err := objects.Get[*corev1.Pod](ctx, sess.Store, ns, args[0])
			if err != nil {
				return fmt.Errorf("pods %q: %w", args[0], err)
			}
			node := pod.GetSpec().GetNodeName()
			if node == "" {
				return fmt.Errorf("pod %s/%s is not scheduled yet", ns, args[0])
			}
			req := nodelogs.Request{Namespace: ns, Pod: args[0], Container: ctrName, Previous: prev}
			if tail >= 0 {
				req.TailLines = &tail
			}
			if since > 0 {
				req.SinceTime = time.Now().Add(-since).UnixNano()
			}
			actx, cancel := sess.RequestContext(ctx, 5*time.Second)
			stream, err := nodelogs.Open(actx, sess.Bus.NATS(), node, req, nodelogs.Options{
				Follow: follow, Timestamps: timestamps, LimitBytes: limitBytes, AskTimeout: sess.RequestTimeout,
			})
			cancel()
			if errors.Is(err, nodelogs.ErrNode) {
				return err
			}
			if err != nil {
				return fmt.Errorf("%w (is it a --runtime linux node agent?)", err)
			}
			out := cmd.OutOrStdout()
			for {
				text, err := stream.Next(ctx)
				if errors.Is(err, io.EOF) {
					return nil
				}
				if err != nil {
					return err
				}
				if _, err := out.Write(text); err != nil {
					return err
				}
			}
		},
	}
	o.flags(cmd)
	f := cmd.Flags()
	f.StringVarP(&ctrName, "container", "c", "", "container name (default: the pod's first app container)")
	f.BoolVarP(&follow, "follow", "f", false, "follow the log until the container exits")
	f.BoolVarP(&prev, "previous", "p", false, "print the logs of the previous instance of the container")
	f.Int64Var(&tail, "tail", -1, "lines of recent log to display; -1 shows all")
	f.DurationVar(&since, "since", 0, "only logs newer than a relative duration like 5s, 2m, or 3h")
	f.Int64Var(&limitBytes, "limit-bytes", 0, "maximum bytes of logs to return (0: no limit)")
	f.BoolVar(&timestamps, "timestamps", false, "include timestamps on each line")
	return cmd
}
