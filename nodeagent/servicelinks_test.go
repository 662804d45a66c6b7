package nodeagent_test

import (
	"context"
	"testing"

	"github.com/podflow/podflow/nodeagent"
	corev1 "github.com/podflow/podflow/proto/corev1"
)

// TestServiceEnvironment: a container gets the Service variables of its
// namespace's Services and of default/kubernetes (kubelet's
// enableServiceLinks, on by default), its own variables win and may refer
// to them; with enableServiceLinks false only default/kubernetes'.
func TestServiceEnvironment(t *testing.T) {
	e, rec := newRecordingEnv(t)
	cache := nodeagent.NewServiceCache()
	if _, err := cache.Sync(context.Background(), []*corev1.Service{
		{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "kubernetes"},
			Spec: &corev1.ServiceSpec{ClusterIp: "10.96.0.1", Ports: []*corev1.ServicePort{{Name: "https", Port: 443, Protocol: "TCP"}}}},
		{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "my-svc"},
			Spec: &corev1.ServiceSpec{ClusterIp: "10.96.0.10", Ports: []*corev1.ServicePort{{Port: 80, Protocol: "TCP"}}}},
		{Metadata: &corev1.ObjectMeta{Namespace: "elsewhere", Name: "far"},
			Spec: &corev1.ServiceSpec{ClusterIp: "10.96.0.11", Ports: []*corev1.ServicePort{{Port: 80}}}},
	}, nil); err != nil {
		t.Fatal(err)
	}
	cfg := fastConfig()
	cfg.Services = cache
	e.agent.Stop()
	a, err := nodeagent.New(cfg, rec, e.store, e.pub)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	if err := a.Start(e.ctx()); err != nil {
		t.Fatal(err)
	}
	e.agent = a

	linked := newPod("linked", func(p *corev1.Pod) {
		p.Spec.Containers[0].Env = []*corev1.EnvVar{
			{Name: "MY_SVC_SERVICE_PORT", Value: "8080"},
			{Name: "URL", Value: "http://$(MY_SVC_SERVICE_HOST):$(MY_SVC_SERVICE_PORT)/"},
		}
		p.Spec.Containers[0].Args = []string{"$(KUBERNETES_SERVICE_HOST)"}
	})
	unlinked := newPod("unlinked", func(p *corev1.Pod) { p.Spec.EnableServiceLinks = ptr(false) })
	for _, p := range []*corev1.Pod{linked, unlinked} {
		e.bind(p)
		e.waitStatus(p.Metadata.Uid, "Running", func(st *corev1.PodStatus) bool { return st.GetPhase() == "Running" })
	}
	got := envMap(rec.starts(linked.Metadata.Uid)[0])
	for k, v := range map[string]string{
		"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443", "KUBERNETES_SERVICE_PORT_HTTPS": "443",
		"KUBERNETES_PORT": "tcp://10.96.0.1:443", "KUBERNETES_PORT_443_TCP_ADDR": "10.96.0.1",
		"MY_SVC_SERVICE_HOST": "10.96.0.10", "MY_SVC_SERVICE_PORT": "8080", // the container's own wins
		"MY_SVC_PORT": "tcp://10.96.0.10:80", "MY_SVC_PORT_80_TCP": "tcp://10.96.0.10:80", "MY_SVC_PORT_80_TCP_PROTO": "tcp",
		"MY_SVC_PORT_80_TCP_PORT": "80", "MY_SVC_PORT_80_TCP_ADDR": "10.96.0.10",
		"URL": "http://10.96.0.10:8080/",
	} {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if _, ok := got["FAR_SERVICE_HOST"]; ok {
		t.Error("another namespace's Service reached the container")
	}
	if args := rec.starts(linked.Metadata.Uid)[0].GetArgs(); len(args) != 1 || args[0] != "10.96.0.1" {
		t.Errorf("args %q, want the Service variable expanded", args)
	}
	off := envMap(rec.starts(unlinked.Metadata.Uid)[0])
	if off["KUBERNETES_SERVICE_HOST"] != "10.96.0.1" {
		t.Errorf("enableServiceLinks false: no KUBERNETES_SERVICE_HOST: %v", off)
	}
	if v, ok := off["MY_SVC_SERVICE_HOST"]; ok {
		t.Errorf("enableServiceLinks false: MY_SVC_SERVICE_HOST = %q", v)
	}
}
