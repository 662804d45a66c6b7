package client

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/apiv1"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/proto/podrules"
	"github.com/podflow/podflow/services/manifest"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
)

// StatusError is a failed request, printed the way kubectl prints one:
// `Error from server (Forbidden): pods is forbidden: ...`.
type StatusError struct{ Status *corev1.Status }

func (e *StatusError) Error() string {
	return fmt.Sprintf("Error from server (%s): %s", e.Status.GetReason(), e.Status.GetMessage())
}

// NotFound is kubectl's error for a missing object: `Error from server
// (NotFound): pods "x" not found` (the resource qualified by its API group
// outside the core group, as kubectl names it).
func NotFound(kind objects.Kind, name string) error {
	res := kind.Resource
	if kind.APIGroup != "" {
		res += "." + kind.APIGroup
	}
	return &StatusError{&corev1.Status{Status: "Failure", Code: 404, Reason: eventsv1.ReasonNotFound,
		Message: fmt.Sprintf("%s %q not found", res, name)}}
}

// SilentError is an error that has been reported already: the command
// prints nothing more for it.
type SilentError struct{ Err error }

func (e SilentError) Error() string { return e.Err.Error() }

// Silent reports that the error was reported already.
func (SilentError) Silent() bool { return true }

// Unwrap returns Err.
func (e SilentError) Unwrap() error { return e.Err }

// Request sends a request-reply to the api stage's front door on the bus
// (subject pipeline.CreatePodSubject or pipeline.ObjectSubject), bounded
// by the session's request timeout (default 30s). While no api replica
// answers (they restart, the bus fails over) the request is sent again
// within that bound (bus.Conn.Request).
func (s *Session) Request(ctx context.Context, subject string, req proto.Message) (*apiv1.Response, error) {
	b, err := proto.Marshal(req)
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.RequestContext(ctx, DefaultRequestTimeout)
	defer cancel()
	msg, err := s.Bus.Request(ctx, subject, b) // nobody answering yet is retried within ctx
	if err != nil {
		return nil, fmt.Errorf("request to %s: %w", subject, err)
	}
	resp := &apiv1.Response{}
	if err := proto.Unmarshal(msg.Data, resp); err != nil {
		return nil, fmt.Errorf("decode response: %w", err)
	}
	return resp, nil
}

// CreatePod sends a pod through the lifecycle and waits for persistence
// (201) or the stage that refused it (a *StatusError).
func (s *Session) CreatePod(ctx context.Context, pod *corev1.Pod, token string, dryRun bool) (*corev1.Pod, error) {
	resp, err := s.Request(ctx, pipeline.CreatePodSubject, &eventsv1.PodRequested{Pod: pod, Token: token, DryRun: dryRun})
	if err != nil {
		return nil, err
	}
	if resp.GetStatus().GetStatus() != "Success" {
		return nil, &StatusError{resp.GetStatus()}
	}
	out := &corev1.Pod{}
	if err := proto.Unmarshal(resp.GetObject(), out); err != nil {
		return nil, err
	}
	return out, nil
}

// ObjectRequest applies, creates or deletes one object; a refusal is a
// *StatusError, returned with the response.
func (s *Session) ObjectRequest(ctx context.Context, req *apiv1.ObjectRequest) (*apiv1.Response, error) {
	resp, err := s.Request(ctx, pipeline.ObjectSubject, req)
	if err != nil {
		return nil, err
	}
	if resp.GetStatus().GetStatus() != "Success" {
		return resp, &StatusError{resp.GetStatus()}
	}
	return resp, nil
}

// ApplyObject applies one decoded object and returns kubectl's verb for
// what happened: created, configured or unchanged.
func (s *Session) ApplyObject(ctx context.Context, obj objects.Object, token string) (string, error) {
	if pod, ok := obj.(*corev1.Pod); ok {
		_, err := s.CreatePod(ctx, pod, token, false)
		if se, ok := err.(*StatusError); ok && se.Status.GetReason() == eventsv1.ReasonAlreadyExists {
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
	resp, err := s.ObjectRequest(ctx, &apiv1.ObjectRequest{
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

// ApplyFiles applies every object of every file, going on after a failed
// object as kubectl does, and fails at the end (a SilentError: each
// failure was printed to errOut) if any did. namespace, when set,
// overrides the manifests'.
func (s *Session) ApplyFiles(ctx context.Context, files []string, token, namespace string, out, errOut io.Writer) error {
	var all []manifest.Object
	for _, f := range files {
		paths, err := ManifestFiles(f, false)
		if err != nil {
			return err
		}
		for _, p := range paths {
			objs, err := ReadManifest(p)
			if err != nil {
				return err
			}
			all = append(all, objs...)
		}
	}
	return s.ApplyObjects(ctx, all, token, namespace, out, errOut)
}

// ApplyObjects applies decoded manifests, going on after a failed object
// as kubectl does, and fails at the end (a SilentError) if any did.
func (s *Session) ApplyObjects(ctx context.Context, objs []manifest.Object, token, namespace string, out, errOut io.Writer) error {
	failed := 0
	{
		for _, mo := range objs {
			for _, w := range mo.Warnings {
				fmt.Fprintf(errOut, "Warning: %s\n", w)
			}
			obj, ok := mo.Message.(objects.Object)
			if !ok {
				return fmt.Errorf("%s is not a stored kind", mo.Kind)
			}
			if namespace != "" {
				objects.Meta(obj).Namespace = namespace
			}
			verb, err := s.ApplyObject(ctx, obj, token)
			if err != nil {
				fmt.Fprintln(errOut, err)
				failed++
				continue
			}
			fmt.Fprintf(out, "%s/%s %s\n", strings.ToLower(mo.Kind), obj.GetMetadata().GetName(), verb)
		}
	}
	if failed > 0 {
		return SilentError{Err: fmt.Errorf("%d object(s) failed", failed)}
	}
	return nil
}

// ReadManifest decodes the Kubernetes YAML at path ("-": stdin), refusing
// the pod fields podflow does not honour as the API server's 422 would.
func ReadManifest(path string) ([]manifest.Object, error) {
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(io.LimitReader(os.Stdin, int64(manifest.DefaultConfig().MaxBytes)+1))
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, err
	}
	objs, err := manifest.Decode(data)
	if name, errs, ok := manifest.RefusedFields(err); ok {
		// As kubectl shows the API server's 422 for it.
		return nil, fmt.Errorf("error validating %q: The Pod %q is invalid: %v: %w", path, name, errs.ToAggregate(), manifest.ErrUnsupportedField)
	}
	if err != nil {
		return nil, fmt.Errorf("error validating %q: %w", path, err)
	}
	return objs, nil
}

// PodRequested builds the fire-and-forget PodRequested envelope of a pod
// (published on the events stream; nobody answers it).
func PodRequested(p *corev1.Pod, token string) *eventsv1.Envelope {
	ns := podrules.NamespaceOrDefault(p.GetMetadata().GetNamespace())
	return &eventsv1.Envelope{
		RequestId:   uuid.NewString(),
		Namespace:   ns,
		PodName:     p.GetMetadata().GetName(),
		Time:        timestamppb.Now(),
		Stage:       "client",
		Replica:     "podflow-cli",
		Attempt:     1,
		Traceparent: bus.NewTraceparent(),
		Payload:     &eventsv1.Envelope_PodRequested{PodRequested: &eventsv1.PodRequested{Pod: p, Token: token}},
	}
}
