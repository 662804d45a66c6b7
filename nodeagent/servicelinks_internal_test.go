package nodeagent

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	corev1 "github.com/podflow/podflow/proto/corev1"
)

func svc(ns, name, ip string, ports ...*corev1.ServicePort) *corev1.Service {
	return &corev1.Service{Metadata: &corev1.ObjectMeta{Namespace: ns, Name: name},
		Spec: &corev1.ServiceSpec{ClusterIp: ip, Ports: ports}}
}

// TestFromService is envvars.FromServices for one Service, variable for
// variable and in its order.
func TestFromService(t *testing.T) {
	got := fromService(svc("shop", "my-svc", "10.96.0.10",
		&corev1.ServicePort{Port: 80}, &corev1.ServicePort{Name: "dns-udp", Protocol: "UDP", Port: 53}))
	want := [][2]string{
		{"MY_SVC_SERVICE_HOST", "10.96.0.10"},
		{"MY_SVC_SERVICE_PORT", "80"},
		{"MY_SVC_SERVICE_PORT_DNS_UDP", "53"},
		{"MY_SVC_PORT", "tcp://10.96.0.10:80"},
		{"MY_SVC_PORT_80_TCP", "tcp://10.96.0.10:80"},
		{"MY_SVC_PORT_80_TCP_PROTO", "tcp"},
		{"MY_SVC_PORT_80_TCP_PORT", "80"},
		{"MY_SVC_PORT_80_TCP_ADDR", "10.96.0.10"},
		{"MY_SVC_PORT_53_UDP", "udp://10.96.0.10:53"},
		{"MY_SVC_PORT_53_UDP_PROTO", "udp"},
		{"MY_SVC_PORT_53_UDP_PORT", "53"},
		{"MY_SVC_PORT_53_UDP_ADDR", "10.96.0.10"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("variables:\n%v\nwant\n%v", got, want)
	}
	if got := fromService(svc("shop", "v6", "fd00::a", &corev1.ServicePort{Port: 80})); got[3][1] != "tcp://[fd00::a]:80" {
		t.Errorf("an IPv6 Service's link: %q", got[3][1])
	}
}

// TestServiceEnvSelection is getServiceEnvVarMap: the pod's namespace's
// Services with a cluster IP when links are on, default/kubernetes
// always, never another namespace's or a headless one.
func TestServiceEnvSelection(t *testing.T) {
	services := []*corev1.Service{
		svc("default", "kubernetes", "10.96.0.1", &corev1.ServicePort{Name: "https", Port: 443}),
		svc("shop", "web", "10.96.0.20", &corev1.ServicePort{Port: 80}),
		svc("shop", "headless", "None", &corev1.ServicePort{Port: 80}),
		svc("shop", "pending", "", &corev1.ServicePort{Port: 80}),
		svc("other", "db", "10.96.0.30", &corev1.ServicePort{Port: 5432}),
	}
	got := serviceEnv(services, "shop", true)
	for k, v := range map[string]string{"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443",
		"KUBERNETES_SERVICE_PORT_HTTPS": "443", "KUBERNETES_PORT_443_TCP": "tcp://10.96.0.1:443", "WEB_SERVICE_HOST": "10.96.0.20"} {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	for _, k := range []string{"HEADLESS_SERVICE_HOST", "PENDING_SERVICE_HOST", "DB_SERVICE_HOST"} {
		if v, ok := got[k]; ok {
			t.Errorf("%s = %q, want none", k, v)
		}
	}
	off := serviceEnv(services, "shop", false)
	if off["KUBERNETES_SERVICE_HOST"] != "10.96.0.1" || off["WEB_SERVICE_HOST"] != "" {
		t.Errorf("enableServiceLinks false: %v, want default/kubernetes only", off)
	}
	if other := serviceEnv(services, "default", true); other["KUBERNETES_SERVICE_HOST"] != "10.96.0.1" || other["WEB_SERVICE_HOST"] != "" {
		t.Errorf("namespace default: %v", other)
	}
}

// TestServiceCacheWaitsForSync: before the first Sync a read fails once
// ctx ends, with kubelet's words; after it, it returns what was synced.
func TestServiceCacheWaitsForSync(t *testing.T) {
	c := NewServiceCache()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := c.Services(ctx); !errors.Is(err, ErrServicesNotSynced) ||
		err.Error() != "services have not yet been read at least once, cannot construct envvars" {
		t.Fatalf("before a sync: %v", err)
	}
	want := []*corev1.Service{svc("default", "kubernetes", "10.96.0.1", &corev1.ServicePort{Port: 443})}
	if _, err := c.Sync(context.Background(), want, nil); err != nil {
		t.Fatal(err)
	}
	got, err := c.Services(context.Background())
	if err != nil || len(got) != 1 || got[0] != want[0] {
		t.Fatalf("after a sync: %v, %v", got, err)
	}
}
