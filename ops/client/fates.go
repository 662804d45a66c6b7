package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
)

// podNamespace and podName split a "namespace/name" key.
func podNamespace(key string) string { ns, _, _ := strings.Cut(key, "/"); return ns }
func podName(key string) string      { _, n, _ := strings.Cut(key, "/"); return n }

// fate is how a published pod ended up.
type fate int

const (
	fateUnknown fate = iota
	fateCreated      // stored, not yet scheduled
	fateScheduled
	fateRejected
	fateUnschedulable
)

// PublishError is a WaitFates that saw a pod refused (exit 1) or
// unschedulable (exit 2); each was printed already.
type PublishError struct {
	code int
	msg  string
}

func (e *PublishError) Error() string { return e.msg }
func (e *PublishError) ExitCode() int { return e.code }
func (e *PublishError) Silent() bool  { return true }

// WaitFates follows the events stream from sequence first until every pod
// of keys has a fate (scheduled, rejected, unschedulable) or ctx ends,
// printing each fate as it is known (with many, only the refusals and a
// summary).
func (sess *Session) WaitFates(ctx context.Context, first uint64, keys []string, many bool, out, errOut io.Writer) error {
	cons, err := sess.Bus.JetStream().OrderedConsumer(ctx, bus.EventsStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{bus.PodPrefix + ".>"},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    first,
	})
	if err != nil {
		return err
	}
	fates := make(map[string]fate, len(keys))
	for _, k := range keys {
		fates[k] = fateUnknown
	}
	pending := len(keys)
	counts := map[fate]int{}
	report := func(key string, f fate, env *eventsv1.Envelope) {
		switch p := env.PayloadMessage().(type) {
		case *eventsv1.PodRejected:
			fmt.Fprintln(errOut, (&StatusError{Status: withDefault(p.GetStatus())}).Error())
		case *eventsv1.PodUnschedulable:
			fmt.Fprintf(out, "pod/%s created, unschedulable: FailedScheduling: %s\n", podName(key), p.GetMessage())
		case *eventsv1.PodScheduled:
			if !many {
				fmt.Fprintf(out, "pod/%s scheduled to %s\n", podName(key), p.GetNodeName())
			}
		}
		counts[f]++
	}
	for pending > 0 {
		batch, err := cons.Fetch(500, jetstream.FetchMaxWait(time.Second))
		if err != nil && ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		if ctx.Err() != nil {
			break
		}
		for m := range batch.Messages() {
			envs, err := bus.DecodeEvents(m.Data())
			if err != nil {
				continue
			}
			for _, env := range envs {
				key := env.GetNamespace() + "/" + env.GetPodName()
				f, ok := fates[key]
				if !ok || f == fateScheduled || f == fateRejected || f == fateUnschedulable {
					continue
				}
				next := f
				switch env.PayloadMessage().(type) {
				case *eventsv1.PodPersisted:
					next = fateCreated
				case *eventsv1.PodScheduled:
					next = fateScheduled
				case *eventsv1.PodRejected:
					next = fateRejected
				case *eventsv1.PodUnschedulable:
					next = fateUnschedulable
				}
				if next == f {
					continue
				}
				fates[key] = next
				if next != fateCreated {
					pending--
					report(key, next, env)
				}
			}
		}
	}
	if pending > 0 {
		for _, k := range keys {
			switch fates[k] {
			case fateUnknown:
				fmt.Fprintf(errOut, "pod/%s: no fate known yet (podflow trace pod %s -n %s says where it is)\n", podName(k), podName(k), podNamespace(k))
			case fateCreated:
				fmt.Fprintf(out, "pod/%s created, not scheduled yet\n", podName(k))
			}
		}
	}
	if many {
		fmt.Fprintf(out, "%d pods: %d scheduled, %d rejected, %d unschedulable, %d undecided\n", len(keys), counts[fateScheduled], counts[fateRejected], counts[fateUnschedulable], pending)
	}
	switch {
	case counts[fateRejected] > 0 || pending > 0:
		return &PublishError{code: 1, msg: fmt.Sprintf("%d pods rejected, %d undecided", counts[fateRejected], pending)}
	case counts[fateUnschedulable] > 0:
		return &PublishError{code: 2, msg: fmt.Sprintf("%d pods unschedulable", counts[fateUnschedulable])}
	}
	return nil
}

// withDefault fills a rejection's Status for printing.
func withDefault(st *corev1.Status) *corev1.Status {
	if st == nil {
		return &corev1.Status{Reason: "Unknown", Message: "rejected without a status"}
	}
	return st
}
