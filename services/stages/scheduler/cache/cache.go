package cache

import (
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/podflow/podflow/services/stages/scheduler/framework"

	"github.com/podflow/podflow/proto/corev1"
)

// Cache is the scheduler's model of the cluster, fed by watch events: nodes,
// the pods bound to them and the pods this scheduler has assumed onto them
// ahead of the bind transaction. It keeps one NodeInfo per node and hands
// out cheap Snapshots for scheduling cycles. A Cache is safe for concurrent
// use.
type Cache struct {
	mu sync.Mutex
	// nodes holds every node known by a node object or by a pod bound to
	// it; an item without a node object (its pods arrived first, or the
	// node was removed before its pods) is not scheduled onto.
	nodes map[string]*nodeItem
	// head is the most recently changed item: items are linked newest
	// first, so a snapshot only visits what changed since it was taken.
	head *nodeItem
	// present lists the items with a node object, in snapshot order.
	present []*nodeItem
	pods    map[string]*framework.PodEntry
	// terminated holds the keys of bound pods seen Succeeded or Failed and
	// not yet deleted. They count on no node, as kube-scheduler's pod
	// informer lists no terminal pod; the status stage releases them from
	// their node's stored allocation with the write that makes them
	// terminal, and a bind releases any a write through another path left
	// there (TerminatedIn).
	terminated map[string]bool
	// departures counts the pods that left a node, and the node entries
	// made (NodeInfo.Departed).
	departures int64
	// generation numbers every change; listGeneration is the generation
	// of the last change to the present set, imagesGeneration of the last
	// change to the image counts.
	generation       int64
	listGeneration   int64
	imagesGeneration int64
	images           map[string]framework.ImageCount
	imageIDs         map[string]int32 // never shrinks: ids stay stable
	// podsWithAffinity counts the pods with pod affinity or anti-affinity,
	// podsWithRequiredAnti those with required anti-affinity (a pod
	// without either needs no inter-pod affinity work).
	podsWithAffinity, podsWithRequiredAnti int
	// namespaces holds the namespaces' labels (for namespaceSelector);
	// replaced, never modified, on change.
	namespaces map[string]map[string]string
	// services holds the Services' selectors by namespace and name (for
	// PodTopologySpread's default constraints); replaced, never
	// modified, on change.
	services map[string]map[string]map[string]string
	// pdbs holds the PodDisruptionBudgets preemption reads, by
	// namespace/name; pdbList the same in that order, replaced, never
	// modified, on change.
	pdbs    map[string]*framework.PDB
	pdbList []*framework.PDB
	// nominated are the unbound pods whose status.nominatedNodeName names
	// a node (preemptors waiting for their victims to go), by node;
	// replaced, never modified, on change. nominatedOn maps a pod's key
	// to its node.
	nominated   map[string][]*framework.PodEntry
	nominatedOn map[string]string
}

type nodeItem struct {
	info       framework.NodeInfo
	prev, next *nodeItem
	index      int // in Cache.present; -1 when there is no node object
}

// NewCache returns an empty cache.
func NewCache() *Cache {
	return &Cache{
		nodes:      make(map[string]*nodeItem),
		pods:       make(map[string]*framework.PodEntry),
		terminated: make(map[string]bool),
		images:     make(map[string]framework.ImageCount),
		imageIDs:   make(map[string]int32),
	}
}

// touch gives the item a new generation and moves it to the head.
func (c *Cache) touch(it *nodeItem) {
	c.generation++
	it.info.SetGeneration(c.generation)
	if c.head == it {
		return
	}
	if it.prev != nil {
		it.prev.next = it.next
	}
	if it.next != nil {
		it.next.prev = it.prev
	}
	it.prev, it.next = nil, c.head
	if c.head != nil {
		c.head.prev = it
	}
	c.head = it
}

func (c *Cache) unlink(it *nodeItem) {
	if it.prev != nil {
		it.prev.next = it.next
	} else if c.head == it {
		c.head = it.next
	}
	if it.next != nil {
		it.next.prev = it.prev
	}
	it.prev, it.next = nil, nil
	delete(c.nodes, it.info.Name())
}

func (c *Cache) item(name string) *nodeItem {
	it := c.nodes[name]
	if it == nil {
		it = &nodeItem{index: -1}
		it.info.Reset(name)
		c.departures++ // a new entry shares no count with a former one
		it.info.SetDeparted(c.departures)
		c.nodes[name] = it
	}
	return it
}

func (c *Cache) countImages(images []framework.NodeImage, delta int) {
	for _, img := range images {
		ic := c.images[img.Name]
		ic.ID, ic.Nodes = img.ID, ic.Nodes+delta
		if ic.Nodes <= 0 {
			delete(c.images, img.Name)
		} else {
			c.images[img.Name] = ic
		}
	}
}

// imageID is the cache's number for an image name, given at its first
// sight.
func (c *Cache) imageID(name string) int32 {
	id, ok := c.imageIDs[name]
	if !ok {
		id = int32(len(c.imageIDs))
		c.imageIDs[name] = id
	}
	return id
}

func sameImages(a, b []framework.NodeImage) bool {
	return slices.EqualFunc(a, b, func(x, y framework.NodeImage) bool { return x.ID == y.ID })
}

// AddNode adds or replaces a node. It is UpdateNode; both names exist to
// match watch events.
func (c *Cache) AddNode(node *corev1.Node) error { return c.UpdateNode(node) }

// UpdateNode adds or replaces a node, keeping the accounting of its pods.
func (c *Cache) UpdateNode(node *corev1.Node) error {
	var fresh framework.NodeInfo
	if err := fresh.SetNode(node); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	it := c.item(fresh.Name())
	oldImages := it.info.Images()
	wasPresent := it.index >= 0
	if err := it.info.SetNode(node); err != nil {
		return err // unreachable: fresh parsed the same node
	}
	it.info.InternImages(c.imageID)
	if !wasPresent {
		it.index = len(c.present)
		c.present = append(c.present, it)
	}
	c.touch(it)
	if !wasPresent {
		c.listGeneration = c.generation
	}
	if !wasPresent || !sameImages(oldImages, it.info.Images()) {
		if wasPresent {
			c.countImages(oldImages, -1)
		}
		c.countImages(it.info.Images(), +1)
		c.imagesGeneration = c.generation
	}
	return nil
}

// RemoveNode removes a node. Its pods stay accounted (they go when their
// own delete events arrive) but it is no longer scheduled onto.
func (c *Cache) RemoveNode(name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	it := c.nodes[name]
	if it == nil || it.index < 0 {
		return fmt.Errorf("%w: %q", framework.ErrNodeNotFound, name)
	}
	last := c.present[len(c.present)-1]
	c.present[it.index], last.index = last, it.index
	c.present = c.present[:len(c.present)-1]
	it.index = -1
	c.countImages(it.info.Images(), -1)
	it.info.Reset(name)
	c.touch(it)
	c.listGeneration, c.imagesGeneration = c.generation, c.generation
	if it.info.NumPods() == 0 {
		c.unlink(it)
	}
	return nil
}

func (c *Cache) addEntry(p *framework.PodEntry) {
	it := c.item(p.Node)
	it.info.AddPod(p)
	c.touch(it)
	c.pods[p.Key] = p
	c.countAffinity(p, 1)
}

func (c *Cache) countAffinity(p *framework.PodEntry, delta int) {
	if a := p.Meta.Affinity; a != nil {
		c.podsWithAffinity += delta
		if len(a.RequiredAnti) > 0 {
			c.podsWithRequiredAnti += delta
		}
	}
}

// removeEntry takes p off its node; departs says that the pod leaves the
// node (it is not being replaced by an update there).
func (c *Cache) removeEntry(p *framework.PodEntry, departs bool) {
	delete(c.pods, p.Key)
	c.countAffinity(p, -1)
	it := c.nodes[p.Node]
	if it == nil {
		return
	}
	it.info.RemovePod(p)
	if departs {
		c.departures++
		it.info.SetDeparted(c.departures)
	}
	c.touch(it)
	if it.index < 0 && it.info.NumPods() == 0 {
		c.unlink(it)
	}
}

// Terminal reports whether pod's phase is Succeeded or Failed: it has
// finished, for good, and holds no resources on its node (kube-scheduler's
// pod informer lists only pods not in either phase).
func Terminal(pod *corev1.Pod) bool {
	phase := pod.GetStatus().GetPhase()
	return phase == "Succeeded" || phase == "Failed"
}

// AddPod accounts for a pod bound to spec.nodeName. A pod this scheduler
// assumed is confirmed (and moved, should it have been bound elsewhere); a
// pod already in the cache is updated; a pod that has terminated
// (Succeeded or Failed) frees its node's resources and is removed.
func (c *Cache) AddPod(pod *corev1.Pod) error {
	node := pod.GetSpec().GetNodeName()
	if node == "" {
		return fmt.Errorf("%w: %q", framework.ErrPodNotBound, framework.PodName(pod))
	}
	if Terminal(pod) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if old := c.pods[framework.PodKey(pod)]; old != nil {
			c.removeEntry(old, true)
		}
		c.terminated[framework.PodKey(pod)] = true
		return nil
	}
	p, err := framework.NewPodEntry(pod, node)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.pods[p.Key]; old != nil {
		c.removeEntry(old, old.Node != p.Node)
	}
	c.addEntry(p)
	c.unnominateLocked(p.Key)
	return nil
}

// Terminated reports whether the cache saw the bound pod with key finish
// (Succeeded or Failed) and not yet deleted.
func (c *Cache) Terminated(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.terminated[key]
}

// TerminatedIn returns the keys of pods, as a NodeAllocation keys them,
// that the cache saw finish (Succeeded or Failed, as stored) and not yet
// deleted. A pod's phase never leaves Succeeded or Failed, so each of them
// may be released from the allocation. One lock for the whole set.
func (c *Cache) TerminatedIn(pods map[string]*corev1.AllocatedPod) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	if len(c.terminated) < len(pods) {
		for k := range c.terminated {
			if _, ok := pods[k]; ok {
				out = append(out, k)
			}
		}
		return out
	}
	for k := range pods {
		if c.terminated[k] {
			out = append(out, k)
		}
	}
	return out
}

// UpdatePod is AddPod: the cache keys pods by uid and replaces the entry.
func (c *Cache) UpdatePod(pod *corev1.Pod) error { return c.AddPod(pod) }

// RemovePod removes a bound or assumed pod.
func (c *Cache) RemovePod(pod *corev1.Pod) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.terminated, framework.PodKey(pod))
	p := c.pods[framework.PodKey(pod)]
	if p == nil {
		return fmt.Errorf("%w: %q", framework.ErrPodNotFound, framework.PodName(pod))
	}
	c.removeEntry(p, true)
	return nil
}

// AssumePod accounts for pod on node before the bind transaction commits,
// so that the next cycles see the node's resources as taken. The bound-pod
// event later confirms it (AddPod); if the bind fails, ForgetPod undoes it.
func (c *Cache) AssumePod(pod *corev1.Pod, node string) error {
	if node == "" {
		return fmt.Errorf("%w: assume %q onto an empty node name", framework.ErrInvalidObject, framework.PodName(pod))
	}
	p, err := framework.NewPodEntry(pod, node)
	if err != nil {
		return err
	}
	p.Assumed = true
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pods[p.Key] != nil {
		return fmt.Errorf("%w: %q", framework.ErrPodExists, framework.PodName(pod))
	}
	c.addEntry(p)
	return nil
}

// ForgetPod removes an assumed pod whose bind did not happen.
func (c *Cache) ForgetPod(pod *corev1.Pod) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.pods[framework.PodKey(pod)]
	if p == nil {
		return fmt.Errorf("%w: %q", framework.ErrPodNotFound, framework.PodName(pod))
	}
	if !p.Assumed {
		return fmt.Errorf("%w: %q is bound to %q", framework.ErrPodNotAssumed, framework.PodName(pod), p.Node)
	}
	c.removeEntry(p, true)
	return nil
}

// IsAssumed reports whether the pod is assumed and not yet confirmed.
func (c *Cache) IsAssumed(pod *corev1.Pod) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.pods[framework.PodKey(pod)]
	return p != nil && p.Assumed
}

// PodNode returns the node a cached pod is bound or assumed to.
func (c *Cache) PodNode(pod *corev1.Pod) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.pods[framework.PodKey(pod)]
	if p == nil {
		return "", false
	}
	return p.Node, true
}

// NumNodes returns the number of nodes that can be scheduled onto.
func (c *Cache) NumNodes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.present)
}

// NumPods returns the number of bound and assumed pods.
func (c *Cache) NumPods() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pods)
}

// NodeInfo returns a copy of a node's current NodeInfo.
func (c *Cache) NodeInfo(name string) (*framework.NodeInfo, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	it := c.nodes[name]
	if it == nil || it.index < 0 {
		return nil, false
	}
	info := it.info
	return &info, true
}

// SetNamespace records a namespace's labels, which pod affinity terms
// with a namespaceSelector match.
func (c *Cache) SetNamespace(ns *corev1.Namespace) {
	c.mu.Lock()
	defer c.mu.Unlock()
	name := ns.GetMetadata().GetName()
	if old, ok := c.namespaces[name]; ok && maps.Equal(old, ns.GetMetadata().GetLabels()) {
		return
	}
	next := maps.Clone(c.namespaces)
	if next == nil {
		next = map[string]map[string]string{}
	}
	next[name] = ns.GetMetadata().GetLabels()
	c.namespaces = next
}

// RemoveNamespace forgets a namespace's labels.
func (c *Cache) RemoveNamespace(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.namespaces[name]; ok {
		next := maps.Clone(c.namespaces)
		delete(next, name)
		c.namespaces = next
	}
}

// SetService records a Service's selector: PodTopologySpread spreads
// the pods it selects that have no spread constraints of their own
// (kube-scheduler's default constraints). A Service without a selector
// selects no pod.
func (c *Cache) SetService(svc *corev1.Service) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ns, name, sel := svc.GetMetadata().GetNamespace(), svc.GetMetadata().GetName(), svc.GetSpec().GetSelector()
	if old, ok := c.services[ns][name]; ok && maps.Equal(old, sel) {
		return
	}
	if len(sel) == 0 {
		c.removeServiceLocked(ns, name)
		return
	}
	next := maps.Clone(c.services)
	if next == nil {
		next = map[string]map[string]map[string]string{}
	}
	byName := maps.Clone(next[ns])
	if byName == nil {
		byName = map[string]map[string]string{}
	}
	byName[name] = sel
	next[ns] = byName
	c.services = next
}

// RemoveService forgets a Service's selector.
func (c *Cache) RemoveService(namespace, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removeServiceLocked(namespace, name)
}

func (c *Cache) removeServiceLocked(ns, name string) {
	if _, ok := c.services[ns][name]; !ok {
		return
	}
	next := maps.Clone(c.services)
	byName := maps.Clone(next[ns])
	delete(byName, name)
	if len(byName) == 0 {
		delete(next, ns)
	} else {
		next[ns] = byName
	}
	c.services = next
}

// SetPDB records a PodDisruptionBudget, which preemption prefers not to
// violate (kube-scheduler's pdbLister).
func (c *Cache) SetPDB(b *framework.PDB) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pdbs == nil {
		c.pdbs = map[string]*framework.PDB{}
	}
	c.pdbs[b.Namespace+"/"+b.Name] = b
	c.listPDBsLocked()
}

// RemovePDB forgets a PodDisruptionBudget.
func (c *Cache) RemovePDB(namespace, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := namespace + "/" + name
	if _, ok := c.pdbs[key]; !ok {
		return
	}
	delete(c.pdbs, key)
	c.listPDBsLocked()
}

func (c *Cache) listPDBsLocked() {
	keys := slices.Sorted(maps.Keys(c.pdbs))
	list := make([]*framework.PDB, len(keys))
	for i, k := range keys {
		list[i] = c.pdbs[k]
	}
	c.pdbList = list
}

// Nominate records that pod, unbound, is nominated to node
// (status.nominatedNodeName): the cycles of pods of no higher priority
// count its requests on that node, as kube-scheduler's nominator, so that
// the room its preemption made is kept for it. A repeated call replaces
// the nomination.
func (c *Cache) Nominate(pod *corev1.Pod, node string) error {
	if node == "" {
		c.Unnominate(pod)
		return nil
	}
	p, err := framework.NewPodEntry(pod, node)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unnominateLocked(p.Key) // a new node, requests or priority
	next := maps.Clone(c.nominated)
	if next == nil {
		next = map[string][]*framework.PodEntry{}
	}
	next[node] = append(slices.Clip(next[node]), p)
	c.nominated = next
	if c.nominatedOn == nil {
		c.nominatedOn = map[string]string{}
	}
	c.nominatedOn[p.Key] = node
	return nil
}

// Unnominate forgets pod's nomination, if any.
func (c *Cache) Unnominate(pod *corev1.Pod) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unnominateLocked(framework.PodKey(pod))
}

func (c *Cache) unnominateLocked(key string) {
	node, ok := c.nominatedOn[key]
	if !ok {
		return
	}
	delete(c.nominatedOn, key)
	next := maps.Clone(c.nominated)
	pods := slices.DeleteFunc(slices.Clone(next[node]), func(p *framework.PodEntry) bool { return p.Key == key })
	if len(pods) == 0 {
		delete(next, node)
	} else {
		next[node] = pods
	}
	c.nominated = next
}

// NominatedPods returns the namespace/name of the pods nominated to node.
func (c *Cache) NominatedPods(node string) []NominatedPod {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []NominatedPod
	for _, p := range c.nominated[node] {
		out = append(out, NominatedPod{UID: p.Key, Namespace: p.Namespace, Name: p.Name, Priority: p.Meta.Priority})
	}
	return out
}

// NominatedPod is a pod nominated to a node.
type NominatedPod struct {
	UID, Namespace, Name string
	Priority             int32
}
