package api

// The Eviction subresource's decision (POST pods/NAME/eviction, served by
// services/apiserver's eviction.go, which decodes the Eviction and
// authorizes create on pods/eviction): kube-apiserver's
// pkg/registry/core/pod/storage/eviction.go over podflow's store.
//
//  1. A pod that is Pending, Succeeded, Failed or already being deleted
//     is deleted at once: it is no disruption.
//  2. Otherwise the PodDisruptionBudgets of its namespace whose selector
//     matches it decide: none, the pod is deleted; more than one, 500
//     "This pod has more than one PodDisruptionBudget, which the eviction
//     subresource does not support."; one, its status must allow a
//     disruption (observedGeneration current, disruptionsAllowed > 0,
//     fewer than MaxDisruptedPodSize evictions pending), else 429
//     TooManyRequests "Cannot evict pod as it would violate the pod's
//     disruption budget." with a DisruptionBudget cause naming why.
//     Approving decrements disruptionsAllowed and records the pod in
//     status.disruptedPods, compared on the budget's revision (a
//     conflict reads it again and decides again), so two evictions never
//     spend one disruption.
//  3. A pod that is not Ready is deleted without spending a disruption
//     when the budget's unhealthyPodEvictionPolicy is AlwaysAllow, or
//     (IfHealthyBudget, the default) while the budget has its desired
//     healthy pods; the deletion is then conditioned on the pod's
//     revision, so a pod that became Ready meanwhile is answered 429.
//  4. The deletion is graceful (deleteOptions.gracePeriodSeconds, else
//     the pod's), with the condition DisruptionTarget=True
//     (EvictionByEvictionAPI) written in the same compare-and-swap;
//     deleteOptions.preconditions (uid, resourceVersion) are honoured
//     (409 Conflict) and dryRun decides without writing anything.
//
// The budget and the pod are written with the api stage's identity, as
// kube-apiserver writes them with its loopback client: the requester
// needs create on pods/eviction, not update on the budget nor delete on
// the pod.

import (
	"context"
	goerrors "errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	pdbhelper "k8s.io/component-helpers/apps/poddisruptionbudget"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/podrules"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/manifest"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
)

// MaxDisruptedPodSize is kube's: a budget with more evictions approved
// and not yet seen by the disruption controller refuses more.
const MaxDisruptedPodSize = 2000

// EvictionsRetry is kube's backoff for conflicts on the pod and the
// budget.
var EvictionsRetry = wait.Backoff{Steps: 20, Duration: 500 * time.Millisecond, Factor: 1.0, Jitter: 0.1}

var podsGR = schema.GroupResource{Resource: "pods"}

// Evict implements apiserver.Evicter: it evicts pod ns/name, whose
// eviction user may create, with opts (the Eviction's deleteOptions, its
// dryRun merged with the request's). It returns nil when the pod was
// evicted (or would be, dry run), else a *errors.StatusError.
func (s *Stage) Evict(ctx context.Context, _ *corev1.UserInfo, ns, name string, opts *metav1.DeleteOptions) error {
	if opts == nil {
		opts = &metav1.DeleteOptions{}
	}
	dry := len(opts.DryRun) > 0
	var pod *corev1.Pod
	deleted := false
	shouldRetry := errors.IsConflict
	if !resourceVersionIsUnset(opts) {
		shouldRetry = func(error) bool { return false }
	}
	err := retry.OnError(EvictionsRetry, shouldRetry, func() error {
		var err error
		if pod, err = s.evictionPod(ctx, ns, name); err != nil {
			return err
		}
		if !canIgnorePDB(pod) {
			return nil
		}
		o := opts
		if shouldEnforceResourceVersion(pod) && resourceVersionIsUnset(opts) {
			o = opts.DeepCopy()
			rv := pod.GetMetadata().GetResourceVersion()
			setPreconditionsResourceVersion(o, &rv)
		}
		if err := s.addConditionAndDeletePod(ctx, ns, name, o); err != nil {
			return err
		}
		deleted = true
		return nil
	})
	switch {
	case err != nil:
		return err
	case deleted:
		return nil
	}

	var pdbName string
	updateDeletionOptions := false
	err = func() error {
		pdbs, err := s.podDisruptionBudgets(ctx, pod)
		if err != nil {
			return err
		}
		if len(pdbs) > 1 {
			return &errors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: 500,
				Message: "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."}}
		}
		if len(pdbs) == 0 {
			return nil
		}
		pdb := pdbs[0]
		pdbName = pdb.Name
		if !podReady(pod) {
			if pdb.Spec.UnhealthyPodEvictionPolicy != nil && *pdb.Spec.UnhealthyPodEvictionPolicy == policyv1.AlwaysAllow {
				updateDeletionOptions = true
				return nil
			}
			if pdb.Status.CurrentHealthy >= pdb.Status.DesiredHealthy && pdb.Status.DesiredHealthy > 0 {
				updateDeletionOptions = true
				return nil
			}
		}
		refresh := false
		return retry.RetryOnConflict(EvictionsRetry, func() error {
			if refresh {
				if pdb, err = s.podDisruptionBudget(ctx, ns, pdbName); err != nil {
					return err
				}
			}
			if err := s.checkAndDecrement(ctx, name, pdb, dry); err != nil {
				refresh = true
				return err
			}
			return nil
		})
	}()
	if wait.Interrupted(err) {
		err = errors.NewTimeoutError(fmt.Sprintf("couldn't update PodDisruptionBudget %q due to conflicts", pdbName), 10)
	}
	if err != nil {
		return err
	}
	o := opts
	if updateDeletionOptions {
		o = opts.DeepCopy()
		rv := pod.GetMetadata().GetResourceVersion()
		setPreconditionsResourceVersion(o, &rv)
	}
	if err := s.addConditionAndDeletePod(ctx, ns, name, o); err != nil {
		if errors.IsConflict(err) && updateDeletionOptions && resourceVersionIsUnset(opts) {
			return createTooManyRequestsError(pdbName)
		}
		return err
	}
	return nil
}

// evictionPod reads pod ns/name (404 as kube's).
func (s *Stage) evictionPod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	p, err := objects.Get[*corev1.Pod](ctx, s.env.Store, ns, name)
	if goerrors.Is(err, raftstore.ErrNotFound) {
		return nil, errors.NewNotFound(podsGR, name)
	}
	return p, err
}

// addConditionAndDeletePod marks pod ns/name terminating with the
// DisruptionTarget condition in one compare-and-swap, after checking
// opts' preconditions against the stored pod, then hands it to its node
// (stage.RequestDeletion). A dry run checks the preconditions only.
func (s *Stage) addConditionAndDeletePod(ctx context.Context, ns, name string, opts *metav1.DeleteOptions) error {
	dry := len(opts.DryRun) > 0
	now := timestamppb.Now()
	check := func(p *corev1.Pod) error {
		md := p.GetMetadata()
		if pre := opts.Preconditions; pre != nil {
			if uid := pre.UID; uid != nil && len(*uid) > 0 && string(*uid) != md.GetUid() {
				return errors.NewConflict(schema.GroupResource{Resource: "Pod"}, name,
					fmt.Errorf("the UID in the precondition (%s) does not match the UID in record (%s). The object might have been deleted and then recreated", *uid, md.GetUid()))
			}
			if rv := pre.ResourceVersion; rv != nil && len(*rv) > 0 && *rv != md.GetResourceVersion() {
				return errors.NewConflict(schema.GroupResource{Resource: "Pod"}, name,
					fmt.Errorf("the ResourceVersion in the precondition (%s) does not match the ResourceVersion in record (%s). The object might have been modified", *rv, md.GetResourceVersion()))
			}
		}
		return nil
	}
	if dry {
		p, err := s.evictionPod(ctx, ns, name)
		if err != nil {
			return err
		}
		return check(p)
	}
	pod, err := objects.Mutate(ctx, s.env.Store, ns, name, func(p *corev1.Pod) error {
		if err := check(p); err != nil {
			return err
		}
		if p.Status == nil {
			p.Status = &corev1.PodStatus{}
		}
		changed := p.GetMetadata().GetDeletionTimestamp() == nil &&
			podrules.MarkPodCondition(p.Status, "DisruptionTarget", podrules.ConditionTrue, "EvictionByEvictionAPI", "Eviction API: evicting", now)
		if stage.MarkTerminating(p, opts.GracePeriodSeconds, now) || changed {
			return nil
		}
		return objects.ErrNoChange
	})
	switch {
	case goerrors.Is(err, objects.ErrNoChange):
		if pod, err = s.evictionPod(ctx, ns, name); err != nil {
			return err
		}
	case goerrors.Is(err, raftstore.ErrNotFound):
		return errors.NewNotFound(podsGR, name)
	case err != nil:
		var se *errors.StatusError
		if goerrors.As(err, &se) {
			return se
		}
		return err
	}
	return stage.RequestDeletion(ctx, s.env, pod)
}

// podDisruptionBudgets returns the budgets of pod's namespace whose
// selector matches it (an invalid selector matches nothing).
func (s *Stage) podDisruptionBudgets(ctx context.Context, pod *corev1.Pod) ([]*policyv1.PodDisruptionBudget, error) {
	md := pod.GetMetadata()
	list, _, err := s.env.Store.ListKind(ctx, objects.PodDisruptionBudgets, md.GetNamespace())
	if err != nil {
		return nil, err
	}
	var out []*policyv1.PodDisruptionBudget
	for _, o := range list {
		pdb, err := decodePDB(o)
		if err != nil {
			return nil, err
		}
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || !sel.Matches(labels.Set(md.GetLabels())) {
			continue
		}
		out = append(out, pdb)
	}
	return out, nil
}

func (s *Stage) podDisruptionBudget(ctx context.Context, ns, name string) (*policyv1.PodDisruptionBudget, error) {
	o, err := s.env.Store.GetKind(ctx, objects.PodDisruptionBudgets, ns, name)
	if goerrors.Is(err, raftstore.ErrNotFound) {
		return nil, errors.NewNotFound(policyv1.Resource("poddisruptionbudgets"), name)
	}
	if err != nil {
		return nil, err
	}
	return decodePDB(o)
}

func decodePDB(o objects.Object) (*policyv1.PodDisruptionBudget, error) {
	u, ok := o.(*corev1.Unstructured)
	if !ok {
		return nil, fmt.Errorf("api: a stored PodDisruptionBudget is a %T", o)
	}
	k, err := manifest.ToKube(u)
	if err != nil {
		return nil, err
	}
	pdb, ok := k.(*policyv1.PodDisruptionBudget)
	if !ok {
		return nil, fmt.Errorf("api: a stored PodDisruptionBudget decodes to %T", k)
	}
	pdb.ResourceVersion = u.GetMetadata().GetResourceVersion()
	return pdb, nil
}

// checkAndDecrement is kube's: it spends one of pdb's disruptions on
// podName, or refuses (429, or 403 for a negative budget or too many
// pending evictions). The write is compared on pdb's revision: a conflict
// is 409, and the caller reads the budget again.
func (s *Stage) checkAndDecrement(ctx context.Context, podName string, pdb *policyv1.PodDisruptionBudget, dryRun bool) error {
	if pdb.Status.ObservedGeneration < pdb.Generation {
		return createTooManyRequestsError(pdb.Name)
	}
	if pdb.Status.DisruptionsAllowed < 0 {
		err := errors.NewForbidden(policyv1.Resource("poddisruptionbudget"), pdb.Name, goerrors.New("pdb disruptions allowed is negative"))
		err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{
			Type:    policyv1.DisruptionBudgetCause,
			Message: fmt.Sprintf("The disruption budget %s does not allow evicting pods currently: pdb disruptions allowed is negative", pdb.Name),
		})
		return err
	}
	if len(pdb.Status.DisruptedPods) > MaxDisruptedPodSize {
		err := errors.NewForbidden(policyv1.Resource("poddisruptionbudget"), pdb.Name, goerrors.New("DisruptedPods map too big - too many evictions not confirmed by PDB controller"))
		err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{
			Type:    policyv1.DisruptionBudgetCause,
			Message: fmt.Sprintf("The disruption budget %s does not allow evicting pods currently: too many pending evictions not confirmed by PDB controller", pdb.Name),
		})
		return err
	}
	if pdb.Status.DisruptionsAllowed == 0 {
		err := errors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
		condition := meta.FindStatusCondition(pdb.Status.Conditions, policyv1.DisruptionAllowedCondition)
		var msg string
		switch {
		case condition != nil && condition.Status == metav1.ConditionFalse && len(condition.Message) > 0 && condition.Reason == policyv1.SyncFailedReason:
			msg = fmt.Sprintf("The disruption budget %s does not allow evicting pods currently because it failed sync: %s", pdb.Name, condition.Message)
		case pdb.Status.CurrentHealthy <= pdb.Status.DesiredHealthy:
			msg = fmt.Sprintf("The disruption budget %s needs %d healthy pods and has %d currently", pdb.Name, pdb.Status.DesiredHealthy, pdb.Status.CurrentHealthy)
		case condition != nil && condition.Status == metav1.ConditionFalse && len(condition.Message) > 0:
			msg = fmt.Sprintf("The disruption budget %s does not allow evicting pods currently (%s): %s", pdb.Name, condition.Reason, condition.Message)
		default:
			msg = fmt.Sprintf("The disruption budget %s does not allow evicting pods currently", pdb.Name)
		}
		err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{Type: policyv1.DisruptionBudgetCause, Message: msg})
		return err
	}
	pdb = pdb.DeepCopy()
	pdb.Status.DisruptionsAllowed--
	if pdb.Status.DisruptionsAllowed == 0 {
		pdbhelper.UpdateDisruptionAllowedCondition(pdb)
	}
	if dryRun {
		return nil
	}
	if pdb.Status.DisruptedPods == nil {
		pdb.Status.DisruptedPods = make(map[string]metav1.Time)
	}
	pdb.Status.DisruptedPods[podName] = metav1.Time{Time: time.Now()}
	return s.writePDBStatus(ctx, pdb)
}

// writePDBStatus stores pdb's status over the stored budget it was read
// from (its resourceVersion): 409 Conflict when the budget changed since.
func (s *Stage) writePDBStatus(ctx context.Context, pdb *policyv1.PodDisruptionBudget) error {
	conflict := func() error {
		return errors.NewConflict(policyv1.Resource("poddisruptionbudgets"), pdb.Name,
			goerrors.New("the object has been modified; please apply your changes to the latest version and try again"))
	}
	o, err := s.env.Store.GetKind(ctx, objects.PodDisruptionBudgets, pdb.Namespace, pdb.Name)
	if goerrors.Is(err, raftstore.ErrNotFound) {
		return errors.NewNotFound(policyv1.Resource("poddisruptionbudgets"), pdb.Name)
	}
	if err != nil {
		return err
	}
	stored, err := decodePDB(o)
	if err != nil {
		return err
	}
	if stored.ResourceVersion != pdb.ResourceVersion || stored.UID != pdb.UID {
		return conflict()
	}
	stored.Status = pdb.Status // the status subresource: the spec and metadata stay the stored ones
	stored.TypeMeta = metav1.TypeMeta{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"}
	m, err := manifest.FromKube(stored)
	if err != nil {
		return err
	}
	u, ok := m.(*corev1.Unstructured)
	if !ok {
		return fmt.Errorf("api: a PodDisruptionBudget is stored as %T", m)
	}
	objects.SetRevision(u, objects.Revision(o))
	if _, err := s.env.Store.Update(ctx, u); err != nil {
		if goerrors.Is(err, raftstore.ErrConflict) {
			return conflict()
		}
		return err
	}
	return nil
}

func podReady(p *corev1.Pod) bool {
	c := podrules.PodCondition(p.GetStatus(), podrules.PodReady)
	return c != nil && c.GetStatus() == podrules.ConditionTrue
}

// canIgnorePDB is kube's: a pod that is no disruption to delete.
func canIgnorePDB(p *corev1.Pod) bool {
	switch p.GetStatus().GetPhase() {
	case string(v1.PodSucceeded), string(v1.PodFailed), string(v1.PodPending):
		return true
	}
	return p.GetMetadata().GetDeletionTimestamp() != nil
}

// shouldEnforceResourceVersion is kube's: a Pending pod is deleted only
// as it was read (it could become Ready and healthy meanwhile).
func shouldEnforceResourceVersion(p *corev1.Pod) bool {
	switch p.GetStatus().GetPhase() {
	case string(v1.PodSucceeded), string(v1.PodFailed):
		return false
	}
	return p.GetMetadata().GetDeletionTimestamp() == nil
}

func resourceVersionIsUnset(o *metav1.DeleteOptions) bool {
	return o.Preconditions == nil || o.Preconditions.ResourceVersion == nil
}

func setPreconditionsResourceVersion(o *metav1.DeleteOptions, rv *string) {
	if o.Preconditions == nil {
		o.Preconditions = &metav1.Preconditions{}
	}
	o.Preconditions.ResourceVersion = rv
}

func createTooManyRequestsError(name string) error {
	err := errors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 10)
	err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{Type: policyv1.DisruptionBudgetCause,
		Message: fmt.Sprintf("The disruption budget %s is still being processed by the server.", name)})
	return err
}
