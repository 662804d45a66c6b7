package main

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/ops/client"
	"github.com/podflow/podflow/proto/apiv1"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
)

// statusError is a failed request, printed the way kubectl prints one:
// `Error from server (Forbidden): pods is forbidden: ...`.
type statusError struct{ st *corev1.Status }

func (e *statusError) Error() string {
	return fmt.Sprintf("Error from server (%s): %s", e.st.GetReason(), e.st.GetMessage())
}

// notFound is kubectl's error for a missing object: `Error from server
// (NotFound): pods "x" not found` (the resource qualified by its API group
// outside the core group, as kubectl names it).
func notFound(kind objects.Kind, name string) error {
	res := kind.Resource
	if kind.APIGroup != "" {
		res += "." + kind.APIGroup
	}
	return &statusError{&corev1.Status{Status: "Failure", Code: 404, Reason: eventsv1.ReasonNotFound,
		Message: fmt.Sprintf("%s %q not found", res, name)}}
}

// request sends a request-reply to the api front door.
func request(ctx context.Context, sess *client.Session, subject string, req proto.Message) (*apiv1.Response, error) {
	b, err := proto.Marshal(req)
	if err != nil {
		return nil, err
	}
	ctx, cancel := sess.RequestContext(ctx, 30*time.Second)
	defer cancel()
	msg, err := sess.Bus.NATS().RequestWithContext(ctx, subject, b)
	if err != nil {
		return nil, fmt.Errorf("request to %s: %w", subject, err)
	}
	resp := &apiv1.Response{}
	if err := proto.Unmarshal(msg.Data, resp); err != nil {
		return nil, fmt.Errorf("decode response: %w", err)
	}
	return resp, nil
}

// createPod sends a pod through the lifecycle and waits for persistence
// (201) or the stage that refused it.
func createPod(ctx context.Context, sess *client.Session, pod *corev1.Pod, token string, dryRun bool) (*corev1.Pod, error) {
	resp, err := request(ctx, sess, pipeline.CreatePodSubject, &eventsv1.PodRequested{Pod: pod, Token: token, DryRun: dryRun})
	if err != nil {
		return nil, err
	}
	if resp.GetStatus().GetStatus() != "Success" {
		return nil, &statusError{resp.GetStatus()}
	}
	out := &corev1.Pod{}
	if err := proto.Unmarshal(resp.GetObject(), out); err != nil {
		return nil, err
	}
	return out, nil
}

// objectRequest applies, creates or deletes one object.
func objectRequest(ctx context.Context, sess *client.Session, req *apiv1.ObjectRequest) (*apiv1.Response, error) {
	resp, err := request(ctx, sess, pipeline.ObjectSubject, req)
	if err != nil {
		return nil, err
	}
	if resp.GetStatus().GetStatus() != "Success" {
		return resp, &statusError{resp.GetStatus()}
	}
	return resp, nil
}

// applyObject applies one decoded object and returns kubectl's verb for
// what happened: created, configured or unchanged.
func applyObject(ctx context.Context, sess *client.Session, obj objects.Object, token string) (string, error) {
	if pod, ok := obj.(*corev1.Pod); ok {
		_, err := createPod(ctx, sess, pod, token, false)
		if se, ok := err.(*statusError); ok && se.st.GetReason() == eventsv1.ReasonAlreadyExists {
			return "unchanged", nil
		}
		if err != nil {
			return "", err
		}
		return "created", nil
	}
	kind, err := objects.KindOf(obj)
	if err != nil {
		return "", err
	}
	b, err := proto.Marshal(obj)
	if err != nil {
		return "", err
	}
	md := obj.GetMetadata()
	resp, err := objectRequest(ctx, sess, &apiv1.ObjectRequest{
		Token: token, Verb: "apply", Kind: kind.Resource, Namespace: md.GetNamespace(), Name: md.GetName(), Object: b,
	})
	if err != nil {
		return "", err
	}
	if resp.GetStatus().GetCode() == 201 {
		return "created", nil
	}
	return "configured", nil
}
