package cache

import (
	"github.com/podflow/podflow/services/stages/scheduler/framework"
)

// Snapshot returns a new, up-to-date snapshot.
func (c *Cache) Snapshot() *framework.Snapshot {
	s := framework.NewSnapshot()
	c.UpdateSnapshot(s)
	return s
}

// UpdateSnapshot brings s up to date with the cache. Its cost is the
// number of nodes that changed since s was last updated, plus a rebuild of
// the node list when nodes were added or removed. NodeInfos are updated in
// place, so pointers taken from s stay valid and show the new state.
func (c *Cache) UpdateSnapshot(s *framework.Snapshot) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// New nodes get their NodeInfos from one block, laid out in list
	// order, so that a cycle walks memory sequentially.
	var block []framework.NodeInfo
	if missing := len(c.present) - len(s.ByName); missing > 8 {
		block = make([]framework.NodeInfo, missing)
	}
	for it := c.head; it != nil && it.info.Generation() > s.Gen; it = it.next {
		if it.index < 0 {
			continue
		}
		n := s.ByName[it.info.Name()]
		if n == nil {
			if len(block) > 0 {
				n, block = &block[len(block)-1], block[:len(block)-1]
			} else {
				n = new(framework.NodeInfo)
			}
			s.ByName[it.info.Name()] = n
		}
		*n = it.info
	}
	if s.ListGen != c.listGeneration {
		s.NodeList = s.NodeList[:0]
		for _, it := range c.present {
			s.NodeList = append(s.NodeList, s.ByName[it.info.Name()])
		}
		if len(s.ByName) != len(c.present) {
			for name := range s.ByName {
				if it := c.nodes[name]; it == nil || it.index < 0 {
					delete(s.ByName, name)
				}
			}
		}
		s.ListGen = c.listGeneration
	}
	if s.ImagesGen != c.imagesGeneration {
		s.ImageCounts = make(map[string]framework.ImageCount, len(c.images))
		for name, n := range c.images {
			s.ImageCounts[name] = n
		}
		s.ImagesGen = c.imagesGeneration
	}
	s.PodsWithAffinity, s.PodsWithRequiredAnti, s.Namespaces = c.podsWithAffinity, c.podsWithRequiredAnti, c.namespaces
	s.Nominated, s.Services, s.PDBs = c.nominated, c.services, c.pdbList
	s.Gen = c.generation
}
