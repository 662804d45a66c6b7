package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/ops/trace"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
)

// StreamsReport is what `podflow streams` shows (-o json|yaml prints it).
type StreamsReport struct {
	Streams   []StreamRow   `json:"streams"`
	Consumers []ConsumerRow `json:"consumers"`
	Stuck     StuckReport   `json:"StuckPods"`
}

type StreamRow struct {
	Name      string   `json:"name"`
	Subjects  []string `json:"subjects"`
	Messages  uint64   `json:"messages"`
	Bytes     uint64   `json:"bytes"`
	FirstSeq  uint64   `json:"firstSeq"`
	LastSeq   uint64   `json:"lastSeq"`
	Consumers int      `json:"consumers"`
}

type ConsumerRow struct {
	Name        string       `json:"name"`
	Stream      string       `json:"stream"`
	Pending     uint64       `json:"pending"`
	AckPending  int          `json:"ackPending"`
	Redelivered int          `json:"redelivered"`
	AckFloor    uint64       `json:"ackFloor"`
	Waiting     int          `json:"waiting"`
	Replicas    []stage.Pong `json:"replicas"`
}

type StuckReport struct {
	Budget string     `json:"budget"`
	Window string     `json:"window"`
	Seen   int        `json:"podsSeen"`
	Pods   []StuckPod `json:"pods"`
}

// StuckPod is a pod that exists, is not Ready and made no progress.
type StuckPod struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Stage     string `json:"stage"`
	Reason    string `json:"reason"`
	// Since is when it last made progress, ForSeconds how long ago.
	Since      time.Time     `json:"since"`
	ForSeconds float64       `json:"forSeconds"`
	age        time.Duration // ForSeconds
}

// ReadStreams reads the streams, every durable consumer with the replicas
// answering for it, and the stuck pods (StuckPods).
func (sess *Session) ReadStreams(ctx context.Context, since, budget time.Duration) (*StreamsReport, error) {
	js := sess.Bus.JetStream()
	rep := &StreamsReport{Streams: []StreamRow{}, Consumers: []ConsumerRow{}}
	var streams []string
	for n := range js.StreamNames(ctx).Name() {
		streams = append(streams, n)
	}
	sort.Strings(streams)
	pongs := Ping(ctx, sess.Bus.NATS(), 500*time.Millisecond)
	for _, n := range streams {
		s, err := js.Stream(ctx, n)
		if err != nil {
			return nil, err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return nil, err
		}
		st := info.State
		rep.Streams = append(rep.Streams, StreamRow{Name: n, Subjects: info.Config.Subjects, Messages: st.Msgs, Bytes: st.Bytes,
			FirstSeq: st.FirstSeq, LastSeq: st.LastSeq, Consumers: st.Consumers})
		var infos []*jetstream.ConsumerInfo
		for ci := range s.ListConsumers(ctx).Info() {
			infos = append(infos, ci)
		}
		sort.Slice(infos, func(i, j int) bool { return infos[i].Name < infos[j].Name })
		for _, ci := range infos {
			if ci.Config.Durable == "" {
				continue // ordered consumers of watchers like this one
			}
			rep.Consumers = append(rep.Consumers, ConsumerRow{Name: ci.Name, Stream: n, Pending: ci.NumPending, AckPending: ci.NumAckPending,
				Redelivered: ci.NumRedelivered, AckFloor: ci.AckFloor.Stream, Waiting: ci.NumWaiting, Replicas: replicasOf(pongs, ci.Name)})
		}
	}
	stuck, seen, err := sess.StuckPods(ctx, since, budget)
	if err != nil {
		return nil, err
	}
	rep.Stuck = StuckReport{Budget: budget.String(), Window: since.String(), Seen: seen, Pods: stuck}
	return rep, nil
}

// Print writes the report as `podflow streams` shows it.
func (rep *StreamsReport) Print(out io.Writer) error {
	tw := tabwriter.NewWriter(out, 2, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STREAM\tSUBJECTS\tMESSAGES\tBYTES\tFIRST\tLAST\tCONSUMERS")
	for _, s := range rep.Streams {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%d\t%d\n", s.Name, strings.Join(s.Subjects, ","), s.Messages, bytesH(s.Bytes), s.FirstSeq, s.LastSeq, s.Consumers)
	}
	tw.Flush()
	fmt.Fprintln(out)
	tw = tabwriter.NewWriter(out, 2, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CONSUMER\tSTREAM\tPENDING\tACK PENDING\tREDELIVERED\tACK FLOOR\tWAITING\tREPLICAS")
	for _, c := range rep.Consumers {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", c.Name, c.Stream, c.Pending, c.AckPending, c.Redelivered, c.AckFloor, c.Waiting, replicasText(c.Replicas))
	}
	tw.Flush()
	st := rep.Stuck
	fmt.Fprintf(out, "\nSTUCK PODS (alive, not Ready, no progress in %s; %d pods seen in the last %s)\n", st.Budget, st.Seen, st.Window)
	if len(st.Pods) == 0 {
		fmt.Fprintln(out, "  none")
		return nil
	}
	tw = tabwriter.NewWriter(out, 2, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tSTAGE\tFOR\tWHY")
	for i, s := range st.Pods {
		if i == 25 {
			fmt.Fprintf(tw, "... and %d more (-o json lists them all)\t\t\t\n", len(st.Pods)-i)
			break
		}
		fmt.Fprintf(tw, "%s/%s\t%s\t%s\t%s\n", s.Namespace, s.Name, s.Stage, HumanDuration(s.age), s.Reason)
	}
	return tw.Flush()
}

// replicasOf are the pongs of consumer's replicas.
func replicasOf(pongs []stage.Pong, consumer string) []stage.Pong {
	out := []stage.Pong{}
	for _, p := range pongs {
		if p.Stage == consumer || (consumer != "" && strings.HasPrefix(consumer, "nodeagent") && p.Stage == "nodeagent") {
			out = append(out, p)
		}
	}
	return out
}

func replicasText(pongs []stage.Pong) string {
	var parts []string
	for _, p := range pongs {
		s := fmt.Sprintf("%s: %d handled", p.Replica, p.Handled)
		if p.Redelivered > 0 {
			s += fmt.Sprintf(", %d redelivered", p.Redelivered)
		}
		if p.DeadLettered > 0 {
			s += fmt.Sprintf(", %d dead-lettered", p.DeadLettered)
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (%s)", len(parts), strings.Join(parts, "; "))
}

// StuckPods folds the events of the window into where each pod is, and
// returns the pods that exist (in the store, or not yet stored and not
// rejected), are not Ready and have not progressed for budget: an event
// that leaves the pod where it was (the scheduler's retry of a pod that
// fits nowhere) is no progress. Stored pods not Ready that the window
// does not mention are stuck since they were created. It also returns
// how many pods the window mentions.
func (sess *Session) StuckPods(ctx context.Context, since, budget time.Duration) ([]StuckPod, int, error) {
	start := time.Now().Add(-since)
	cons, err := sess.Bus.JetStream().OrderedConsumer(ctx, bus.EventsStream, jetstream.OrderedConsumerConfig{
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
	type state struct {
		where, verdict string
		progress       time.Time // when where or the kind of verdict last changed
	}
	pods := map[string]*state{}
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
				st := pods[key]
				if st == nil {
					st = &state{}
				}
				where, verdict := trace.Step(env, st.where, st.verdict)
				if where == "" {
					continue
				}
				if where != st.where || progressKind(verdict) != progressKind(st.verdict) {
					st.progress = env.GetTime().AsTime()
				}
				st.where, st.verdict = where, verdict
				pods[key] = st
			}
		}
		if n == 0 {
			break
		}
		pending -= n
	}
	stored, _, err := objects.List[*corev1.Pod](ctx, sess.Store, "")
	if err != nil {
		return nil, 0, err
	}
	now := time.Now()
	out := []StuckPod{}
	add := func(key, where, why string, at time.Time) {
		if now.Sub(at) <= budget {
			return
		}
		ns, name, _ := strings.Cut(key, "/")
		out = append(out, StuckPod{Namespace: ns, Name: name, Stage: where, Reason: why, Since: at, ForSeconds: now.Sub(at).Seconds(), age: now.Sub(at)})
	}
	inStore := map[string]*corev1.Pod{}
	for _, p := range stored {
		key := p.GetMetadata().GetNamespace() + "/" + p.GetMetadata().GetName()
		inStore[key] = p
		if _, ok := pods[key]; ok || podReady(p) || p.GetMetadata().GetDeletionTimestamp() != nil {
			continue
		}
		if ph := p.GetStatus().GetPhase(); ph == "Succeeded" || ph == "Failed" {
			continue
		}
		if t := p.GetMetadata().GetCreationTimestamp(); t != nil {
			add(key, "unknown", fmt.Sprintf("%s, no event in the last %s", p.GetStatus().GetPhase(), since), t.AsTime())
		}
	}
	for key, st := range pods {
		if trace.Settled(st.verdict) {
			continue
		}
		p, ok := inStore[key]
		switch {
		case ok && (podReady(p) || p.GetMetadata().GetDeletionTimestamp() != nil):
			continue
		case ok && (p.GetStatus().GetPhase() == "Succeeded" || p.GetStatus().GetPhase() == "Failed"):
			continue // done: nothing more will happen to it
		case !ok && st.where != "api" && st.where != "admission" && st.where != "persistence":
			continue // it was stored, and is gone: deleted
		}
		add(key, st.where, st.verdict, st.progress)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].age > out[j].age })
	return out, len(pods), nil
}

// progressKind is what of a verdict counts as progress when it changes:
// its words before the first colon ("Pending" of "Pending:
// FailedScheduling: 0/3 nodes are available…").
func progressKind(verdict string) string {
	k, _, _ := strings.Cut(verdict, ":")
	return k
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.GetStatus().GetConditions() {
		if c.GetType() == "Ready" {
			return c.GetStatus() == "True"
		}
	}
	return false
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

// Ping gathers every stage replica's Pong for wait.
func Ping(ctx context.Context, nc *nats.Conn, wait time.Duration) []stage.Pong {
	inbox := nc.NewRespInbox()
	ch := make(chan *nats.Msg, 256)
	sub, err := nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return nil
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest(stage.PingSubject, inbox, nil); err != nil {
		return nil
	}
	var out []stage.Pong
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case m := <-ch:
			var p stage.Pong
			if json.Unmarshal(m.Data, &p) == nil {
				out = append(out, p)
			}
		case <-timer.C:
			sort.Slice(out, func(i, j int) bool { return out[i].Replica < out[j].Replica })
			return out
		case <-ctx.Done():
			return out
		}
	}
}
