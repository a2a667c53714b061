package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"

	"github.com/projector-dev/projector/internal/core/inputformat"
	"strings"
	"time"

	"github.com/projector-dev/projector/sideeffects/effect"
)

// splitBrokers interprets the scalar form of kafka.brokers.
func splitBrokers(s string) (brokers []string, embedded bool) {
	s = strings.TrimSpace(s)
	if s == EmbeddedBrokers {
		return nil, true
	}
	for _, b := range strings.Split(s, ",") {
		if b = strings.TrimSpace(b); b != "" {
			brokers = append(brokers, b)
		}
	}
	return brokers, false
}

// SetBrokers sets Brokers and Embedded from a flag value: "embedded" or a
// comma-separated list of host:port. It reports an *Error for kafka.brokers.
func (k *Kafka) SetBrokers(s string) error {
	brokers, embedded := splitBrokers(s)
	if !embedded && len(brokers) == 0 {
		return &Error{Key: "kafka.brokers", Msg: fmt.Sprintf("expected host:port[,host:port…] or %q, got %q", EmbeddedBrokers, s)}
	}
	for _, b := range brokers {
		if msg := checkAddr(b, false, 1); msg != "" {
			return &Error{Key: "kafka.brokers", Msg: msg}
		}
	}
	k.Brokers, k.Embedded = brokers, embedded
	return nil
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

const (
	maxNameLen  = 200 // leaves room for topic suffixes within Kafka's 249
	maxTopicLen = 249
)

// Validate checks a Config that has had ApplyDefaults applied. It reports
// every problem found, not just the first, as an *Error or an errors.Join of
// them. It does not modify c and does not touch the file system.
func (c *Config) Validate() error {
	var l errorList
	checkName(&l, "name", c.Name)
	c.validateKafka(&l)
	c.validateInputFormats(&l)

	if c.Name != "" && c.State.Dir == "" {
		l.add("state.dir", "required")
	}
	if c.State.CacheSize < 0 {
		l.add("state.cacheSize", "must be positive, got %d", int64(c.State.CacheSize))
	}
	between(&l, "state.standbyReplicas", c.State.StandbyReplicas, 0, 16)
	positive(&l, "dedup.retention", c.Dedup.Retention)
	positive(&l, "gaps.holdTimeout", c.Gaps.HoldTimeout)
	oneOf(&l, "gaps.onTimeout", c.Gaps.OnTimeout, OnTimeoutWait, OnTimeoutSkip, OnTimeoutDeadLetter)
	if c.Gaps.MaxHeldPerAggregate < 1 {
		l.add("gaps.maxHeldPerAggregate", "must be at least 1, got %d", c.Gaps.MaxHeldPerAggregate)
	}

	c.validateProjections(&l)
	c.validateSideEffects(&l)

	if c.HTTP.Enabled() {
		if msg := checkAddr(c.HTTP.Listen, true, 0); msg != "" {
			l.add("http.listen", "%s (or %q to disable)", msg, HTTPOff)
		}
	}
	c.validateIngress(&l)
	c.validateTracing(&l)
	return l.err()
}

// validateKafka checks the kafka section, and the projections' output
// topics against the other topics.
func (c *Config) validateKafka(l *errorList) {
	k := &c.Kafka
	c.validateBrokers(l)
	switch {
	case k.InstanceID == "":
		l.add("kafka.instanceId", "required (the host name could not be determined)")
	case len(k.InstanceID) > maxNameLen || !nameRE.MatchString(k.InstanceID):
		l.add("kafka.instanceId", "must be 1 to %d characters of A-Z a-z 0-9 . _ -, got %q", maxNameLen, k.InstanceID)
	}
	c.validateTopics(l)

	if k.TransactionTimeout <= 0 || k.TransactionTimeout >= Duration(15*time.Minute) {
		l.add("kafka.transactionTimeout", "must be more than 0 and less than 15m, got %s", k.TransactionTimeout)
	}
	if k.MaxRecordBytes < 1<<10 || k.MaxRecordBytes > 64<<20 {
		l.add("kafka.maxRecordBytes", "must be between 1KiB and 64MiB, got %s", k.MaxRecordBytes)
	}
	between(l, "kafka.maxRecordsPerTransaction", k.MaxRecordsPerTransaction, 1, 1_000_000)
	positive(l, "kafka.sessionTimeout", k.SessionTimeout)
	k.validateSecurity(l)
}

// validateBrokers checks the broker list, or the embedded broker that
// stands in for it.
func (c *Config) validateBrokers(l *errorList) {
	k := &c.Kafka
	switch {
	case k.Embedded && len(k.Brokers) > 0:
		l.add("kafka.brokers", "must be empty when the embedded broker is used")
	case !k.Embedded && len(k.Brokers) == 0:
		l.add("kafka.brokers", "required: a list of host:port, or %q for the in-process broker", EmbeddedBrokers)
	}
	for i, b := range k.Brokers {
		key := fmt.Sprintf("kafka.brokers[%d]", i)
		if b == EmbeddedBrokers {
			l.add(key, "%q must stand alone: brokers: %s", EmbeddedBrokers, EmbeddedBrokers)
		} else if msg := checkAddr(b, false, 1); msg != "" {
			l.add(key, "%s", msg)
		}
	}

	eb := &k.EmbeddedBroker
	if k.Embedded {
		if eb.Dir == "" && c.Name != "" {
			l.add("kafka.embeddedBroker.dir", "required")
		} else if eb.Dir != "" && c.State.Dir != "" && pathOverlaps(eb.Dir, c.State.Dir) {
			l.add("kafka.embeddedBroker.dir", "must not overlap state.dir %q", c.State.Dir)
		}
	}
	if msg := checkAddr(eb.Listen, true, 0); msg != "" {
		l.add("kafka.embeddedBroker.listen", "%s", msg)
	}
	between(l, "kafka.embeddedBroker.partitions", eb.Partitions, 1, 1024)
}

// validateTopics checks the input topics, then the output topics (dead
// letters, effects, projections, the ingress's receipts) and the ingress's
// claims, which must differ from the inputs (a loop) and from each other.
func (c *Config) validateTopics(l *errorList) {
	k := &c.Kafka
	if len(k.Input) == 0 {
		l.add("kafka.input", "at least one input topic is required")
	}
	inputs := map[string]string{}
	for i, in := range k.Input {
		t := in.Topic
		key := fmt.Sprintf("kafka.input[%d]", i)
		if checkTopic(l, key, t) {
			if prev, dup := inputs[t]; dup {
				l.add(key, "duplicate of %s", prev)
			} else {
				inputs[t] = key
			}
		}
	}
	outputs := map[string]string{}
	output := func(key, topic string) {
		if topic == "" && c.Name == "" {
			return // the missing name is reported; this is its consequence
		}
		if !checkTopic(l, key, topic) {
			return
		}
		if in, ok := inputs[topic]; ok {
			l.add(key, "topic %q is also an input topic (%s)", topic, in)
		} else if prev, ok := outputs[topic]; ok {
			l.add(key, "topic %q is already used by %s", topic, prev)
		} else {
			outputs[topic] = key
		}
	}
	output("kafka.deadLetterTopic", k.DeadLetterTopic)
	output("kafka.effectsTopic", k.EffectsTopic)
	for i := range c.Projections {
		if t := c.Projections[i].Topic; t != "" {
			output(fmt.Sprintf("projections[%d].topic", i), t)
		}
	}
	if c.Ingress != nil {
		output("ingress.receiptsTopic", c.Ingress.ReceiptsTopic)
		// An internal input, not an output, but as an output it must be
		// neither an input topic nor another of the worker's topics.
		output("ingress.claimsTopic", c.Ingress.ClaimsTopic)
	}
}

// validateSecurity checks that TLS and SASL, when configured, are complete.
func (k *Kafka) validateSecurity(l *errorList) {
	if t := k.TLS; t != nil {
		if t.CertFile != "" && t.KeyFile == "" {
			l.add("kafka.tls.keyFile", "required with certFile")
		}
		if t.KeyFile != "" && t.CertFile == "" {
			l.add("kafka.tls.certFile", "required with keyFile")
		}
	}
	if s := k.SASL; s != nil {
		oneOf(l, "kafka.sasl.mechanism", s.Mechanism, SASLPlain, SASLScramSHA256, SASLScramSHA512)
		if s.Username == "" {
			l.add("kafka.sasl.username", "required")
		}
		if s.Password == "" {
			l.add("kafka.sasl.password", "required")
		}
	}
}

func (c *Config) validateProjections(l *errorList) {
	if len(c.Projections) == 0 {
		l.add("projections", "at least one projection is required")
	}
	names := map[string]int{}
	for i := range c.Projections {
		p := &c.Projections[i]
		key := fmt.Sprintf("projections[%d]", i)
		checkUniqueName(l, "projections", i, p.Name, names)
		if p.Topic == "" {
			l.add(key+".topic", "required")
		} // otherwise checked with the other topics in validateKafka
		checkDistinct(l, key+".aggregateTypes", p.AggregateTypes)
		if len(p.Events) == 0 {
			l.add(key+".events", "at least one eventType: rule (%s or %s) is required", RuleMerge, RuleDelete)
		}
		for _, et := range sortedKeys(p.Events) {
			k := key + ".events." + et
			if et == "" {
				l.add(key+".events", "an event type must not be empty")
				continue
			}
			if r := p.Events[et]; r != RuleMerge && r != RuleDelete {
				l.add(k, "rule must be %q or %q, got %q", RuleMerge, RuleDelete, r)
			}
		}
	}
}

// checkUniqueName checks the name of entry i of the list at key list (a
// valid name, not that of an earlier entry) and records it in names.
func checkUniqueName(l *errorList, list string, i int, name string, names map[string]int) {
	key := fmt.Sprintf("%s[%d].name", list, i)
	if !checkName(l, key, name) {
		return
	}
	if j, dup := names[name]; dup {
		l.add(key, "duplicate of %s[%d].name %q", list, j, name)
	} else {
		names[name] = i
	}
}

// checkDistinct checks a list of strings (event or aggregate types) at key:
// none empty, none repeated.
func checkDistinct(l *errorList, key string, list []string) {
	seen := map[string]bool{}
	for j, t := range list {
		k := fmt.Sprintf("%s[%d]", key, j)
		switch {
		case t == "":
			l.add(k, "must not be empty")
		case seen[t]:
			l.add(k, "duplicate %q", t)
		}
		seen[t] = true
	}
}

func (c *Config) validateSideEffects(l *errorList) {
	names := map[string]int{}
	for i := range c.SideEffects {
		s := &c.SideEffects[i]
		key := fmt.Sprintf("sideEffects[%d]", i)
		checkUniqueName(l, "sideEffects", i, s.Name, names)
		if len(s.On) == 0 {
			l.add(key+".on", "at least one event type is required")
		}
		checkDistinct(l, key+".on", s.On)
		if w := s.When; w != nil {
			// The condition's meaning is effect's: so are its checks.
			cond := effect.Condition{Field: w.Field, Equals: w.Equals}
			for _, err := range joined(cond.Check()) {
				var ce *effect.ConditionError
				if errors.As(err, &ce) {
					l.add(key+".when."+ce.Member, "%s", ce.Reason)
				} else {
					l.add(key+".when", "%v", err)
				}
			}
		}
		if s.Key == "" {
			l.add(key+".key", "required: an idempotency key template such as \"%s:{aggregateId}:v{aggregateVersion}\"", s.Name)
		} else if _, err := effect.ParseTemplate(s.Key); err != nil {
			var te *effect.TemplateError
			if errors.As(err, &te) {
				l.add(key+".key", "%s", te.Reason) // the key names the template
			} else {
				l.add(key+".key", "%v", err)
			}
		}
		checkURL(l, key+".webhook.url", s.Webhook.URL)
		positive(l, key+".webhook.timeout", s.Webhook.Timeout)
		validateSigningSecrets(l, key+".webhook.signingSecret", s.Webhook.SigningSecret)
		between(l, key+".maxAttempts", s.MaxAttempts, 1, 1000)
		oneOf(l, key+".onUnknown", s.OnUnknown, OnUnknownRetry, OnUnknownPark)
	}
}

// joined is the members of an errors.Join, or err alone (none for nil).
func joined(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	if err != nil {
		return []error{err}
	}
	return nil
}

func checkName(l *errorList, key, name string) bool {
	switch {
	case name == "":
		l.add(key, "required")
	case len(name) > maxNameLen || !nameRE.MatchString(name) || strings.Trim(name, ".") == "":
		l.add(key, "must be 1 to %d characters of A-Z a-z 0-9 . _ - (not only dots), got %q", maxNameLen, name)
	default:
		return true
	}
	return false
}

// checkTopic applies Kafka's topic name rules.
func checkTopic(l *errorList, key, topic string) bool {
	switch {
	case topic == "":
		l.add(key, "required")
	case len(topic) > maxTopicLen || !nameRE.MatchString(topic) || topic == "." || topic == "..":
		l.add(key, "invalid topic name %q: 1 to %d characters of A-Z a-z 0-9 . _ -, not . or ..", topic, maxTopicLen)
	default:
		return true
	}
	return false
}

// checkAddr validates host:port; listen addresses may omit the host (all
// interfaces). It returns "" when valid.
func checkAddr(addr string, listen bool, minPort int) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Sprintf("invalid address %q: expected host:port", addr)
	}
	if host == "" && !listen {
		return fmt.Sprintf("invalid address %q: missing host", addr)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < minPort || n > 65535 {
		return fmt.Sprintf("invalid address %q: port must be a number from %d to 65535", addr, minPort)
	}
	return ""
}

func checkURL(l *errorList, key, raw string) {
	if raw == "" {
		l.add(key, "required")
		return
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		l.add(key, "invalid URL: %v", err)
	case u.Scheme != "http" && u.Scheme != "https":
		l.add(key, "must be an absolute http or https URL, got %q", raw)
	case u.Host == "":
		l.add(key, "missing host in %q", raw)
	}
}

func positive(l *errorList, key string, d Duration) {
	if d <= 0 {
		l.add(key, "must be more than 0, got %s", d)
	}
}

// between checks that v is in [lo, hi].
func between(l *errorList, key string, v, lo, hi int) {
	if v < lo || v > hi {
		l.add(key, "must be between %d and %d, got %d", lo, hi, v)
	}
}

func oneOf(l *errorList, key, v string, allowed ...string) {
	if !slices.Contains(allowed, v) {
		l.add(key, "must be one of %s, got %q", strings.Join(allowed, ", "), v)
	}
}

// pathOverlaps reports whether a and b are the same directory or one
// contains the other (lexically).
func pathOverlaps(a, b string) bool {
	a, b = filepath.Clean(a), filepath.Clean(b)
	within := func(x, y string) bool {
		r, err := filepath.Rel(y, x)
		return err == nil && r != ".." && !strings.HasPrefix(r, ".."+string(filepath.Separator))
	}
	return within(a, b) || within(b, a)
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func (c *Config) validateIngress(l *errorList) {
	in := c.Ingress
	if in == nil {
		return
	}
	switch {
	case in.Listen == "":
		l.add("ingress.listen", "required when the ingress section is present (host:port, or %q for an instance that only processes)", HTTPOff)
	case in.Listen != HTTPOff:
		if msg := checkAddr(in.Listen, true, 0); msg != "" {
			l.add("ingress.listen", "%s (or %q to disable)", msg, HTTPOff)
		} else if c.HTTP.Enabled() && in.Listen == c.HTTP.Listen && !strings.HasSuffix(in.Listen, ":0") {
			l.add("ingress.listen", "must differ from http.listen (%s): the ingress has its own listener", c.HTTP.Listen)
		}
	}
	if in.Topic != "" {
		i := slices.Index(c.Kafka.InputNames(), in.Topic)
		switch {
		case i < 0:
			l.add("ingress.topic", "must be one of kafka.input %v, got %q", c.Kafka.InputNames(), in.Topic)
		case c.Kafka.Input[i].Format != "" && c.Kafka.Input[i].Format != string(inputformat.Envelope):
			// The ingress writes event envelopes; a topic read as another
			// format would dead-letter every one of them.
			l.add("ingress.topic", "%q is read as format %s, but the ingress writes event envelopes: name an input topic of format envelope",
				in.Topic, c.Kafka.Input[i].Format)
		}
	}
	positive(l, "ingress.timeout", in.Timeout)
	if in.MaxBodyBytes < 2 {
		l.add("ingress.maxBodyBytes", "must be at least 2 bytes, got %d", int64(in.MaxBodyBytes))
	}
	between(l, "ingress.maxBatch", in.MaxBatch, 1, 10000)
	in.validateIngressSecurity(l)
}
