package trace

import (
	"github.com/nats-io/nats.go/jetstream"

	"github.com/podflow/podflow/bus"
)

// Records decodes one fetched batch of the events stream into records,
// skipping messages that are not envelopes; a node's PodStatusReport gives
// a record for itself and one for each step it carries (bus.DecodeEvents),
// all with the report's stored time and sequence. n counts every message of the
// batch (decoded or not); err is the batch's own error, once it ended.
func Records(batch jetstream.MessageBatch) (recs []Record, n int, err error) {
	for m := range batch.Messages() {
		n++
		envs, err := bus.DecodeEvents(m.Data())
		if err != nil {
			continue
		}
		meta, err := m.Metadata()
		if err != nil {
			continue
		}
		for _, env := range envs { // a report's steps share its message
			recs = append(recs, Record{Env: env, Stored: meta.Timestamp, Seq: meta.Sequence.Stream})
		}
	}
	return recs, n, batch.Error()
}
