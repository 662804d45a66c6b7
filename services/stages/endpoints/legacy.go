package endpoints

// core/v1 Endpoints, as two kube-controller-manager controllers keep them:
// the endpoints controller writes a Service's Endpoints from the same pods
// as its EndpointSlice (for a Service with a selector), and the
// EndpointSlice mirroring controller turns the Endpoints a user wrote for
// a Service without a selector into EndpointSlices.

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/netip"
	"slices"
	"strconv"
	"sync"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
)

// Labels of the endpoints and mirroring controllers.
const (
	// LabelSkipMirror marks the Endpoints the stage writes: they are
	// not mirrored (their slice exists already).
	LabelSkipMirror = "endpointslice.kubernetes.io/skip-mirror"
	// MirrorManagedBy is the EndpointSlice mirroring controller's name,
	// the manager of the slices it mirrors.
	MirrorManagedBy = "endpointslicemirroring-controller.k8s.io"
	// MaxMirrorAddresses bounds the addresses mirrored per subset, as
	// the mirroring controller's default.
	MaxMirrorAddresses = 1000
)

// DesiredEndpoints is the core/v1 Endpoints of svc, a Service with a
// selector whose slices are sls, as kube's endpoints controller writes it:
// named after the Service, with its labels, the headless label for a
// Service without a cluster IP and skip-mirror; one subset per set of
// resolved ports (a slice) with its ready addresses, its not-ready ones
// and its ports, ordered by ports (RepackSubsets). An endpoint none of
// whose ports resolved is left out, unless the Service has no ports (a
// headless Service's addresses alone); no subset without an address.
func DesiredEndpoints(svc *corev1.Service, sls []*corev1.EndpointSlice) *corev1.Endpoints {
	labels := map[string]string{}
	for k, v := range svc.GetMetadata().GetLabels() {
		labels[k] = v
	}
	if ip := svc.GetSpec().GetClusterIp(); ip == "" || ip == "None" {
		labels[LabelHeadless] = ""
	}
	labels[LabelSkipMirror] = "true"
	eps := &corev1.Endpoints{Metadata: &corev1.ObjectMeta{
		Name: svc.GetMetadata().GetName(), Namespace: svc.GetMetadata().GetNamespace(), Labels: labels,
	}}
	type subset struct {
		key string
		sub *corev1.EndpointSubset
	}
	var subs []subset
	for _, sl := range sls {
		if len(sl.GetPorts()) == 0 && len(svc.GetSpec().GetPorts()) > 0 {
			continue
		}
		sub := &corev1.EndpointSubset{}
		for _, e := range sl.GetEndpoints() {
			for _, a := range e.GetAddresses() {
				addr := &corev1.EndpointAddress{Ip: a, Hostname: e.GetHostname(), NodeName: e.NodeName, TargetRef: e.GetTargetRef()}
				if c := e.GetConditions(); c == nil || c.Ready == nil || c.GetReady() {
					sub.Addresses = append(sub.Addresses, addr)
				} else {
					sub.NotReadyAddresses = append(sub.NotReadyAddresses, addr)
				}
			}
		}
		if len(sub.Addresses)+len(sub.NotReadyAddresses) == 0 {
			continue
		}
		for _, p := range sl.GetPorts() {
			sub.Ports = append(sub.Ports, &corev1.EndpointsPort{Name: p.GetName(), Port: p.GetPort(),
				Protocol: cmp.Or(p.GetProtocol(), "TCP"), AppProtocol: p.AppProtocol})
		}
		subs = append(subs, subset{portsKey(sl.GetPorts()), sub})
	}
	slices.SortFunc(subs, func(a, b subset) int { return cmp.Compare(a.key, b.key) })
	for _, s := range subs {
		eps.Subsets = append(eps.Subsets, s.sub)
	}
	return eps
}

// Mirror is the EndpointSlices mirroring eps, the Endpoints of svc (a
// Service without a selector), as kube's mirroring controller makes them:
// one per subset (its IPv4 addresses, at most MaxMirrorAddresses, ready or
// not as listed; its ports), labelled with the Endpoints' labels, the
// Service's name and the mirroring controller. None for Endpoints marked
// skip-mirror.
func Mirror(svc *corev1.Service, eps *corev1.Endpoints) []*corev1.EndpointSlice {
	if eps == nil || eps.GetMetadata().GetLabels()[LabelSkipMirror] == "true" {
		return nil
	}
	ns, name := svc.GetMetadata().GetNamespace(), svc.GetMetadata().GetName()
	var out []*corev1.EndpointSlice
	for i, sub := range eps.GetSubsets() {
		labels := map[string]string{}
		for k, v := range eps.GetMetadata().GetLabels() {
			if k != LabelServiceName && k != LabelManagedBy && k != LabelSkipMirror {
				labels[k] = v
			}
		}
		labels[LabelServiceName] = name
		labels[LabelManagedBy] = MirrorManagedBy
		sl := &corev1.EndpointSlice{Metadata: &corev1.ObjectMeta{Name: mirrorName(name, i), Namespace: ns, Labels: labels,
			OwnerReferences: []*corev1.OwnerReference{{ApiVersion: "v1", Kind: "Endpoints", Name: name,
				Uid: eps.GetMetadata().GetUid(), Controller: true, BlockOwnerDeletion: true}}},
			AddressType: "IPv4"}
		n := 0
		add := func(a *corev1.EndpointAddress, ready bool) {
			if ip, err := netip.ParseAddr(a.GetIp()); err != nil || !ip.Is4() || n >= MaxMirrorAddresses {
				return
			}
			n++
			ep := &corev1.Endpoint{Addresses: []string{a.GetIp()}, Conditions: &corev1.EndpointConditions{Ready: proto.Bool(ready)},
				TargetRef: a.GetTargetRef(), NodeName: a.NodeName}
			if a.GetHostname() != "" {
				ep.Hostname = proto.String(a.GetHostname())
			}
			sl.Endpoints = append(sl.Endpoints, ep)
		}
		for _, a := range sub.GetAddresses() {
			add(a, true)
		}
		for _, a := range sub.GetNotReadyAddresses() {
			add(a, false)
		}
		for _, p := range sub.GetPorts() {
			sp := &corev1.EndpointPort{Name: proto.String(p.GetName()), Port: proto.Int32(p.GetPort()),
				Protocol: proto.String(cmp.Or(p.GetProtocol(), "TCP")), AppProtocol: p.AppProtocol}
			sl.Ports = append(sl.Ports, sp)
		}
		out = append(out, sl)
	}
	return out
}

// mirrorName names the slice mirroring subset i of the Endpoints name.
func mirrorName(name string, i int) string {
	h := sha256.Sum256([]byte(name + "/" + strconv.Itoa(i)))
	return name + "-" + hex.EncodeToString(h[:3])
}

// Mirrored reports whether sl is a slice the stage mirrored.
func Mirrored(sl *corev1.EndpointSlice) bool {
	return sl.GetMetadata().GetLabels()[LabelManagedBy] == MirrorManagedBy
}

// stamped gives o, about to be created, what kube-apiserver gives every
// new object: a uid and its creation time (kubectl's AGE).
func stamped[T objects.Object](o T) T {
	md := o.GetMetadata()
	md.Uid, md.CreationTimestamp = uuid.NewString(), timestamppb.Now()
	return o
}

// syncEndpoints writes svc's Endpoints for its slices sls, when they
// differ from the stored ones (compare-and-swap; a conflict reads again).
func (s *Stage) syncEndpoints(ctx context.Context, svc *corev1.Service, sls []*corev1.EndpointSlice) error {
	want := DesiredEndpoints(svc, sls)
	for {
		cur, err := objects.Get[*corev1.Endpoints](ctx, s.env.Store, want.Metadata.Namespace, want.Metadata.Name)
		switch {
		case errors.Is(err, raftstore.ErrNotFound):
			_, err = s.env.Store.Create(ctx, stamped(want))
		case err != nil:
			return err
		case sameEndpoints(cur, want):
			return nil
		default:
			want.Metadata.Uid, want.Metadata.CreationTimestamp = cur.GetMetadata().GetUid(), cur.GetMetadata().GetCreationTimestamp()
			want.Metadata.Generation = cur.GetMetadata().GetGeneration() + 1
			objects.SetRevision(want, objects.Revision(cur))
			_, err = s.env.Store.Update(ctx, want)
		}
		if errors.Is(err, raftstore.ErrConflict) || errors.Is(err, raftstore.ErrAlreadyExists) {
			continue
		}
		return err
	}
}

func sameEndpoints(a, b *corev1.Endpoints) bool {
	if len(a.GetSubsets()) != len(b.GetSubsets()) {
		return false
	}
	for i := range a.GetSubsets() {
		if !proto.Equal(a.GetSubsets()[i], b.GetSubsets()[i]) {
			return false
		}
	}
	la, lb := a.GetMetadata().GetLabels(), b.GetMetadata().GetLabels()
	if len(la) != len(lb) {
		return false
	}
	for k, v := range la {
		if w, ok := lb[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// mirror brings the mirrored slices of svc (a Service the stage keeps no
// slice for) to Mirror of its stored Endpoints: none for an ExternalName
// Service or without Endpoints.
func (s *Stage) mirror(ctx context.Context, svc *corev1.Service) error {
	ns, name := svc.GetMetadata().GetNamespace(), svc.GetMetadata().GetName()
	var want []*corev1.EndpointSlice
	if svc.GetSpec().GetType() != "ExternalName" && len(svc.GetSpec().GetSelector()) == 0 {
		eps, err := objects.Get[*corev1.Endpoints](ctx, s.env.Store, ns, name)
		if err != nil && !errors.Is(err, raftstore.ErrNotFound) {
			return err
		}
		if err == nil {
			want = Mirror(svc, eps)
		}
	}
	return s.setMirrored(ctx, ns, name, want)
}

// setMirrored makes the mirrored slices of the Service ns/name exactly
// want: created, updated when they differ, the others deleted.
func (s *Stage) setMirrored(ctx context.Context, ns, name string, want []*corev1.EndpointSlice) error {
	for {
		err := s.setMirroredOnce(ctx, ns, name, want)
		if !errors.Is(err, raftstore.ErrConflict) && !errors.Is(err, raftstore.ErrAlreadyExists) {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// Another writer moved a slice on: read again.
		for _, w := range want {
			w.Metadata.Uid, w.Metadata.CreationTimestamp, w.Metadata.ResourceVersion = "", nil, ""
		}
	}
}

func (s *Stage) setMirroredOnce(ctx context.Context, ns, name string, want []*corev1.EndpointSlice) error {
	all, _, err := objects.List[*corev1.EndpointSlice](ctx, s.env.Store, ns)
	if err != nil {
		return err
	}
	have := map[string]*corev1.EndpointSlice{}
	for _, sl := range all {
		if Mirrored(sl) && sl.GetMetadata().GetLabels()[LabelServiceName] == name {
			have[sl.GetMetadata().GetName()] = sl
		}
	}
	var errs []error
	for _, w := range want {
		cur, ok := have[w.Metadata.Name]
		delete(have, w.Metadata.Name)
		switch {
		case !ok:
			_, err = s.env.Store.Create(ctx, stamped(w))
		case Equal(cur, w):
			continue
		default:
			w.Metadata.Uid, w.Metadata.CreationTimestamp = cur.GetMetadata().GetUid(), cur.GetMetadata().GetCreationTimestamp()
			w.Metadata.Generation = cur.GetMetadata().GetGeneration() + 1
			objects.SetRevision(w, objects.Revision(cur))
			_, err = s.env.Store.Update(ctx, w)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	for _, sl := range have {
		_, err := s.env.Store.Delete(ctx, objects.EndpointSlices, ns, sl.GetMetadata().GetName(), objects.Revision(sl))
		if err != nil && !errors.Is(err, raftstore.ErrNotFound) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeLegacy deletes what the stage made for the Service ns/name, gone
// from the cache and the store: its Endpoints (those marked skip-mirror,
// the stage's own) and its mirrored slices.
func (s *Stage) removeLegacy(ctx context.Context, ns, name string) error {
	mu, _ := s.locks.LoadOrStore(ns+"/"+name, &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()
	if _, err := objects.Get[*corev1.Service](ctx, s.env.Store, ns, name); err == nil || !errors.Is(err, raftstore.ErrNotFound) {
		return err // still there (or unknown): nothing goes
	}
	var errs []error
	eps, err := objects.Get[*corev1.Endpoints](ctx, s.env.Store, ns, name)
	switch {
	case err == nil && eps.GetMetadata().GetLabels()[LabelSkipMirror] == "true":
		if _, err := s.env.Store.Delete(ctx, objects.Endpoints, ns, name, objects.Revision(eps)); err != nil &&
			!errors.Is(err, raftstore.ErrNotFound) && !errors.Is(err, raftstore.ErrConflict) {
			errs = append(errs, err)
		}
	case err != nil && !errors.Is(err, raftstore.ErrNotFound):
		errs = append(errs, err)
	}
	errs = append(errs, s.setMirrored(ctx, ns, name, nil))
	return errors.Join(errs...)
}
