package processor

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/core/eos"
	"github.com/projector-dev/projector/internal/core/receipt"
)

// receipts reports whether this processor writes ingress receipts.
func (p *Processor) receipts() bool { return p.cfg.Mode == Live && p.cfg.ReceiptsTopic != "" }

// receipt produces the receipt of an ingested record into the batch's
// transaction. A malformed origin header (not written by the ingress) gets
// no receipt: there is no key to file it under.
func (p *Processor) receipt(b *eos.Batch, r *kgo.Record, origin []byte, rc *receipt.Receipt) {
	if !p.receipts() {
		return
	}
	o, err := receipt.ParseOrigin(origin)
	if err != nil {
		p.cfg.Logger.Warn("input record with a malformed ingress header: no receipt written",
			"topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", err)
		return
	}
	rc.Origin = o
	rc.Topic, rc.Partition, rc.Offset = r.Topic, r.Partition, r.Offset
	b.Produce(&kgo.Record{Topic: p.cfg.ReceiptsTopic, Key: []byte(receipt.Key(o.TenantID, o.Key, o.Index)), Value: rc.Encode()})
}
