package apiserver

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/auth"
)

// Fairness between users, the idea of kube-apiserver's API Priority and
// Fairness: the global in-flight limits (MaxWatches, MaxMutatingInFlight)
// stay the outer bound, and inside them each user is a flow with a number
// of seats of its own — MaxWatchesPerUser long-running requests (watches,
// exec, attach, port-forward, followed logs) and MaxMutatingPerUser
// mutating requests — so one user cannot take a whole pool from the
// others. Past its seats a user gets 429 with Retry-After, as from a full
// pool. system:masters and the nodes' own identities (system:nodes) are
// exempt, as upstream's exempt and system priority levels. Read-only
// requests have only the global MaxInFlight.

// fairGroups are exempt from the per-user seats.
var fairGroups = []string{auth.GroupMasters, "system:nodes"}

// flows counts each user's seats in one pool.
type flows struct {
	seats int

	mu    sync.Mutex
	inUse map[string]int
}

func newFlows(seats int) *flows { return &flows{seats: seats, inUse: map[string]int{}} }

// seats is a user's seats in a pool of size: perUser, or a quarter of
// the pool (at least 1) when 0.
func seats(perUser, size int) int {
	if perUser > 0 {
		return perUser
	}
	return max(size/4, 1)
}

// acquire takes one of user's seats; release gives it back. ok is false
// when the user holds all its seats.
func (f *flows) acquire(user *corev1.UserInfo) (release func(), ok bool) {
	if f == nil {
		return func() {}, true
	}
	for _, g := range user.GetGroups() {
		for _, e := range fairGroups {
			if g == e {
				return func() {}, true
			}
		}
	}
	name := user.GetUsername()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.inUse[name] >= f.seats {
		return nil, false
	}
	f.inUse[name]++
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			if f.inUse[name]--; f.inUse[name] <= 0 {
				delete(f.inUse, name)
			}
			f.mu.Unlock()
		})
	}, true
}

// userFlows are the per-user seats of the pool slots belongs to (nil for
// read-only requests).
func (s *Server) userFlows(slots chan struct{}) *flows {
	switch slots {
	case s.watches:
		return s.watchFlows
	case s.mutating:
		return s.mutatingFlows
	}
	return nil
}

// tooManyForUser answers a request past its user's seats: 429 with
// Retry-After, kube-apiserver's message.
func tooManyForUser(w http.ResponseWriter, user *corev1.UserInfo, seats int) {
	w.Header().Set("Retry-After", strconv.Itoa(1))
	writeStatus(w, &corev1.Status{Status: "Failure", Code: 429, Reason: "TooManyRequests",
		Message: fmt.Sprintf("Too many requests, please try again later. (user %q holds its %d seats of this kind)", user.GetUsername(), seats)})
}
