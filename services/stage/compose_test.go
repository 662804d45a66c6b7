package stage_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/services/stage"
)

// part records what Compose calls on it in log.
type part struct {
	name     string
	log      *[]string
	startErr error
	recErr   error
}

func (p part) Start(context.Context, *errgroup.Group) error {
	*p.log = append(*p.log, "start "+p.name)
	return p.startErr
}

func (p part) Reconcile(context.Context) error {
	*p.log = append(*p.log, "reconcile "+p.name)
	return p.recErr
}

func (p part) Handle(context.Context, *bus.Delivery) error {
	*p.log = append(*p.log, "handle "+p.name)
	return nil
}

func (p part) RegisterMetrics(prometheus.Registerer) error {
	*p.log = append(*p.log, "metrics "+p.name)
	return nil
}

// startOnly is a part that is no Reconciler.
type startOnly struct{ part }

func (s startOnly) Reconcile() {}

// TestCompose: the composed handler handles events with the stage alone,
// starts the stage then every part in order (stopping at the first that
// fails), reconciles the stage and every part that is a Reconciler, and
// registers the stage's metrics.
func TestCompose(t *testing.T) {
	ctx := context.Background()
	var log []string
	boom := errors.New("boom")
	h := stage.Compose(part{name: "stage", log: &log}, part{name: "ctrl", log: &log, recErr: boom}, startOnly{part{name: "server", log: &log}})

	var g errgroup.Group
	if err := h.(stage.Starter).Start(ctx, &g); err != nil {
		t.Fatal(err)
	}
	if err := h.Handle(ctx, &bus.Delivery{}); err != nil {
		t.Fatal(err)
	}
	if err := h.(stage.Reconciler).Reconcile(ctx); !errors.Is(err, boom) {
		t.Fatalf("Reconcile: %v, want the controller's %v", err, boom)
	}
	if err := h.(interface {
		RegisterMetrics(prometheus.Registerer) error
	}).RegisterMetrics(prometheus.NewRegistry()); err != nil {
		t.Fatal(err)
	}
	want := []string{"start stage", "start ctrl", "start server", "handle stage", "reconcile stage", "reconcile ctrl", "metrics stage"}
	if !slices.Equal(log, want) {
		t.Fatalf("calls:\n got %q\nwant %q", log, want)
	}

	log = nil
	h = stage.Compose(part{name: "stage", log: &log}, part{name: "ctrl", log: &log, startErr: boom}, part{name: "server", log: &log})
	if err := h.(stage.Starter).Start(ctx, &g); !errors.Is(err, boom) {
		t.Fatalf("Start: %v, want %v", err, boom)
	}
	if want := []string{"start stage", "start ctrl"}; !slices.Equal(log, want) {
		t.Fatalf("calls after a failed start: got %q, want %q", log, want)
	}
}
