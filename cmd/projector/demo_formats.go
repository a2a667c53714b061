package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/processor"
)

// The demo's streams in other formats (configs/demo.yaml's kafka.input): a
// CloudEvents topic and a mapped topic whose values are Avro, framed for
// the embedded Schema Registry the demo starts.
const (
	demoCloudEventsTopic = "demo-billing"
	demoAvroTopic        = "demo-orders.avro"
	demoCaseAvro         = `{"type":"record","name":"CaseEvent","namespace":"demo","fields":[
		{"name":"id","type":"string"},{"name":"type","type":"string"},{"name":"caseId","type":"string"},
		{"name":"caseType","type":"string"},{"name":"seq","type":"long"},
		{"name":"data","type":{"type":"record","name":"Data","fields":[{"name":"status","type":"string"},{"name":"amount","type":"int"}]}}]}`
)

// formats shows events arriving as they are already published: one
// CloudEvent (binary mode: the attributes in ce_ headers, the data as the
// value) and one Avro record framed with its schema id; then the Avro
// event again, re-serialised as plain JSON: the same event, a duplicate.
func (d *demo) formats(ctx context.Context) error {
	cl, err := sr.NewClient(sr.URLs(d.registry.URL()))
	if err != nil {
		return err
	}
	ss, err := cl.CreateSchema(ctx, demoAvroTopic+"-value", sr.Schema{Schema: demoCaseAvro, Type: sr.TypeAvro})
	if err != nil {
		return fmt.Errorf("demo: register the Avro schema: %w", err)
	}
	order := map[string]any{"id": "ord-9-1", "type": "CaseOpened", "caseId": "CASE-9", "caseType": "RegulatoryCase", "seq": int64(1),
		"data": map[string]any{"status": "OPEN", "amount": 75}}
	bin, err := avro.Marshal(avro.MustParse(demoCaseAvro), order)
	if err != nil {
		return err
	}
	var h sr.ConfluentHeader
	framed, err := h.AppendEncode(nil, ss.ID, nil)
	if err != nil {
		return err
	}
	asJSON, err := json.Marshal(order)
	if err != nil {
		return err
	}
	ce := &kgo.Record{Topic: demoCloudEventsTopic, Key: []byte("CASE-8"), Value: []byte(`{"status":"OPEN","amount":40}`),
		Headers: []kgo.RecordHeader{
			{Key: "ce_specversion", Value: []byte("1.0")}, {Key: "ce_id", Value: []byte("bill-8-1")},
			{Key: "ce_source", Value: []byte("/billing")}, {Key: "ce_type", Value: []byte("CaseOpened")},
			{Key: "ce_subject", Value: []byte("CASE-8")}, {Key: "ce_sequence", Value: []byte("1")},
			{Key: "ce_aggregatetype", Value: []byte("RegulatoryCase")},
			{Key: "content-type", Value: []byte("application/json")},
		}}
	recs := []*kgo.Record{ce,
		{Topic: demoAvroTopic, Key: []byte("CASE-9"), Value: append(framed, bin...)},
		{Topic: demoAvroTopic, Key: []byte("CASE-9"), Value: asJSON}}
	st := d.a.Processor.Stats()
	applied, dup := st.Outcome(processor.OutcomeApplied), st.Outcome(processor.OutcomeDuplicate)
	fmt.Fprintf(d.stdout, "\n   Your existing stream (kafka.input formats): a CloudEvent on %s (binary mode), an Avro record\n   on %s (schema id %d, embedded Schema Registry) and the same Avro event again as plain JSON:\n",
		demoCloudEventsTopic, demoAvroTopic, ss.ID)
	if err := testkit.ProduceRecords(ctx, d.a.Brokers, 1<<20, recs...); err != nil {
		return err
	}
	if err := testkit.WaitFor(ctx, 30*time.Second, func() bool {
		return st.Outcome(processor.OutcomeApplied) >= applied+2 && st.Outcome(processor.OutcomeDuplicate) >= dup+1
	}); err != nil {
		return fmt.Errorf("demo: waiting for the CloudEvent and the Avro record: %w", err)
	}
	gotApplied, gotDup := st.Outcome(processor.OutcomeApplied)-applied, st.Outcome(processor.OutcomeDuplicate)-dup
	mark := ""
	if gotApplied != 2 || gotDup != 1 {
		mark = "  <- MISMATCH"
		d.mismatch++
	}
	fmt.Fprintf(d.stdout, "   applied %d, duplicate %d (the JSON copy of the Avro event)%s\n", gotApplied, gotDup, mark)
	return d.printProjectionKeys(ctx, "CASE-8", "CASE-9")
}
