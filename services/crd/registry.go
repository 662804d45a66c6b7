package crd

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"google.golang.org/protobuf/proto"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/warning"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/manifest"
)

// Preparer prepares writes of generic kinds for the store (the api
// stage's Registry: services/registry for the built-in kinds).
type Preparer interface {
	PrepareCreate(ctx context.Context, user *corev1.UserInfo, subresource string, obj *corev1.Unstructured) ([]string, *corev1.Status)
	PrepareUpdate(ctx context.Context, user *corev1.UserInfo, subresource string, obj, old *corev1.Unstructured) ([]string, *corev1.Status)
}

// Registry prepares writes of custom resources with their definition's
// strategies (kube-apiserver's customresource strategy of the version
// written: the schema, CEL rules, status and generation semantics) and
// hands every other kind to Builtin. It is the api stage's Registry in a
// process that serves CustomResourceDefinitions.
type Registry struct {
	Builtin Preparer
	Catalog *Catalog
}

var _ Preparer = Registry{}

// definitionOf is the servable definition of a custom resource and the
// version it is written in (nil: not a custom resource).
func (r Registry) definitionOf(obj *corev1.Unstructured) (*Definition, *Version, *corev1.Status) {
	gv, err := schema.ParseGroupVersion(obj.GetApiVersion())
	if err != nil {
		return nil, nil, statusOf(apierrors.NewBadRequest(err.Error()))
	}
	d, ok := r.Catalog.ForKind(gv.Group, obj.GetKind())
	if !ok {
		return nil, nil, nil
	}
	v, ok := d.Version(gv.Version)
	if !ok || !v.Served {
		return nil, nil, statusOf(apierrors.NewBadRequest(fmt.Sprintf("version %q of %s is not served", gv.Version, d.CRD.Name)))
	}
	return d, v, nil
}

// PrepareCreate prepares a new custom resource for the store as
// kube-apiserver's custom resource storage does: pruned and defaulted by
// its version's schema, uid and creationTimestamp, then the strategy
// through rest.BeforeCreate (status dropped where there is a status
// subresource, generation 1, the schema, the CEL rules and the metadata
// validated), then converted to the storage version. A definition being
// deleted refuses new objects (403). Any other kind goes to Builtin.
func (r Registry) PrepareCreate(ctx context.Context, usr *corev1.UserInfo, subresource string, obj *corev1.Unstructured) ([]string, *corev1.Status) {
	d, v, st := r.definitionOf(obj)
	if st != nil {
		return nil, st
	}
	if d == nil {
		return r.Builtin.PrepareCreate(ctx, usr, subresource, obj)
	}
	if subresource != "" {
		return nil, statusOf(apierrors.NewMethodNotSupported(schema.GroupResource{}, "create through "+subresource))
	}
	u, st := unstructuredOf(obj)
	if st != nil {
		return nil, st
	}
	if d.Terminating() {
		return nil, statusOf(apierrors.NewForbidden(schema.GroupResource{Group: d.Group(), Resource: d.names.Plural}, u.GetName(),
			errors.New("create not allowed while custom resource definition is terminating")))
	}
	if _, err := d.coerce(u, false, false); err != nil {
		return nil, statusOf(apierrors.NewBadRequest(err.Error()))
	}
	d.defaults(u)
	rest.FillObjectMetaSystemFields(u)
	ctx, rec := v.context(ctx, usr, "create", "", u)
	if err := rest.BeforeCreate(v.strategy, ctx, u); err != nil {
		return nil, statusOf(err)
	}
	return rec.warnings, store(d, u, obj)
}

// PrepareUpdate prepares obj, the new state of old (as stored), as
// kube-apiserver does: old converted to obj's version, then
// rest.BeforeUpdate with the strategy of the subresource written through
// ("": status kept as stored where there is a status subresource, the
// generation bumped on any change outside metadata; "status": only
// status changes; "scale": the object's, the replicas validated), then
// converted to the storage version. Any other kind goes to Builtin.
func (r Registry) PrepareUpdate(ctx context.Context, usr *corev1.UserInfo, subresource string, obj, old *corev1.Unstructured) ([]string, *corev1.Status) {
	d, v, st := r.definitionOf(obj)
	if st != nil {
		return nil, st
	}
	if d == nil {
		return r.Builtin.PrepareUpdate(ctx, usr, subresource, obj, old)
	}
	var strategy rest.RESTUpdateStrategy
	switch {
	case subresource == "" || (subresource == "scale" && v.scaleSub != nil):
		strategy = v.strategy
	case subresource == "status" && v.status != nil:
		strategy = v.status
	default:
		return nil, statusOf(apierrors.NewNotFound(schema.GroupResource{Group: d.Group(), Resource: d.names.Plural + "/" + subresource},
			obj.GetMetadata().GetName()))
	}
	u, st := unstructuredOf(obj)
	if st != nil {
		return nil, st
	}
	stored, st := unstructuredOf(old)
	if st != nil {
		return nil, st
	}
	oldU, err := v.FromStorage(stored)
	if err != nil {
		return nil, statusOf(apierrors.NewInternalError(err))
	}
	if _, err := d.coerce(u, false, false); err != nil {
		return nil, statusOf(apierrors.NewBadRequest(err.Error()))
	}
	d.defaults(u)
	ctx, rec := v.context(ctx, usr, "update", subresource, u)
	if err := rest.BeforeUpdate(strategy, ctx, u, oldU); err != nil {
		return nil, statusOf(err)
	}
	return rec.warnings, store(d, u, obj)
}

// store converts u to the storage version and replaces obj with it.
func store(d *Definition, u *unstructured.Unstructured, obj *corev1.Unstructured) *corev1.Status {
	out, err := d.ToStorage(u)
	if err != nil {
		return statusOf(apierrors.NewInternalError(err))
	}
	m, err := manifest.FromKube(out)
	if err != nil {
		return statusOf(apierrors.NewInternalError(err))
	}
	pu, ok := m.(*corev1.Unstructured)
	if !ok {
		return statusOf(apierrors.NewInternalError(fmt.Errorf("crd: %s converted to %T", u.GetKind(), m)))
	}
	proto.Reset(obj)
	proto.Merge(obj, pu)
	return nil
}

// unstructuredOf is a stored custom resource as an Unstructured.
func unstructuredOf(obj *corev1.Unstructured) (*unstructured.Unstructured, *corev1.Status) {
	k, err := manifest.ToKube(obj)
	if err != nil {
		return nil, statusOf(apierrors.NewBadRequest(err.Error()))
	}
	u, ok := k.(*unstructured.Unstructured)
	if !ok {
		return nil, statusOf(apierrors.NewInternalError(fmt.Errorf("crd: %s has a Go type (%T)", obj.GetKind(), k)))
	}
	return u, nil
}

// context is the context kube-apiserver's handlers give a strategy: the
// request, the namespace, the user and a recorder of its warnings.
func (v *Version) context(ctx context.Context, usr *corev1.UserInfo, verb, subresource string, u *unstructured.Unstructured) (context.Context, *recorder) {
	ctx = v.requestInfo(ctx, verb, subresource, u.GetNamespace(), u.GetName())
	if usr != nil {
		ctx = genericapirequest.WithUser(ctx, &user.DefaultInfo{Name: usr.GetUsername(), UID: usr.GetUid(), Groups: usr.GetGroups()})
	}
	rec := &recorder{}
	return warning.WithWarningRecorder(ctx, rec), rec
}

// recorder collects a request's warnings, each once.
type recorder struct {
	mu       sync.Mutex
	warnings []string
}

func (r *recorder) AddWarning(_, text string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, w := range r.warnings {
		if w == text {
			return
		}
	}
	r.warnings = append(r.warnings, text)
}

// statusOf converts an error to podflow's Status: a Kubernetes API error
// with its code, reason, message and causes; anything else a 500.
func statusOf(err error) *corev1.Status {
	var se apierrors.APIStatus
	if !errors.As(err, &se) {
		se = apierrors.NewInternalError(err)
	}
	s := se.Status()
	st := &corev1.Status{Status: s.Status, Message: s.Message, Reason: string(s.Reason), Code: s.Code}
	if st.Status == "" {
		st.Status = metav1.StatusFailure
	}
	if st.Code == 0 {
		st.Code = http.StatusInternalServerError
	}
	if dt := s.Details; dt != nil {
		st.Name, st.Kind = dt.Name, dt.Kind
		for _, c := range dt.Causes {
			st.Causes = append(st.Causes, &corev1.StatusCause{Type: string(c.Type), Message: c.Message, Field: c.Field})
		}
	}
	return st
}

// StatusOf converts an error of this package's callers' (a conversion, a
// decode) to podflow's Status, as statusOf.
func StatusOf(err error) *corev1.Status { return statusOf(err) }
