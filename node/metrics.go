package node

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvoffload/kvoffload/txn"
)

// metrics are the node's Prometheus metrics. Counters that the coordinator already keeps are
// exported by a collector reading Stats at scrape time; latencies are observed here.
type metrics struct {
	offloadSeconds prometheus.Histogram
	offloadKeys    *prometheus.CounterVec
	offloadBytes   prometheus.Counter
	getKeys        *prometheus.CounterVec
	getBytes       prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, n *Node) *metrics {
	m := &metrics{
		offloadSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "kvoffload_offload_batch_seconds", Help: "Latency of BatchOffload requests served by this node.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		offloadKeys: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvoffload_offload_keys_total", Help: "Keys offloaded through this node, by outcome.",
		}, []string{"outcome"}),
		offloadBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvoffload_offload_bytes_total", Help: "Payload bytes of keys this node stored.",
		}),
		getKeys: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvoffload_get_keys_total", Help: "Keys read through this node, by status.",
		}, []string{"status"}),
		getBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvoffload_get_bytes_total", Help: "Payload bytes returned by reads through this node.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.offloadSeconds, m.offloadKeys, m.offloadBytes, m.getKeys, m.getBytes, stateCollector{n})
	}
	return m
}

func (m *metrics) observeOffload(res []txn.KeyResult, objs []txn.Object, d time.Duration) {
	m.offloadSeconds.Observe(d.Seconds())
	for i, r := range res {
		m.offloadKeys.WithLabelValues(r.Outcome.String()).Inc()
		if r.Outcome == txn.Stored && i < len(objs) {
			m.offloadBytes.Add(float64(len(objs[i].Value)))
		}
	}
}

func (m *metrics) observeGets(res []txn.GetResult) {
	for _, r := range res {
		m.getKeys.WithLabelValues(r.Status.String()).Inc()
		m.getBytes.Add(float64(len(r.Value)))
	}
}

// stateCollector exports the node's state at scrape time.
type stateCollector struct{ n *Node }

var (
	descKeys      = prometheus.NewDesc("kvoffload_keys", "Live keys in the cluster metadata.", nil, nil)
	descLocalKeys = prometheus.NewDesc("kvoffload_local_keys", "Live keys whose bytes this node owns.", nil, nil)
	descLive      = prometheus.NewDesc("kvoffload_bucket_live_bytes", "Bucket bytes held by live records on this node.", nil, nil)
	descAlloc     = prometheus.NewDesc("kvoffload_bucket_allocated_bytes", "Bytes allocated by bucket files on this node.", nil, nil)
	descApplied   = prometheus.NewDesc("kvoffload_raft_applied_index", "Raft applied index.", nil, nil)
	descLeader    = prometheus.NewDesc("kvoffload_raft_leader", "1 if this node is the Raft leader.", nil, nil)
	descTxn       = prometheus.NewDesc("kvoffload_txn_events_total", "Coordinator events by kind.", []string{"kind"}, nil)
)

func (c stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descKeys, descLocalKeys, descLive, descAlloc, descApplied, descLeader, descTxn} {
		ch <- d
	}
}

func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.n
	if n.coord == nil || n.fsm == nil || n.raft == nil {
		return
	}
	st, err := n.Stats()
	if err != nil {
		return
	}
	own := n.fsm.Owners()[n.cfg.ID]
	leader := 0.0
	if n.raft.IsLeader() {
		leader = 1
	}
	ch <- prometheus.MustNewConstMetric(descKeys, prometheus.GaugeValue, float64(st.Meta.Keys))
	ch <- prometheus.MustNewConstMetric(descLocalKeys, prometheus.GaugeValue, float64(own.Keys))
	ch <- prometheus.MustNewConstMetric(descLive, prometheus.GaugeValue, float64(st.Buckets.LiveBytes))
	ch <- prometheus.MustNewConstMetric(descAlloc, prometheus.GaugeValue, float64(st.Buckets.AllocatedBytes))
	ch <- prometheus.MustNewConstMetric(descApplied, prometheus.GaugeValue, float64(n.raft.AppliedIndex()))
	ch <- prometheus.MustNewConstMetric(descLeader, prometheus.GaugeValue, leader)
	t := st.Txn
	for kind, v := range map[string]uint64{
		"txn": t.Txns, "stored": t.Stored, "already_stored": t.AlreadyStored, "joined": t.Joined,
		"conflict": t.Conflicts, "rejected": t.Rejected, "failed": t.Failed, "backpressure_wait": t.Waits,
		"abort": t.Aborts, "get_corrupt": t.GetCorrupt, "removed": t.Removed,
		"recovered": t.Recovered, "recovery_abort": t.RecoveryAbort, "evicted": t.Evicted,
		"read_index_failed": t.ReadIndexFailed,
	} {
		ch <- prometheus.MustNewConstMetric(descTxn, prometheus.CounterValue, float64(v), kind)
	}
}
