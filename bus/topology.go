package bus

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// StreamSpec declares a stream.
type StreamSpec struct {
	Name        string
	Description string
	Subjects    []string
	// Storage: jetstream.FileStorage (default) or MemoryStorage.
	Storage jetstream.StorageType
	// Replicas: 1 for a single server, 3 for a cluster.
	Replicas int
	// Limits retention: messages older than MaxAge, or beyond MaxBytes
	// (oldest first) are discarded; 0 = unlimited.
	MaxAge            time.Duration
	MaxBytes          int64
	MaxMsgsPerSubject int64
	// Discard: what happens at MaxBytes. jetstream.DiscardOld (default)
	// evicts the oldest messages; jetstream.DiscardNew refuses new ones
	// (ErrStreamFull to the publisher), so nothing is evicted unseen.
	Discard jetstream.DiscardPolicy
	// MaxMsgSize bounds one message (ErrMessageTooLarge to the
	// publisher); 0 = the server's max payload.
	MaxMsgSize int32
	// Duplicates is the Nats-Msg-Id deduplication window.
	Duplicates time.Duration
	// PlacementTags, when set, place the stream on servers with every one
	// of these tags (EmbeddedConfig.Tags) only.
	PlacementTags []string
}

// ConsumerSpec declares a durable pull consumer with explicit acks.
type ConsumerSpec struct {
	Stream         string
	Durable        string
	Description    string
	FilterSubjects []string
	// AckWait: a delivery not acked (nor InProgress'd) within AckWait is
	// redelivered.
	AckWait time.Duration
	// MaxDeliver bounds deliveries of one message (-1 = unlimited).
	MaxDeliver int
	// Backoff, when set, replaces AckWait for the redelivery of
	// unacknowledged messages: the n-th redelivery waits Backoff[n].
	// Leave it empty for stage consumers: it applies to messages still
	// being handled too, and the runner already naks with its own delay.
	Backoff []time.Duration
	// MaxAckPending bounds messages delivered and not yet acked, across
	// all replicas.
	MaxAckPending int
}

// Topology is the desired set of streams and consumers.
type Topology struct {
	Streams   []StreamSpec
	Consumers []ConsumerSpec
}

// StreamsConfig parameterises DefaultStreams.
type StreamsConfig struct {
	// Replicas of every stream: 1 (single server) or 3 (cluster).
	Replicas int
	// Storage of every stream. Default file.
	Storage jetstream.StorageType
	// EventsMaxAge and EventsMaxBytes bound PODFLOW_EVENTS. At
	// EventsMaxBytes new messages are refused (DiscardNew: ErrStreamFull),
	// never the oldest evicted before their consumers saw them; messages
	// older than EventsMaxAge are removed.
	EventsMaxAge   time.Duration
	EventsMaxBytes int64
	// EventsMaxMsgSize bounds one message of PODFLOW_EVENTS and
	// PODFLOW_NODES (ErrMessageTooLarge): whatever a client may publish,
	// the streams store no more. Dead letters may be twice as large (they
	// carry the original message). Default 2 MiB.
	EventsMaxMsgSize int32
	// Duplicates window of PODFLOW_EVENTS and PODFLOW_NODES.
	Duplicates time.Duration
	// NodeHistory: node-level events kept per node and type.
	NodeHistory int64
	// DLQMaxAge and DLQMaxBytes bound PODFLOW_DLQ and
	// PODFLOW_ADVISORIES (oldest dead letters evicted first).
	DLQMaxAge   time.Duration
	DLQMaxBytes int64
	// PlacementTags, when set, place every stream on servers with these
	// tags only (StreamSpec.PlacementTags).
	PlacementTags []string
}

// DefaultStreamsConfig: single replica, file storage, events kept 24h
// and at most 1GiB (then refused), messages at most 2 MiB, a 2-minute
// dedup window, 8 heartbeats per node, dead letters kept a week and at
// most 256 MiB.
func DefaultStreamsConfig() StreamsConfig {
	return StreamsConfig{
		Replicas:         1,
		Storage:          jetstream.FileStorage,
		EventsMaxAge:     24 * time.Hour,
		EventsMaxBytes:   1 << 30,
		EventsMaxMsgSize: 2 << 20,
		Duplicates:       2 * time.Minute,
		NodeHistory:      8,
		DLQMaxAge:        7 * 24 * time.Hour,
		DLQMaxBytes:      256 << 20,
	}
}

// Validate checks the configuration.
func (c StreamsConfig) Validate() error {
	switch {
	case c.Replicas != 1 && c.Replicas != 3:
		return invalidf("streams: Replicas (%d) must be 1 or 3", c.Replicas)
	case c.EventsMaxAge < 0 || c.DLQMaxAge < 0:
		return invalidf("streams: negative MaxAge")
	case c.EventsMaxBytes < 0 || c.DLQMaxBytes < 0:
		return invalidf("streams: negative MaxBytes")
	case c.EventsMaxMsgSize < 0 || c.EventsMaxMsgSize > 1<<29:
		return invalidf("streams: EventsMaxMsgSize (%d) must be 0..512MiB", c.EventsMaxMsgSize)
	case c.Duplicates <= 0:
		return invalidf("streams: Duplicates (%s) must be positive", c.Duplicates)
	case c.EventsMaxAge > 0 && c.Duplicates > c.EventsMaxAge:
		return invalidf("streams: Duplicates (%s) cannot exceed EventsMaxAge (%s)", c.Duplicates, c.EventsMaxAge)
	case c.NodeHistory <= 0:
		return invalidf("streams: NodeHistory (%d) must be positive", c.NodeHistory)
	}
	return nil
}

// DefaultStreams returns podflow's streams: PODFLOW_EVENTS (podflow.pod.>),
// PODFLOW_NODES (podflow.node.>, last NodeHistory messages per subject),
// PODFLOW_ADVISORIES (max-deliveries advisories) and PODFLOW_DLQ
// (podflow.dlq.>).
func DefaultStreams(cfg StreamsConfig) []StreamSpec {
	specs := defaultStreams(cfg)
	for i := range specs {
		specs[i].PlacementTags = cfg.PlacementTags
	}
	return specs
}

func defaultStreams(cfg StreamsConfig) []StreamSpec {
	return []StreamSpec{
		{
			Name:        EventsStream,
			Description: "podflow pod lifecycle events",
			Subjects:    []string{PodPrefix + ".>"},
			Storage:     cfg.Storage,
			Replicas:    cfg.Replicas,
			MaxAge:      cfg.EventsMaxAge,
			MaxBytes:    cfg.EventsMaxBytes,
			Discard:     jetstream.DiscardNew,
			MaxMsgSize:  cfg.EventsMaxMsgSize,
			Duplicates:  cfg.Duplicates,
		},
		{
			Name:              NodesStream,
			Description:       "podflow node-level events (heartbeats)",
			Subjects:          []string{NodePrefix + ".>"},
			Storage:           cfg.Storage,
			Replicas:          cfg.Replicas,
			MaxAge:            cfg.EventsMaxAge,
			MaxMsgsPerSubject: cfg.NodeHistory,
			MaxMsgSize:        cfg.EventsMaxMsgSize,
			Duplicates:        cfg.Duplicates,
		},
		{
			Name:        AdvisoriesStream,
			Description: "JetStream max-deliveries advisories, until recorded as dead letters",
			Subjects:    []string{MaxDeliveriesAdvisoryPrefix + ".>"},
			Storage:     cfg.Storage,
			Replicas:    cfg.Replicas,
			MaxAge:      cfg.DLQMaxAge,
			MaxBytes:    cfg.DLQMaxBytes,
		},
		{
			Name:        DLQStream,
			Description: "podflow dead letters",
			Subjects:    []string{DLQPrefix + ".>"},
			Storage:     cfg.Storage,
			Replicas:    cfg.Replicas,
			MaxAge:      cfg.DLQMaxAge,
			MaxBytes:    cfg.DLQMaxBytes,
			MaxMsgSize:  2 * cfg.EventsMaxMsgSize,
			Duplicates:  cfg.Duplicates,
		},
	}
}

func (s StreamSpec) validate() error {
	if s.Name == "" || strings.ContainsAny(s.Name, ".*> \t\n") {
		return invalidf("stream name %q is invalid", s.Name)
	}
	if len(s.Subjects) == 0 {
		return invalidf("stream %q has no subjects", s.Name)
	}
	for _, subj := range s.Subjects {
		for _, reserved := range []string{APIPrefix + ".>", StorePrefix + ".>"} {
			if subjectsOverlap(subj, reserved) {
				return invalidf("stream %q subject %q captures reserved %q", s.Name, subj, reserved)
			}
		}
	}
	return nil
}

func (s StreamSpec) config() jetstream.StreamConfig {
	replicas := s.Replicas
	if replicas == 0 {
		replicas = 1
	}
	maxBytes := s.MaxBytes
	if maxBytes == 0 {
		maxBytes = -1
	}
	perSubject := s.MaxMsgsPerSubject
	if perSubject == 0 {
		perSubject = -1
	}
	msgSize := s.MaxMsgSize
	if msgSize == 0 {
		msgSize = -1
	}
	var placement *jetstream.Placement
	if len(s.PlacementTags) > 0 {
		placement = &jetstream.Placement{Tags: s.PlacementTags}
	}
	return jetstream.StreamConfig{
		Placement:         placement,
		Name:              s.Name,
		Description:       s.Description,
		Subjects:          s.Subjects,
		Retention:         jetstream.LimitsPolicy,
		Discard:           s.Discard,
		Storage:           s.Storage,
		Replicas:          replicas,
		MaxAge:            s.MaxAge,
		MaxBytes:          maxBytes,
		MaxMsgs:           -1,
		MaxMsgsPerSubject: perSubject,
		MaxConsumers:      -1,
		MaxMsgSize:        msgSize,
		Duplicates:        s.Duplicates,
	}
}

func (c ConsumerSpec) validate() error {
	switch {
	case c.Stream == "":
		return invalidf("consumer %q has no stream", c.Durable)
	case c.Durable == "" || strings.ContainsAny(c.Durable, ".*> \t\n"):
		return invalidf("consumer durable name %q is invalid", c.Durable)
	case c.AckWait < 0:
		return invalidf("consumer %q: AckWait (%s) is negative", c.Durable, c.AckWait)
	case c.MaxDeliver == 0 || c.MaxDeliver < -1:
		return invalidf("consumer %q: MaxDeliver (%d) must be positive or -1", c.Durable, c.MaxDeliver)
	case len(c.Backoff) > 0 && c.MaxDeliver != -1 && c.MaxDeliver <= len(c.Backoff):
		return invalidf("consumer %q: MaxDeliver (%d) must exceed len(Backoff) (%d)", c.Durable, c.MaxDeliver, len(c.Backoff))
	case c.MaxAckPending < 0:
		return invalidf("consumer %q: MaxAckPending (%d) is negative", c.Durable, c.MaxAckPending)
	}
	return nil
}

func (c ConsumerSpec) config() jetstream.ConsumerConfig {
	cc := jetstream.ConsumerConfig{
		Durable:       c.Durable,
		Description:   c.Description,
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait:       c.AckWait,
		MaxDeliver:    c.MaxDeliver,
		BackOff:       c.Backoff,
		MaxAckPending: c.MaxAckPending,
	}
	if len(c.FilterSubjects) == 1 {
		cc.FilterSubject = c.FilterSubjects[0]
	} else {
		cc.FilterSubjects = c.FilterSubjects
	}
	return cc
}

// Validate checks every stream and consumer, and that each consumer's
// stream is declared or already exists (checked by Provision).
func (t Topology) Validate() error {
	names := map[string]bool{}
	for _, s := range t.Streams {
		if err := s.validate(); err != nil {
			return err
		}
		if names[s.Name] {
			return invalidf("stream %q declared twice", s.Name)
		}
		names[s.Name] = true
	}
	seen := map[string]bool{}
	for _, c := range t.Consumers {
		if err := c.validate(); err != nil {
			return err
		}
		key := c.Stream + "/" + c.Durable
		if seen[key] {
			return invalidf("consumer %q declared twice", key)
		}
		seen[key] = true
	}
	return nil
}

// Provision creates or updates every stream, then every consumer, of t.
// It is idempotent: provisioning the same topology twice changes
// nothing. Nothing else in this package creates streams or consumers.
func Provision(ctx context.Context, js jetstream.JetStream, t Topology) error {
	if err := t.Validate(); err != nil {
		return err
	}
	for _, s := range t.Streams {
		if _, err := js.CreateOrUpdateStream(ctx, s.config()); err != nil {
			return fmt.Errorf("bus: provision stream %q: %w", s.Name, err)
		}
	}
	for _, c := range t.Consumers {
		if _, err := js.CreateOrUpdateConsumer(ctx, c.Stream, c.config()); err != nil {
			return fmt.Errorf("bus: provision consumer %q on stream %q: %w", c.Durable, c.Stream, err)
		}
	}
	return nil
}

// subjectsOverlap reports whether some subject matches both patterns.
func subjectsOverlap(a, b string) bool {
	at, bt := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; ; i++ {
		switch {
		case i == len(at) && i == len(bt):
			return true
		case i < len(at) && at[i] == ">" || i < len(bt) && bt[i] == ">":
			// '>' needs at least one more token on the other side.
			return i < len(at) && i < len(bt)
		case i == len(at) || i == len(bt):
			return false
		case at[i] == "*" || bt[i] == "*" || at[i] == bt[i]:
			continue
		default:
			return false
		}
	}
}
