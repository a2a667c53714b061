package rebuild

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/dedup"
	"github.com/projector-dev/projector/internal/app/config"
	"github.com/projector-dev/projector/internal/app/httpserver"
	"github.com/projector-dev/projector/internal/app/metrics"
	"github.com/projector-dev/projector/internal/app/wiring"
	"github.com/projector-dev/projector/internal/core/eos"
	"github.com/projector-dev/projector/internal/core/seam"
	"github.com/projector-dev/projector/internal/core/state"
	"github.com/projector-dev/projector/processor"
	"github.com/projector-dev/projector/projection"
)

// DefaultPollInterval is how often Run reads the group's committed offsets.
const DefaultPollInterval = 200 * time.Millisecond

// OptionError is a wrong option: the command line's fault (exit code 2).
type OptionError struct {
	Option string // the flag, e.g. "--topic"
	Msg    string
}

func (e *OptionError) Error() string { return "rebuild: " + e.Option + ": " + e.Msg }

// Options configure Run.
type Options struct {
	// Config is the live worker's configuration (validated, defaults applied).
	Config *config.Config
	// Projection names the configured projection to rebuild; "" is allowed
	// when the configuration has exactly one.
	Projection string
	// Topic is the new projection topic; it must not be a topic the live
	// worker writes or reads.
	Topic string
	// From, if not zero, starts a group that has no committed offsets at the
	// first record at or after this time instead of the earliest offset.
	From time.Time
	// DeadLetterTopic receives the rebuild's dead letters (default
	// "<Topic>.dlq": the live dead-letter topic already has them).
	DeadLetterTopic string
	// Brokers override the configuration's (default: wiring.Connect, which
	// connects to a running worker's embedded broker or starts it).
	Brokers []string
	// HTTPListen serves /metrics, /healthz and /readyz of the rebuild;
	// "" or "off" serves nothing.
	HTTPListen string
	// Progress reports progress; nil reports nothing.
	Progress *Progress
	// PollInterval defaults to DefaultPollInterval.
	PollInterval time.Duration
	Logger       *slog.Logger
	// Hooks are passed to the processor (tests; internal/core/seam).
	Hooks *eos.Hooks
}

// Group is the rebuild's consumer group and transactional-id prefix.
func Group(name, topic string) string { return name + "-rebuild-" + topic }

// StateDir is the rebuild's Pebble directory.
func StateDir(cfg *config.Config, topic string) string {
	return filepath.Join(cfg.State.Dir, "rebuild-"+topic)
}

var topicRE = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// projection returns the selected projection's configuration.
func (o *Options) projection() (*config.Projection, error) {
	ps := o.Config.Projections
	if o.Projection == "" {
		if len(ps) == 1 {
			return &ps[0], nil
		}
		return nil, &OptionError{"--projection", "required: the configuration has " + projectionNames(ps)}
	}
	for i := range ps {
		if ps[i].Name == o.Projection {
			return &ps[i], nil
		}
	}
	return nil, &OptionError{"--projection", fmt.Sprintf("no projection %q in the configuration (it has %s)", o.Projection, projectionNames(ps))}
}

func projectionNames(ps []config.Projection) string {
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.Name
	}
	return strings.Join(names, ", ")
}

// validate checks the options and fills in defaults.
func (o *Options) validate() (*config.Projection, error) {
	if o.Config == nil {
		return nil, errors.New("rebuild: no configuration")
	}
	pc, err := o.projection()
	if err != nil {
		return nil, err
	}
	if o.Topic == "" {
		return nil, &OptionError{"--topic", "the new projection topic is required"}
	}
	if !topicRE.MatchString(o.Topic) {
		return nil, &OptionError{"--topic", fmt.Sprintf("%q is not a valid topic name ([A-Za-z0-9._-]+)", o.Topic)}
	}
	if o.DeadLetterTopic == "" {
		o.DeadLetterTopic = o.Topic + ".dlq"
	}
	k := &o.Config.Kafka
	group := Group(o.Config.Name, o.Topic)
	taken := map[string]string{k.DeadLetterTopic: "the dead-letter topic", k.EffectsTopic: "the side-effect intents topic"}
	for _, p := range o.Config.Projections {
		taken[p.Topic] = "the topic of projection " + p.Name
	}
	for _, in := range k.InputNames() {
		taken[in] = "an input topic"
		taken[processor.ChangelogTopic(o.Config.Name, in)] = "a changelog topic of the live worker"
		if n := len(processor.ChangelogTopic(group, in)); n > 249 {
			return nil, &OptionError{"--topic", fmt.Sprintf("too long: the rebuild's changelog topic name would be %d characters (Kafka allows 249)", n)}
		}
	}
	if what, ok := taken[o.Topic]; ok {
		return nil, &OptionError{"--topic", fmt.Sprintf("%s is %s; a rebuild writes a new topic", o.Topic, what)}
	}
	if what, ok := taken[o.DeadLetterTopic]; ok {
		return nil, &OptionError{"--dead-letter-topic", fmt.Sprintf("%s is %s of the live worker", o.DeadLetterTopic, what)}
	}
	if o.DeadLetterTopic == o.Topic {
		return nil, &OptionError{"--dead-letter-topic", "must differ from --topic"}
	}
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return pc, nil
}

// Result is what one run of a rebuild did.
type Result struct {
	Projection, Topic, Group, StateDir, DeadLetterTopic string
	From                                                time.Time // zero: from the earliest offsets
	// Completed: the group's committed offsets reached the end offsets
	// captured at start. False when the run was stopped first.
	Completed bool
	// Resumed: the group had committed offsets when this run started.
	Resumed bool
	// Target is the records between where this run started and the end
	// offsets captured at start; Records is how many input offsets this run
	// consumed (it may exceed Target: the processor keeps consuming records
	// produced after the start until it is stopped).
	Target, Records int64
	// Outcomes are the committed outcome counts (processor.Outcomes).
	Outcomes map[string]int64
	// Suppressed counts the side-effect intents not produced, by effect.
	Suppressed  map[string]int64
	DeadLetters int64
	// Transactions is the number of committed transactions.
	Transactions int64
	Duration     time.Duration
}

// Rate is the records consumed per second of the run.
func (r *Result) Rate() float64 {
	if r.Duration <= 0 {
		return 0
	}
	return float64(r.Records) / r.Duration.Seconds()
}

// SuppressedTotal sums Suppressed.
func (r *Result) SuppressedTotal() int64 {
	var n int64
	for _, v := range r.Suppressed {
		n += v
	}
	return n
}

// WriteSummary prints the result for an operator.
func (r *Result) WriteSummary(w io.Writer) {
	status := "complete: caught up with the end offsets taken at start"
	if !r.Completed {
		status = "stopped before the end offsets taken at start"
	}
	fmt.Fprintf(w, "rebuild of projection %s into %s %s\n", r.Projection, r.Topic, status)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	from := "the earliest offsets"
	if !r.From.IsZero() {
		from = r.From.UTC().Format(time.RFC3339)
	}
	if r.Resumed {
		from = "the group's committed offsets (resumed)"
	}
	fmt.Fprintf(tw, "  group\t%s\n  state\t%s\n  started from\t%s\n", r.Group, r.StateDir, from)
	fmt.Fprintf(tw, "  events\t%d records consumed (target %d)\n", r.Records, r.Target)
	var outs []string
	for _, o := range processor.Outcomes {
		if n := r.Outcomes[o.String()]; n > 0 || o == processor.OutcomeApplied {
			outs = append(outs, fmt.Sprintf("%s %d", o, n))
		}
	}
	fmt.Fprintf(tw, "  outcomes\t%s\n", strings.Join(outs, ", "))
	effects := make([]string, 0, len(r.Suppressed))
	for e := range r.Suppressed {
		effects = append(effects, e)
	}
	sort.Strings(effects)
	var sup []string
	for _, e := range effects {
		sup = append(sup, fmt.Sprintf("%s %d", e, r.Suppressed[e]))
	}
	if len(sup) == 0 {
		sup = []string{"none configured"}
	}
	fmt.Fprintf(tw, "  suppressed effects\t%d (%s); nothing was called\n", r.SuppressedTotal(), strings.Join(sup, ", "))
	fmt.Fprintf(tw, "  dead letters\t%d (to %s)\n", r.DeadLetters, r.DeadLetterTopic)
	fmt.Fprintf(tw, "  transactions\t%d committed\n", r.Transactions)
	fmt.Fprintf(tw, "  duration\t%s\n", r.Duration.Round(time.Millisecond))
	fmt.Fprintf(tw, "  rate\t%.0f records/s\n", r.Rate())
	tw.Flush()
}

// Run rebuilds one projection into a new topic: it captures the input's end
// offsets, runs a rebuild-mode processor under the rebuild's own group and
// state until the group's committed offsets reach them, and stops it.
//
// It returns a nil error when the rebuild completed or ctx was cancelled
// (Result.Completed tells which; the open transaction was finished or
// aborted either way), and the processor's error when it failed. The Result
// is non-nil whenever the processor ran.
func Run(ctx context.Context, o Options) (*Result, error) {
	pc, err := o.validate()
	if err != nil {
		return nil, err
	}
	cfg, log := o.Config, o.Logger
	group := Group(cfg.Name, o.Topic)
	res := &Result{Projection: pc.Name, Topic: o.Topic, Group: group, StateDir: StateDir(cfg, o.Topic),
		DeadLetterTopic: o.DeadLetterTopic, From: o.From, Outcomes: map[string]int64{}, Suppressed: map[string]int64{}}

	brokers := o.Brokers
	if len(brokers) == 0 {
		b, closeFn, err := wiring.Connect(cfg, log)
		if err != nil {
			return nil, err
		}
		defer closeFn()
		brokers = b
	}
	copts, err := wiring.ClientOpts(&cfg.Kafka)
	if err != nil {
		return nil, err
	}
	admCl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, copts...)...)
	if err != nil {
		return nil, err
	}
	defer admCl.Close()
	if err := checkAccess(ctx, admCl, group, cfg.Kafka.InputNames()); err != nil {
		return nil, err
	}
	adm := kadm.NewClient(admCl)
	pos, err := capture(ctx, adm, group, cfg.Kafka.InputNames(), o.From)
	if err != nil {
		return nil, err
	}
	res.Resumed = pos.resumed
	res.Target = pos.total()
	if !pos.resumed {
		warnIfNotEmpty(ctx, adm, log, o.Topic)
	}

	store, p, err := newProcessor(o, pc, res.StateDir, group, brokers, copts)
	if err != nil {
		return nil, err
	}
	defer store.Close()

	began := time.Now()
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	if err := serveMetrics(pctx, &wg, o.HTTPListen, cfg, pc.Name, group, p, store, adm, log); err != nil {
		stop()
		wg.Wait()
		return nil, err
	}
	var runErr error
	stopped := make(chan struct{})
	wg.Go(func() {
		runErr = p.Run(pctx)
		stop()
		close(stopped)
	})
	if o.Progress != nil {
		o.Progress.begin(fmt.Sprintf("rebuild %s → %s", pc.Name, o.Topic), pos, began)
	}
	log.Info("rebuild started", "projection", pc.Name, "topic", o.Topic, "group", group,
		"resumed", pos.resumed, "target", res.Target)
	res.Completed = o.watch(pctx, stopped, pos, adm, append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, copts...))
	res.Duration = time.Since(began) // to the end offsets, or to the stop
	stop()
	wg.Wait() // runErr is set

	o.finish(ctx, p, pos, adm, res)
	if runErr != nil {
		res.Completed = false
		return res, fmt.Errorf("rebuild: %w", runErr)
	}
	log.Info("rebuild finished", "completed", res.Completed, "records", res.Records, "duration", res.Duration)
	return res, nil
}

// newProcessor opens the rebuild's state directory and makes a rebuild-mode
// processor for projection pc, writing to o.Topic under group from the
// start of the input (or o.From).
func newProcessor(o Options, pc *config.Projection, stateDir, group string, brokers []string, copts []kgo.Opt) (*state.Store, *processor.Processor, error) {
	cfg := o.Config
	projs, err := wiring.Projections(cfg)
	if err != nil {
		return nil, nil, err
	}
	var proj *projection.Projection
	for _, p := range projs {
		if p.Name == pc.Name {
			proj = p
		}
	}
	proj.Topic = o.Topic
	policy, err := projection.ParsePolicy(cfg.Gaps.OnTimeout)
	if err != nil {
		return nil, nil, &config.Error{Key: "gaps.onTimeout", Msg: err.Error()}
	}
	store, err := state.Open(stateDir, seam.ProcessorStoreOptions(int64(cfg.State.CacheSize)))
	if err != nil {
		return nil, nil, fmt.Errorf("rebuild: is this rebuild running already? %w", err)
	}
	startOffset := kgo.NewOffset().AtStart()
	if !o.From.IsZero() {
		startOffset = kgo.NewOffset().AfterMilli(o.From.UnixMilli())
	}
	pcfg := processor.Config{
		Session: processor.Session{
			Name: cfg.Name, InstanceID: cfg.Kafka.InstanceID, Brokers: brokers, ClientOpts: copts,
			DeadLetterTopic: o.DeadLetterTopic, Partitions: int32(cfg.Kafka.EmbeddedBroker.Partitions),
			MaxRecordsPerTxn:   cfg.Kafka.MaxRecordsPerTransaction,
			TransactionTimeout: cfg.Kafka.TransactionTimeout.Std(),
			SessionTimeout:     cfg.Kafka.SessionTimeout.Std(), Logger: o.Logger,
		},
		Group:         group,
		Inputs:        cfg.Kafka.InputNames(),
		WaitForInputs: !cfg.Kafka.Embedded,
		Projections:   []*projection.Projection{proj}, Dedup: dedup.NewStore(cfg.Dedup.Retention.Std()),
		HoldTimeout: cfg.Gaps.HoldTimeout.Std(), GapPolicy: policy, MaxHeld: int64(cfg.Gaps.MaxHeldPerAggregate),

		Mode: processor.Rebuild, StartOffset: &startOffset,
	}
	seam.Processor(&pcfg, seam.Seams{Store: store, Hooks: o.Hooks})
	pcfg.InputFormats, pcfg.SchemaRegistry = wiring.InputFormats(cfg)
	// The rules run so that what live would have emitted is counted as
	// suppressed; in rebuild mode the processor never produces it.
	rules, err := wiring.EffectRules(cfg)
	if err != nil {
		store.Close()
		return nil, nil, err
	}
	if rules != nil { // an interface: a nil *effect.Rules in it is not nil
		pcfg.EffectRules = rules
	}
	p, err := processor.New(pcfg)
	if err != nil {
		store.Close()
		return nil, nil, err
	}
	return store, p, nil
}

// watch polls the rebuild group's offsets every PollInterval, reporting
// progress, until they reach the captured end offsets, or only transaction
// markers are left below them (true), or the processor stops or pctx ends
// first (false). readOpts are the options of a client reading the inputs.
func (o Options) watch(pctx context.Context, stopped <-chan struct{}, pos *positions, adm *kadm.Client, readOpts []kgo.Opt) bool {
	tick := time.NewTicker(o.PollInterval)
	defer tick.Stop()
	for {
		select {
		case <-stopped:
			return false
		case <-pctx.Done():
			return false
		case <-tick.C:
		}
		if err := pos.poll(pctx, adm); err != nil {
			if pctx.Err() == nil {
				o.Logger.Debug("reading the rebuild group's offsets", "err", err)
			}
			continue
		}
		if o.Progress != nil {
			o.Progress.update(pos, time.Now())
		}
		if err := pos.settle(pctx, readOpts); err != nil && pctx.Err() == nil {
			o.Logger.Debug("reading what is left of the inputs", "err", err)
		}
		if pos.done() {
			return true
		}
	}
}

// finish fills in the final figures: the processor has stopped, so its stats
// and the group's offsets are settled.
func (o Options) finish(ctx context.Context, p *processor.Processor, pos *positions, adm *kadm.Client, res *Result) {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := pos.poll(fctx, adm); err == nil && pos.done() {
		res.Completed = true
	}
	res.Records = pos.consumed()
	st := p.Stats()
	for _, oc := range processor.Outcomes {
		res.Outcomes[oc.String()] = st.Outcome(oc)
	}
	for _, se := range o.Config.SideEffects {
		res.Suppressed[se.Name] = st.Effects(se.Name, processor.IntentSuppressed)
	}
	for _, r := range metrics.DeadLetterReasons() {
		res.DeadLetters += st.DeadLetters(r)
	}
	res.Transactions = st.Transactions("committed")
	if o.Progress != nil {
		o.Progress.end(pos, time.Now(), res.Completed)
	}
}

// serveMetrics runs the metrics and the HTTP server when listen is set.
func serveMetrics(ctx context.Context, wg *sync.WaitGroup, listen string, cfg *config.Config, proj, group string,
	p *processor.Processor, store *state.Store, adm *kadm.Client, log *slog.Logger) error {
	if listen == "" || listen == config.HTTPOff {
		return nil
	}
	reg := prometheus.NewRegistry()
	mo := metrics.OptionsFromConfig(cfg)
	mo.Projections = []string{proj}
	mo.Processor = metrics.Processor(p.Stats())
	mo.Pebble = map[string]func() *pebble.Metrics{"processor": store.Metrics}
	mo.Lag = metrics.NewKafkaLag(adm, group, cfg.Kafka.InputNames()...)
	mo.Logger = log
	m, err := metrics.New(reg, mo)
	if err != nil {
		return err
	}
	srv := httpserver.New(listen, reg, p.Stats().Readiness)
	wg.Go(func() { _ = m.Run(ctx) })
	errc := make(chan error, 1)
	wg.Go(func() { errc <- srv.Run(ctx) })
	<-srv.Listening()
	if srv.Addr() == nil {
		return <-errc
	}
	log.Info("serving metrics", "addr", srv.Addr().String())
	return nil
}

// warnIfNotEmpty warns when a fresh rebuild (no committed offsets) writes
// into a topic that already has records: readers would see two histories.
func warnIfNotEmpty(ctx context.Context, adm *kadm.Client, log *slog.Logger, topic string) {
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil && o.Offset > 0 {
			n += o.Offset
		}
	})
	if n > 0 {
		log.Warn("the rebuild group has no committed offsets but the target topic already has records; "+
			"it will hold two histories (use a new topic, or delete it first)", "topic", topic, "records", n)
	}
}
