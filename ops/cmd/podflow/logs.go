package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
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
		ctrName        string
		follow, prev   bool
		requestTimeout time.Duration
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
			ns := o.namespace
			if ns == "" {
				ns = "default"
			}
			pod, err := objects.Get[*corev1.Pod](ctx, sess.store, ns, args[0])
			if err != nil {
				return fmt.Errorf("pods %q: %w", args[0], err)
			}
			node := pod.GetSpec().GetNodeName()
			if node == "" {
				return fmt.Errorf("pod %s/%s is not scheduled yet", ns, args[0])
			}
			req := map[string]any{"namespace": ns, "pod": args[0], "container": ctrName, "previous": prev}
			w := bufio.NewWriter(cmd.OutOrStdout())
			defer w.Flush()
			for offset := int64(0); ; {
				req["offset"] = offset
				b, _ := json.Marshal(req)
				rctx, cancel := context.WithTimeout(ctx, requestTimeout)
				msg, err := sess.bus.NATS().RequestWithContext(rctx, logsSubject(node), b)
				cancel()
				if err != nil {
					return fmt.Errorf("ask node %q for the logs (is it a --runtime linux node agent?): %w", node, err)
				}
				var rep logReply
				if err := json.Unmarshal(msg.Data, &rep); err != nil {
					return fmt.Errorf("node %q: %w", node, err)
				}
				if rep.Error != "" {
					return fmt.Errorf("node %q: %s", node, rep.Error)
				}
				if err := writeRecords(w, rep.Data); err != nil {
					return err
				}
				offset = rep.Offset
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
	f.DurationVar(&requestTimeout, "request-timeout", 5*time.Second, "timeout of each request to the node agent")
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
