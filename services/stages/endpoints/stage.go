package endpoints

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/proto/podrules"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/informer"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
)

// ErrStoreBehind is returned (and the event retried) when an event reports
// a pod fact the store does not reflect yet.
var ErrStoreBehind = errors.New("endpoints: store does not reflect the event yet")

// Stage is one replica of the endpoints stage: it keeps the EndpointSlices
// of each Service listing the Ready pods its selector matches, a slice per
// set of resolved ports (the seed's failure 5 is a pod missing from them),
// and the Service's core/v1 Endpoints; a Service without a selector has
// its user's Endpoints mirrored into slices (legacy.go). Every sync
// computes the slices from a linearizable read of the namespace's pods and
// writes them with compare-and-swap, so replicas and retries never
// overwrite a fresher slice with a staler one.
type Stage struct {
	env      stage.Env
	services *informer.Informer[*corev1.Service]
	pods     *informer.Informer[*corev1.Pod]           // identities and labels only (NewMetaLabels), for label changes; syncs read pods from the store
	podsLazy *informer.Lazy                            // runs pods only while a Service with a selector exists
	eps      *informer.Informer[*corev1.Endpoints]     // core/v1 Endpoints, whose changes queue their Service (legacy.go)
	slices   *informer.Informer[*corev1.EndpointSlice] // identities and labels only: a deleted managed slice queues its Service
	locks    sync.Map                                  // service key -> *sync.Mutex: one sync per service at a time in this replica
	queue    serviceQueue
}

var (
	_ stage.Starter    = (*Stage)(nil)
	_ stage.Reconciler = (*Stage)(nil)
)

// NewStage returns an endpoints stage replica.
func NewStage(env stage.Env) (*Stage, error) {
	s := &Stage{env: env, queue: newServiceQueue()}
	enqueue := func(svc *corev1.Service) {
		s.queue.add(svc.GetMetadata().GetNamespace(), svc.GetMetadata().GetName())
		if s.podsLazy != nil {
			s.podsLazy.Poke()
		}
	}
	var err error
	s.services, err = informer.New[*corev1.Service](env.Store, "", informer.Handlers[*corev1.Service]{
		OnAdd: enqueue, OnUpdate: func(_, svc *corev1.Service) { enqueue(svc) }, OnDelete: enqueue,
	})
	if err != nil {
		return nil, err
	}
	// A pod's labels change without a pod event: queue every Service that
	// selected it before or selects it now. The cache decodes a pod's
	// identity and labels alone: every pod write reaches it, and Selects
	// reads nothing else.
	s.pods, err = informer.NewMetaLabels[*corev1.Pod](env.Store, "", informer.Handlers[*corev1.Pod]{
		OnUpdate: func(old, pod *corev1.Pod) {
			if maps.Equal(old.GetMetadata().GetLabels(), pod.GetMetadata().GetLabels()) {
				return
			}
			for _, svc := range s.services.List(pod.GetMetadata().GetNamespace()) {
				if Selects(svc, old) || Selects(svc, pod) {
					enqueue(svc)
				}
			}
		},
	})
	if err != nil {
		return nil, err
	}
	// Only a Service with a selector reads pods: with none (a cluster
	// with only default/kubernetes), the stage holds no watch of every
	// pod. A sync of such a Service waits for the informer's list first.
	s.podsLazy, err = informer.NewLazy(s.pods, s.selectorServices, podsIdle, s.services)
	if err != nil {
		return nil, err
	}
	// A user's Endpoints for a Service without a selector are mirrored:
	// a change of an Endpoints queues its Service — but not the stage's
	// own writes (skip-mirror), which would only sync the Service again;
	// a deletion always (the stage's own are written again).
	enqueueEps := func(e *corev1.Endpoints) { s.queue.add(e.GetMetadata().GetNamespace(), e.GetMetadata().GetName()) }
	users := func(e *corev1.Endpoints) {
		if e.GetMetadata().GetLabels()[LabelSkipMirror] != "true" {
			enqueueEps(e)
		}
	}
	s.eps, err = informer.New[*corev1.Endpoints](env.Store, "", informer.Handlers[*corev1.Endpoints]{
		OnAdd: users, OnUpdate: func(_, e *corev1.Endpoints) { users(e) }, OnDelete: enqueueEps,
	})
	if err != nil {
		return nil, err
	}
	// A managed slice deleted by someone else is written again at once,
	// as kube's EndpointSlice controller does (its own deletions queue
	// a sync that finds nothing to do).
	s.slices, err = informer.NewMetaLabels[*corev1.EndpointSlice](env.Store, "", informer.Handlers[*corev1.EndpointSlice]{
		OnDelete: func(sl *corev1.EndpointSlice) {
			if Managed(sl) {
				s.queue.add(sl.GetMetadata().GetNamespace(), sl.GetMetadata().GetLabels()[LabelServiceName])
			}
		},
	})
	return s, err
}

// podsIdle is how long the pod informer keeps running after the last
// Service with a selector is gone.
const podsIdle = time.Minute

// selectorServices reports whether a Service with a selector exists: the
// pod informer is wanted (informer.Lazy).
func (s *Stage) selectorServices() bool {
	for _, svc := range s.services.List("") {
		if HasSlice(svc) {
			return true
		}
	}
	return false
}

// Start runs the informers and, once they have synced, the worker that
// syncs a Service's slices as soon as the Service is created, changed or
// deleted, a pod's labels change, or one of its slices is deleted (the
// Services present at start are Reconcile's).
func (s *Stage) Start(ctx context.Context, g *errgroup.Group) error {
	var infs informer.Group
	infs.Add(s.services, s.podsLazy, s.eps, s.slices)
	if err := infs.Start(ctx, g); err != nil {
		return err
	}
	s.queue.open()
	g.Go(func() error {
		s.work(ctx)
		return nil
	})
	return nil
}

// work syncs the queued Services until ctx is done. A failed sync is
// queued again after a second; the resync heals whatever is still off.
func (s *Stage) work(ctx context.Context) {
	for {
		keys, ok := s.queue.take(ctx)
		if !ok {
			return
		}
		for _, k := range keys {
			if err := s.syncKey(ctx, k.ns, k.name); err != nil && ctx.Err() == nil {
				s.env.Log.Warn("syncing a changed Service's slice", "service", k.ns+"/"+k.name, "err", err)
				time.AfterFunc(time.Second, func() { s.queue.add(k.ns, k.name) })
			}
		}
	}
}

// syncKey syncs the Service ns/name as the informer has it now, or
// removes its managed slice once it is gone from the store too.
func (s *Stage) syncKey(ctx context.Context, ns, name string) error {
	if svc, ok := s.services.Get(ns, name); ok {
		return s.sync(ctx, nil, svc)
	}
	if err := s.removeLegacy(ctx, ns, name); err != nil {
		return err
	}
	sls, err := s.managedSlices(ctx, ns, name)
	if err != nil {
		return err
	}
	var errs []error
	for _, sl := range sls {
		errs = append(errs, s.removeOrphan(ctx, sl))
	}
	return errors.Join(errs...)
}

// Handle reacts to a pod becoming Ready, NotReady, or deleted. It acts
// only on events whose envelope agrees with their subject and, for a
// stored pod, come from the node it is bound to (a deletion: once it is
// being deleted); others are refused (stage.CheckSubject, stage.CheckPodEvent).
func (s *Stage) Handle(ctx context.Context, d *bus.Delivery) error {
	env := d.Envelope
	if err := stage.CheckSubject(s.env.Log, d); err != nil {
		return err
	}
	ns := env.GetNamespace()
	// Services without a selector (default/kubernetes) have their slices
	// kept by their owner: a namespace with only those needs no read.
	svcs := slices.DeleteFunc(s.services.List(ns), func(svc *corev1.Service) bool { return !HasSlice(svc) })
	if len(svcs) == 0 {
		return nil
	}
	pod, err := objects.Get[*corev1.Pod](ctx, s.env.Store, ns, env.GetPodName())
	switch {
	case errors.Is(err, raftstore.ErrNotFound):
		pod = nil
	case err != nil:
		return err
	}
	if pod != nil && pod.GetMetadata().GetUid() != env.GetPodUid() {
		pod = nil // another incarnation; the event is about a pod already gone
	}
	if err := stage.CheckPodEvent(s.env.Log, d, pod); err != nil {
		return err
	}
	switch env.Type() {
	case "PodDeleted":
		if pod != nil {
			return fmt.Errorf("%w: pod %s/%s still stored", ErrStoreBehind, ns, env.GetPodName())
		}
	case "PodReady", "PodNotReady":
		if pod == nil {
			return nil
		}
		if podrules.AppliedSeq(pod) < env.GetGeneration() {
			return fmt.Errorf("%w: pod %s/%s at status seq %d, event at %d", ErrStoreBehind, ns, env.GetPodName(), podrules.AppliedSeq(pod), env.GetGeneration())
		}
	}
	var errs []error
	for _, svc := range svcs {
		if pod == nil || Selects(svc, pod) {
			if err := s.sync(ctx, d, svc); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// Reconcile syncs every Service and removes the slices, Endpoints and
// mirrored slices of deleted Services.
func (s *Stage) Reconcile(ctx context.Context) error {
	var errs []error
	for _, svc := range s.services.List("") {
		if err := s.sync(ctx, nil, svc); err != nil {
			errs = append(errs, err)
		}
	}
	sls, _, err := objects.List[*corev1.EndpointSlice](ctx, s.env.Store, "")
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	gone := map[[2]string]bool{} // Services whose Endpoints or mirrored slices may be left (legacy.go)
	for _, sl := range sls {
		if err := s.removeOrphan(ctx, sl); err != nil {
			errs = append(errs, err)
		}
		if md := sl.GetMetadata(); Mirrored(sl) {
			gone[[2]string{md.GetNamespace(), md.GetLabels()[LabelServiceName]}] = true
		}
	}
	for _, e := range s.eps.List("") {
		if md := e.GetMetadata(); md.GetLabels()[LabelSkipMirror] == "true" {
			gone[[2]string{md.GetNamespace(), md.GetName()}] = true
		}
	}
	for k := range gone {
		if _, ok := s.services.Get(k[0], k[1]); !ok {
			if err := s.removeLegacy(ctx, k[0], k[1]); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// removeOrphan deletes sl if this stage manages it and its Service is
// gone (from the cache and from the store).
func (s *Stage) removeOrphan(ctx context.Context, sl *corev1.EndpointSlice) error {
	md := sl.GetMetadata()
	if !Managed(sl) {
		return nil
	}
	if _, ok := s.services.Get(md.GetNamespace(), md.GetLabels()[LabelServiceName]); ok {
		return nil
	}
	if _, err := objects.Get[*corev1.Service](ctx, s.env.Store, md.GetNamespace(), md.GetLabels()[LabelServiceName]); errors.Is(err, raftstore.ErrNotFound) {
		_, err := s.env.Store.Delete(ctx, objects.EndpointSlices, md.GetNamespace(), md.GetName(), objects.Revision(sl))
		if err != nil && !errors.Is(err, raftstore.ErrNotFound) && !errors.Is(err, raftstore.ErrConflict) {
			return err
		}
	}
	return nil
}

// sync brings svc's slices to their desired state; d is the event that
// caused the sync (nil from Reconcile).
func (s *Stage) sync(ctx context.Context, d *bus.Delivery, svc *corev1.Service) error {
	ns, name := svc.GetMetadata().GetNamespace(), svc.GetMetadata().GetName()
	mu, _ := s.locks.LoadOrStore(ns+"/"+name, &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()
	if !HasSlice(svc) {
		// Its slices are its owner's (default/kubernetes: the api
		// replicas'); its owner's Endpoints are mirrored (legacy.go).
		return s.mirror(ctx, svc)
	}
	// The pod informer must have listed before the pods are read, so that
	// a relabelling after the read reaches its handler.
	if err := s.podsLazy.WaitForSync(ctx); err != nil {
		return err
	}
	for {
		// Read the slices first, then the pods: a pod change after the
		// list triggers another sync, and a concurrent writer's change of
		// a slice makes our compare-and-swap fail.
		cur, err := s.managedSlices(ctx, ns, name)
		if err != nil {
			return err
		}
		pods, _, err := objects.List[*corev1.Pod](ctx, s.env.Store, ns)
		if err != nil {
			return err
		}
		want := Desired(svc, pods)
		changed, err := s.writeSlices(ctx, cur, want)
		if errors.Is(err, raftstore.ErrConflict) || errors.Is(err, raftstore.ErrAlreadyExists) {
			continue
		}
		if err != nil {
			return err
		}
		if changed {
			if err := s.announce(ctx, d, svc, cur, want); err != nil {
				return err
			}
		}
		return s.syncEndpoints(ctx, svc, want)
	}
}

// managedSlices reads the slices the stage keeps for the Service ns/name.
func (s *Stage) managedSlices(ctx context.Context, ns, name string) ([]*corev1.EndpointSlice, error) {
	all, _, err := objects.List[*corev1.EndpointSlice](ctx, s.env.Store, ns)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(sl *corev1.EndpointSlice) bool {
		return !Managed(sl) || sl.GetMetadata().GetLabels()[LabelServiceName] != name
	}), nil
}

// writeSlices makes the stored slices cur exactly want (stamped with
// what the store keeps: uid, creation time, generation): the new ones
// created (one of the same name it does not manage is written over), the
// changed ones updated (compare-and-swap), then the others
// deleted, as kube's reconciler orders its writes (a reader may see an
// endpoint twice for a moment, never miss one that stays).
func (s *Stage) writeSlices(ctx context.Context, cur, want []*corev1.EndpointSlice) (changed bool, err error) {
	have := map[string]*corev1.EndpointSlice{}
	for _, sl := range cur {
		have[sl.GetMetadata().GetName()] = sl
	}
	for _, w := range want {
		c, ok := have[w.Metadata.Name]
		delete(have, w.Metadata.Name)
		if !ok {
			// A slice of that name the stage does not manage (yet) is
			// taken over, as the one slice named after its Service was.
			c, err = objects.Get[*corev1.EndpointSlice](ctx, s.env.Store, w.Metadata.Namespace, w.Metadata.Name)
			switch {
			case err == nil:
				ok = true
			case !errors.Is(err, raftstore.ErrNotFound):
				return changed, err
			}
		}
		switch {
		case !ok:
			_, err = s.env.Store.Create(ctx, stamped(w))
		case Equal(c, w):
			continue
		default:
			w.Metadata.Uid = c.GetMetadata().GetUid()
			w.Metadata.CreationTimestamp = c.GetMetadata().GetCreationTimestamp()
			w.Metadata.Generation = c.GetMetadata().GetGeneration() + 1
			objects.SetRevision(w, objects.Revision(c))
			_, err = s.env.Store.Update(ctx, w)
		}
		if err != nil {
			return changed, err
		}
		changed = true
	}
	for _, sl := range have {
		_, err := s.env.Store.Delete(ctx, objects.EndpointSlices, sl.GetMetadata().GetNamespace(), sl.GetMetadata().GetName(), objects.Revision(sl))
		if errors.Is(err, raftstore.ErrNotFound) {
			err = raftstore.ErrConflict // gone under us: read again
		}
		if err != nil {
			return changed, err
		}
		changed = true
	}
	return changed, nil
}

// announce publishes EndpointsUpdated for the pod whose event caused the
// change, so the pod's trace shows it joining or leaving the Service.
func (s *Stage) announce(ctx context.Context, d *bus.Delivery, svc *corev1.Service, before, after []*corev1.EndpointSlice) error {
	if d == nil {
		return nil
	}
	uid := d.Envelope.GetPodUid()
	in := func(sls []*corev1.EndpointSlice) *corev1.EndpointSlice {
		for _, sl := range sls {
			for _, e := range sl.GetEndpoints() {
				if e.GetTargetRef().GetUid() == uid {
					return sl
				}
			}
		}
		return nil
	}
	was, is := in(before), in(after)
	if (was != nil) == (is != nil) {
		return nil
	}
	ready := 0
	for _, sl := range after {
		for _, e := range sl.GetEndpoints() {
			if e.GetConditions().GetReady() {
				ready++
			}
		}
	}
	// The slice the pod joined or left; its generation orders the
	// announcements of one slice.
	sl := cmp.Or(is, was)
	gen := sl.GetMetadata().GetGeneration()
	for _, a := range after {
		if a.GetMetadata().GetName() == sl.GetMetadata().GetName() {
			gen = a.GetMetadata().GetGeneration()
		}
	}
	next := d.Next(&eventsv1.EndpointsUpdated{
		Service: svc.GetMetadata().GetName(), Slice: sl.GetMetadata().GetName(), ReadyEndpoints: int32(ready), Added: is != nil,
	})
	next.Generation = gen
	return s.env.Pub.Publish(ctx, next)
}
