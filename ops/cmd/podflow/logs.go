package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"github.com/podflow/podflow/services/nodelogs"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/podflow/podflow/nodeagent/linux/container"
	corev1 "github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/objects"
)

func init() { register(newLogsCmd) }

func newLogsCmd() *cobra.Command {
	o := &clientOptions{}
	var (
		ctrName      string
		follow, prev bool
	)
	cmd := &cobra.Command{
		Use:   "logs POD",
		Short: "Print the logs of a container of a pod, like kubectl logs",
		Long: `Print a container's stdout and stderr. The pod's Linux node agent serves its
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
			w := bufio.NewWriter(cmd.OutOrStdout())
			defer w.Flush()
			for {
				rctx, cancel := sess.RequestContext(ctx, 5*time.Second)
				rep, err := nodelogs.Ask(rctx, sess.Bus.NATS(), node, req)
				cancel()
				if errors.Is(err, nodelogs.ErrNode) {
					return err
				}
				if err != nil {
					return fmt.Errorf("%w (is it a --runtime linux node agent?)", err)
				}
				if err := writeRecords(w, rep.Data); err != nil {
					return err
				}
				req.Offset = rep.Offset
				if len(rep.Data) > 0 {
					continue // more may be there already
				}
				if !follow || !rep.Running {
					return nil
				}
				_ = w.Flush()
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(300 * time.Millisecond):
				}
			}
		},
	}
	o.flags(cmd)
	f := cmd.Flags()
	f.StringVarP(&ctrName, "container", "c", "", "container name (default: the pod's first app container)")
	f.BoolVarP(&follow, "follow", "f", false, "follow the log until the container exits")
	f.BoolVarP(&prev, "previous", "p", false, "print the logs of the previous instance of the container")
	return cmd
}

// writeRecords writes the text of CRI log records, partial records joined.
func writeRecords(w io.Writer, data []byte) error {
	for len(data) > 0 {
		line, rest, _ := bytes.Cut(data, []byte{'\n'})
		data = rest
		rec, ok := container.ParseLogRecord(line)
		if !ok {
			continue
		}
		if _, err := w.Write(rec.Text); err != nil {
			return err
		}
		if !rec.Partial {
			if _, err := w.Write([]byte{'\n'}); err != nil {
				return err
			}
		}
	}
	return nil
}
