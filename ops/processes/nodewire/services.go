package nodewire

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"golang.org/x/sync/errgroup"

	corev1 "github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/informer"
	"github.com/podflow/podflow/services/objects"
)

// ServiceSyncer is what WatchServices feeds: the node proxy
// (nodeagent/linux/proxy.Proxy). Sync gets every Service and EndpointSlice
// known and reports whether it reprogrammed anything; it is called from
// one goroutine.
type ServiceSyncer interface {
	Sync(ctx context.Context, services []*corev1.Service, slices []*corev1.EndpointSlice) (bool, error)
}

// Syncers feeds several ServiceSyncers from one watch (the node proxy and
// the cluster DNS): each gets every Sync, in order, whatever the others
// returned; it reports a change if any did, and every error.
type Syncers []ServiceSyncer

// Sync implements ServiceSyncer.
func (ss Syncers) Sync(ctx context.Context, services []*corev1.Service, slices []*corev1.EndpointSlice) (bool, error) {
	var changed bool
	var errs []error
	for _, s := range ss {
		c, err := s.Sync(ctx, services, slices)
		changed = changed || c
		if err != nil {
			errs = append(errs, err)
		}
	}
	return changed, errors.Join(errs...)
}

// ServiceWatchConfig tunes WatchServices.
type ServiceWatchConfig struct {
	// Resync re-applies the whole state this often even without a change
	// (level-triggered healing of a rule someone removed); 0 means 30 s.
	Resync time.Duration
	// OnSync, when set, is told how long after the change that triggered
	// it each programming finished (the "slice change → rule programmed"
	// figure).
	OnSync func(latency time.Duration)
	Logger *slog.Logger
}

// WatchServices watches Services and EndpointSlices in the store and
// hands them to s whenever one changes (coalescing bursts), until ctx is
// done. The nodeagent never imports services: the watching happens here
// and the proxy gets plain objects.
func WatchServices(ctx context.Context, st *objects.Store, s ServiceSyncer, cfg ServiceWatchConfig) error {
	if cfg.Resync <= 0 {
		cfg.Resync = 30 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	kick := make(chan time.Time, 1)
	poke := func() {
		select {
		case kick <- time.Now():
		default: // a sync is already due; it will see this change too
		}
	}
	svcs, err := informer.New(st, "", informer.Handlers[*corev1.Service]{
		OnAdd: func(*corev1.Service) { poke() }, OnUpdate: func(_, _ *corev1.Service) { poke() }, OnDelete: func(*corev1.Service) { poke() },
	})
	if err != nil {
		return err
	}
	eps, err := informer.New(st, "", informer.Handlers[*corev1.EndpointSlice]{
		OnAdd: func(*corev1.EndpointSlice) { poke() }, OnUpdate: func(_, _ *corev1.EndpointSlice) { poke() }, OnDelete: func(*corev1.EndpointSlice) { poke() },
	})
	if err != nil {
		return err
	}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return svcs.Run(ctx) })
	g.Go(func() error { return eps.Run(ctx) })
	g.Go(func() error {
		if err := svcs.WaitForSync(ctx); err != nil {
			return err
		}
		if err := eps.WaitForSync(ctx); err != nil {
			return err
		}
		t := time.NewTicker(cfg.Resync)
		defer t.Stop()
		since := time.Now()
		for {
			changed, err := s.Sync(ctx, svcs.List(""), eps.List(""))
			switch {
			case err != nil && ctx.Err() == nil:
				log.Warn("programming service rules", "err", err)
			case changed && cfg.OnSync != nil:
				cfg.OnSync(time.Since(since))
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case since = <-kick:
			case <-t.C:
				since = time.Now()
			}
		}
	})
	err = g.Wait()
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
