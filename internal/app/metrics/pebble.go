package metrics

import (
	"sort"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"
)

// pebbleCollector reports the state stores' health at scrape time.
type pebbleCollector struct {
	names  []string
	stores map[string]func() *pebble.Metrics

	diskBytes, compactions, cacheHits, cacheMisses, cacheHitRatio, cacheBytes, memtableBytes, readAmp *prometheus.Desc
}

func newPebbleCollector(stores map[string]func() *pebble.Metrics) *pebbleCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "pebble", name), help, []string{"store"}, nil)
	}
	names := make([]string, 0, len(stores))
	for n := range stores {
		names = append(names, n)
	}
	sort.Strings(names)
	return &pebbleCollector{
		names:         names,
		stores:        stores,
		diskBytes:     d("disk_bytes", "Bytes the state store uses on disk (tables, WAL, manifests)."),
		compactions:   d("compactions_total", "Compactions completed since the store was opened."),
		cacheHits:     d("block_cache_hits_total", "Block cache hits since the store was opened."),
		cacheMisses:   d("block_cache_misses_total", "Block cache misses since the store was opened."),
		cacheHitRatio: d("block_cache_hit_ratio", "Block cache hits / (hits + misses) since the store was opened; 0 before any lookup."),
		cacheBytes:    d("block_cache_bytes", "Bytes in the block cache."),
		memtableBytes: d("memtable_bytes", "Bytes allocated by memtables."),
		readAmp:       d("read_amplification", "Sublevels and levels a point read may have to consult."),
	}
}

func (c *pebbleCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.diskBytes, c.compactions, c.cacheHits, c.cacheMisses, c.cacheHitRatio, c.cacheBytes, c.memtableBytes, c.readAmp} {
		ch <- d
	}
}

func (c *pebbleCollector) Collect(ch chan<- prometheus.Metric) {
	for _, name := range c.names {
		fn := c.stores[name]
		if fn == nil {
			continue
		}
		pm := fn()
		if pm == nil {
			continue
		}
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, name)
		}
		counter := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, name)
		}
		hits, misses := pm.BlockCache.Hits, pm.BlockCache.Misses
		ratio := 0.0
		if hits+misses > 0 {
			ratio = float64(hits) / float64(hits+misses)
		}
		gauge(c.diskBytes, float64(pm.DiskSpaceUsage()))
		counter(c.compactions, float64(pm.Compact.Count))
		counter(c.cacheHits, float64(hits))
		counter(c.cacheMisses, float64(misses))
		gauge(c.cacheHitRatio, ratio)
		gauge(c.cacheBytes, float64(pm.BlockCache.Size))
		gauge(c.memtableBytes, float64(pm.MemTable.Size))
		gauge(c.readAmp, float64(pm.ReadAmp()))
	}
}
