package apiserver

import (
	"context"
	"net/http"
	"sort"
	"sync"
	"time"

	k8scorev1 "k8s.io/api/core/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/auth"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/podmetrics"
	"github.com/podflow/podflow/services/stage"
)

// MetricsBackend is implemented by backends that read the nodes' resource
// usage (metrics.k8s.io/v1beta1, kubectl top). NodeReading returns node's
// reading or an error when the node did not answer by ctx's deadline.
type MetricsBackend interface {
	NodeReading(ctx context.Context, node string) (podmetrics.Reading, error)
}

// Bounds of a metrics request: how long a node may take to answer and how
// many are asked at once.
const (
	metricsNodeTimeout = 5 * time.Second
	metricsConcurrency = 16
)

// serveMetrics answers get and list of PodMetrics and NodeMetrics from the
// readings of the nodes (all of them for a list, the pod's or the named
// one for a get), as metrics-server: a node that does not answer is left
// out; a pod or node without a reading is 404. A labelSelector selects
// by the pods' (nodes') labels in the store.
func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request, req *request) {
	if req.sub != "" || (req.verb != "get" && req.verb != "list") {
		writeStatus(w, methodNotAllowed(r.Method, r.URL.Path))
		return
	}
	attrs := auth.Attributes{User: req.user, Verb: req.verb, Namespace: req.namespace, APIGroup: req.res.group,
		Resource: req.res.name, Name: req.name}
	if d := s.backend.Authorize(attrs); !d.Allowed {
		writeStatus(w, auth.Forbidden(attrs, ""))
		return
	}
	mb, ok := s.backend.(MetricsBackend)
	if !ok {
		writeStatus(w, stage.Failure(http.StatusServiceUnavailable, "ServiceUnavailable", req.res.name, req.name, "this server reads no node metrics"))
		return
	}
	sel, err := labels.Parse(r.URL.Query().Get("labelSelector"))
	if err != nil {
		writeStatus(w, badRequest("labelSelector: %v", err))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
	defer cancel()
	// The stored objects say which readings are asked for and give each
	// item its labels, as metrics-server's from its informers: a node (pod)
	// not in the store, or not selected, has no metrics item.
	var nodes []string
	nodeLabels := map[string]map[string]string{}
	podLabels := map[string]map[string]string{}
	switch {
	case req.res.kind == "NodeMetrics" && req.name != "":
		n, err := objects.Get[*corev1.Node](ctx, s.store, "", req.name)
		if err != nil {
			writeStatus(w, storeStatus(err, req.res, req.name))
			return
		}
		nodes = []string{req.name}
		nodeLabels[req.name] = n.GetMetadata().GetLabels()
	case req.res.kind == "PodMetrics" && req.name != "":
		pod, err := objects.Get[*corev1.Pod](ctx, s.store, req.namespace, req.name)
		if err != nil {
			writeStatus(w, storeStatus(err, req.res, req.name))
			return
		}
		if n := pod.GetSpec().GetNodeName(); n != "" {
			nodes = []string{n}
		}
		podLabels[req.namespace+"/"+req.name] = pod.GetMetadata().GetLabels()
	case req.res.kind == "NodeMetrics":
		all, _, err := objects.List[*corev1.Node](ctx, s.store, "")
		if err != nil {
			writeStatus(w, storeStatus(err, req.res, ""))
			return
		}
		for _, n := range all {
			if md := n.GetMetadata(); sel.Matches(labels.Set(md.GetLabels())) {
				nodes = append(nodes, md.GetName())
				nodeLabels[md.GetName()] = md.GetLabels()
			}
		}
	default: // a pod list: the nodes of the selected pods
		pods, _, err := objects.List[*corev1.Pod](ctx, s.store, req.namespace)
		if err != nil {
			writeStatus(w, storeStatus(err, req.res, ""))
			return
		}
		seen := map[string]bool{}
		for _, p := range pods {
			md := p.GetMetadata()
			if !sel.Matches(labels.Set(md.GetLabels())) {
				continue
			}
			podLabels[md.GetNamespace()+"/"+md.GetName()] = md.GetLabels()
			if n := p.GetSpec().GetNodeName(); n != "" && !seen[n] {
				seen[n] = true
				nodes = append(nodes, n)
			}
		}
		sort.Strings(nodes)
	}
	readings := readNodes(ctx, mb, nodes)
	if req.res.kind == "NodeMetrics" {
		l := &metricsv1beta1.NodeMetricsList{TypeMeta: metav1.TypeMeta{Kind: "NodeMetricsList", APIVersion: "metrics.k8s.io/v1beta1"}}
		for _, rd := range readings {
			l.Items = append(l.Items, metricsv1beta1.NodeMetrics{
				TypeMeta:   metav1.TypeMeta{Kind: "NodeMetrics", APIVersion: "metrics.k8s.io/v1beta1"},
				ObjectMeta: metav1.ObjectMeta{Name: rd.Node, Labels: nodeLabels[rd.Node], CreationTimestamp: metav1.Now()},
				Timestamp:  metav1.NewTime(time.Unix(0, rd.Timestamp)), Window: metav1.Duration{Duration: time.Duration(rd.WindowNs)},
				Usage: usageList(rd.Usage),
			})
		}
		writeMetrics(w, req, len(l.Items), l, func() any { return &l.Items[0] })
		return
	}
	l := &metricsv1beta1.PodMetricsList{TypeMeta: metav1.TypeMeta{Kind: "PodMetricsList", APIVersion: "metrics.k8s.io/v1beta1"}}
	for _, rd := range readings {
		for _, p := range rd.Pods {
			lbl, ok := podLabels[p.Namespace+"/"+p.Name]
			if !ok {
				continue
			}
			pm := metricsv1beta1.PodMetrics{
				TypeMeta:   metav1.TypeMeta{Kind: "PodMetrics", APIVersion: "metrics.k8s.io/v1beta1"},
				ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, Labels: lbl, CreationTimestamp: metav1.Now()},
				Timestamp:  metav1.NewTime(time.Unix(0, rd.Timestamp)), Window: metav1.Duration{Duration: time.Duration(rd.WindowNs)},
			}
			for _, c := range p.Containers {
				pm.Containers = append(pm.Containers, metricsv1beta1.ContainerMetrics{Name: c.Name, Usage: usageList(c.Usage)})
			}
			l.Items = append(l.Items, pm)
		}
	}
	sort.Slice(l.Items, func(i, j int) bool {
		a, b := l.Items[i], l.Items[j]
		return a.Namespace < b.Namespace || a.Namespace == b.Namespace && a.Name < b.Name
	})
	writeMetrics(w, req, len(l.Items), l, func() any { return &l.Items[0] })
}

// writeMetrics writes the list, or for a get its one item (404 when none).
func writeMetrics(w http.ResponseWriter, req *request, n int, list any, first func() any) {
	if req.verb == "list" {
		writeJSON(w, http.StatusOK, list)
		return
	}
	if n == 0 {
		writeStatus(w, stage.NotFound(req.res.name+".metrics.k8s.io", req.name))
		return
	}
	writeJSON(w, http.StatusOK, first())
}

// readNodes asks the nodes for their readings, metricsConcurrency at a
// time, each under metricsNodeTimeout; the readings are in node order, the
// nodes that did not answer left out.
func readNodes(ctx context.Context, mb MetricsBackend, nodes []string) []podmetrics.Reading {
	out := make([]*podmetrics.Reading, len(nodes))
	sem := make(chan struct{}, metricsConcurrency)
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-sem }()
			nctx, cancel := context.WithTimeout(ctx, metricsNodeTimeout)
			defer cancel()
			if rd, err := mb.NodeReading(nctx, n); err == nil {
				rd.Node = n
				out[i] = &rd
			}
		}()
	}
	wg.Wait()
	var rds []podmetrics.Reading
	for _, rd := range out {
		if rd != nil {
			rds = append(rds, *rd)
		}
	}
	return rds
}

func usageList(u podmetrics.Usage) k8scorev1.ResourceList {
	return k8scorev1.ResourceList{
		k8scorev1.ResourceCPU:    *apiresource.NewScaledQuantity(int64(u.CPUNanoCores), apiresource.Nano),
		k8scorev1.ResourceMemory: *apiresource.NewQuantity(int64(u.MemoryBytes), apiresource.BinarySI),
	}
}
