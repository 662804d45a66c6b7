package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// ReplicasBehind reports which of the named streams, and which of their
// durable consumers, do not yet have every replica current: a leader and,
// for R replicas, R-1 followers that are current with it. It returns one
// line per stream or consumer behind; none means all of them are.
//
// A stream scaled up (R1 to R3, as `podflow up` does once three servers
// run) is only fault tolerant from then on: its new replicas, and each of
// its consumers' new replicas, start empty and must catch up with the
// leader first. Until they have, they do not elect a leader among
// themselves — a replica that never heard from a leader would lose the
// acknowledgements it never received — so losing the leader's server
// leaves the stream or consumer without a leader until that server comes
// back. Ephemeral consumers (an ordered consumer is R1 in memory) are
// not checked.
func ReplicasBehind(ctx context.Context, js jetstream.JetStream, streams ...string) ([]string, error) {
	var behind []string
	for _, name := range streams {
		s, err := js.Stream(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("bus: stream %q: %w", name, err)
		}
		info := s.CachedInfo()
		if why := replicasBehind(info.Cluster, info.Config.Replicas); why != "" {
			behind = append(behind, fmt.Sprintf("stream %s: %s", name, why))
		}
		names := s.ConsumerNames(ctx)
		var consumers []string
		for c := range names.Name() {
			consumers = append(consumers, c)
		}
		if err := names.Err(); err != nil {
			return nil, fmt.Errorf("bus: consumers of stream %q: %w", name, err)
		}
		for _, c := range consumers {
			cons, err := s.Consumer(ctx, c)
			switch {
			case errors.Is(err, jetstream.ErrConsumerNotFound):
				continue // an ephemeral consumer gone meanwhile
			case err != nil:
				// A consumer without a leader does not answer.
				behind = append(behind, fmt.Sprintf("consumer %s > %s: %v", name, c, err))
				continue
			}
			ci := cons.CachedInfo()
			if ci.Config.Durable == "" {
				continue
			}
			replicas := ci.Config.Replicas
			if replicas == 0 {
				replicas = info.Config.Replicas // consumers follow their stream
			}
			if why := replicasBehind(ci.Cluster, replicas); why != "" {
				behind = append(behind, fmt.Sprintf("consumer %s > %s: %s", name, c, why))
			}
		}
	}
	return behind, nil
}

// replicasBehind says what of a replica group is not current, or "".
func replicasBehind(ci *jetstream.ClusterInfo, replicas int) string {
	if replicas <= 1 {
		return ""
	}
	if ci == nil || ci.Leader == "" {
		return "no leader"
	}
	var not []string
	current := 0
	for _, r := range ci.Replicas {
		if r.Current && !r.Offline {
			current++
		} else {
			not = append(not, r.Name)
		}
	}
	if current >= replicas-1 {
		return ""
	}
	why := fmt.Sprintf("%d of %d followers current with leader %s", current, replicas-1, ci.Leader)
	if len(not) > 0 {
		why += " (not current: " + strings.Join(not, ", ") + ")"
	}
	return why
}
