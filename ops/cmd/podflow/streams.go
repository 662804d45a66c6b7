package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/ops/client"
	"github.com/podflow/podflow/ops/console"
	"github.com/podflow/podflow/ops/trace"
	"github.com/podflow/podflow/services/stage"
)

func init() { register(newStreamsCmd) }

func newStreamsCmd() *cobra.Command {
	o := &clientOptions{}
	var since, budget time.Duration
	cmd := &cobra.Command{
		Use:   "streams",
		Short: "The JetStream streams and every stage's consumer, the replicas working, and the stuck pods",
		Long: `For each stream: messages and bytes. For each stage's durable consumer:
pending, ack pending, redelivered, ack floor and waiting pulls (what
` + "`nats consumer report`" + ` shows), and the replicas answering right now with
what each has handled. Then the stuck pods: pods whose last event is older
than --budget, named with the stage they wait in, and why.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			sess, _, err := o.session(ctx)
			if err != nil {
				return err
			}
			defer sess.Close()
			return runStreams(ctx, sess, since, budget, cmd.OutOrStdout())
		},
	}
	configFlag(cmd, &o.config)
	cmd.Flags().DurationVar(&since, "since", 15*time.Minute, "look for stuck pods among the events of this window")
	cmd.Flags().DurationVar(&budget, "budget", 10*time.Second, "a pod whose last event is older than this, and not settled, is stuck")
	return cmd
}

func runStreams(ctx context.Context, sess *client.Session, since, budget time.Duration, out io.Writer) error {
	js := sess.Bus.JetStream()
	tw := tabwriter.NewWriter(out, 2, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STREAM\tSUBJECTS\tMESSAGES\tBYTES\tFIRST\tLAST\tCONSUMERS")
	names := js.StreamNames(ctx)
	var streams []string
	for n := range names.Name() {
		streams = append(streams, n)
	}
	sort.Strings(streams)
	for _, n := range streams {
		s, err := js.Stream(ctx, n)
		if err != nil {
			return err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return err
		}
		st := info.State
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%d\t%d\n", n, strings.Join(info.Config.Subjects, ","), st.Msgs, bytesH(st.Bytes), st.FirstSeq, st.LastSeq, st.Consumers)
	}
	tw.Flush()

	pongs := console.Ping(ctx, sess.Bus.NATS(), 500*time.Millisecond)
	fmt.Fprintln(out)
	tw = tabwriter.NewWriter(out, 2, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CONSUMER\tSTREAM\tPENDING\tACK PENDING\tREDELIVERED\tACK FLOOR\tWAITING\tREPLICAS")
	for _, n := range streams {
		s, err := js.Stream(ctx, n)
		if err != nil {
			return err
		}
		lister := s.ListConsumers(ctx)
		var infos []*jetstream.ConsumerInfo
		for ci := range lister.Info() {
			infos = append(infos, ci)
		}
		sort.Slice(infos, func(i, j int) bool { return infos[i].Name < infos[j].Name })
		for _, ci := range infos {
			if ci.Config.Durable == "" {
				continue // ordered consumers of watchers like this one
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", ci.Name, n, ci.NumPending, ci.NumAckPending, ci.NumRedelivered,
				ci.AckFloor.Stream, ci.NumWaiting, replicasOf(pongs, ci.Name))
		}
	}
	tw.Flush()

	stuck, scanned, err := stuckPods(ctx, js, since, budget)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\nSTUCK PODS (not settled, last event older than %s; %d pods seen in the last %s)\n", budget, scanned, since)
	if len(stuck) == 0 {
		fmt.Fprintln(out, "  none")
		return nil
	}
	tw = tabwriter.NewWriter(out, 2, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tWAITING IN\tFOR\tWHY")
	for i, s := range stuck {
		if i == 25 {
			fmt.Fprintf(tw, "... and %d more\t\t\t\n", len(stuck)-i)
			break
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.pod, s.where, client.HumanDuration(s.age), s.verdict)
	}
	return tw.Flush()
}

func replicasOf(pongs []stage.Pong, consumer string) string {
	var parts []string
	for _, p := range pongs {
		if p.Stage == consumer || (consumer != "" && strings.HasPrefix(consumer, "nodeagent") && p.Stage == "nodeagent") {
			s := fmt.Sprintf("%s: %d handled", p.Replica, p.Handled)
			if p.Redelivered > 0 {
				s += fmt.Sprintf(", %d redelivered", p.Redelivered)
			}
			if p.DeadLettered > 0 {
				s += fmt.Sprintf(", %d dead-lettered", p.DeadLettered)
			}
			parts = append(parts, s)
		}
	}
	if len(parts) == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (%s)", len(parts), strings.Join(parts, "; "))
}

type stuckPod struct {
	pod, where, verdict string
	age                 time.Duration
}

// stuckPods reads the events of the window and returns the pods whose last
// moving event is older than budget without the pod having settled.
func stuckPods(ctx context.Context, js jetstream.JetStream, since, budget time.Duration) ([]stuckPod, int, error) {
	start := time.Now().Add(-since)
	cons, err := js.OrderedConsumer(ctx, bus.EventsStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{bus.PodPrefix + ".>"},
		DeliverPolicy:  jetstream.DeliverByStartTimePolicy,
		OptStartTime:   &start,
	})
	if err != nil {
		return nil, 0, err
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, 0, err
	}
	type last struct {
		where, verdict string
		at             time.Time
	}
	pods := map[string]*last{}
	for pending := int(info.NumPending); pending > 0; {
		batch, err := cons.Fetch(min(pending, 1000), jetstream.FetchMaxWait(3*time.Second))
		if err != nil {
			return nil, 0, err
		}
		n := 0
		for m := range batch.Messages() {
			n++
			envs, err := bus.DecodeEvents(m.Data())
			if err != nil {
				continue
			}
			for _, env := range envs {
				key := env.GetNamespace() + "/" + env.GetPodName()
				where, verdict := trace.Verdict(env)
				if where == "" {
					continue
				}
				pods[key] = &last{where, verdict, env.GetTime().AsTime()}
			}
		}
		if n == 0 {
			break
		}
		pending -= n
	}
	now := time.Now()
	var out []stuckPod
	for k, l := range pods {
		if !trace.Settled(l.verdict) && now.Sub(l.at) > budget {
			out = append(out, stuckPod{pod: k, where: l.where, verdict: l.verdict, age: now.Sub(l.at)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].age > out[j].age })
	return out, len(pods), nil
}

func bytesH(b uint64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1fGiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1fMiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1fKiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%dB", b)
}
