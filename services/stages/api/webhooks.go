package api

import (
	"context"
	"errors"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/auth"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/webhook"
)

// Webhooks returns the stage's dynamic admission (Config.Webhooks), for
// the writes the HTTPS front door makes itself (pod updates, CONNECTs).
func (s *Stage) Webhooks() webhook.Admitter { return s.cfg.Webhooks }

// webhookRequest is the dynamic admission request of a create or update
// of obj (existing: the stored object), or nil when no webhooks are
// configured.
func (s *Stage) webhookRequest(kind objects.Kind, attrs auth.Attributes, obj, existing objects.Object, exists, dry bool) *webhook.Request {
	if s.cfg.Webhooks == nil {
		return nil
	}
	md := obj.GetMetadata()
	r := &webhook.Request{Operation: webhook.Create, Kind: kind, Subresource: attrs.Subresource, Namespace: md.GetNamespace(),
		Name: md.GetName(), Object: obj, DryRun: dry, User: attrs.User}
	if exists {
		r.Operation, r.OldObject = webhook.Update, existing
	}
	return r
}

// admissionRevision is the store revision the stage's webhook
// configurations and policies have reached, for PodAuthorized: the
// admission stage calls a pod's webhooks once its own have reached it, so
// a webhook this process already calls (a marker ConfigMap admitted
// through it) is called for the pod too. 0 without dynamic admission.
func (s *Stage) admissionRevision() int64 {
	if r, ok := s.cfg.Webhooks.(webhook.Revisioned); ok {
		return r.ConfigRevision()
	}
	return 0
}

// admitDelete runs the webhooks and policies on a DELETE of ns/name, with
// the stored object as the old one. An object that is not stored is left
// to the delete itself (404).
func (s *Stage) admitDelete(ctx context.Context, kind objects.Kind, ns, name string, attrs auth.Attributes) ([]string, *corev1.Status) {
	if s.cfg.Webhooks == nil {
		return nil, nil
	}
	old, err := s.env.Store.GetKind(ctx, kind, ns, name)
	if errors.Is(err, raftstore.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, stage.Internal(err)
	}
	r := &webhook.Request{Operation: webhook.Delete, Kind: kind, Subresource: attrs.Subresource, Namespace: ns, Name: name,
		OldObject: old, User: attrs.User}
	res := s.cfg.Webhooks.Mutate(ctx, r)
	warnings := res.Warnings
	if !res.Allowed() {
		return warnings, res.Status
	}
	res = s.cfg.Webhooks.Validate(ctx, r)
	return append(warnings, res.Warnings...), res.Status
}
