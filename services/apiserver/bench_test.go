package apiserver_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podflow/podflow/proto/corev1"
)

// reportLatency adds p50 and p99 in milliseconds to the benchmark result.
func reportLatency(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	q := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
	}
	b.ReportMetric(q(0.50), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(0, "ns/op") // latency percentiles say more than the mean
}

// BenchmarkCreatePod is the mutating API call latency: an HTTPS POST of
// a pod until its 201, through the real api, admission and persistence
// stages and a raft store (one and three replicas on loopback, fsync'ed),
// one request at a time.
func BenchmarkCreatePod(b *testing.B) {
	for _, n := range []int{1, 3} {
		b.Run(fmt.Sprintf("store-replicas=%d", n), func(b *testing.B) { benchCreatePod(b, n) })
	}
}

func benchCreatePod(b *testing.B, replicas int) {
	s := startSystem(b, options{replicas: replicas, fsync: true})
	c := s.client(b, adminToken)
	url := s.url + "/api/v1/namespaces/default/pods"
	// Warm up connections and caches.
	for i := range 20 {
		postPod(b, c, url, fmt.Sprintf("warm-%d", i))
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		postPod(b, c, url, fmt.Sprintf("p-%d", i))
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	reportLatency(b, lat)
}

func postPod(b *testing.B, c *http.Client, url, name string) {
	resp, err := c.Post(url, "application/json", strings.NewReader(podJSON(name, "")))
	if err != nil {
		b.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 201 {
		b.Fatalf("POST %s: %d %s", name, resp.StatusCode, body)
	}
}

// BenchmarkListPods1000 is the list latency at 1,000 pods: a
// linearizable store read and the conversion of every pod, as JSON
// (client-go) and as a server-side Table (kubectl get).
func BenchmarkListPods1000(b *testing.B) {
	s := startSystem(b, options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < 1000; i += 8 {
				pod := &corev1.Pod{
					Metadata: &corev1.ObjectMeta{Name: fmt.Sprintf("pod-%04d", i), Namespace: "default", Uid: fmt.Sprintf("uid-%d", i),
						Labels: map[string]string{"app": "bench"}},
					Spec: &corev1.PodSpec{NodeName: "node-1", Containers: []*corev1.Container{{Name: "c", Image: "nginx:1.27",
						Ports: []*corev1.ContainerPort{{ContainerPort: 80, Protocol: "TCP"}}}}},
					Status: &corev1.PodStatus{Phase: "Running", PodIp: "10.244.0.1"},
				}
				if _, err := s.store.Create(ctx, pod); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	c := s.client(b, adminToken)
	for _, bc := range []struct{ name, accept string }{
		{"json", "application/json"},
		{"table", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			var size int
			for b.Loop() {
				req, _ := http.NewRequest("GET", s.url+"/api/v1/namespaces/default/pods?limit=500", nil)
				req.Header.Set("Accept", bc.accept)
				start := time.Now()
				resp, err := c.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				lat = append(lat, time.Since(start))
				if resp.StatusCode != 200 || !strings.Contains(string(body), "pod-0999") {
					b.Fatalf("list: %d %.200s", resp.StatusCode, body)
				}
				size = len(body)
			}
			b.StopTimer()
			b.ReportMetric(float64(size)/1024, "KiB/list")
			reportLatency(b, lat)
		})
	}
}
