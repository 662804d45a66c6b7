package endpoints

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/proto/podrules"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/informer"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
)

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
	pods     *informer.Informer[*corev1.Pod]           // what makes a pod an endpoint only (podwatch.go); syncs read pods from the store
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
	// The pod watch drives the stage, as kube's EndpointSlice
	// controller's pod informer drives it: a pod added, changed in what
	// makes it an endpoint (readiness, termination, IP, labels, ...) or
	// deleted queues the Services that select it, before or now. The
	// cache keeps of a pod only what that comparison and an announcement
	// read (podwatch.go).
	s.pods, err = informer.NewDecoding[*corev1.Pod](env.Store, "", informer.Handlers[*corev1.Pod]{
		OnAdd:    func(pod *corev1.Pod) { s.podChanged(nil, pod) },
		OnUpdate: s.podChanged,
		OnDelete: s.podDeleted,
	}, decodeWatchedPod)
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

// podChanged queues the Services a pod's change concerns, as kube's
// updatePod and getPodServiceMemberships: when what makes it an endpoint
// changed, every Service that selected it or selects it now; when only its
// labels did, those that selected it and no longer do, or the reverse. A
// change of an existing pod is the cause of the sync, announced if the pod
// joins or leaves (a pod added is never Ready yet; after a relist, its
// sync heals the slice silently). old is nil for a pod added.
func (s *Stage) podChanged(old, pod *corev1.Pod) {
	podChanged, labelsChanged := true, false
	var causes []cause
	if old != nil {
		if podChanged, labelsChanged = endpointsChanged(old, pod); !podChanged && !labelsChanged {
			return
		}
		causes = []cause{{pod: pod, at: time.Now()}}
	}
	ns := pod.GetMetadata().GetNamespace()
	for _, svc := range s.services.List(ns) {
		if !HasSlice(svc) {
			continue
		}
		was, is := old != nil && Selects(svc, old), Selects(svc, pod)
		if was != is || podChanged && is {
			s.queue.add(ns, svc.GetMetadata().GetName(), causes...)
		}
	}
}

// podDeleted queues the Services that selected a deleted pod, the pod
// being the cause (it leaves their slices, if it was still in).
func (s *Stage) podDeleted(pod *corev1.Pod) {
	ns := pod.GetMetadata().GetNamespace()
	for _, svc := range s.services.List(ns) {
		if HasSlice(svc) && Selects(svc, pod) {
			s.queue.add(ns, svc.GetMetadata().GetName(), cause{pod: pod, at: time.Now()})
		}
	}
}

// Start runs the informers and, once they have synced, the worker that
// syncs a Service's slices as soon as the Service is created, changed or
// deleted, a pod it selects changes (pod watch), or one of its slices is
// deleted (the Services present at start are Reconcile's).
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
		items, ok := s.queue.take(ctx)
		if !ok {
			return
		}
		for _, k := range items {
			if err := s.syncKey(ctx, k.ns, k.name, k.causes); err != nil && ctx.Err() == nil {
				s.env.Log.Warn("syncing a changed Service's slice", "service", k.ns+"/"+k.name, "err", err)
				time.AfterFunc(time.Second, func() { s.queue.add(k.ns, k.name, k.causes...) })
			}
		}
	}
}

// syncKey syncs the Service ns/name as the informer has it now, or
// removes its managed slice once it is gone from the store too; causes
// are the pods whose changes queued it.
func (s *Stage) syncKey(ctx context.Context, ns, name string, causes []cause) error {
	if svc, ok := s.services.Get(ns, name); ok {
		return s.sync(ctx, causes, svc)
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

// Handle is never called: the stage consumes no events (its pod watch
// drives it).
func (s *Stage) Handle(context.Context, *bus.Delivery) error {
	return bus.Permanent(errors.New("endpoints: the stage consumes no events"))
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

// sync brings svc's slices to their desired state; causes are the pods
// whose changes caused the sync (none from Reconcile or a change of the
// Service).
func (s *Stage) sync(ctx context.Context, causes []cause, svc *corev1.Service) error {
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
			if err := s.announce(ctx, causes, svc, cur, want); err != nil {
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

// announce publishes EndpointsUpdated for each pod among causes that the
// change made join or leave svc's slices, so the pod's trace shows it. The
// event is the pod's (stage.PodEvent: its uid, request id, trace), handled
// from when the pod watch saw the change; it is caused by the pod's
// PodReady or PodNotReady when a readiness change moved it (causeID).
func (s *Stage) announce(ctx context.Context, causes []cause, svc *corev1.Service, before, after []*corev1.EndpointSlice) error {
	if len(causes) == 0 {
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
	var errs []error
	for _, c := range causes {
		uid := c.pod.GetMetadata().GetUid()
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
			continue
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
		next, err := stage.PodEvent(s.env, c.pod, 1, &eventsv1.EndpointsUpdated{
			Service: svc.GetMetadata().GetName(), Slice: sl.GetMetadata().GetName(), ReadyEndpoints: int32(ready), Added: is != nil,
		})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		next.Generation, next.CausedBy = gen, causeID(c.pod, is != nil)
		next.HandledStart, next.HandledEnd = timestamppb.New(c.at), timestamppb.Now()
		errs = append(errs, s.env.Pub.Publish(ctx, next))
	}
	return errors.Join(errs...)
}

// causeID is the id of the node agent's PodReady (joined) or PodNotReady
// (left) that pod's last applied status report carries when a readiness
// change moved it — a step of that PodStatusReport, numbered with its seq
// (eventsv1.EventID) — or "" when something else did (its labels, its
// deletion).
func causeID(pod *corev1.Pod, joined bool) string {
	env := &eventsv1.Envelope{PodUid: pod.GetMetadata().GetUid(), Generation: podrules.AppliedSeq(pod), Attempt: 1}
	switch ready := podrules.IsPodReady(pod); {
	case env.Generation == 0:
		return ""
	case joined && ready:
		env.Payload = &eventsv1.Envelope_PodReady{PodReady: &eventsv1.PodReady{}}
	case !joined && !ready && pod.GetMetadata().GetDeletionTimestamp() == nil:
		env.Payload = &eventsv1.Envelope_PodNotReady{PodNotReady: &eventsv1.PodNotReady{}}
	default:
		return ""
	}
	return eventsv1.EventID(env)
}
