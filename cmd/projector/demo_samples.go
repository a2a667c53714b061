package main

import "fmt"

// sample is one hand-written demo record and the outcome it must get.
type sample struct {
	key, value, expect, why string
}

func ev(id, typ, agg string, version int, payload string) string {
	return fmt.Sprintf(`{"eventId":%q,"eventType":%q,"aggregateId":%q,"aggregateType":"RegulatoryCase","aggregateVersion":%d,"occurredAt":"2026-06-28T10:15:30Z","payload":%s}`,
		id, typ, agg, version, payload)
}

// demoSamples is the demo's story, in production order.
func demoSamples() []sample {
	return []sample{
		{"CASE-1", ev("e1-1", "CaseOpened", "CASE-1", 1, `{"status":"OPEN","title":"Late filing"}`), "applied", "in order"},
		{"CASE-1", ev("e1-2", "CaseUpdated", "CASE-1", 2, `{"owner":"ana"}`), "applied", "in order"},
		{"CASE-1", ev("e1-3", "CaseEscalated", "CASE-1", 3, `{"status":"ESCALATED","reasonCode":"SLA_BREACH"}`), "applied", "in order"},
		{"CASE-2", ev("e2-1", "CaseOpened", "CASE-2", 1, `{"status":"OPEN","title":"Missing report"}`), "applied", "reordered"},
		{"CASE-2", ev("e2-3", "CaseEscalated", "CASE-2", 3, `{"status":"ESCALATED","reasonCode":"CUSTOMER"}`), "held", "v3 before v2: held"},
		{"CASE-2", ev("e2-2", "CaseUpdated", "CASE-2", 2, `{"owner":"ben"}`), "applied", "v2 arrives: applied, v3 drains"},
		{"CASE-3", ev("e3-1", "CaseOpened", "CASE-3", 1, `{"status":"OPEN"}`), "applied", "duplicated"},
		{"CASE-3", ev("e3-2", "CaseUpdated", "CASE-3", 2, `{"owner":"cy","tags":["kyc","aml"]}`), "applied", "duplicated"},
		{"CASE-3", `{ "payload": {"tags":["kyc","aml"], "owner":"cy"}, "aggregateVersion": 2.0, "aggregateType":"RegulatoryCase",
			"aggregateId":"CASE-3", "eventType":"CaseUpdated", "eventId":"e3-2" }`, "duplicate", "re-serialised copy"},
		{"CASE-3", ev("e3-1", "CaseOpened", "CASE-3", 1, `{"status":"OPEN"}`), "duplicate", "client retry"},
		{"CASE-4", ev("e4-1", "CaseOpened", "CASE-4", 1, `{"status":"OPEN"}`), "applied", "gap never filled"},
		{"CASE-4", ev("e4-3", "CaseUpdated", "CASE-4", 3, `{"owner":"dee"}`), "held", "v2 never comes: dead-lettered after gaps.holdTimeout"},
		{"CASE-5", ev("e5-1", "CaseOpened", "CASE-5", 1, `{"status":"OPEN"}`), "applied", "conflict"},
		{"CASE-5", ev("e5-1", "CaseOpened", "CASE-5", 1, `{"status":"CLOSED"}`), "conflict", "same eventId, other payload"},
		{"CASE-6", ev("e6-1", "CaseOpened", "CASE-6", 1, `{"status":"OPEN"}`), "applied", "deleted"},
		{"CASE-6", ev("e6-2", "CaseClosed", "CASE-6", 2, `null`), "applied", "delete rule: tombstone"},
		{"CASE-1", ev("e1-x", "CaseUpdated", "CASE-1", 2, `{"owner":"zed"}`), "stale", "a second writer at an old version"},
		{"bad-1", `this is not JSON`, "invalid", "poison"},
		{"bad-2", `{"eventId":"","eventType":"CaseOpened","aggregateId":"CASE-9","aggregateVersion":1}`, "invalid", "empty eventId"},
		{"bad-3", `{"eventId":"e9-1","eventType":"CaseOpened","aggregateVersion":1}`, "invalid", "no aggregateId"},
		{"bad-4", `{"eventId":"e9-2","eventType":"CaseOpened","aggregateId":"CASE-9","aggregateVersion":0}`, "invalid", "version 0"},
	}
}
