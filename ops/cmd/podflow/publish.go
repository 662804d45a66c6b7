package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/ops/client"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
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
					fmt.Fprintf(out, "follow with: podflow trace pod %s -f -n %s (or publish --wait)\n", podName(keys[0]), podNamespace(keys[0]))
				}
				return nil
			}
			wctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			return waitFates(wctx, sess, first, keys, count > 0, out, cmd.ErrOrStderr())
		},
	}
	o.flags(cmd)
	cmd.Flags().StringVarP(&file, "filename", "f", "", "manifest with one or more Pods")
	cmd.Flags().IntVar(&count, "count", 0, "publish this many copies of each pod, suffixed -0, -1, ...")
	cmd.Flags().BoolVar(&wait, "wait", false, "follow each pod until it is scheduled, refused or found unschedulable, and exit non-zero unless scheduled")
	cmd.Flags().DurationVar(&timeout, "timeout", time.Minute, "with --wait, how long to wait for the pods' fate")
	return cmd
}

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

// publishError is a --wait that saw a pod refused (exit 1) or
// unschedulable (exit 2); each was printed already.
type publishError struct {
	code int
	msg  string
}

func (e *publishError) Error() string { return e.msg }
func (e *publishError) ExitCode() int { return e.code }
func (e *publishError) Silent() bool  { return true }

// waitFates follows the events stream from sequence first until every pod
// of keys has a fate (scheduled, rejected, unschedulable) or ctx ends,
// printing each fate as it is known (with many, only the refusals and a
// summary).
func waitFates(ctx context.Context, sess *client.Session, first uint64, keys []string, many bool, out, errOut io.Writer) error {
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
			fmt.Fprintln(errOut, (&client.StatusError{Status: withDefault(p.GetStatus())}).Error())
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
		return &publishError{code: 1, msg: fmt.Sprintf("%d pods rejected, %d undecided", counts[fateRejected], pending)}
	case counts[fateUnschedulable] > 0:
		return &publishError{code: 2, msg: fmt.Sprintf("%d pods unschedulable", counts[fateUnschedulable])}
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
