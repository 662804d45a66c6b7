package crds

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"
	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/util/webhook"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/crd"
	"github.com/podflow/podflow/services/informer"
	"github.com/podflow/podflow/services/manifest"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
)

// Config configures a Controller.
type Config struct {
	// RetryInterval is how long a definition waits before its next pass
	// after one that did not finish (a write that lost a race, objects
	// still being deleted). Default 1s.
	RetryInterval time.Duration
	// DeleteBatch is how many objects one store transaction deletes when
	// a definition's objects go. Default 100.
	DeleteBatch int
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config { return Config{RetryInterval: time.Second, DeleteBatch: 100} }

// Validate checks the Config.
func (c Config) Validate() error {
	switch {
	case c.RetryInterval <= 0:
		return fmt.Errorf("crds: RetryInterval (%s) must be positive", c.RetryInterval)
	case c.DeleteBatch < 1:
		return fmt.Errorf("crds: DeleteBatch (%d) must be at least 1", c.DeleteBatch)
	}
	return nil
}

// Controller is apiextensions-apiserver's controllers of
// CustomResourceDefinitions in one: naming (NamesAccepted and the
// accepted names), establishing (Established) and the
// customresourcecleanup finalizer (a deleted definition's objects go
// before it does). Every step is a compare-and-swap write derived from
// the store, so several replicas may run it at once; accepting names is
// one transaction that also compares every other definition of the group,
// so two replicas never accept clashing names.
type Controller struct {
	env stage.Env
	cfg Config
	inf *informer.Informer[*corev1.Unstructured]

	mu      sync.Mutex
	pending map[string]bool
	wake    chan struct{}
}

// New returns a Controller over env's store.
func New(env stage.Env, cfg Config) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Controller{env: env, cfg: cfg, pending: map[string]bool{}, wake: make(chan struct{}, 1)}
	inf, err := informer.NewKind(env.Store, objects.CustomResourceDefinitions, "", informer.Handlers[*corev1.Unstructured]{
		OnAdd:    func(u *corev1.Unstructured) { c.Enqueue(u.GetMetadata().GetName()) },
		OnUpdate: func(_, u *corev1.Unstructured) { c.Enqueue(u.GetMetadata().GetName()) },
		// A deleted definition frees its names: the others of its group
		// may take them now.
		OnDelete: func(u *corev1.Unstructured) { c.requeueGroup(u) },
	})
	if err != nil {
		return nil, err
	}
	c.inf = inf
	return c, nil
}

// Start runs the informer and the worker on g, both stopped by ctx; it
// returns once the informer is synced.
func (c *Controller) Start(ctx context.Context, g *errgroup.Group) error {
	var infs informer.Group
	infs.Add(c.inf)
	if err := infs.Start(ctx, g); err != nil {
		return err
	}
	g.Go(func() error { return c.run(ctx) })
	return nil
}

// Reconcile queues every definition (the level-triggered half).
func (c *Controller) Reconcile(context.Context) error {
	for _, u := range c.inf.List("") {
		c.Enqueue(u.GetMetadata().GetName())
	}
	return nil
}

// Enqueue asks for a pass over the definition name. It never blocks.
func (c *Controller) Enqueue(name string) {
	c.mu.Lock()
	c.pending[name] = true
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *Controller) requeueGroup(gone *corev1.Unstructured) {
	d, err := crd.Decode(gone)
	if err != nil {
		return
	}
	for _, u := range c.inf.List("") {
		if o, err := crd.Decode(u); err == nil && o.Spec.Group == d.Spec.Group && o.Name != d.Name {
			c.Enqueue(o.Name)
		}
	}
}

func (c *Controller) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.pending))
	for n := range c.pending {
		out = append(out, n)
	}
	clear(c.pending)
	slices.Sort(out)
	return out
}

// run is the one worker (naming is decided one definition at a time, as
// upstream's): a pass per queued definition; one not finished is passed
// over again after RetryInterval.
func (c *Controller) run(ctx context.Context) error {
	retry := map[string]bool{}
	for {
		var tick <-chan time.Time
		var timer *time.Timer
		if len(retry) > 0 {
			timer = time.NewTimer(c.cfg.RetryInterval)
			tick = timer.C
		}
		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return nil
		case <-c.wake:
		case <-tick:
			for n := range retry {
				c.Enqueue(n)
			}
			clear(retry)
		}
		if timer != nil {
			timer.Stop()
		}
		for _, name := range c.take() {
			done, err := c.Sync(ctx, name)
			if err != nil && ctx.Err() == nil && c.env.Log != nil {
				c.env.Log.Warn("custom resource definition: pass failed", "crd", name, "err", err)
			}
			if !done || err != nil {
				retry[name] = true
			}
		}
	}
}

// Sync makes one pass over the definition name: the finalizer's work if
// it is being deleted, else its names and then its Established
// condition. done is false when another pass is needed.
func (c *Controller) Sync(ctx context.Context, name string) (done bool, err error) {
	u, err := c.env.Store.GetKind(ctx, objects.CustomResourceDefinitions, "", name)
	if errors.Is(err, raftstore.ErrNotFound) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	def, err := crd.Decode(u.(*corev1.Unstructured))
	if err != nil {
		return true, err // a definition the store cannot decode does not get better
	}
	rev := objects.Revision(u)
	if def.DeletionTimestamp != nil {
		return c.finalize(ctx, def, rev)
	}
	if !equality.Semantic.DeepEqual(def.Spec.Names, def.Status.AcceptedNames) {
		done, err := c.name(ctx, def, rev)
		if err != nil || !done {
			return done, err
		}
		return false, nil // establish on the next pass, from what was written
	}
	return c.establish(ctx, def, rev)
}

// name accepts the definition's names that no other definition of its
// group holds (apiextensions-apiserver's NamingConditionController) and
// writes them with NamesAccepted, in one transaction with every other
// definition of the group unchanged.
func (c *Controller) name(ctx context.Context, def *apiextensionsv1.CustomResourceDefinition, rev int64) (bool, error) {
	all, _, err := c.env.Store.ListKind(ctx, objects.CustomResourceDefinitions, "")
	if err != nil {
		return false, err
	}
	txn := objects.Txn{}
	var others []*apiextensionsv1.CustomResourceDefinition
	for _, o := range all {
		od, err := crd.Decode(o.(*corev1.Unstructured))
		if err != nil || od.Spec.Group != def.Spec.Group || od.Name == def.Name {
			continue
		}
		others = append(others, od)
		txn = txn.Unchanged(o)
	}
	names, naming, established := calculateNamesAndConditions(def, others)
	if reflect.DeepEqual(def.Status.AcceptedNames, names) &&
		apihelpers.IsCRDConditionEquivalent(&naming, apihelpers.FindCRDCondition(def, apiextensionsv1.NamesAccepted)) {
		return true, nil
	}
	next := def.DeepCopy()
	next.Status.AcceptedNames = names
	apihelpers.SetCRDCondition(next, naming)
	apihelpers.SetCRDCondition(next, established)
	obj, err := stored(next, rev)
	if err != nil {
		return true, err
	}
	_, err = c.env.Store.Commit(ctx, txn.Unchanged(obj).Put(obj))
	if errors.Is(err, raftstore.ErrConflict) || errors.Is(err, raftstore.ErrNotFound) {
		return false, nil // it or a definition of its group moved on: again, from the store
	}
	if err == nil {
		// Names this definition gave up may be free for others now.
		for _, o := range others {
			c.Enqueue(o.Name)
		}
	}
	return err == nil, err
}

// calculateNamesAndConditions is apiextensions-apiserver's naming
// decision (pkg/controller/status, which computes it over its lister): a
// requested name is accepted when it is the one accepted already or no
// other definition of the group holds it; NamesAccepted says which
// clashed; Established stays as it was, or becomes Installing once every
// name is accepted.
func calculateNamesAndConditions(in *apiextensionsv1.CustomResourceDefinition, others []*apiextensionsv1.CustomResourceDefinition) (apiextensionsv1.CustomResourceDefinitionNames, apiextensionsv1.CustomResourceDefinitionCondition, apiextensionsv1.CustomResourceDefinitionCondition) {
	allResources, allKinds := sets.New[string](), sets.New[string]()
	for _, o := range others {
		n := o.Status.AcceptedNames
		allResources.Insert(n.Plural, n.Singular)
		allResources.Insert(n.ShortNames...)
		allKinds.Insert(n.Kind, n.ListKind)
	}
	cond := apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.NamesAccepted, Status: apiextensionsv1.ConditionUnknown}
	requested, accepted := in.Spec.Names, in.Status.AcceptedNames
	names := in.Status.AcceptedNames
	conflict := func(reason string, err error) {
		cond.Status, cond.Reason, cond.Message = apiextensionsv1.ConditionFalse, reason, err.Error()
	}
	if err := equalToAcceptedOrFresh(requested.Plural, accepted.Plural, allResources); err != nil {
		conflict("PluralConflict", err)
	} else {
		names.Plural = requested.Plural
	}
	if err := equalToAcceptedOrFresh(requested.Singular, accepted.Singular, allResources); err != nil {
		conflict("SingularConflict", err)
	} else {
		names.Singular = requested.Singular
	}
	if !reflect.DeepEqual(requested.ShortNames, accepted.ShortNames) {
		var errs []error
		existing := sets.New(accepted.ShortNames...)
		for _, s := range requested.ShortNames {
			if existing.Has(s) {
				continue
			}
			if err := equalToAcceptedOrFresh(s, "", allResources); err != nil {
				errs = append(errs, err)
			}
		}
		if err := aggregate(errs); err != nil {
			conflict("ShortNamesConflict", err)
		} else {
			names.ShortNames = requested.ShortNames
		}
	}
	if err := equalToAcceptedOrFresh(requested.Kind, accepted.Kind, allKinds); err != nil {
		conflict("KindConflict", err)
	} else {
		names.Kind = requested.Kind
	}
	if err := equalToAcceptedOrFresh(requested.ListKind, accepted.ListKind, allKinds); err != nil {
		conflict("ListKindConflict", err)
	} else {
		names.ListKind = requested.ListKind
	}
	names.Categories = requested.Categories
	if cond.Status == apiextensionsv1.ConditionUnknown {
		cond.Status, cond.Reason, cond.Message = apiextensionsv1.ConditionTrue, "NoConflicts", "no conflicts found"
	}
	established := apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionFalse,
		Reason: "NotAccepted", Message: "not all names are accepted"}
	if old := apihelpers.FindCRDCondition(in, apiextensionsv1.Established); old != nil {
		established = *old
	}
	if established.Status != apiextensionsv1.ConditionTrue && cond.Status == apiextensionsv1.ConditionTrue {
		established = apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionFalse,
			Reason: "Installing", Message: "the initial names have been accepted"}
	}
	return names, cond, established
}

func equalToAcceptedOrFresh(requested, accepted string, used sets.Set[string]) error {
	if requested == accepted || !used.Has(requested) {
		return nil
	}
	return fmt.Errorf("%q is already in use", requested)
}

// aggregate words several errors as apimachinery's utilerrors aggregate.
func aggregate(errs []error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	msg := "["
	for i, e := range errs {
		if i > 0 {
			msg += ", "
		}
		msg += e.Error()
	}
	return errors.New(msg + "]")
}

// establish sets Established once the names are accepted
// (apiextensions-apiserver's EstablishingController): True, or False for
// a conversion webhook whose caBundle is not PEM.
func (c *Controller) establish(ctx context.Context, def *apiextensionsv1.CustomResourceDefinition, rev int64) (bool, error) {
	if !apihelpers.IsCRDConditionTrue(def, apiextensionsv1.NamesAccepted) || apihelpers.IsCRDConditionTrue(def, apiextensionsv1.Established) {
		return true, nil
	}
	next := def.DeepCopy()
	cond := apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue,
		Reason: "InitialNamesAccepted", Message: "the initial names have been accepted"}
	if conv := def.Spec.Conversion; conv != nil && conv.Webhook != nil && conv.Webhook.ClientConfig != nil &&
		len(webhook.ValidateCABundle(field.NewPath(""), conv.Webhook.ClientConfig.CABundle)) > 0 {
		cond = apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionFalse,
			Reason: "InvalidCABundle", Message: "The conversion webhook CABundle is invalid"}
	}
	apihelpers.SetCRDCondition(next, cond)
	return c.write(ctx, next, rev)
}

// write stores def as read at rev; done is false when it moved on.
func (c *Controller) write(ctx context.Context, def *apiextensionsv1.CustomResourceDefinition, rev int64) (bool, error) {
	obj, err := stored(def, rev)
	if err != nil {
		return true, err
	}
	_, err = c.env.Store.Update(ctx, obj)
	if errors.Is(err, raftstore.ErrConflict) || errors.Is(err, raftstore.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// finalize is apiextensions-apiserver's CRDFinalizer: Terminating
// (InstanceDeletionInProgress), every object of the definition deleted
// (those with finalizers marked: the definition waits for them), then
// the customresourcecleanup finalizer removed — and the definition
// deleted with its last finalizer.
func (c *Controller) finalize(ctx context.Context, def *apiextensionsv1.CustomResourceDefinition, rev int64) (bool, error) {
	if !apihelpers.CRDHasFinalizer(def, apiextensionsv1.CustomResourceCleanupFinalizer) {
		if len(def.Finalizers) == 0 { // marked, and nothing holds it
			return c.remove(ctx, def, rev)
		}
		return true, nil
	}
	next := def.DeepCopy()
	progress := apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.Terminating, Status: apiextensionsv1.ConditionTrue,
		Reason: "InstanceDeletionInProgress", Message: "CustomResource deletion is in progress"}
	if !apihelpers.IsCRDConditionEquivalent(&progress, apihelpers.FindCRDCondition(def, apiextensionsv1.Terminating)) {
		apihelpers.SetCRDCondition(next, progress)
		return c.write(ctx, next, rev) // the next pass deletes, from what was written
	}
	switch {
	case apihelpers.IsCRDConditionTrue(def, apiextensionsv1.Established):
		remaining, err := c.deleteInstances(ctx, def)
		if err != nil {
			apihelpers.SetCRDCondition(next, apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.Terminating,
				Status: apiextensionsv1.ConditionTrue, Reason: "InstanceDeletionFailed", Message: fmt.Sprintf("could not issue all deletes: %v", err)})
			_, _ = c.write(ctx, next, rev)
			return false, err
		}
		if remaining > 0 {
			return false, nil // objects with finalizers of their own, or written meanwhile: wait
		}
		apihelpers.SetCRDCondition(next, apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.Terminating,
			Status: apiextensionsv1.ConditionFalse, Reason: "InstanceDeletionCompleted", Message: "removed all instances"})
	default:
		apihelpers.SetCRDCondition(next, apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.Terminating,
			Status: apiextensionsv1.ConditionFalse, Reason: "NeverEstablished", Message: "resource was never established"})
	}
	apihelpers.CRDRemoveFinalizer(next, apiextensionsv1.CustomResourceCleanupFinalizer)
	if len(next.Finalizers) == 0 {
		return c.remove(ctx, next, rev)
	}
	return c.write(ctx, next, rev)
}

// remove deletes the definition at rev (its last finalizer gone).
func (c *Controller) remove(ctx context.Context, def *apiextensionsv1.CustomResourceDefinition, rev int64) (bool, error) {
	_, err := c.env.Store.Delete(ctx, objects.CustomResourceDefinitions, "", def.Name, rev)
	switch {
	case errors.Is(err, raftstore.ErrNotFound):
		return true, nil
	case errors.Is(err, raftstore.ErrConflict):
		return false, nil
	}
	return err == nil, err
}

// deleteInstances deletes every object of the definition's kind, in every
// namespace (stage.DeleteObject's semantics: objects with finalizers are
// marked), and returns how many remain. Objects without finalizers go
// DeleteBatch per transaction.
func (c *Controller) deleteInstances(ctx context.Context, def *apiextensionsv1.CustomResourceDefinition) (int, error) {
	plural := def.Status.AcceptedNames.Plural
	if plural == "" {
		return 0, nil
	}
	prefix := objects.CustomResourcePrefix(def.Spec.Group, plural)
	kvs, _, err := c.env.Store.KV().List(ctx, prefix)
	if err != nil {
		return 0, err
	}
	kind := objects.Kind{} // the definition's kind, when this process registered it
	if k, err := objects.KindForResource(plural + "." + def.Spec.Group); err == nil && k.Prefix("") == prefix {
		kind = k
	}
	remaining := 0
	var txn raftstore.Txn
	flush := func() error {
		if len(txn.Ops) == 0 {
			return nil
		}
		_, err := c.env.Store.KV().Txn(ctx, txn)
		txn = raftstore.Txn{}
		if errors.Is(err, raftstore.ErrConflict) {
			remaining++ // one moved on (a finalizer added?): count again on the next pass
			return nil
		}
		return err
	}
	for _, kv := range kvs {
		obj := &corev1.Unstructured{}
		if err := objects.Decode(kv, obj); err != nil {
			return 0, err
		}
		if len(obj.GetMetadata().GetFinalizers()) > 0 {
			remaining++
			if obj.GetMetadata().GetDeletionTimestamp() == nil && kind.Name != "" {
				if _, _, err := stage.DeleteObject(ctx, c.env.Store, kind, obj); err != nil && !errors.Is(err, raftstore.ErrConflict) {
					return 0, err
				}
			}
			continue
		}
		txn.Compares = append(txn.Compares, raftstore.Compare{Key: kv.Key, ModRevision: kv.ModRevision})
		txn.Ops = append(txn.Ops, raftstore.Op{Type: raftstore.OpDelete, Key: kv.Key})
		if len(txn.Ops) >= c.cfg.DeleteBatch {
			if err := flush(); err != nil {
				return 0, err
			}
		}
	}
	if err := flush(); err != nil {
		return 0, err
	}
	return remaining, nil
}

// stored is def as the store keeps it, at rev.
func stored(def *apiextensionsv1.CustomResourceDefinition, rev int64) (*corev1.Unstructured, error) {
	def = def.DeepCopy()
	def.APIVersion, def.Kind = apiextensionsv1.SchemeGroupVersion.String(), "CustomResourceDefinition"
	m, err := manifest.FromKube(def)
	if err != nil {
		return nil, err
	}
	u, ok := m.(*corev1.Unstructured)
	if !ok {
		return nil, fmt.Errorf("crds: %s converted to %T", def.Name, m)
	}
	u = proto.CloneOf(u)
	objects.SetRevision(u, rev)
	return u, nil
}
