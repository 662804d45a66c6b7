package bus_test

import (
	"fmt"

	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
)

// podEvent is a PodPersisted event for pod uid in namespace default.
func podEvent(uid, name string, gen int64) *eventsv1.Envelope {
	return &eventsv1.Envelope{
		PodUid: uid, Namespace: "default", PodName: name, Generation: gen, Attempt: 1,
		Payload: &eventsv1.Envelope_PodPersisted{PodPersisted: &eventsv1.PodPersisted{Revision: gen}},
	}
}

// podEvents returns n distinct PodPersisted events.
func podEvents(n int) []*eventsv1.Envelope {
	out := make([]*eventsv1.Envelope, n)
	for i := range out {
		out[i] = podEvent(fmt.Sprintf("uid-%d", i), fmt.Sprintf("pod-%d", i), 1)
	}
	return out
}
