package scheduler

// Snapshot is a consistent view of the cache for scheduling cycles. A cycle
// reads it without locks; Cache.UpdateSnapshot brings it up to date by
// copying only the NodeInfos whose generation moved since the last update.
//
// Concurrency: any number of goroutines may read a Snapshot (Schedule,
// Nodes, Get) at once, but UpdateSnapshot must not run while anyone reads
// it. The usual owner is the one scheduling goroutine, which updates the
// snapshot at the start of each cycle.
type Snapshot struct {
	nodes            []*NodeInfo
	byName           map[string]*NodeInfo
	images           map[string]imageCount
	generation       int64
	listGeneration   int64
	imagesGeneration int64
	// podsWithAffinity and podsWithRequiredAnti count the pods with pod
	// (anti-)affinity and with required anti-affinity.
	podsWithAffinity, podsWithRequiredAnti int
	namespaces                             map[string]map[string]string            // read-only
	services                               map[string]map[string]map[string]string // read-only: Cache.services
	nominated                              map[string][]*podEntry                  // read-only: Cache.nominated
}

// NewSnapshot returns an empty snapshot for Cache.UpdateSnapshot to fill.
func NewSnapshot() *Snapshot {
	return &Snapshot{byName: make(map[string]*NodeInfo), images: map[string]imageCount{}}
}

// NumNodes returns the number of nodes in the snapshot.
func (s *Snapshot) NumNodes() int { return len(s.nodes) }

// Nodes returns the snapshot's nodes in scheduling order; read-only.
func (s *Snapshot) Nodes() []*NodeInfo { return s.nodes }

// Get returns a node's NodeInfo.
func (s *Snapshot) Get(name string) (*NodeInfo, bool) {
	n, ok := s.byName[name]
	return n, ok
}

// Generation returns the cache generation the snapshot reflects.
func (s *Snapshot) Generation() int64 { return s.generation }

// namespaceLabels returns a namespace's labels (nil: unknown).
func (s *Snapshot) namespaceLabels(name string) map[string]string {
	if s == nil {
		return nil
	}
	return s.namespaces[name]
}

// image returns an image's id and how many nodes in the snapshot have it.
func (s *Snapshot) image(name string) imageCount { return s.images[name] }

// Snapshot returns a new, up-to-date snapshot.
func (c *Cache) Snapshot() *Snapshot {
	s := NewSnapshot()
	c.UpdateSnapshot(s)
	return s
}

// UpdateSnapshot brings s up to date with the cache. Its cost is the
// number of nodes that changed since s was last updated, plus a rebuild of
// the node list when nodes were added or removed. NodeInfos are updated in
// place, so pointers taken from s stay valid and show the new state.
func (c *Cache) UpdateSnapshot(s *Snapshot) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// New nodes get their NodeInfos from one block, laid out in list
	// order, so that a cycle walks memory sequentially.
	var block []NodeInfo
	if missing := len(c.present) - len(s.byName); missing > 8 {
		block = make([]NodeInfo, missing)
	}
	for it := c.head; it != nil && it.info.generation > s.generation; it = it.next {
		if it.index < 0 {
			continue
		}
		n := s.byName[it.info.name]
		if n == nil {
			if len(block) > 0 {
				n, block = &block[len(block)-1], block[:len(block)-1]
			} else {
				n = new(NodeInfo)
			}
			s.byName[it.info.name] = n
		}
		*n = it.info
	}
	if s.listGeneration != c.listGeneration {
		s.nodes = s.nodes[:0]
		for _, it := range c.present {
			s.nodes = append(s.nodes, s.byName[it.info.name])
		}
		if len(s.byName) != len(c.present) {
			for name := range s.byName {
				if it := c.nodes[name]; it == nil || it.index < 0 {
					delete(s.byName, name)
				}
			}
		}
		s.listGeneration = c.listGeneration
	}
	if s.imagesGeneration != c.imagesGeneration {
		s.images = make(map[string]imageCount, len(c.images))
		for name, n := range c.images {
			s.images[name] = n
		}
		s.imagesGeneration = c.imagesGeneration
	}
	s.podsWithAffinity, s.podsWithRequiredAnti, s.namespaces = c.podsWithAffinity, c.podsWithRequiredAnti, c.namespaces
	s.nominated, s.services = c.nominated, c.services
	s.generation = c.generation
}
