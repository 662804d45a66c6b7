package apiserver

// Server-side apply and managedFields, as kube-apiserver's: a FieldManager
// (k8s.io/apimachinery/pkg/util/managedfields, over
// sigs.k8s.io/structured-merge-diff) per served kind, typed by the OpenAPI
// schemas this server serves. Creates, updates and patches record the
// request's manager with operation Update; an apply merges the applied
// configuration into the live object, owns what it sets and refuses (409)
// to take fields another manager owns unless forced.

import (
	"encoding/json"
	"errors"
	"k8s.io/client-go/applyconfigurations"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"unicode"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"sigs.k8s.io/yaml"

	"github.com/podflow/podflow/proto/corev1"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
)

// maxFieldManagerLength is kube-apiserver's limit on a field manager's name.
const maxFieldManagerLength = 128

// applyScheme knows the Go types of the stored Kubernetes kinds: the
// FieldManager converts, creates and defaults through it.
var applyScheme = sync.OnceValue(func() *runtime.Scheme {
	sc := runtime.NewScheme()
	for _, byName := range resources {
		for _, r := range byName {
			if !managesFields(r) {
				continue
			}
			sc.AddKnownTypeWithName(r.gvk(), kubeType(r)())
		}
	}
	if err := addHPAConversions(sc); err != nil { // autoscaling.go
		panic(err)
	}
	return sc
})

// typeConverter types objects by client-go's structured-merge-diff schema
// of the built-in kinds (applyconfigurations: generated from the k8s.io/api
// types of the same release, with their list keys), so every field podflow
// serves is declared.
var typeConverter = sync.OnceValue(func() managedfields.TypeConverter {
	return applyconfigurations.NewTypeConverter(applyScheme())
})

// fieldManagers are the FieldManagers by kind and subresource.
var fieldManagers sync.Map // managerKey -> *managedfields.FieldManager

// managerKey names a FieldManager: a kind's, for its main resource
// (subresource "") or one of its subresources, whose writes it records
// under that subresource, as kube-apiserver's (a managedFields entry's
// subresource).
type managerKey struct {
	gvk         schema.GroupVersionKind
	subresource string
}

func (r *resource) gvk() schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: r.group, Version: r.version, Kind: r.kind}
}

// managesFields reports whether r's writes record managedFields: the
// stored Kubernetes kinds client-go has the field schema of. client-go
// has no schema of apiextensions.k8s.io's; an apply of one is a JSON
// merge patch.
func managesFields(r *resource) bool {
	if r.cr != nil {
		return true
	}
	return kubeType(r) != nil && r.store.Name != "" && !r.readOnly && clientgoscheme.Scheme.Recognizes(r.gvk())
}

// fieldManager is the FieldManager of r's writes through subresource
// (""; the main resource); nil when r does not manage fields.
func fieldManager(r *resource, subresource string) (*managedfields.FieldManager, error) {
	if !managesFields(r) {
		return nil, nil
	}
	if r.cr != nil {
		return r.cr.FieldManager(subresource)
	}
	key := managerKey{r.gvk(), subresource}
	if fm, ok := fieldManagers.Load(key); ok {
		return fm.(*managedfields.FieldManager), nil
	}
	sc := applyScheme()
	fm, err := managedfields.NewDefaultFieldManager(typeConverter(), sc, sc, sc, r.gvk(), r.gvk().GroupVersion(), subresource, nil)
	if err != nil {
		return nil, err
	}
	actual, _ := fieldManagers.LoadOrStore(key, fm)
	return actual.(*managedfields.FieldManager), nil
}

// managerName is the request's field manager: ?fieldManager, else (not
// for an apply, which must name one) the User-Agent up to its first "/",
// as kube-apiserver's; a name longer than 128 characters or with
// non-printable characters is refused (422).
func managerName(r *http.Request, apply bool, kind string) (string, *corev1.Status) {
	m := r.URL.Query().Get("fieldManager")
	if m == "" && apply {
		return "", invalid("PatchOptions.meta.k8s.io", "", []*corev1.StatusCause{{Type: "FieldValueRequired", Field: "fieldManager",
			Message: "Required value: is required for apply patch"}},
			`PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch`)
	}
	if m == "" {
		ua, _, _ := strings.Cut(r.UserAgent(), "/")
		var b strings.Builder
		for _, c := range ua {
			if !unicode.IsPrint(c) {
				continue
			}
			if b.Len() >= maxFieldManagerLength {
				break
			}
			b.WriteRune(c)
		}
		return b.String(), nil
	}
	opts := kind + "Options.meta.k8s.io"
	if len(m) > maxFieldManagerLength {
		return "", invalid(opts, "", []*corev1.StatusCause{{Type: "FieldValueTooLong", Field: "fieldManager",
			Message: "Too long: may not be more than 128 bytes"}},
			`%s "" is invalid: fieldManager: Too long: may not be more than 128 bytes`, opts)
	}
	for _, c := range m {
		if !unicode.IsPrint(c) {
			return "", invalid(opts, "", []*corev1.StatusCause{{Type: "FieldValueInvalid", Field: "fieldManager",
				Message: "Invalid value: " + strconv.Quote(m) + ": must only contain printable characters"}},
				`%s "" is invalid: fieldManager: Invalid value: %s: must only contain printable characters`, opts, strconv.Quote(m))
		}
	}
	return m, nil
}

// liveKube is the Kubernetes form of the stored object, or a new empty
// object of r's kind when there is none (a create).
func liveKube(r *resource, current objects.Object) (runtime.Object, error) {
	if current == nil {
		if r.cr != nil {
			u := &unstructured.Unstructured{Object: map[string]any{}}
			u.SetGroupVersionKind(r.gvk())
			return u, nil
		}
		obj := kubeType(r)()
		obj.GetObjectKind().SetGroupVersionKind(r.gvk())
		return obj, nil
	}
	return r.toKube(current)
}

// manageFields records manager's update (create, update, non-apply patch)
// of current (nil: a create) to obj, through subresource ("": the main
// resource), in obj's managedFields.
func manageFields(r *resource, subresource string, current, obj objects.Object, manager string) *corev1.Status {
	fm, err := fieldManager(r, subresource)
	if err != nil {
		return stage.Internal(err)
	}
	if fm == nil {
		return nil
	}
	live, err := liveKube(r, current)
	if err != nil {
		return stage.Internal(err)
	}
	next, err := r.toKube(obj)
	if err != nil {
		return stage.Internal(err)
	}
	out := fm.UpdateNoErrors(live, next, manager)
	return setManagedFields(obj, out)
}

// applyConfiguration merges the applied configuration patch (YAML or
// JSON) into current (nil: the object is created) as manager's, and
// returns the result's Kubernetes JSON for decoding; the apply is
// recorded as one through subresource ("": the main resource). A conflict
// with another manager's fields is 409 naming each field and its manager,
// unless force.
func applyConfiguration(r *resource, subresource string, current objects.Object, patch []byte, manager string, force bool) ([]byte, *corev1.Status) {
	fm, err := fieldManager(r, subresource)
	if err != nil {
		return nil, stage.Internal(err)
	}
	if fm == nil {
		return nil, stage415(patchApply, r)
	}
	j, err := yaml.YAMLToJSON(patch)
	if err != nil {
		return nil, badRequest("decode the apply patch: %v", err)
	}
	applied := &unstructured.Unstructured{}
	if err := applied.UnmarshalJSON(j); err != nil {
		return nil, badRequest("decode the apply patch: %v", err)
	}
	if gvk := applied.GroupVersionKind(); gvk != r.gvk() {
		return nil, badRequest("the applied object is %s %s; %s %s expected", gvk.GroupVersion(), gvk.Kind, r.groupVersion(), r.kind)
	}
	live, err := liveKube(r, current)
	if err != nil {
		return nil, stage.Internal(err)
	}
	out, err := fm.Apply(live, applied, manager, force)
	if err != nil {
		return nil, apiStatus(err)
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, stage.Internal(err)
	}
	return b, nil
}

// setManagedFields copies the managedFields of Kubernetes object k to obj.
func setManagedFields(obj objects.Object, k runtime.Object) *corev1.Status {
	acc, err := meta.Accessor(k)
	if err != nil {
		return stage.Internal(err)
	}
	entries, err := managedFieldsProto(acc.GetManagedFields())
	if err != nil {
		return stage.Internal(err)
	}
	objects.Meta(obj).ManagedFields = entries
	return nil
}

func managedFieldsProto(in []metav1.ManagedFieldsEntry) ([]*corev1.ManagedFieldsEntry, error) {
	out := make([]*corev1.ManagedFieldsEntry, 0, len(in))
	for _, e := range in {
		p := &corev1.ManagedFieldsEntry{Manager: e.Manager, Operation: string(e.Operation), ApiVersion: e.APIVersion,
			FieldsType: e.FieldsType, Subresource: e.Subresource}
		if e.Time != nil {
			p.Time = timestamppb.New(e.Time.Time)
		}
		if e.FieldsV1 != nil && len(e.FieldsV1.Raw) > 0 {
			p.FieldsV1 = &structpb.Struct{}
			if err := protojson.Unmarshal(e.FieldsV1.Raw, p.FieldsV1); err != nil {
				return nil, err
			}
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// keepUnchanged reverts obj's managedFields timestamps to current's when
// obj is current but for them, so that re-applying or re-writing an
// unchanged object changes nothing (kube-apiserver's
// IgnoreManagedFieldsTimestampsTransformer); it reports whether obj is
// then current unchanged. A pod's status is not compared (a pod update
// never writes it), nor the creation and deletion timestamps the store
// keeps finer than the seconds of their Kubernetes form.
func keepUnchanged(current, obj objects.Object) bool {
	if current == nil {
		return false
	}
	a, b := proto.CloneOf(current), proto.CloneOf(obj)
	// The Kubernetes form has whole seconds; the store keeps what the
	// api stage stamped (it keeps the stored one on every update).
	objects.Meta(b).CreationTimestamp = objects.Meta(a).GetCreationTimestamp()
	objects.Meta(b).DeletionTimestamp = objects.Meta(a).GetDeletionTimestamp()
	for _, o := range []objects.Object{a, b} {
		md := objects.Meta(o)
		md.ResourceVersion = ""
		for _, e := range md.GetManagedFields() {
			e.Time = nil
		}
		if p, ok := o.(*corev1.Pod); ok {
			p.Status = nil
		}
	}
	if !proto.Equal(a, b) {
		return false
	}
	objects.Meta(obj).ManagedFields = proto.CloneOf(objects.Meta(current)).GetManagedFields()
	return true
}

// apiStatus converts a Kubernetes API error (the FieldManager's conflict)
// to podflow's Status; any other error is a 400.
func apiStatus(err error) *corev1.Status {
	var se apierrors.APIStatus
	if !errors.As(err, &se) {
		return badRequest("%v", err)
	}
	s := se.Status()
	st := &corev1.Status{Status: metav1.StatusFailure, Message: s.Message, Reason: string(s.Reason), Code: s.Code}
	if d := s.Details; d != nil {
		st.Name, st.Kind = d.Name, d.Kind
		for _, c := range d.Causes {
			st.Causes = append(st.Causes, &corev1.StatusCause{Type: string(c.Type), Message: c.Message, Field: c.Field})
		}
	}
	if st.Reason == "" && st.Code == http.StatusConflict {
		st.Reason = eventsv1.ReasonConflict
	}
	return st
}
