package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/ops/client"
	"github.com/podflow/podflow/ops/trace"
)

func init() { register(newTraceCmd) }

func newTraceCmd() *cobra.Command {
	o := &clientOptions{}
	var follow bool
	var output dataOutput
	cmd := &cobra.Command{
		Use:   "trace pod NAME",
		Short: "A pod's lifecycle rebuilt from the JetStream stream alone",
		Long: `Rebuild a pod's journey from the events stream: every stage it passed, the
replica that handled it, when, how long the event waited in the stream and
how long the stage took, redeliveries, scheduler conflicts, and where the pod
is now and why. With --follow, keep printing as events arrive.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if args[0] != "pod" && args[0] != "pods" && args[0] != "po" {
				return fmt.Errorf("trace supports pods (got %q)", args[0])
			}
			if err := output.validate(); err != nil {
				return err
			}
			ctx := cmd.Context()
			sess, _, err := o.session(ctx)
			if err != nil {
				return err
			}
			defer sess.Close()
			ns := o.ns()
			return runTrace(ctx, sess, ns, args[1], follow, output, cmd.OutOrStdout())
		},
	}
	o.flags(cmd)
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep following the pod's events")
	outputFlag(cmd, &output)
	return cmd
}

func runTrace(ctx context.Context, sess *client.Session, ns, name string, follow bool, output dataOutput, out io.Writer) error {
	cons, err := sess.Bus.JetStream().OrderedConsumer(ctx, bus.EventsStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{bus.PodFilter(ns, name)},
	})
	if err != nil {
		return err
	}
	var recs []trace.Record
	read := func(wait time.Duration) (int, error) {
		batch, err := cons.Fetch(500, jetstream.FetchMaxWait(wait))
		if err != nil {
			return 0, err
		}
		got, n, err := trace.Records(batch)
		recs = append(recs, got...)
		return n, err
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return err
	}
	// The backlog: every message pending when the consumer was made. A
	// fetch that brings nothing (the ordered consumer made again after its
	// stream's leader moved, a loaded server) is tried again until a
	// request's timeout passes without progress; then that is the answer,
	// not an empty or partial trace.
	patience, progress := cmp.Or(sess.RequestTimeout, client.DefaultRequestTimeout), time.Now()
	for pending := int(info.NumPending); pending > 0; {
		n, err := read(2 * time.Second)
		pending -= n
		if n > 0 {
			progress = time.Now()
			continue
		}
		if ctx.Err() != nil || time.Since(progress) >= patience {
			if err == nil {
				err = cmp.Or(ctx.Err(), context.DeadlineExceeded)
			}
			return fmt.Errorf("reading pod %s/%s's events from stream %s: %d not read: %w", ns, name, bus.EventsStream, pending, err)
		}
	}
	tl := trace.Build(ns, name, recs, nil)
	if done, err := output.print(out, tl); done {
		return err
	}
	if len(tl.Entries) == 0 && !follow {
		return fmt.Errorf("no events for pod %s/%s in stream %s", ns, name, bus.EventsStream)
	}
	printTimeline(out, tl, true)
	if !follow {
		return nil
	}
	shown := len(tl.Entries)
	for ctx.Err() == nil {
		if n, _ := read(time.Second); n == 0 {
			continue
		}
		tl = trace.Build(ns, name, recs, nil)
		if len(tl.Entries) < shown { // a new incarnation: start over
			shown = 0
		}
		rest := *tl
		rest.Entries = tl.Entries[shown:]
		printTimeline(out, &rest, false)
		shown = len(tl.Entries)
	}
	return nil
}

func printTimeline(out io.Writer, tl *trace.Timeline, header bool) {
	if header {
		fmt.Fprintf(out, "pod %s/%s  uid %s  request %s\n", tl.Namespace, tl.Name, client.OrNone(tl.UID), client.OrNone(tl.RequestID))
		if tl.Traceparent != "" {
			fmt.Fprintf(out, "traceparent %s\n", tl.Traceparent)
		}
	}
	tw := tabwriter.NewWriter(out, 2, 0, 2, ' ', 0)
	if header {
		fmt.Fprintln(tw, "TIME\t+ELAPSED\tSTAGE\tREPLICA\tEVENT\tWAITED\tTOOK\tREDELIVERED\tDETAIL")
	}
	dur := func(d time.Duration) string {
		if d == 0 {
			return "-"
		}
		return d.Round(10 * time.Microsecond).String()
	}
	for _, e := range tl.Entries {
		red := "-"
		if e.Redeliveries > 0 {
			red = fmt.Sprint(e.Redeliveries)
		}
		detail := e.Detail
		if len(detail) > 120 {
			detail = detail[:117] + "..."
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Time.Local().Format("15:04:05.000"), dur(e.Elapsed),
			e.Stage, e.Replica, e.Event, dur(e.Waited), dur(e.Took), red, strings.ReplaceAll(detail, "\n", " "))
	}
	tw.Flush()
	if tl.Verdict != "" {
		fmt.Fprintf(out, "now: at %s — %s\n", tl.Where, tl.Verdict)
	}
}
