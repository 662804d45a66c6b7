package image

// Waiters is the number of callers waiting for the download of ref (a
// normalised reference), for tests that need every caller to have joined.
func (s *Store) Waiters(canonical string) int {
	s.images.mu.Lock()
	defer s.images.mu.Unlock()
	if f := s.images.m[canonical]; f != nil {
		return f.waiters
	}
	return 0
}
