package kube

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	webhookutil "k8s.io/apiserver/pkg/util/webhook"
	"k8s.io/client-go/rest"

	"github.com/podflow/podflow/services/webhook"
)

// The plugins' span names for a webhook call (mutating and validating
// dispatchers) and the attributes they set.
const (
	spanMutating   = "Call mutating webhook"
	spanValidating = "Call validating webhook"
	attrWebhook    = "webhook"
	attrConfig     = "configuration"
	eventPatched   = "Patch applied"
)

// The attributes the webhook client's transport (observer) notes on a
// call's span.
const (
	attrHTTP    = "podflow.http.status"
	attrErr     = "podflow.error"
	attrAllowed = "podflow.allowed"
	attrMessage = "podflow.message"
)

// callRecorder is an OpenTelemetry span processor that hands the webhook
// calls' spans of one admission request (one trace) to its collector.
type callRecorder struct {
	mu      sync.Mutex
	byTrace map[trace.TraceID]*spanList
}

type spanList struct {
	mu    sync.Mutex
	spans []sdktrace.ReadOnlySpan
}

var _ sdktrace.SpanProcessor = (*callRecorder)(nil)

func newCallRecorder() *callRecorder { return &callRecorder{byTrace: map[trace.TraceID]*spanList{}} }

func (c *callRecorder) collect(id trace.TraceID) *spanList {
	l := &spanList{}
	c.mu.Lock()
	c.byTrace[id] = l
	c.mu.Unlock()
	return l
}

func (c *callRecorder) done(id trace.TraceID, l *spanList) []sdktrace.ReadOnlySpan {
	c.mu.Lock()
	delete(c.byTrace, id)
	c.mu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.spans
}

func (c *callRecorder) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

func (c *callRecorder) OnEnd(s sdktrace.ReadOnlySpan) {
	if s.Name() != spanMutating && s.Name() != spanValidating {
		return
	}
	c.mu.Lock()
	l := c.byTrace[s.SpanContext().TraceID()]
	c.mu.Unlock()
	if l == nil {
		return
	}
	l.mu.Lock()
	l.spans = append(l.spans, s)
	l.mu.Unlock()
}

func (c *callRecorder) Shutdown(context.Context) error   { return nil }
func (c *callRecorder) ForceFlush(context.Context) error { return nil }

// observeCalls wraps the webhooks' client configurations: their transport
// notes each call's HTTP answer on the call's span.
func observeCalls(d webhookutil.AuthenticationInfoResolver) webhookutil.AuthenticationInfoResolver {
	return observingResolver{d}
}

type observingResolver struct {
	d webhookutil.AuthenticationInfoResolver
}

func (o observingResolver) ClientConfigFor(hostPort string) (*rest.Config, error) {
	return wrapObserver(o.d.ClientConfigFor(hostPort))
}

func (o observingResolver) ClientConfigForService(name, namespace string, port int) (*rest.Config, error) {
	return wrapObserver(o.d.ClientConfigForService(name, namespace, port))
}

func wrapObserver(cfg *rest.Config, err error) (*rest.Config, error) {
	if err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	if cfg.Proxy == nil {
		// The default (the environment's proxy), set explicitly: a
		// config with a Proxy gets a transport of its own from client-go
		// rather than one shared from its TLS cache, so its idle pool can
		// be sized below without touching a transport other clients use.
		cfg.Proxy = http.ProxyFromEnvironment
	}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		if t, ok := rt.(*http.Transport); ok && t.MaxIdleConnsPerHost < maxIdleConnsPerWebhook {
			// client-go keeps 25 idle connections a host; a stage calls a
			// webhook from up to its handlers' number of deliveries at
			// once (HTTP/1.1, a connection a call in flight), and each
			// connection past the pool would cost a TLS handshake per call.
			t.MaxIdleConnsPerHost = maxIdleConnsPerWebhook
		}
		return observer{rt}
	})
	return cfg, nil
}

// maxIdleConnsPerWebhook is the idle connections kept to one webhook
// host: a stage's concurrent deliveries (256 handlers).
const maxIdleConnsPerWebhook = 256

// maxReviewBytes bounds the AdmissionReview the observer reads to note the
// verdict (the client reads the whole answer anyway).
const maxReviewBytes = 3 << 20

type observer struct{ rt http.RoundTripper }

func (o observer) RoundTrip(req *http.Request) (*http.Response, error) {
	span := trace.SpanFromContext(req.Context())
	resp, err := o.rt.RoundTrip(req)
	if !span.IsRecording() {
		return resp, err
	}
	if err != nil {
		span.SetAttributes(attribute.String(attrErr, err.Error()))
		return resp, err
	}
	span.SetAttributes(attribute.Int(attrHTTP, resp.StatusCode))
	if resp.StatusCode != http.StatusOK {
		return resp, nil
	}
	body, rerr := io.ReadAll(io.LimitReader(resp.Body, maxReviewBytes))
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if rerr != nil {
		span.SetAttributes(attribute.String(attrErr, rerr.Error()))
		return resp, nil
	}
	var review struct {
		Response *struct {
			Allowed bool `json:"allowed"`
			Status  *struct {
				Message string `json:"message"`
			} `json:"status"`
		} `json:"response"`
	}
	if json.Unmarshal(body, &review) == nil && review.Response != nil {
		span.SetAttributes(attribute.Bool(attrAllowed, review.Response.Allowed))
		if st := review.Response.Status; st != nil && st.Message != "" {
			span.SetAttributes(attribute.String(attrMessage, st.Message))
		}
	}
	return resp, nil
}

// webhookCalls turns the webhook calls' spans of a request into Calls, in
// the order they started; err is the request's outcome.
func webhookCalls(spans []sdktrace.ReadOnlySpan, err error, attrs *recordingAttributes) []webhook.Call {
	sort.Slice(spans, func(i, j int) bool { return spans[i].StartTime().Before(spans[j].StartTime()) })
	failedOpen := map[string]bool{}
	for k, v := range attrs.annotationMap() {
		if strings.HasPrefix(k, "failed-open.") {
			failedOpen[v] = true
		}
	}
	out := make([]webhook.Call, 0, len(spans))
	for _, s := range spans {
		c := webhook.Call{Plugin: webhook.PluginValidatingWebhook, Start: s.StartTime(), Latency: s.EndTime().Sub(s.StartTime())}
		if s.Name() == spanMutating {
			c.Plugin = webhook.PluginMutatingWebhook
		}
		var status int64
		var callErr, message string
		allowed, answered := false, false
		for _, kv := range s.Attributes() {
			switch kv.Key {
			case attrWebhook:
				c.Name = kv.Value.AsString()
			case attrConfig:
				c.Configuration = kv.Value.AsString()
			case attrHTTP:
				status = kv.Value.AsInt64()
			case attrErr:
				callErr = kv.Value.AsString()
			case attrAllowed:
				allowed, answered = kv.Value.AsBool(), true
			case attrMessage:
				message = kv.Value.AsString()
			}
		}
		patched := false
		for _, e := range s.Events() {
			patched = patched || e.Name == eventPatched
		}
		named := err != nil && strings.Contains(err.Error(), fmt.Sprintf("%q", c.Name))
		switch {
		case callErr != "" || (status != 0 && status != http.StatusOK) || !answered:
			c.Verdict, c.Message = webhook.Error, callErr
			if c.Message == "" && status != 0 {
				c.Message = fmt.Sprintf("HTTP %d", status)
			}
			if named {
				c.Message = err.Error()
			}
			if failedOpen[c.Name] {
				c.Verdict = webhook.FailedOpen
			}
		case !allowed:
			c.Verdict, c.Message = webhook.Denied, message
		case named: // answered, yet failed: an invalid answer or patch
			c.Verdict, c.Message = webhook.Error, err.Error()
		case patched:
			c.Verdict = webhook.Patched
		default:
			c.Verdict = webhook.Allowed
		}
		out = append(out, c)
	}
	return out
}

var (
	policyWarning = regexp.MustCompile(`^Validation failed for ValidatingAdmissionPolicy '([^']*)' with binding '([^']*)': (.*)$`)
	policyDenial  = regexp.MustCompile(`ValidatingAdmissionPolicy '([^']*)'(?: with binding '([^']*)')? denied request: (.*)$`)
)

// policyCalls are the Calls of the policies' evaluation: one per policy
// that denied or warned (Warn or Audit), else one for the whole
// evaluation.
func policyCalls(start time.Time, latency time.Duration, err error, warned []string, attrs *recordingAttributes) []webhook.Call {
	call := func(v webhook.Verdict, policy, binding, msg string) webhook.Call {
		return webhook.Call{Plugin: webhook.PluginValidatingPolicy, Name: policy, Configuration: binding, Start: start, Latency: latency,
			Verdict: v, Message: msg}
	}
	var out []webhook.Call
	for _, w := range warned {
		if m := policyWarning.FindStringSubmatch(w); m != nil {
			out = append(out, call(webhook.Warned, m[1], m[2], m[3]))
		}
	}
	if v, ok := attrs.annotationMap()["validation.policy.admission.k8s.io/validation_failure"]; ok {
		var failures []struct{ Message, Policy, Binding string }
		if json.Unmarshal([]byte(v), &failures) == nil {
			for _, f := range failures {
				out = append(out, call(webhook.Warned, f.Policy, f.Binding, "audit: "+f.Message))
			}
		}
	}
	if err != nil {
		if m := policyDenial.FindStringSubmatch(err.Error()); m != nil {
			out = append(out, call(webhook.Denied, m[1], m[2], m[3]))
		} else {
			out = append(out, call(webhook.Error, "", "", err.Error()))
		}
	}
	if len(out) == 0 {
		out = append(out, call(webhook.Allowed, "", "", ""))
	}
	return out
}
