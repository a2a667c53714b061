package eos

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/projector-dev/projector/internal/core/acl"
)

// ensureTopics creates the topics the loop needs when they are missing and
// checks that every changelog is co-partitioned with its input. Missing
// inputs are created only with Config.CreateInputs; otherwise it waits for
// them (waitInputs).
func (l *Loop[T]) ensureTopics(ctx context.Context) error {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(l.cfg.Brokers...)}, l.cfg.ClientOpts...)...)
	if err != nil {
		return fmt.Errorf("eos: admin client: %w", err)
	}
	defer cl.Close()
	// Permissions first (access.go), on what exists now; the topics created
	// below are checked once they exist.
	absent, err := l.checkAccess(ctx, cl, nil)
	if err != nil {
		return err
	}
	adm := kadm.NewClient(cl)
	if !l.cfg.CreateInputs {
		if err := l.waitInputs(ctx, adm); err != nil {
			return err
		}
	}
	var specs []TopicSpec
	for _, in := range l.cfg.Inputs {
		// Listed either way: the changelogs follow their partition count.
		spec := TopicSpec{Name: in, MustExist: !l.cfg.CreateInputs}
		if i := slices.IndexFunc(l.cfg.InternalInputs, func(s TopicSpec) bool { return s.Name == in }); i >= 0 {
			spec = l.cfg.InternalInputs[i]
		}
		specs = append(specs, spec)
	}
	for _, in := range l.cfg.Inputs {
		specs = append(specs, TopicSpec{Name: l.cfg.ChangelogOf(in), Compacted: true, CopartitionOf: in})
	}
	specs = append(specs, TopicSpec{Name: l.cfg.DeadLetterTopic})
	specs = append(specs, l.cfg.OutputTopics...)
	if l.cfg.MaxRecordBytes > 0 {
		for i := range specs {
			specs[i].MaxMessageBytes = MaxBatchBytes(l.cfg.MaxRecordBytes)
		}
	}
	if err := EnsureTopics(ctx, adm, specs, l.cfg.Partitions); err != nil {
		return err
	}
	if len(absent) > 0 {
		_, err = l.checkAccess(ctx, cl, absent)
	}
	return err
}

// inputWait is how often a missing input topic is looked for again.
const inputWait = 5 * time.Second

// waitInputs returns once every input topic exists. While one is missing it
// says so once in the log and all along in Stats (the metric
// projector_input_topic_missing and /readyz).
func (l *Loop[T]) waitInputs(ctx context.Context, adm *kadm.Client) error {
	var logged []string
	defer l.setMissing(nil)
	var external []string // the inputs to wait for: not the internal ones, which are created
	for _, in := range l.cfg.Inputs {
		if !slices.ContainsFunc(l.cfg.InternalInputs, func(s TopicSpec) bool { return s.Name == in }) {
			external = append(external, in)
		}
	}
	for {
		details, err := adm.ListTopics(ctx, external...)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("eos: list input topics: %w", err)
		}
		var missing []string
		for _, in := range external {
			d, ok := details[in]
			switch {
			case ok && d.Err == nil:
			case !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) || kerr.IsRetriable(d.Err):
				// Retriable: a topic just created whose leader is
				// not elected yet, say. Wait for it like a missing one.
				missing = append(missing, in)
			default:
				return fmt.Errorf("eos: input topic %s: %w", in, d.Err)
			}
		}
		if len(missing) == 0 {
			if len(logged) > 0 {
				l.cfg.Logger.Info("input topics exist now; starting", "topics", external)
			}
			return nil
		}
		if !slices.Equal(missing, logged) {
			l.cfg.Logger.Warn("input topic does not exist; waiting for it to be created (the worker creates input topics only on the embedded broker)",
				"topics", missing, "group", l.cfg.Group, "recheck", inputWait)
			logged = missing
		}
		l.setMissing(missing)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(inputWait):
		}
	}
}

func (l *Loop[T]) setMissing(topics []string) {
	l.stats.setMissing(topics)
	l.publishReadiness()
}

// TopicSpec describes one topic the loop uses.
type TopicSpec struct {
	Name      string
	Compacted bool
	// CopartitionOf names the topic whose partition count this one must match.
	CopartitionOf string
	// PartitionsOf names the topic whose partition count this one is
	// created with when missing (it must exist, or come before it); unlike
	// CopartitionOf, an existing topic is taken with any count.
	PartitionsOf string
	// MustExist: a missing topic is an error, not created.
	MustExist bool
	// MaxMessageBytes, when set, is the created topic's max.message.bytes.
	MaxMessageBytes int
}

// EnsureTopics creates missing topics in order (a topic is created after the
// one it is co-partitioned with) and verifies co-partitioning.
func EnsureTopics(ctx context.Context, adm *kadm.Client, specs []TopicSpec, partitions int32) error {
	names := make([]string, 0, len(specs))
	for _, s := range specs {
		names = append(names, s.Name)
	}
	details, err := adm.ListTopics(ctx, names...)
	if err != nil {
		return fmt.Errorf("eos: list topics: %w", err)
	}
	count := func(t string) (int32, bool) {
		d, ok := details[t]
		if !ok || d.Err != nil {
			return 0, false
		}
		return int32(len(d.Partitions)), true
	}
	for _, s := range specs {
		want := partitions
		if like := cmp.Or(s.CopartitionOf, s.PartitionsOf); like != "" {
			n, ok := count(like)
			if !ok {
				return fmt.Errorf("eos: topic %s: its input %s does not exist", s.Name, like)
			}
			want = n
		}
		if n, ok := count(s.Name); ok {
			if s.CopartitionOf != "" && n != want {
				return fmt.Errorf("eos: changelog %s has %d partitions but its input %s has %d; they must be co-partitioned", s.Name, n, s.CopartitionOf, want)
			}
			continue
		}
		if s.MustExist {
			return fmt.Errorf("eos: topic %s does not exist", s.Name)
		}
		cfgs := map[string]*string{}
		if s.Compacted {
			compact := "compact"
			cfgs["cleanup.policy"] = &compact
		}
		if s.MaxMessageBytes > 0 {
			mb := strconv.Itoa(s.MaxMessageBytes)
			cfgs["max.message.bytes"] = &mb
		}
		resp, err := adm.CreateTopic(ctx, want, -1, cfgs, s.Name)
		if err == nil {
			err = resp.Err
		}
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			// Create on the topic (or on the cluster) is what a refusal lacks.
			return fmt.Errorf("eos: create topic %s: %w", s.Name,
				acl.Denied(err, acl.Topic(s.Name, kmsg.ACLOperationCreate, "create it, as it does not exist")))
		}
		details[s.Name] = kadm.TopicDetail{Topic: s.Name, Partitions: make(kadm.PartitionDetails, want)}
		for i := int32(0); i < want; i++ {
			details[s.Name].Partitions[i] = kadm.PartitionDetail{Topic: s.Name, Partition: i}
		}
	}
	return nil
}
