// Package webhook describes dynamic admission — admission webhooks
// (MutatingWebhookConfiguration, ValidatingWebhookConfiguration) and
// ValidatingAdmissionPolicy — to the stages that write objects: a Request
// (one write), its Result, and the Admitter interface they call. The
// implementation, kube-apiserver's own plugins over podflow's store, is
// services/webhook/kube; it links k8s.io/kubernetes, so the stages take an
// Admitter and only the podflow binary and the tests that need it link it.
//
// A writer calls, as kube-apiserver's handlers do:
//
//  1. Mutate after its own (in-tree) mutations, before validation, with
//     Request.Reinvoke re-running those mutations when a webhook with
//     reinvocationPolicy IfNeeded must see their effect; it goes on with
//     Result.Object;
//  2. its own validation;
//  3. Validate on the object as it will be stored, then stores it;
//  4. answers a Result whose Status is set with that Status (the webhook
//     or policy is named in its message), and passes Result.Warnings to
//     the client as Warning headers.
//
// A DELETE is given the stored object as OldObject (no Object); a CONNECT
// (pods/attach, pods/exec, pods/portforward) its options as
// ConnectOptions.
package webhook

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/objects"
)

// Operation is an admission operation, as in AdmissionReview.
type Operation string

// The operations.
const (
	Create  Operation = "CREATE"
	Update  Operation = "UPDATE"
	Delete  Operation = "DELETE"
	Connect Operation = "CONNECT"
)

// Request is one write, as an admission plugin sees it.
type Request struct {
	Operation Operation
	// Kind is the resource written (for a CONNECT, the pod's).
	Kind objects.Kind
	// Subresource written through ("status", "scale", "attach", ...).
	Subresource     string
	Namespace, Name string
	// Object is the new object (CREATE, UPDATE); OldObject the stored one
	// (UPDATE, DELETE).
	Object, OldObject objects.Object
	// ConnectOptions is a CONNECT's options object, a k8s.io/api value
	// (*corev1.PodAttachOptions, *corev1.PodExecOptions, ...).
	ConnectOptions runtime.Object
	// DryRun: nothing will be stored. A webhook with sideEffects Some or
	// Unknown refuses the request.
	DryRun bool
	User   *corev1.UserInfo
	// Reinvoke, when set, re-runs the writer's own mutations (its in-tree
	// admission plugins) over the object before the webhooks are invoked
	// again (reinvocationPolicy IfNeeded), as kube-apiserver reinvokes its
	// whole admission chain once. It returns the new object, or the
	// Status refusing it.
	Reinvoke func(objects.Object) (objects.Object, *corev1.Status)
}

// Verdict is what one webhook or policy decided.
type Verdict string

// The verdicts.
const (
	Allowed Verdict = "Allowed"
	Patched Verdict = "Patched" // allowed, and the object was changed
	Denied  Verdict = "Denied"
	// Error: the call failed (unreachable, timed out, an invalid answer);
	// the request fails with it under failurePolicy Fail.
	Error Verdict = "Error"
	// FailedOpen: the call failed and failurePolicy Ignore admitted the
	// request anyway.
	FailedOpen Verdict = "FailedOpen"
	// Warned: a policy's validationActions Warn (or Audit) reported a
	// failed validation without denying.
	Warned Verdict = "Warned"
)

// The plugins a Call is made by, as kube-apiserver names them.
const (
	PluginMutatingWebhook   = "MutatingAdmissionWebhook"
	PluginValidatingWebhook = "ValidatingAdmissionWebhook"
	PluginValidatingPolicy  = "ValidatingAdmissionPolicy"
)

// Call is one webhook call or policy evaluation of a request.
type Call struct {
	Plugin string // PluginMutatingWebhook, ...
	// Name is the webhook's or the policy's name; Configuration its
	// webhook configuration's (for a policy: the binding's).
	Name, Configuration string
	Start               time.Time
	Latency             time.Duration
	Verdict             Verdict
	// Message is the denial's or the error's.
	Message string
}

// Result is the outcome of Mutate or Validate.
type Result struct {
	// Object is the object as the mutating webhooks left it (Mutate; the
	// request's object when none changed it). Validate leaves it nil.
	Object objects.Object
	// Status refuses the request: a webhook's denial (its code, else 400
	// "admission webhook "x" denied the request: …"), a failed call under
	// failurePolicy Fail (500 "Internal error occurred: failed calling
	// webhook …"), a policy's (422 Invalid or its reason). Nil: allowed.
	Status *corev1.Status
	// Warnings for the client (Warning headers).
	Warnings []string
	// AuditAnnotations are the webhooks' and policies' audit annotations
	// (key "webhook-name/key", and kube-apiserver's own keys).
	AuditAnnotations map[string]string
	// Calls lists each webhook called and policy evaluated, in order.
	Calls []Call
}

// Allowed reports whether the request may go on.
func (r Result) Allowed() bool { return r.Status == nil }

// Admitter runs dynamic admission over a request. Implementations are safe
// for concurrent use; a call costs at most the webhooks' timeouts
// (timeoutSeconds, 10 s by default, 30 s at most each) and ctx's deadline.
type Admitter interface {
	// Mutate calls the mutating webhooks that match r.
	Mutate(ctx context.Context, r *Request) Result
	// Validate evaluates the ValidatingAdmissionPolicies and calls the
	// validating webhooks that match r.
	Validate(ctx context.Context, r *Request) Result
}

// Revisioned is implemented by an Admitter whose configurations (webhook
// configurations, policies and their bindings) are cached from the store:
// a process that admits a request after another process admitted a
// related one (the api stage, then the admission stage, for a pod) makes
// the second see at least what the first saw.
type Revisioned interface {
	// ConfigRevision returns the store revision the cached configurations
	// have reached: every change up to it has been seen.
	ConfigRevision() int64
	// WaitForConfigRevision blocks until every change to the
	// configurations up to store revision rev is in use, or ctx is done
	// (an error wrapping its cause).
	WaitForConfigRevision(ctx context.Context, rev int64) error
}
