package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/client-go/util/retry"
)

// peerOptions are what one run of the peer needs.
type peerOptions struct {
	Tools       string // kube-apiserver, kube-scheduler, etcd, kwok
	Pods, Nodes int
	Rate        int // creates per second
	Workers     int // creates in flight
	Members     int
	Timeout     time.Duration
	Keep        bool
	Progress    io.Writer
}

const benchNamespace = "bench"

// runPeer starts the peer in a fresh temporary directory, runs the load and
// stops every process it started, also when ctx ends.
func runPeer(ctx context.Context, o peerOptions) (res side, err error) {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	dir, err := os.MkdirTemp("", "podflow-peer-")
	if err != nil {
		return res, err
	}
	if o.Keep {
		fmt.Fprintf(o.Progress, "peer: keeping %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	var ps procs
	defer ps.stopAll(15 * time.Second)

	ports, err := freePorts(2*o.Members + 3)
	if err != nil {
		return res, err
	}
	members := make([]member, o.Members)
	for i, name := range memberNames(o.Members) {
		members[i] = member{Name: name, ClientPort: ports[2*i], PeerPort: ports[2*i+1], DataDir: filepath.Join(dir, name)}
	}
	apiPort, schedPort, kwokPort := ports[2*o.Members], ports[2*o.Members+1], ports[2*o.Members+2]
	p, err := writePKI(dir, apiPort)
	if err != nil {
		return res, fmt.Errorf("certificates: %w", err)
	}

	var etcds []*proc
	for i, m := range members {
		e, err := ps.start(m.Name, filepath.Join(o.Tools, "etcd"), etcdArgs(members, i), nil, dir)
		if err != nil {
			return res, err
		}
		etcds = append(etcds, e)
	}
	for i, m := range members {
		if err := waitHTTP(ctx, m.clientURL()+"/health", etcds[i]); err != nil {
			return res, err
		}
	}
	api, err := ps.start("kube-apiserver", filepath.Join(o.Tools, "kube-apiserver"), apiserverArgs(members, p, apiPort), nil, dir)
	if err != nil {
		return res, err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", p.Kubeconfig)
	if err != nil {
		return res, err
	}
	cfg.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()
	cfg.UserAgent = "podflow-bench-peer"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return res, err
	}
	if err := waitReady(ctx, cs, api); err != nil {
		return res, err
	}
	sched, err := ps.start("kube-scheduler", filepath.Join(o.Tools, "kube-scheduler"), schedulerArgs(p, schedPort), nil, dir)
	if err != nil {
		return res, err
	}
	// KWOK reads ~/.kwok/kwok.yaml when there is one: not the user's.
	kwok, err := ps.start("kwok", filepath.Join(o.Tools, "kwok"), kwokArgs(p, kwokPort), []string{"HOME=" + dir}, dir)
	if err != nil {
		return res, err
	}
	alive := []*proc{api, sched, kwok}
	alive = append(alive, etcds...)

	if err := setup(ctx, cs, o.Nodes); err != nil {
		return res, err
	}
	if err := waitNodesReady(ctx, cs, o.Nodes, alive); err != nil {
		return res, err
	}
	if err := untaint(ctx, cs, o.Nodes); err != nil {
		return res, err
	}
	fmt.Fprintf(o.Progress, "peer: %d etcd members, kube-apiserver, kube-scheduler and KWOK up; %d nodes Ready\n", o.Members, o.Nodes)
	return load(ctx, cs, &ps, o, alive)
}

func waitReady(ctx context.Context, cs kubernetes.Interface, api *proc) error {
	for {
		if err := api.exited(); err != nil {
			return err
		}
		err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for kube-apiserver's /readyz: %w (last: %v)", ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// setup creates the bench's namespace, its default service account (no
// kube-controller-manager runs to make it; the ServiceAccount admission
// plugin stays on and needs it) and the nodes KWOK plays.
func setup(ctx context.Context, cs kubernetes.Interface, nodes int) error {
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNamespace}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := cs.CoreV1().ServiceAccounts(benchNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	for i := range nodes {
		if _, err := cs.CoreV1().Nodes().Create(ctx, fakeNode(i), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("node %d: %w", i, err)
		}
	}
	return nil
}

// fakeNode is node i as KWOK's own examples make one, sized as podflow's
// simulated nodes (110 pods).
func fakeNode(i int) *corev1.Node {
	rl := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("32"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        fmt.Sprintf("kwok-node-%d", i),
			Labels:      map[string]string{"type": "kwok", "kubernetes.io/hostname": fmt.Sprintf("kwok-node-%d", i)},
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
		},
		Status: corev1.NodeStatus{Capacity: rl, Allocatable: rl},
	}
}

func waitNodesReady(ctx context.Context, cs kubernetes.Interface, n int, alive []*proc) error {
	for {
		for _, p := range alive {
			if err := p.exited(); err != nil {
				return err
			}
		}
		list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		ready := 0
		if err == nil {
			for _, node := range list.Items {
				for _, c := range node.Status.Conditions {
					if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
						ready++
					}
				}
			}
			if ready == n {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %d nodes Ready (%d are): %w", n, ready, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// untaint removes the node.kubernetes.io/not-ready taint the apiserver's
// TaintNodesByCondition admission put on each new node, once KWOK has made
// it Ready: kube-controller-manager's node lifecycle controller does it in
// a cluster, and it does not run here (nothing else of it is needed).
func untaint(ctx context.Context, cs kubernetes.Interface, nodes int) error {
	for i := range nodes {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			n, err := cs.CoreV1().Nodes().Get(ctx, fakeNode(i).Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool {
				return t.Key == corev1.TaintNodeNotReady
			})
			_, err = cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			return fmt.Errorf("untaint node %d: %w", i, err)
		}
	}
	return nil
}

// load creates the pods at o.Rate and times each from its create to the
// informer's first sight of it Running.
func load(ctx context.Context, cs kubernetes.Interface, ps *procs, o peerOptions, alive []*proc) (side, error) {
	var res side
	var mu sync.Mutex
	created := make(map[string]time.Time, o.Pods)
	runningAt := make(map[string]time.Time, o.Pods)
	allRunning := make(chan struct{})
	var lastRunning time.Time
	seen := func(obj any) {
		pod, ok := obj.(*corev1.Pod)
		if !ok || pod.Status.Phase != corev1.PodRunning {
			return
		}
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		if _, dup := runningAt[pod.Name]; dup {
			return
		}
		runningAt[pod.Name] = now
		lastRunning = now
		if len(runningAt) == o.Pods {
			close(allRunning)
		}
	}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(benchNamespace))
	inf := f.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    seen,
		UpdateFunc: func(_, obj any) { seen(obj) },
	}); err != nil {
		return res, err
	}
	stop := make(chan struct{})
	defer close(stop)
	f.Start(stop)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return res, fmt.Errorf("pod informer: %w", ctx.Err())
	}

	before, err := ps.cpu()
	if err != nil {
		return res, err
	}
	lim := rate.NewLimiter(rate.Limit(o.Rate), 1)
	next := make(chan int)
	var failed atomic.Value
	var wg sync.WaitGroup
	for range o.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				pod := benchPod(i)
				t := time.Now()
				mu.Lock()
				created[pod.Name] = t
				mu.Unlock()
				if _, err := cs.CoreV1().Pods(benchNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
					failed.CompareAndSwap(nil, fmt.Errorf("create %s: %w", pod.Name, err))
				}
			}
		}()
	}
	first := time.Now()
	fmt.Fprintf(o.Progress, "peer: creating %d pods at %d/s\n", o.Pods, o.Rate)
	for i := range o.Pods {
		if err := lim.Wait(ctx); err != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		return res, err
	}
	fmt.Fprintf(o.Progress, "peer: %d pods created in %s; waiting for them to run\n", o.Pods, time.Since(first).Round(time.Millisecond))
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
wait:
	for {
		select {
		case <-allRunning:
			break wait
		case <-tick.C:
			for _, p := range alive {
				if err := p.exited(); err != nil {
					return res, err
				}
			}
			mu.Lock()
			fmt.Fprintf(o.Progress, "peer: %d/%d pods Running after %s\n", len(runningAt), o.Pods, time.Since(first).Round(time.Second))
			mu.Unlock()
		case <-ctx.Done():
			mu.Lock()
			defer mu.Unlock()
			return res, fmt.Errorf("%d of %d pods Running: %w", len(runningAt), o.Pods, ctx.Err())
		}
	}
	after, err := ps.cpu()
	if err != nil {
		return res, err
	}
	mu.Lock()
	defer mu.Unlock()
	var lat []time.Duration
	for name, at := range runningAt {
		lat = append(lat, at.Sub(created[name]))
	}
	res = side{
		Pods:       o.Pods,
		PodsPerSec: throughput(len(lat), first, lastRunning),
		P50:        percentile(lat, 50),
		P99:        percentile(lat, 99),
		ByProcess:  map[string]float64{},
	}
	for name, a := range after {
		ms := float64(a-before[name]) / float64(time.Millisecond)
		res.ByProcess[name] = ms
		res.CPUms += ms
	}
	return res, nil
}

// benchPod is pod i, as podflow's bench pipeline requests its pods: one
// container, no resource requests.
func benchPod(i int) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bench-%05d", i), Namespace: benchNamespace},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "podflow/http:1"}}},
	}
}
