package trace

import (
	"github.com/nats-io/nats.go/jetstream"

	"github.com/podflow/podflow/bus"
)

// Records decodes one fetched batch of the events stream into records,
// skipping messages that are not envelopes. n counts every message of the
// batch (decoded or not); err is the batch's own error, once it ended.
func Records(batch jetstream.MessageBatch) (recs []Record, n int, err error) {
	for m := range batch.Messages() {
		n++
		env, err := bus.DecodeEnvelope(m.Data())
		if err != nil {
			continue
		}
		meta, err := m.Metadata()
		if err != nil {
			continue
		}
		recs = append(recs, Record{Env: env, Stored: meta.Timestamp, Seq: meta.Sequence.Stream})
	}
	return recs, n, batch.Error()
}
