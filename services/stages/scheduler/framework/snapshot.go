package framework

// Snapshot is a consistent view of the cache for scheduling cycles. A cycle
// reads it without locks; Cache.UpdateSnapshot brings it up to date by
// copying only the NodeInfos whose generation moved since the last update.
//
// Concurrency: any number of goroutines may read a Snapshot (Schedule,
// Nodes, Get) at once, but UpdateSnapshot must not run while anyone reads
// it. The usual owner is the one scheduling goroutine, which updates the
// snapshot at the start of each cycle.
type Snapshot struct {
	NodeList    []*NodeInfo
	ByName      map[string]*NodeInfo
	ImageCounts map[string]ImageCount
	Gen         int64
	ListGen     int64
	ImagesGen   int64
	// podsWithAffinity and podsWithRequiredAnti count the pods with pod
	// (anti-)affinity and with required anti-affinity.
	PodsWithAffinity, PodsWithRequiredAnti int
	Namespaces                             map[string]map[string]string            // read-only
	Services                               map[string]map[string]map[string]string // read-only: Cache.services
	Nominated                              map[string][]*PodEntry                  // read-only: Cache.nominated
	PDBs                                   []*PDB                                  // read-only: Cache.pdbList
}

// NewSnapshot returns an empty snapshot for Cache.UpdateSnapshot to fill.
func NewSnapshot() *Snapshot {
	return &Snapshot{ByName: make(map[string]*NodeInfo), ImageCounts: map[string]ImageCount{}}
}

// NumNodes returns the number of nodes in the snapshot.
func (s *Snapshot) NumNodes() int { return len(s.NodeList) }

// Nodes returns the snapshot's nodes in scheduling order; read-only.
func (s *Snapshot) Nodes() []*NodeInfo { return s.NodeList }

// Get returns a node's NodeInfo.
func (s *Snapshot) Get(name string) (*NodeInfo, bool) {
	n, ok := s.ByName[name]
	return n, ok
}

// Generation returns the cache generation the snapshot reflects.
func (s *Snapshot) Generation() int64 { return s.Gen }

// namespaceLabels returns a namespace's labels (nil: unknown).
func (s *Snapshot) NamespaceLabels(name string) map[string]string {
	if s == nil {
		return nil
	}
	return s.Namespaces[name]
}

// image returns an image's id and how many nodes in the snapshot have it.
func (s *Snapshot) Image(name string) ImageCount { return s.ImageCounts[name] }
