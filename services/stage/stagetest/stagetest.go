// Package stagetest runs a stage's logic in a unit test: a Publisher that
// records what the stage publishes and replies, an Env over it and an
// in-memory store (objectstest.KV), and Deliver to hand the stage one
// event as the runner would.
//
//	env, pub, kv := stagetest.NewEnv("persistence")
//	s := persistence.New(env)
//	stagetest.Start(t, s.Start) // for a stage with informers
//	err := s.Handle(ctx, stagetest.Deliver(env, &eventsv1.Envelope{...}))
//	// pub.Events(), pub.Replies(), objects.Get(ctx, env.Store, ...)
package stagetest

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/apiv1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/objects/objectstest"
	"github.com/podflow/podflow/services/stage"
)

// Publisher records every event published and every reply sent, in
// order. Set Err to make Publish fail (nothing is recorded then). It is
// safe for concurrent use.
type Publisher struct {
	mu      sync.Mutex
	err     error
	events  []*eventsv1.Envelope
	replies []Reply
}

// Reply is one recorded reply.
type Reply struct {
	Subject  string
	Response *apiv1.Response // decoded; nil if the bytes were no Response
	Data     []byte
}

var _ stage.Publisher = (*Publisher)(nil)

// Fail makes every later Publish return err (nil: succeed again).
func (p *Publisher) Fail(err error) {
	p.mu.Lock()
	p.err = err
	p.mu.Unlock()
}

// Publish validates e as the bus does, fills its id and time, and
// records a copy.
func (p *Publisher) Publish(ctx context.Context, e *eventsv1.Envelope) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := bus.ValidateEnvelope(e); err != nil {
		return err
	}
	if e.Id == "" {
		e.Id = eventsv1.EventID(e)
	}
	if e.Time == nil {
		e.Time = timestamppb.Now()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return p.err
	}
	p.events = append(p.events, proto.CloneOf(e))
	return nil
}

// Reply records a reply.
func (p *Publisher) Reply(subject string, data []byte) error {
	r := Reply{Subject: subject, Data: append([]byte(nil), data...)}
	resp := &apiv1.Response{}
	if proto.Unmarshal(data, resp) == nil {
		r.Response = resp
	}
	p.mu.Lock()
	p.replies = append(p.replies, r)
	p.mu.Unlock()
	return nil
}

// Events returns the events published so far.
func (p *Publisher) Events() []*eventsv1.Envelope {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*eventsv1.Envelope(nil), p.events...)
}

// Types returns the payload types of the events published so far.
func (p *Publisher) Types() []eventsv1.Type {
	var out []eventsv1.Type
	for _, e := range p.Events() {
		out = append(out, e.Type())
	}
	return out
}

// Replies returns the replies sent so far.
func (p *Publisher) Replies() []Reply {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Reply(nil), p.replies...)
}

// Reset forgets what was recorded.
func (p *Publisher) Reset() {
	p.mu.Lock()
	p.events, p.replies = nil, nil
	p.mu.Unlock()
}

// NewEnv returns an Env for stage name over a fresh recording Publisher
// and a fresh in-memory store, and both.
func NewEnv(name string) (stage.Env, *Publisher, *objectstest.KV) {
	pub, kv := &Publisher{}, objectstest.New()
	env := stage.Env{
		Pub: pub, Store: objects.FromKV(kv), Stage: name, Replica: name + "-test",
		Log: slog.New(slog.DiscardHandler),
	}
	return env, pub, kv
}

// Start runs start (a stage's Start, or part of it) under an errgroup
// that the end of the test cancels and waits for, failing the test if
// start fails or the group ends with an error.
func Start(t testing.TB, start func(ctx context.Context, g *errgroup.Group) error) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	g, gctx := errgroup.WithContext(ctx)
	t.Cleanup(func() {
		stop()
		if err := g.Wait(); err != nil {
			t.Error(err)
		}
	})
	if err := start(gctx, g); err != nil {
		t.Fatal(err)
	}
}

// Deliver returns e as the runner hands it to env's stage: first
// delivery, received now, on the subject Publish would put it on. e gets
// an id when it has none. DeliverOn delivers on another subject.
func Deliver(env stage.Env, e *eventsv1.Envelope) *bus.Delivery {
	return DeliverOn(env, e, bus.Subject(e))
}

// DeliverOn is Deliver on subject: an event whose envelope disagrees with
// the subject it was published on.
func DeliverOn(env stage.Env, e *eventsv1.Envelope, subject string) *bus.Delivery {
	if e.Id == "" {
		e.Id = fmt.Sprintf("test-%d", time.Now().UnixNano())
	}
	if e.Time == nil {
		e.Time = timestamppb.Now()
	}
	return &bus.Delivery{Envelope: e, Subject: subject, NumDelivered: 1, Received: time.Now(), Stage: env.Stage, Replica: env.Replica}
}
