package apiserver

// apiregistration.k8s.io: the APIServices kube-apiserver's aggregator
// keeps for the groups it serves itself. The kind is stored as any
// generic kind (services/registry: kube-aggregator's strategy, validation
// and status subresource); LocalAPIServices is the part of the
// aggregator that writes them: its autoregister controller (one APIService
// per built-in group version, created at start) and its availability
// controller for local services (Available=True, reason Local). An
// APIService naming a Service is an extension API server's: proxied and
// checked by aggregator.go.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/manifest"
	"github.com/podflow/podflow/services/objects"
)

// apiServicePriority is an APIService's groupPriorityMinimum and
// versionPriority.
type apiServicePriority struct{ group, version int32 }

// apiServicePriorities are kube-apiserver's priorities of the built-in
// group versions (cmd/kube-apiserver/app/aggregator.go and
// k8s.io/kubernetes/pkg/controlplane/apiserver's
// DefaultGenericAPIServicePriorities). As kube-apiserver, a served group
// version without one gets no APIService.
var apiServicePriorities = map[schema.GroupVersion]apiServicePriority{
	{Group: "", Version: "v1"}:                             {18000, 1},
	{Group: "apps", Version: "v1"}:                         {17800, 15},
	{Group: "events.k8s.io", Version: "v1"}:                {17750, 15},
	{Group: "authentication.k8s.io", Version: "v1"}:        {17700, 15},
	{Group: "authorization.k8s.io", Version: "v1"}:         {17600, 15},
	{Group: "autoscaling", Version: "v1"}:                  {17500, 15},
	{Group: "autoscaling", Version: "v2"}:                  {17500, 30},
	{Group: "batch", Version: "v1"}:                        {17400, 15},
	{Group: "certificates.k8s.io", Version: "v1"}:          {17300, 15},
	{Group: "networking.k8s.io", Version: "v1"}:            {17200, 15},
	{Group: "policy", Version: "v1"}:                       {17100, 15},
	{Group: "rbac.authorization.k8s.io", Version: "v1"}:    {17000, 15},
	{Group: "storage.k8s.io", Version: "v1"}:               {16800, 15},
	{Group: "apiextensions.k8s.io", Version: "v1"}:         {16700, 15},
	{Group: "admissionregistration.k8s.io", Version: "v1"}: {16700, 15},
	{Group: "scheduling.k8s.io", Version: "v1"}:            {16600, 15},
	{Group: "coordination.k8s.io", Version: "v1"}:          {16500, 15},
	{Group: "node.k8s.io", Version: "v1"}:                  {16300, 15},
	{Group: "discovery.k8s.io", Version: "v1"}:             {16200, 15},
	{Group: "resource.k8s.io", Version: "v1"}:              {16200, 21},
	{Group: "flowcontrol.apiserver.k8s.io", Version: "v1"}: {16100, 21},
}

// Kubernetes' names on the APIServices the aggregator manages.
const (
	// AutomanagedLabel marks an APIService the aggregator registered;
	// "onstart": a built-in group version, written when it starts.
	AutomanagedLabel = "kube-aggregator.kubernetes.io/automanaged"
	automanagedStart = "onstart"
	// localReason and localMessage are the Available condition of an
	// APIService served locally (no spec.service).
	localReason  = "Local"
	localMessage = "Local APIServices are always available"
)

// LocalAPIServices registers the built-in group versions podflow serves
// as APIServices and keeps every local APIService (one naming no
// Service) Available, as kube-apiserver's aggregator does. Run one in
// every api replica: every write is a create-if-absent or a
// compare-and-swap from a fresh read, so replicas may race.
type LocalAPIServices struct {
	Store *objects.Store
	Log   *slog.Logger
	// Period is the time between passes (an APIService created without
	// a status, a registration that failed). 0: 30s.
	Period time.Duration
	// now is the clock (tests).
	now func() time.Time
}

// Start runs the passes on g until ctx ends; the first is at once.
func (l *LocalAPIServices) Start(ctx context.Context, g *errgroup.Group) error {
	if l.Store == nil {
		return fmt.Errorf("%w: LocalAPIServices needs a Store", ErrInvalidConfig)
	}
	period := l.Period
	if period <= 0 {
		period = 30 * time.Second
	}
	g.Go(func() error {
		registered := false
		t := time.NewTimer(0)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
			err := l.Sync(ctx, !registered)
			if err == nil {
				registered = true
			} else if ctx.Err() == nil && l.Log != nil {
				l.Log.Warn("apiservices: pass failed", "err", err)
			}
			t.Reset(period)
		}
	})
	return nil
}

// LocalAPIServiceNames are the names of the APIServices podflow registers
// for the group versions it serves: "v1." for the core group, else
// version.group.
func LocalAPIServiceNames() []string {
	var out []string
	for _, gv := range servedGroupVersions() {
		out = append(out, gv.Version+"."+gv.Group)
	}
	return out
}

// servedGroupVersions are the built-in group versions podflow serves that
// kube-apiserver registers an APIService for, in name order.
func servedGroupVersions() []schema.GroupVersion {
	seen := map[schema.GroupVersion]bool{}
	for _, byName := range resources {
		for _, r := range byName {
			gv := schema.GroupVersion{Group: r.group, Version: r.version}
			if _, ok := apiServicePriorities[gv]; ok && r.cr == nil {
				seen[gv] = true
			}
		}
	}
	out := make([]schema.GroupVersion, 0, len(seen))
	for gv := range seen {
		out = append(out, gv)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version+"."+out[i].Group < out[j].Version+"."+out[j].Group })
	return out
}

// Sync is one pass: with register, every served built-in group version's
// APIService is created if absent, its spec restored if it differs
// (kube's autoregister on start); then every local APIService not
// Available=True is made so.
func (l *LocalAPIServices) Sync(ctx context.Context, register bool) error {
	var errs []error
	if register {
		for _, gv := range servedGroupVersions() {
			if err := l.register(ctx, gv); err != nil {
				errs = append(errs, err)
			}
		}
	}
	items, _, err := l.Store.ListKind(ctx, objects.APIServices, "")
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, obj := range items {
		if err := l.makeAvailable(ctx, obj.GetMetadata().GetName()); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (l *LocalAPIServices) clock() time.Time {
	if l.now != nil {
		return l.now()
	}
	return time.Now()
}

// register creates gv's APIService, or restores its spec.
func (l *LocalAPIServices) register(ctx context.Context, gv schema.GroupVersion) error {
	p := apiServicePriorities[gv]
	spec := apiregistrationv1.APIServiceSpec{Group: gv.Group, Version: gv.Version, GroupPriorityMinimum: p.group, VersionPriority: p.version}
	name := gv.Version + "." + gv.Group
	for {
		obj, err := l.Store.GetKind(ctx, objects.APIServices, "", name)
		if errors.Is(err, raftstore.ErrNotFound) {
			as := &apiregistrationv1.APIService{
				TypeMeta: metav1.TypeMeta{APIVersion: "apiregistration.k8s.io/v1", Kind: "APIService"},
				ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(uuid.NewString()), CreationTimestamp: metav1.NewTime(l.clock()),
					Labels: map[string]string{AutomanagedLabel: automanagedStart}},
				Spec: spec,
			}
			setLocalAvailable(as, l.clock())
			u, err := toStored(as)
			if err != nil {
				return err
			}
			if _, err = l.Store.Create(ctx, u); errors.Is(err, raftstore.ErrAlreadyExists) {
				continue // another replica's
			}
			return err
		}
		if err != nil {
			return err
		}
		as, err := fromStored(obj)
		if err != nil {
			return err
		}
		if apiequality.Semantic.DeepEqual(as.Spec, spec) {
			return nil
		}
		as.Spec = spec // kube's autoregister: a managed APIService's spec is the server's
		u, err := toStored(as)
		if err != nil {
			return err
		}
		if _, err = l.Store.Update(ctx, u); errors.Is(err, raftstore.ErrConflict) {
			continue
		}
		return err
	}
}

// makeAvailable sets Available=True (Local) on the APIService name if it
// names no Service, as kube-aggregator's availability controller.
func (l *LocalAPIServices) makeAvailable(ctx context.Context, name string) error {
	return updateAPIService(ctx, l.Store, name, func(as *apiregistrationv1.APIService) bool {
		return as.Spec.Service == nil && setLocalAvailable(as, l.clock())
	})
}

// updateAPIService applies change to the stored APIService name and
// writes it back, compare-and-swap, again from a fresh read on a
// conflict; nothing is written when change reports no change, and an
// APIService that is gone is no error.
func updateAPIService(ctx context.Context, st *objects.Store, name string, change func(*apiregistrationv1.APIService) bool) error {
	for {
		obj, err := st.GetKind(ctx, objects.APIServices, "", name)
		if errors.Is(err, raftstore.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		as, err := fromStored(obj)
		if err != nil {
			return err
		}
		if !change(as) {
			return nil
		}
		u, err := toStored(as)
		if err != nil {
			return err
		}
		if _, err = st.Update(ctx, u); errors.Is(err, raftstore.ErrConflict) {
			continue
		}
		return err
	}
}

// setLocalAvailable sets as's Available condition to True, reason Local;
// it reports whether anything changed.
func setLocalAvailable(as *apiregistrationv1.APIService, now time.Time) bool {
	return setAPIServiceCondition(as, apiregistrationv1.APIServiceCondition{Type: apiregistrationv1.Available,
		Status: apiregistrationv1.ConditionTrue, Reason: localReason, Message: localMessage, LastTransitionTime: metav1.NewTime(now)})
}

// setAPIServiceCondition sets want on as; a condition whose status stays
// keeps its transition time. It reports whether anything changed.
func setAPIServiceCondition(as *apiregistrationv1.APIService, want apiregistrationv1.APIServiceCondition) bool {
	i := slices.IndexFunc(as.Status.Conditions, func(c apiregistrationv1.APIServiceCondition) bool { return c.Type == want.Type })
	if i < 0 {
		as.Status.Conditions = append(as.Status.Conditions, want)
		return true
	}
	old := as.Status.Conditions[i]
	if old.Status == want.Status && old.Reason == want.Reason && old.Message == want.Message {
		return false
	}
	if old.Status == want.Status {
		want.LastTransitionTime = old.LastTransitionTime
	}
	as.Status.Conditions[i] = want
	return true
}

func toStored(as *apiregistrationv1.APIService) (*corev1.Unstructured, error) {
	m, err := manifest.FromKube(as)
	if err != nil {
		return nil, err
	}
	u, ok := m.(*corev1.Unstructured)
	if !ok {
		return nil, fmt.Errorf("apiserver: APIService converted to %T", m)
	}
	return u, nil
}

func fromStored(obj objects.Object) (*apiregistrationv1.APIService, error) {
	k, err := manifest.ToKube(obj)
	if err != nil {
		return nil, err
	}
	as, ok := k.(*apiregistrationv1.APIService)
	if !ok {
		return nil, fmt.Errorf("apiserver: stored APIService is a %T", k)
	}
	return as, nil
}
