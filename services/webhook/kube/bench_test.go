package kube_test

import (
	"context"
	"slices"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/webhook"
)

// BenchmarkPodThroughTwoWebhooks is the admission latency one local
// mutating webhook (a JSONPatch adding a container) and one local
// validating webhook add to a pod: Mutate then Validate, as the admission
// stage calls them, over HTTPS on loopback. It reports the median (p50-ns)
// beside the mean.
func BenchmarkPodThroughTwoWebhooks(b *testing.B) {
	e := newEnv(b, nil)
	hs := newHookServer(b)
	hs.handle("/inject", injector)
	hs.handle("/allow", allow)
	e.put(&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "injector"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{mutatingHook("inject.example.com", hs.config("/inject"))}})
	e.put(&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "check"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{validatingHook("check.example.com", hs.config("/allow"))}})
	ctx := context.Background()
	for deadline := time.Now().Add(10 * time.Second); ; {
		r := createPod(pod("p", nil))
		if res := e.adm.Validate(ctx, r); len(res.Calls) == 1 {
			if res := e.adm.Mutate(ctx, r); len(res.Calls) == 1 {
				break
			}
		}
		if time.Now().After(deadline) {
			b.Fatal("the webhooks were not called")
		}
		time.Sleep(10 * time.Millisecond)
	}
	p := pod("p", nil)
	took := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		r := createPod(p)
		res := e.adm.Mutate(ctx, r)
		if !res.Allowed() {
			b.Fatal(res.Status)
		}
		r.Object = res.Object.(*corev1.Pod)
		if res := e.adm.Validate(ctx, r); !res.Allowed() || len(res.Calls) != 1 || res.Calls[0].Verdict != webhook.Allowed {
			b.Fatalf("%v %+v", res.Status, res.Calls)
		}
		took = append(took, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Nanoseconds()), "p50-ns")
}

// BenchmarkPodWithoutWebhooks is the cost of asking when none is
// configured: what every write pays.
func BenchmarkPodWithoutWebhooks(b *testing.B) {
	e := newEnv(b, nil)
	ctx := context.Background()
	r := createPod(pod("p", nil))
	b.ReportAllocs()
	for b.Loop() {
		e.adm.Mutate(ctx, r)
		e.adm.Validate(ctx, r)
	}
}
